"""ASGI lifespan for mounted apps that ask for it (``mount(..., lifespan=True)``).

``httpx.ASGITransport`` never sends lifespan events, so an app that opens its resources in a
lifespan handler (FastAPI's ``lifespan=``, Starlette's ``on_startup``) would meet its first
delivery unprepared. This runs the app's lifespan on the fake's own event loop (the blocking
portal's thread): startup before the first delivery, shutdown when the fake stops. The
lifespan's state dict is handed to every request, as ASGI servers do.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread

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
        self._shutdown_requested: anyio.Event | None = None
        self._finished: anyio.Event | None = None
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

    def start(self, portal: anyio.from_thread.BlockingPortal) -> None:
        portal.start_task(self._run)
        self._raise_failure("startup")

    def stop(self, portal: anyio.from_thread.BlockingPortal) -> None:
        portal.call(self._stop)
        self._raise_failure("shutdown")

    def _raise_failure(self, phase: str) -> None:
        if self._failure is None:
            return
        # Servers send a whole traceback as the failure message: its last line says what
        # happened; the app's exception itself is chained, with its traceback.
        lines = self._failure.strip().splitlines() or [self._failure]
        raise LifespanError(
            f"{phase} of the app at {self.base_url} failed: {lines[-1]}"
        ) from self._exception

    async def _stop(self) -> None:
        if self._shutdown_requested is not None and self._finished is not None:
            self._shutdown_requested.set()
            await self._finished.wait()

    async def _run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        self._shutdown_requested = anyio.Event()
        self._finished = anyio.Event()
        started = anyio.Event()
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
        async with anyio.create_task_group() as group:

            async def serve() -> None:
                try:
                    await self.app(scope, receive, send)
                except BaseException as exc:  # an app without lifespan support raises here
                    if not isinstance(exc, anyio.get_cancelled_exc_class()):
                        self._exception = exc
                    if not started.is_set():
                        started.set()  # ASGI servers carry on without lifespan, and so do we
                    elif self._failure is None and not isinstance(
                        exc, anyio.get_cancelled_exc_class()
                    ):
                        self._failure = f"{type(exc).__name__}: {exc}"
                finally:
                    self._finished_set()

            group.start_soon(serve)
            await started.wait()
            task_status.started()

    def _finished_set(self) -> None:
        if self._finished is not None:
            self._finished.set()
