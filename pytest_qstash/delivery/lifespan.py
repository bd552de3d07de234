"""ASGI lifespan for mounted apps that ask for it (``mount(..., lifespan=True)``).

``httpx.ASGITransport`` never sends lifespan events, so an app that opens its resources in a
lifespan handler (FastAPI's ``lifespan=``, Starlette's ``on_startup``) would meet its first
delivery unprepared. This runs the app's lifespan as a task on the fake's own event loop, where
the app's deliveries run too: startup before the first delivery, shutdown when the fake stops.
The lifespan's state dict is handed to every request, as ASGI servers do.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..errors import LifespanError

Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[Message]],
        Callable[[Message], Awaitable[None]],
    ],
    Awaitable[None],
]


class Lifespan:
    def __init__(self, app: ASGIApp, base_url: str) -> None:
        self.app = app
        self.base_url = base_url
        self.state: dict[str, Any] = {}
        self._shutdown_requested: asyncio.Event | None = None
        self._finished: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._failure: str | None = None
        self._exception: BaseException | None = None

    async def request_app(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        """The app as deliveries call it: with a copy of the lifespan's state in the scope."""
        scope["state"] = copy.copy(self.state)
        await self.app(scope, receive, send)

    async def start_up(self) -> None:
        """Start the lifespan as a task of the running loop and wait for its startup; a
        failure is kept for ``raise_failure``."""
        started = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(started))
        await started.wait()

    def raise_failure(self, phase: str) -> None:
        if self._failure is None:
            return
        # Servers send a whole traceback as the failure message: its last line says what
        # happened; the app's exception itself is chained, with its traceback.
        lines = self._failure.strip().splitlines() or [self._failure]
        raise LifespanError(
            f"{phase} of the app at {self.base_url} failed: {lines[-1]}"
        ) from self._exception

    async def shut_down(self) -> None:
        """Ask for shutdown and wait for it; a failure is kept for ``raise_failure``."""
        if self._shutdown_requested is not None and self._finished is not None:
            self._shutdown_requested.set()
            await self._finished.wait()

    async def _run(self, started: asyncio.Event) -> None:
        self._shutdown_requested = asyncio.Event()
        self._finished = asyncio.Event()
        sent_startup = False

        async def receive() -> Message:
            nonlocal sent_startup
            if not sent_startup:
                sent_startup = True
                return {"type": "lifespan.startup"}
            assert self._shutdown_requested is not None
            await self._shutdown_requested.wait()
            return {"type": "lifespan.shutdown"}

        async def send(message: Message) -> None:
            kind = message["type"]
            if kind.endswith(".failed"):
                self._failure = message.get("message") or kind
            if kind.startswith("lifespan.startup"):
                started.set()
            elif kind.startswith("lifespan.shutdown"):
                self._finished_set()

        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}}
        scope["state"] = self.state
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # an app without lifespan support raises here
            self._exception = exc
            if started.is_set() and self._failure is None:
                self._failure = f"{type(exc).__name__}: {exc}"
            # Else ASGI servers carry on without lifespan, and so do we.
        finally:
            started.set()
            self._finished_set()

    def _finished_set(self) -> None:
        if self._finished is not None:
            self._finished.set()
