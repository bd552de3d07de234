"""How a delivery reaches an app: ASGI, WSGI or a plain callable, from sync or async code.

Sync tests drive ASGI apps on an event loop of the fake's own, run in the test's thread (no
thread hop per delivery) and kept for the fake's lifetime; apps mounted with a lifespan run
on an AnyIO blocking portal's loop instead, next to their lifespan. Async tests drive them on the
test's own loop. URLs no app is mounted for go through httpx, so a user's respx routes or
pytest-httpx can answer them; the network is only used for loopback hosts.

Functions on the delivery path set ``__tracebackhide__``: pytest then shows a failed
delivery from the test's call straight to the app's frame (or our error).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import ssl
from collections.abc import AsyncIterator, Awaitable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx
from respx.models import AllMockedAssertionError

from .. import httpx2_support
from ..errors import QStashFakeError
from ..intercept import is_loopback, user_interceptors_active
from .lifespan import Lifespan
from .mounts import Mount, MountTable

_T = TypeVar("_T")
_BACKGROUND_PASSES = 20


class Unrouted(Exception):
    """Nothing could answer the request; the reason says what was tried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class Outcome:
    """What one attempt produced: a response, or the exception the app raised."""

    status: int | None
    headers: httpx.Headers
    content: bytes
    error: str | None = None
    exception: BaseException | None = None

    @classmethod
    def of_response(cls, response: httpx.Response) -> Outcome:
        return cls(response.status_code, response.headers, response.content)

    @classmethod
    def of_exception(cls, exc: BaseException) -> Outcome:
        # QStash sees a crashed handler as a 500 from the server.
        return cls(500, httpx.Headers(), b"", f"{type(exc).__name__}: {exc}", exc)


class Sender:
    def __init__(self, mounts: MountTable) -> None:
        self._mounts = mounts
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._portal_cm: contextlib.AbstractContextManager[anyio.from_thread.BlockingPortal] | (
            None
        ) = None
        self._lifespans: dict[str, Lifespan] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Deliver unmounted URLs to any host, not only loopback or a user's mocks: the
        #: server mode's choice (``pytest-qstash serve``), where the user asked for it.
        self.network = False

    # -- sync -------------------------------------------------------------------------------
    def send(self, request: httpx.Request) -> Outcome:
        __tracebackhide__ = True
        mount = self._mounts.resolve(str(request.url))
        if mount is None:
            return self._send_unmounted(request)
        try:
            if mount.kind == "wsgi":
                return _wsgi(mount, request)
            if mount.kind == "asgi" and mount.lifespan:
                outcome: Outcome = self._blocking_portal().call(
                    _asgi, self._asgi_app(mount), request
                )
                return outcome
            if mount.kind == "asgi":
                outcome = self._on_own_loop(_asgi(mount.app, request))
                return outcome
            result = mount.app(request)
            if inspect.isawaitable(result):
                result = self._on_own_loop(_awaited(result))
            return _callable_outcome(result)
        except QStashFakeError:
            raise  # the fake's own API misused from a handler: the test's bug, not the app's
        except Exception as exc:
            return Outcome.of_exception(exc)

    def _send_unmounted(self, request: httpx.Request) -> Outcome:
        __tracebackhide__ = True
        self._check_can_route(request)
        try:
            if httpx2_support.takes_unmounted():  # only httpx2's mocks can answer it
                return Outcome.of_response(httpx2_support.send(request))
            with httpx.Client(verify=_ssl_context()) as client:
                return Outcome.of_response(client.send(request))
        except Exception as exc:
            return _network_failure(exc)

    # -- async ------------------------------------------------------------------------------
    async def asend(self, request: httpx.Request) -> Outcome:
        __tracebackhide__ = True
        mount = self._mounts.resolve(str(request.url))
        if mount is None:
            return await self._asend_unmounted(request)
        try:
            if mount.kind == "asgi" and mount.lifespan:
                # Its lifespan runs on the portal's loop: so do its requests.
                return await anyio.to_thread.run_sync(self.send, request)
            if mount.kind == "wsgi":
                return await anyio.to_thread.run_sync(_wsgi, mount, request)
            async with _settling_background_tasks():
                if mount.kind == "asgi":
                    return await _asgi(mount.app, request)
                result = mount.app(request)
                if inspect.isawaitable(result):
                    result = await result
                return _callable_outcome(result)
        except QStashFakeError:
            raise  # the fake's own API misused from a handler: the test's bug, not the app's
        except Exception as exc:
            return Outcome.of_exception(exc)

    async def _asend_unmounted(self, request: httpx.Request) -> Outcome:
        self._check_can_route(request)
        try:
            if httpx2_support.takes_unmounted():
                return Outcome.of_response(await httpx2_support.asend(request))
            async with httpx.AsyncClient(verify=_ssl_context()) as client:
                return Outcome.of_response(await client.send(request))
        except Exception as exc:
            return _network_failure(exc)

    # -- shared -----------------------------------------------------------------------------
    def _check_can_route(self, request: httpx.Request) -> None:
        if self.network or is_loopback(request.url.host) or user_interceptors_active():
            return
        raise Unrouted("no respx route or pytest-httpx mock is active to answer it either")

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop sync tests deliver to ASGI apps on: in the test's own thread (no
        thread hop per delivery), kept for the fake's lifetime so what an app binds to its
        loop (clients, pools) stays usable from one delivery to the next."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def _on_own_loop(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        __tracebackhide__ = True
        loop = self._own_loop()
        result = loop.run_until_complete(coroutine)
        # Let what the app started and did not wait for (a fire-and-forget task) move on
        # before the test looks, as it would on a server's loop: a few passes of the loop,
        # never a wait (a task waiting on something else stays pending, and is cancelled
        # when the fake stops).
        for _ in range(_BACKGROUND_PASSES):
            if not asyncio.all_tasks(loop):
                break
            loop.run_until_complete(asyncio.sleep(0))
        return result

    def _blocking_portal(self) -> anyio.from_thread.BlockingPortal:
        if self._portal is None:
            self._portal_cm = anyio.from_thread.start_blocking_portal()
            self._portal = self._portal_cm.__enter__()
        return self._portal

    def start_lifespans(self) -> None:
        """Bring the running lifespans in line with the mounts (at mount, unmount, or when the
        fake starts): shut down those whose app was replaced or unmounted, then start every
        lifespan mount not started yet, so an app that creates its schedules or queues at
        startup has them before the test publishes or advances anything."""
        wanted = {m.base_url: m.app for m in self._mounts.mounts if m.lifespan}
        for base_url, lifespan in list(self._lifespans.items()):
            if wanted.get(base_url) is not lifespan.app:
                del self._lifespans[base_url]
                if self._portal is not None:
                    lifespan.stop(self._portal)
        for mount in self._mounts.mounts:
            if mount.kind == "asgi" and mount.lifespan:
                self._asgi_app(mount)

    def _asgi_app(self, mount: Mount) -> Any:
        """The app to call for a delivery; for a lifespan mount, started once, with state."""
        if not mount.lifespan:
            return mount.app
        lifespan = self._lifespans.get(mount.base_url)
        if lifespan is None or lifespan.app is not mount.app:
            lifespan = Lifespan(mount.app, mount.base_url)
            lifespan.start(self._blocking_portal())
            self._lifespans[mount.base_url] = lifespan
        return lifespan.request_app

    def close(self) -> None:
        failure: BaseException | None = None
        try:
            lifespans, self._lifespans = list(self._lifespans.values()), {}
            if self._portal is not None:
                # Every lifespan is shut down, even after one fails: a lifespan left waiting
                # would keep the portal's thread from ever finishing.
                for lifespan in reversed(lifespans):
                    try:
                        lifespan.stop(self._portal)
                    except Exception as exc:
                        failure = failure or exc
        finally:
            self._close_portal()
            self._close_loop()
        if failure is not None:
            raise failure

    def _close_loop(self) -> None:
        if self._loop is None:
            return
        loop, self._loop = self._loop, None
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def _close_portal(self) -> None:
        if self._portal_cm is not None:
            cm, self._portal_cm, self._portal = self._portal_cm, None, None
            cm.__exit__(None, None, None)


@contextlib.asynccontextmanager
async def _settling_background_tasks() -> AsyncIterator[None]:
    """After a delivery on the test's loop, let the tasks the app started and did not await
    (a fire-and-forget publish) run a few passes, as the sync path does on its own loop:
    what they publish is there when ``atick()`` returns. Never a wait: a task waiting on
    something else stays pending."""
    try:
        before = asyncio.all_tasks()
    except RuntimeError:  # not an asyncio loop (trio): nothing to settle this way
        yield
        return
    yield
    started = asyncio.all_tasks() - before
    for _ in range(_BACKGROUND_PASSES):
        if all(task.done() for task in started):
            break
        await asyncio.sleep(0)


async def _asgi(app: Any, request: httpx.Request) -> Outcome:
    """One request into an ASGI app. An exception after the app sent its whole response (a
    background task's, say) does not undo the answer: QStash got it, so the attempt keeps its
    status and only carries the exception; before that, the attempt is a 500."""
    __tracebackhide__ = True
    sent_all = False
    raised: Exception | None = None

    async def watched(scope: Any, receive: Any, send: Any) -> None:
        nonlocal sent_all, raised

        async def watched_send(message: Any) -> None:
            nonlocal sent_all
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                sent_all = True

        try:
            await app(scope, receive, watched_send)
        except Exception as exc:
            raised = exc
            raise

    transport = httpx.ASGITransport(app=watched, raise_app_exceptions=False)
    response = await transport.handle_async_request(request)
    content = await response.aread()
    if raised is None:
        return Outcome(response.status_code, response.headers, content)
    if not sent_all:
        return Outcome.of_exception(raised)
    # Sent, then raised: Starlette's error middleware answers 500 and re-raises; a background
    # task fails after the app's own answer, which stands.
    error = f"{type(raised).__name__}: {raised}"
    if response.status_code < 500:
        error += " (raised after the response was sent)"
    return Outcome(response.status_code, response.headers, content, error, raised)


def _wsgi(mount: Mount, request: httpx.Request) -> Outcome:
    __tracebackhide__ = True
    transport = httpx.WSGITransport(app=mount.app, raise_app_exceptions=True)
    response = transport.handle_request(request)
    return Outcome(response.status_code, response.headers, response.read())


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _callable_outcome(result: Any) -> Outcome:
    """A plain callable may answer an ``httpx.Response``, a status code, or None (200)."""
    if result is None:
        return Outcome(200, httpx.Headers(), b"")
    if isinstance(result, httpx.Response):
        result.read()
        return Outcome.of_response(result)
    if isinstance(result, int) and not isinstance(result, bool):
        return Outcome(result, httpx.Headers(), b"")
    raise TypeError(
        f"a mounted callable returned {result!r}: expected an httpx.Response, an int status or None"
    )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~20 ms: once per process, not once per unmounted delivery.
    return httpx.create_ssl_context()


def _network_failure(exc: Exception) -> Outcome:
    """A request no interceptor matched is unrouted; an httpx transport error (a respx side
    effect raising ConnectError, a refused loopback port) is a failed attempt with no
    response, as on QStash; any other exception is a bug in the code that answered (a respx
    side effect, a pytest-httpx callback), handled as an app's exception."""
    name = type(exc).__name__
    if isinstance(exc, AllMockedAssertionError):
        raise Unrouted("the active respx routes do not match it") from exc
    if "No response can be found" in str(exc):
        request = getattr(exc, "_request", None)  # httpx's .request raises when unset
        if isinstance(request, httpx.Request):
            _unrecord_in_pytest_httpx(request)
        raise Unrouted("pytest-httpx has no response registered for it") from exc
    if not isinstance(exc, httpx.TransportError):
        return Outcome.of_exception(exc)
    error = f"{name}: {exc}"
    request = getattr(exc, "_request", None)
    if (
        isinstance(exc, httpx.ConnectError)
        and isinstance(request, httpx.Request)
        and is_loopback(request.url.host)
    ):
        error += (
            f" (nothing listens at {request.url.scheme}://{request.url.netloc.decode()}: "
            "if the app under test should answer there, mount it with qstash.mount(...))"
        )
    return Outcome(None, httpx.Headers(), b"", error)


def _unrecord_in_pytest_httpx(request: httpx.Request) -> None:
    """pytest-httpx keeps every request it could not answer, to fail the test at teardown. The
    fake only asked whether anything would answer this one: the answer (no) is the fake's
    UnroutedDeliveryError, so the request comes off pytest-httpx's list. Its mock is found in
    the closure of the transport method it patched; if that ever changes, nothing is done."""
    for patched in (
        httpx.HTTPTransport.handle_request,
        httpx.AsyncHTTPTransport.handle_async_request,
    ):
        for cell in getattr(patched, "__closure__", None) or ():
            try:
                mock = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            not_matched = getattr(mock, "_requests_not_matched", None)
            if isinstance(not_matched, list) and any(r is request for r in not_matched):
                not_matched[:] = [r for r in not_matched if r is not request]
                seen = getattr(mock, "_requests", None)
                if isinstance(seen, list):
                    seen[:] = [entry for entry in seen if entry[1] is not request]
                return
