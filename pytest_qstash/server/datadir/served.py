"""What the data dir needs of the server it keeps (it imports neither the app nor the fake)."""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any, Protocol

import httpx

from ...engine.account import Account
from ...engine.clock import VirtualClock
from ...engine.store import Store


class Settings(Protocol):
    """The server's settings (a frozen dataclass)."""

    @property
    def token(self) -> str: ...
    @property
    def current_signing_key(self) -> str: ...
    @property
    def next_signing_key(self) -> str: ...
    @property
    def clock(self) -> str: ...
    @property
    def start(self) -> str | None: ...


class Engine(Protocol):
    """The fake a server serves."""

    @property
    def store(self) -> Store: ...
    @property
    def clock(self) -> VirtualClock: ...
    @property
    def account(self) -> Account: ...
    def handle(self, request: httpx.Request) -> httpx.Response: ...
    def saved_extras(self) -> dict[str, Any]: ...
    def restore_extras(self, extras: Mapping[str, Any]) -> None: ...


class Served(Protocol):
    """The server app whose state is kept."""

    @property
    def CLOCK_MOVES(self) -> tuple[str, ...]:  # the app's class constant
        """The control actions that move the clock (and deliver on the way)."""
        ...

    @property
    def fake(self) -> Engine: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def resets(self) -> int: ...
    def answer(self, request: httpx.Request, action: str) -> Coroutine[Any, Any, httpx.Response]:
        """A control action, answered without authentication or journaling."""
        ...
