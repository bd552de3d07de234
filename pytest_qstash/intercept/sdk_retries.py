"""The official Python SDK's own retries, as a simulated lost answer meets them.

``qstash`` (and what builds on it: upstash-workflow, django-qstash) sends a request again when
it gets no answer: ``HttpClient.request`` loops over ``attempt in range(max_attempts)``,
sleeping ``backoff(attempt)`` milliseconds after each failure. A simulated lost answer is only
injected where that loop has an attempt left (``will_retry``): a client built with
``retry=False``, or on its last attempt, would hand the error to the app, which no correct app
could tell from a real outage. The SDK's sleeps are real ones (``time.sleep``,
``asyncio.sleep``); a simulated test must not wait for them, so while a fake is active after
such an injection the SDK modules' ``time``/``asyncio`` names point at the real modules with an
instant ``sleep`` (``instant_sleeps``), put back when the fake stops.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any

#: The SDK modules whose request loops retry, and the name each sleeps through.
_SDK_SLEEPS = {"qstash.http": "time", "qstash.asyncio.http": "asyncio"}
#: How far up the stack the SDK's request loop may be from the interception.
_MAX_DEPTH = 80


def will_retry() -> bool:
    """Whether the request being answered comes from the SDK's request loop with an attempt
    left after this one."""
    frame: FrameType | None = sys._getframe(1)
    depth = 0
    while frame is not None and depth < _MAX_DEPTH:
        code = frame.f_code
        if code.co_name == "request" and code.co_filename.endswith(
            ("qstash/http.py", "qstash/asyncio/http.py")
        ):
            names = frame.f_locals
            attempt, attempts = names.get("attempt"), names.get("max_attempts")
            return isinstance(attempt, int) and isinstance(attempts, int) and attempt + 1 < attempts
        frame = frame.f_back
        depth += 1
    return False


class _InstantTime:
    """The ``time`` module, but ``sleep`` returns at once."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real

    def sleep(self, seconds: float) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _InstantAsyncio:
    """The ``asyncio`` module, but ``sleep`` only yields to the loop once."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real

    async def sleep(self, delay: float, result: Any = None) -> Any:
        return await self._real.sleep(0, result)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


_INSTANT: dict[str, Callable[[ModuleType], object]] = {
    "time": _InstantTime,
    "asyncio": _InstantAsyncio,
}


def instant_sleeps() -> Callable[[], None]:
    """Make the SDK's retry sleeps instant; returns what puts them back."""
    undo: list[tuple[ModuleType, str, object]] = []
    for module_name, attribute in _SDK_SLEEPS.items():
        module = sys.modules.get(module_name)
        current = getattr(module, attribute, None) if module is not None else None
        if module is None or current not in (time, asyncio):
            continue  # not loaded, or someone else's patch: left alone
        undo.append((module, attribute, current))
        setattr(module, attribute, _INSTANT[attribute](current))

    def restore() -> None:
        for module, attribute, original in undo:
            setattr(module, attribute, original)

    return restore
