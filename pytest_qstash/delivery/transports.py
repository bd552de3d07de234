"""How a delivery reaches an app: ASGI, WSGI, a plain callable or a test client, from sync or
async code.

Sync tests drive ASGI apps on an event loop of the fake's own, run in the test's thread (no
thread hop per delivery) and kept for the fake's lifetime; apps mounted with a lifespan run
there in async tests too (from a worker thread), next to their lifespan, a task of that loop.
Async tests drive the others on the test's own loop. Django's handlers get deliveries as its
test client makes requests (``django_apps``). A mounted Starlette ``TestClient`` inside
its ``with`` block gets its deliveries on its own portal's loop, next to the lifespan it runs.
URLs no app is mounted for go through httpx, so a user's respx routes or pytest-httpx can
answer them; the network is only used for loopback hosts.

Every delivery on an event loop is bounded in real time (the loop's monotonic clock, which no
app clock moves): past ``delivery_timeout`` it is cancelled and ``DeliveryTimeoutError``
raised. On an asyncio loop a watch also looks, every few tens of milliseconds, whether the loop
is idle (no callback ready, no timer, no I/O, no worker thread busy) while the delivery still
waits: nothing can then ever finish it, so after a short grace it is reported at once. Sync
code in the test's own thread (a WSGI app, a sync callable, a sync test client) cannot be
interrupted and is not bounded; in async tests it runs in a worker thread, given up on (left
running) at the timeout.

Functions on the delivery path set ``__tracebackhide__``: pytest then shows a failed
delivery from the test's call straight to the app's frame (or our error).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import importlib
import inspect
import ssl
import sys
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx

from ..engine.attempts import timeout_error
from ..errors import DeliveryTimeoutError, QStashFakeError
from ..intercept.compat import PYTEST_HTTPX_NO_RESPONSE, httpx_transports_patched
from ..intercept.compat import unrecord_in_pytest_httpx as _unrecord_in_pytest_httpx
from ..wire.hosts import is_loopback
from .django_apps import connections_kept_open, run_in_this_thread
from .lifespan import Lifespan
from .mounts import Mount, MountTable

_T = TypeVar("_T")
_BACKGROUND_PASSES = 20
#: The default bound on one delivery, in real seconds: far above any real handler in a test.
DEFAULT_DELIVERY_TIMEOUT_S = 30.0
#: How often the watch of a delivery on an asyncio loop looks at it (real seconds).
_WATCH_INTERVAL_S = 0.05
#: How long a loop must stay idle, the delivery waiting, before it is called stuck: long
#: enough for a thread the watch cannot see (a library's own) to wake it when done.
STALL_GRACE_S = 1.0
#: After the timeout, how long a thread waits for a cancelled delivery on another loop to end
#: before it gives up on it (an app blocking its loop never lets the cancellation in).
_CANCEL_GRACE_S = 1.0


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


class Pool(Protocol):
    async def send(self, request: httpx.Request) -> httpx.Response: ...


class Sender:
    def __init__(
        self, mounts: MountTable, delivery_timeout_s: float = DEFAULT_DELIVERY_TIMEOUT_S
    ) -> None:
        self._mounts = mounts
        self.delivery_timeout_s = delivery_timeout_s
        self._lifespans: dict[str, Lifespan] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # One watch per event loop deliveries run on (the fake's own, a portal's, the test's).
        self._watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWatch] = (
            weakref.WeakKeyDictionary()
        )
        #: Deliver unmounted URLs to any host, not only loopback or a user's mocks: the
        #: server mode's choice (``pytest-qstash serve``), where the user asked for it.
        self.network = False
        #: Sends unmounted deliveries from async code over connections kept alive (the
        #: server's, per origin). Without one, each delivery has its own client.
        self.pool: Pool | None = None

    # -- sync -------------------------------------------------------------------------------
    def send(self, request: httpx.Request) -> Outcome:
        __tracebackhide__ = True
        mount = self._mounts.resolve(str(request.url))
        if mount is None:
            return self._send_unmounted(request)
        try:
            if mount.kind == "wsgi" and mount.django:
                with connections_kept_open():  # the test's own, in this thread
                    return _wsgi(mount, request)
            if mount.kind == "wsgi":
                return _wsgi(mount, request)
            if mount.django and mount.kind == "asgi":
                return self._django_asgi(mount, request)
            if mount.kind == "asgi":
                app = self._asgi_app(mount)
                outcome: Outcome = self._on_own_loop(_asgi(app, "", request), request)
                return outcome
            if mount.kind == "client":
                return self._send_client(mount, request)
            result = mount.app(request)
            if inspect.isawaitable(result):
                result = self._on_own_loop(_awaited(result), request)
            return _callable_outcome(result)
        except QStashFakeError:
            raise  # the fake's own API misused from a handler: the test's bug, not the app's
        except Exception as exc:
            return Outcome.of_exception(exc)

    def _send_client(self, mount: Mount, request: httpx.Request) -> Outcome:
        __tracebackhide__ = True
        client = mount.app
        if mount.client == "starlette":
            portal = getattr(client, "portal", None)
            if portal is not None:  # inside its `with` block: its loop, next to its lifespan
                return self._on_portal(portal, _asgi, *_test_client_app(client), request)
            # Outside it, the TestClient starts no lifespan either: the app as it is.
            app, root_path = _test_client_app(client)
            return self._on_own_loop(_asgi(app, root_path, request), request)
        if mount.client in ("httpx-async", "django-async"):
            return self._on_own_loop(_through_async_client(mount, request), request)
        return _through_sync_client(mount, request)

    def _django_asgi(self, mount: Mount, request: httpx.Request) -> Outcome:
        """Django's ASGI handler, from a sync test: its sync code runs in the test's thread.
        That code runs off the loop, where the idle watch cannot see it: bounded by the
        timeout alone."""
        __tracebackhide__ = True

        def delivery() -> Coroutine[Any, Any, Outcome]:
            return self._bounded(_asgi(mount.app, "", request), request, idle_watch=False)

        with connections_kept_open():
            return run_in_this_thread(delivery)

    def _send_unmounted(self, request: httpx.Request) -> Outcome:
        __tracebackhide__ = True
        self._check_can_route(request)
        try:
            httpx2 = _httpx2_mocks()
            if httpx2 is not None:  # only httpx2's mocks can answer it
                return Outcome.of_response(httpx2.send(request))
            with httpx.Client(verify=_ssl_context()) as client:
                return Outcome.of_response(client.send(self._bounded_in_real_time(request)))
        except Exception as exc:
            return self._unmounted_failure(exc, request)

    # -- async ------------------------------------------------------------------------------
    async def asend(self, request: httpx.Request) -> Outcome:
        __tracebackhide__ = True
        mount = self._mounts.resolve(str(request.url))
        if mount is None:
            return await self._asend_unmounted(request)
        try:
            if (mount.kind == "asgi" and mount.lifespan) or (
                mount.client == "starlette" and getattr(mount.app, "portal", None) is not None
            ):
                # Its lifespan runs on another loop (the fake's own, or the TestClient's
                # portal's): so do its requests, bounded there, from a worker thread.
                return await anyio.to_thread.run_sync(self.send, request)
            if mount.kind == "wsgi":
                return await self._in_thread(_wsgi, mount, request)
            if mount.client in ("httpx", "werkzeug", "django"):
                return await self._in_thread(_through_sync_client, mount, request)
            async with _settling_background_tasks():
                if mount.django and mount.kind == "asgi":
                    # Django's sync code runs in threads of its own, on their connections
                    # (never the test's), which it closes as usual; off the watch's sight.
                    return await self._bounded(
                        _asgi(mount.app, "", request), request, idle_watch=False
                    )
                if mount.kind == "asgi":
                    return await self._bounded(_asgi(mount.app, "", request), request)
                if mount.client == "starlette":
                    app, root_path = _test_client_app(mount.app)
                    return await self._bounded(_asgi(app, root_path, request), request)
                if mount.kind == "client":
                    return await self._bounded(_through_async_client(mount, request), request)
                result = mount.app(request)
                if inspect.isawaitable(result):
                    result = await self._bounded(_awaited(result), request)
                return _callable_outcome(result)
        except QStashFakeError:
            raise  # the fake's own API misused from a handler: the test's bug, not the app's
        except Exception as exc:
            return Outcome.of_exception(exc)

    async def _asend_unmounted(self, request: httpx.Request) -> Outcome:
        self._check_can_route(request)
        try:
            httpx2 = _httpx2_mocks()
            if httpx2 is not None:
                return Outcome.of_response(await httpx2.asend(request))
            if self.pool is not None:
                response = await self.pool.send(self._bounded_in_real_time(request))
                return Outcome.of_response(response)
            async with httpx.AsyncClient(verify=_ssl_context()) as client:
                return Outcome.of_response(await client.send(self._bounded_in_real_time(request)))
        except Exception as exc:
            return self._unmounted_failure(exc, request)

    # -- shared -----------------------------------------------------------------------------
    def _bounded_in_real_time(self, request: httpx.Request) -> httpx.Request:
        """A real endpoint gets the attempt's deadline (set by the dispatcher), as QStash gives
        it; inside a test no longer than ``delivery_timeout``, which no test waits past. A
        server (``network``) waits the whole deadline, as QStash does."""
        deadline = request.extensions.get("timeout", {}).get("read")
        if self.network or deadline is None or deadline <= self.delivery_timeout_s:
            return request
        request.extensions["timeout"] = httpx.Timeout(self.delivery_timeout_s).as_dict()
        return request

    def _unmounted_failure(self, exc: Exception, request: httpx.Request) -> Outcome:
        if isinstance(exc, httpx.ReadTimeout):
            # No answer by the deadline: QStash cut the attempt (a failed attempt, retried), in
            # its words. A connect timeout is the network's failure, said as it is.
            error = timeout_error(request.method, str(request.url))
            return Outcome(None, httpx.Headers(), b"", error)
        if self.network and isinstance(exc, httpx.TransportError):
            # A server's deliveries go to real endpoints: one that is down (a loopback port
            # too) is a failed attempt, retried, as on QStash; there is nothing to mount.
            return Outcome(None, httpx.Headers(), b"", f"{type(exc).__name__}: {exc}")
        return _network_failure(exc)

    def _check_can_route(self, request: httpx.Request) -> None:
        if self.network or is_loopback(request.url.host) or _user_interceptors_active():
            return
        raise Unrouted("no respx route or pytest-httpx mock is active to answer it either")

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop sync tests deliver to ASGI apps on: in the test's own thread (no
        thread hop per delivery), kept for the fake's lifetime so what an app binds to its
        loop (clients, pools) stays usable from one delivery to the next."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def _on_own_loop(self, coroutine: Coroutine[Any, Any, _T], request: httpx.Request) -> _T:
        __tracebackhide__ = True
        loop = self._own_loop()
        result = loop.run_until_complete(self._bounded(coroutine, request))
        # Let what the app started and did not wait for (a fire-and-forget task, a job handed
        # to a lifespan's worker) move on before the test looks, as it would on a server's
        # loop: a few passes of the loop while something is ready to run, never a wait (a
        # task waiting on something else stays pending, and is cancelled when the fake stops).
        for _ in range(_BACKGROUND_PASSES):
            if not _ready_to_run(loop):
                break
            loop.run_until_complete(asyncio.sleep(0))
        return result

    async def _bounded(
        self, coroutine: Awaitable[_T], request: httpx.Request, *, idle_watch: bool = True
    ) -> _T:
        """Await one delivery on the running loop, bounded in real time (see the module);
        without ``idle_watch``, by the timeout alone."""
        __tracebackhide__ = True
        timeout = self.delivery_timeout_s
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio: its own clock bounds it; no idle watch
            with anyio.move_on_after(timeout):
                return await coroutine
            raise _timeout_error(request, timeout, stalled=False) from None
        task = asyncio.current_task()
        assert task is not None
        watch = self._watches.get(loop)
        if watch is None:
            watch = self._watches[loop] = _LoopWatch(loop)
        delivery = watch.begin(task, timeout, idle_watch=idle_watch)
        try:
            result = await coroutine
        except asyncio.CancelledError:
            if delivery.verdict is None:
                raise  # cancelled by someone else: not ours to turn into an error
        finally:
            watch.end(delivery)
        if delivery.verdict is not None:
            if sys.version_info >= (3, 11):
                task.uncancel()  # the cancellation was the watch's, and is spent
            raise _timeout_error(request, timeout, stalled=delivery.verdict == "stalled")
        return result

    def _on_portal(
        self,
        portal: anyio.from_thread.BlockingPortal,
        func: Callable[..., Coroutine[Any, Any, Outcome]],
        *args: Any,
    ) -> Outcome:
        """Run ``func(*args)`` (its last argument the request) on a portal's loop, bounded
        there; this thread waits a little longer, in case the app blocks that loop."""
        __tracebackhide__ = True
        request: httpx.Request = args[-1]
        future: concurrent.futures.Future[Outcome] = portal.start_task_soon(
            self._bounded, func(*args), request
        )
        try:
            return future.result(timeout=self.delivery_timeout_s + _CANCEL_GRACE_S)
        except concurrent.futures.TimeoutError:
            if future.done():  # the delivery's own DeliveryTimeoutError (a TimeoutError)
                raise
            future.cancel()  # lands whenever the app lets its loop run again
            raise _timeout_error(
                request,
                self.delivery_timeout_s,
                stalled=False,
                detail=" (and did not end when cancelled: the app blocks its event loop, "
                "e.g. a blocking call in an async handler)",
            ) from None

    async def _in_thread(self, func: Callable[..., Outcome], *args: Any) -> Outcome:
        """Sync code from an async test: in a worker thread, waited for up to the timeout. A
        thread cannot be stopped: past the timeout it is left to run, and the test fails."""
        __tracebackhide__ = True
        request: httpx.Request = args[-1]
        with anyio.move_on_after(self.delivery_timeout_s):
            return await _run_sync_abandoning(func, *args)
        raise _timeout_error(
            request,
            self.delivery_timeout_s,
            stalled=False,
            detail=" (it runs sync code in a worker thread, which cannot be stopped and is "
            "left running)",
        )

    def _run_here(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` to its end on the fake's own loop (a lifespan's startup or
        shutdown), whichever thread this is called from."""
        result: _T = _off_any_loop(self._own_loop().run_until_complete, coroutine)
        return result

    def start_lifespans(self) -> None:
        """Bring the running lifespans in line with the mounts (at mount, unmount, or when the
        fake starts): shut down those whose app was replaced or unmounted, then start every
        lifespan mount not started yet, so an app that creates its schedules or queues at
        startup has them before the test publishes or advances anything."""
        wanted = {m.base_url: m.app for m in self._mounts.mounts if m.lifespan}
        for base_url, lifespan in list(self._lifespans.items()):
            if wanted.get(base_url) is not lifespan.app:
                del self._lifespans[base_url]
                self._run_here(lifespan.shut_down())
                lifespan.raise_failure("shutdown")
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
            self._run_here(lifespan.start_up())
            lifespan.raise_failure("startup")
            self._lifespans[mount.base_url] = lifespan
        return lifespan.request_app

    def close(self) -> None:
        """Shut down every lifespan (even after one fails: a lifespan left waiting would keep
        its task alive), cancel what the apps left on the fake's loop, and close it."""
        lifespans, self._lifespans = list(self._lifespans.values()), {}
        if self._loop is not None:
            loop, self._loop = self._loop, None
            _off_any_loop(_close_loop, loop, lifespans)
        failure: BaseException | None = None
        for lifespan in reversed(lifespans):
            try:
                lifespan.raise_failure("shutdown")
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


def _close_loop(loop: asyncio.AbstractEventLoop, lifespans: list[Lifespan]) -> None:
    try:
        loop.run_until_complete(_shut_down_all(lifespans))
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


async def _shut_down_all(lifespans: list[Lifespan]) -> None:
    for lifespan in reversed(lifespans):
        await lifespan.shut_down()


def _off_any_loop(func: Callable[..., _T], *args: Any) -> _T:
    """``func(*args)`` here or, when an event loop runs in this thread (an async test, an
    ``async with FakeQStash()``), in a helper thread: the fake's own loop cannot run inside
    another one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return func(*args)
    with concurrent.futures.ThreadPoolExecutor(1) as helper:
        return helper.submit(func, *args).result()


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


async def _asgi(app: Any, root_path: str, request: httpx.Request) -> Outcome:
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

    transport = httpx.ASGITransport(app=watched, raise_app_exceptions=False, root_path=root_path)
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
    app, request = _latin1_environ(mount.app, request)
    transport = httpx.WSGITransport(app=app, raise_app_exceptions=True)
    response = transport.handle_request(request)
    # Read whole, and closed: where a Django request ends (request_finished).
    return Outcome(response.status_code, response.headers, response.read())


def _latin1_environ(app: Any, request: httpx.Request) -> tuple[Any, httpx.Request]:
    """httpx's WSGI transport takes header values for ASCII; a value beyond it (UTF-8, as
    QStash forwards it) reaches the app as PEP 3333 says, its bytes read as latin-1."""
    wide = {_environ_key(k): v.decode("latin-1") for k, v in request.headers.raw if not v.isascii()}
    if not wide:
        return app, request
    headers = [(k, v if v.isascii() else b"") for k, v in request.headers.raw]
    stripped = httpx.Request(request.method, request.url, headers=headers, content=request.content)

    def restored(environ: dict[str, Any], start_response: Any) -> Any:
        environ.update(wide)
        return app(environ, start_response)

    return restored, stripped


def _environ_key(name: bytes) -> str:
    key = name.decode("ascii").upper().replace("-", "_")
    return key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + key


@dataclass(eq=False, slots=True)
class _InFlight:
    task: asyncio.Task[Any]
    deadline: float
    idle_since: float | None = None
    #: Whether an idle loop ends it early (not when its work runs where the watch cannot see).
    idle_watch: bool = True
    #: Why the watch cancelled it: "timeout" or "stalled"; None while it runs its course.
    verdict: str | None = None


class _LoopWatch:
    """Bounds the deliveries in flight on one asyncio loop, in real time: a timer looks at
    them every ``_WATCH_INTERVAL_S`` and cancels one past its deadline, or once the loop has
    been idle for ``STALL_GRACE_S`` while it still waits. The timer is shared by every
    delivery and only armed while one is in flight (a burst of quick deliveries costs one
    timer per interval, not one each), and no deadline timer is set, so that the loop it
    watches can look idle."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # Read here, in a delivery's task: AnyIO finds its loop only from inside a task.
        self._limiter = anyio.to_thread.current_default_thread_limiter()
        self._in_flight: list[_InFlight] = []
        self._timer: asyncio.TimerHandle | None = None

    def begin(
        self, task: asyncio.Task[Any], timeout: float, *, idle_watch: bool = True
    ) -> _InFlight:
        delivery = _InFlight(task, self._loop.time() + timeout, idle_watch=idle_watch)
        self._in_flight.append(delivery)
        if self._timer is None:
            self._timer = self._loop.call_later(min(_WATCH_INTERVAL_S, timeout), self._look)
        return delivery

    def end(self, delivery: _InFlight) -> None:
        self._in_flight.remove(delivery)

    def _look(self) -> None:
        self._timer = None
        now = self._loop.time()
        idle: bool | None = None  # asked once per look, and only when it matters
        next_look = _WATCH_INTERVAL_S
        for delivery in self._in_flight:
            if delivery.verdict is not None:
                continue
            if now >= delivery.deadline:
                delivery.verdict = "timeout"
            elif delivery.idle_watch:
                if idle is None:
                    idle = _loop_idle(self._loop, self._limiter)
                if not idle:
                    delivery.idle_since = None
                elif delivery.idle_since is None:
                    delivery.idle_since = now
                elif now - delivery.idle_since >= STALL_GRACE_S:
                    delivery.verdict = "stalled"
            if delivery.verdict is not None:
                delivery.task.cancel()
            else:
                next_look = min(next_look, delivery.deadline - now)
        if any(d.verdict is None for d in self._in_flight):
            self._timer = self._loop.call_later(max(next_look, 0.0), self._look)


def _ready_to_run(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether a callback is ready on the loop (asyncio's private queue of them); on a loop
    without one (uvloop), whether any task is pending at all."""
    ready = getattr(loop, "_ready", None)
    return bool(ready) if ready is not None else bool(asyncio.all_tasks(loop))


def _loop_idle(loop: asyncio.AbstractEventLoop, limiter: anyio.CapacityLimiter) -> bool:
    """Whether nothing the loop knows of can make progress: no callback ready, no timer, no
    file descriptor watched (its own wake-up pipe aside), no worker thread of its default
    executor or of AnyIO's busy. Only a thread the loop cannot see (a library's own) could
    still wake it. False whenever the loop is not the standard library's (uvloop, say)."""
    try:
        if loop._ready or any(not h.cancelled() for h in loop._scheduled):  # type: ignore[attr-defined]
            return False
        wakeup = loop._ssock.fileno()  # type: ignore[attr-defined]
        watched = loop._selector.get_map().values()  # type: ignore[attr-defined]
        if any(key.fd != wakeup for key in watched):
            return False
        executor = loop._default_executor  # type: ignore[attr-defined]
        if executor is not None and (
            executor._work_queue.qsize() or len(executor._threads) > executor._idle_semaphore._value
        ):
            return False
        return limiter.borrowed_tokens == 0
    except Exception:
        return False


def _timeout_error(
    request: httpx.Request, timeout: float, *, stalled: bool, detail: str = ""
) -> DeliveryTimeoutError:
    return DeliveryTimeoutError(
        str(request.url),
        request.headers.get("Upstash-Message-Id", "?"),
        timeout,
        stalled=stalled,
        detail=detail,
    )


_ABANDON = (
    "abandon_on_cancel"
    if "abandon_on_cancel" in inspect.signature(anyio.to_thread.run_sync).parameters
    else "cancellable"  # AnyIO before 4.1
)


async def _run_sync_abandoning(func: Callable[..., _T], *args: Any) -> _T:
    run_sync: Callable[..., Awaitable[_T]] = anyio.to_thread.run_sync
    return await run_sync(func, *args, **{_ABANDON: True})


# -- test clients ---------------------------------------------------------------------------
def _test_client_app(client: Any) -> tuple[Any, str]:
    """A Starlette TestClient's app as its own requests reach it: with a copy of the
    lifespan's state in the scope, and its root path."""
    app, state = client.app, client.app_state

    async def with_state(scope: Any, receive: Any, send: Any) -> None:
        scope["state"] = state.copy()
        await app(scope, receive, send)

    return with_state, getattr(getattr(client, "_transport", None), "root_path", "") or ""


def _through_sync_client(mount: Mount, request: httpx.Request) -> Outcome:
    __tracebackhide__ = True
    client = mount.app
    try:
        if mount.client == "httpx":
            response = client.send(request, auth=None, follow_redirects=False)
            return Outcome.of_response(response)
        if mount.client == "werkzeug":
            return _werkzeug_outcome(client.open(**_werkzeug_args(request)))
        return _django_outcome(client.generic(**_django_args(request)))
    except QStashFakeError:
        raise
    except httpx.TransportError as exc:  # the client's transport could not answer
        return Outcome(None, httpx.Headers(), b"", f"{type(exc).__name__}: {exc}")


async def _through_async_client(mount: Mount, request: httpx.Request) -> Outcome:
    __tracebackhide__ = True
    client = mount.app
    try:
        if mount.client == "httpx-async":
            response = await client.send(request, auth=None, follow_redirects=False)
            await response.aread()
            return Outcome.of_response(response)
        # AsyncClient.generic() always adds `Host: testserver`: the scope is built here.
        return _django_outcome(await client.request(**_django_scope(request)))
    except httpx.TransportError as exc:
        return Outcome(None, httpx.Headers(), b"", f"{type(exc).__name__}: {exc}")


def _werkzeug_args(request: httpx.Request) -> dict[str, Any]:
    url = request.url
    return {
        "path": url.raw_path.decode("ascii"),  # path and query, as sent
        "base_url": f"{url.scheme}://{url.netloc.decode('ascii')}",
        "method": request.method,
        "headers": [
            (k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"
        ],
        "data": request.content,
    }


def _werkzeug_outcome(response: Any) -> Outcome:
    headers = httpx.Headers(list(response.headers.items()))
    return Outcome(response.status_code, headers, response.get_data())


def _django_args(request: httpx.Request) -> dict[str, Any]:
    url = request.url
    headers: dict[str, str] = {}
    for key, value in request.headers.multi_items():
        if key.lower() in ("content-type", "content-length"):
            continue
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return {
        "method": request.method,
        "path": url.raw_path.decode("ascii"),
        "data": request.content,
        "content_type": request.headers.get("content-type", "application/octet-stream"),
        "secure": url.scheme == "https",
        "headers": headers,
        "SERVER_PORT": str(url.port or (443 if url.scheme == "https" else 80)),
    }


def _django_scope(request: httpx.Request) -> dict[str, Any]:
    # Only ever called for a Django client, so Django is there; untyped, hence the lookup.
    fake_payload = importlib.import_module("django.test.client").FakePayload
    url = request.url
    return {
        "method": request.method,
        "path": url.path,
        "query_string": url.query.decode("ascii"),
        "scheme": url.scheme,
        "server": (url.host, str(url.port or (443 if url.scheme == "https" else 80))),
        "headers": [(k.lower(), v) for k, v in request.headers.raw],
        "_body_file": fake_payload(request.content),
    }


def _django_outcome(response: Any) -> Outcome:
    pairs = list(response.items())
    pairs += [("Set-Cookie", morsel.OutputString()) for morsel in response.cookies.values()]
    headers = httpx.Headers(pairs)
    if getattr(response, "streaming", False):
        content = b"".join(response.streaming_content)
    else:
        content = response.content
    return Outcome(response.status_code, headers, content)


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


# Interception is respx's, which a process that never starts a fake (the server) does not
# load: until respx is loaded, no router of a test's, and no mock of httpx2's, is in place.
def _user_interceptors_active() -> bool:
    if "respx" not in sys.modules:
        return httpx_transports_patched()
    from ..intercept.router import user_interceptors_active

    return user_interceptors_active()


def _httpx2_mocks() -> Any:
    """``httpx2_support`` when a delivery nothing is mounted for goes out through httpx2 (only
    httpx2's mocks can answer it), else None."""
    if "respx" not in sys.modules:
        return None
    from ..intercept import httpx2_support

    return httpx2_support if httpx2_support.takes_unmounted() else None


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~20 ms: once per process, not once per unmounted delivery.
    return httpx.create_ssl_context()


def _network_failure(exc: Exception) -> Outcome:
    """A request no interceptor matched is unrouted, and so is one to a loopback port nothing
    listens on (no interceptor active); an httpx transport error (a respx side effect raising
    ConnectError) is a failed attempt with no response, as on QStash; any other exception is a
    bug in the code that answered (a respx side effect, a pytest-httpx callback), handled as
    an app's exception."""
    name = type(exc).__name__
    respx_models = sys.modules.get("respx.models")
    if respx_models is not None and isinstance(exc, respx_models.AllMockedAssertionError):
        raise Unrouted("the active respx routes do not match it") from exc
    if PYTEST_HTTPX_NO_RESPONSE in str(exc):
        request = getattr(exc, "_request", None)  # httpx's .request raises when unset
        if isinstance(request, httpx.Request):
            _unrecord_in_pytest_httpx(request)
        raise Unrouted("pytest-httpx has no response registered for it") from exc
    if not isinstance(exc, httpx.TransportError):
        return Outcome.of_exception(exc)
    request = getattr(exc, "_request", None)
    if (
        isinstance(exc, httpx.ConnectError)
        and isinstance(request, httpx.Request)
        and is_loopback(request.url.host)
        and not _user_interceptors_active()
    ):
        # A dev PUBLIC_URL (http://localhost:8000) with no server behind it: the app under
        # test was meant to answer, not a real endpoint that happens to be down.
        raise Unrouted(
            f"nothing listens at {request.url.scheme}://{request.url.netloc.decode()}: "
            "mount the app"
        ) from exc
    return Outcome(None, httpx.Headers(), b"", f"{name}: {exc}")
