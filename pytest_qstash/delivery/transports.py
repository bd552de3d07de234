"""The sender: how a delivery reaches an app, from sync or async code, and on which event loop.

Sync tests drive ASGI apps on an event loop of the fake's own, run in the test's thread (no
thread hop per delivery) and kept for the fake's lifetime; apps mounted with a lifespan run
there in async tests too (from a worker thread), next to their lifespan, a task of that loop.
Async tests drive the others on the test's own loop. Django's handlers get deliveries as its
test client makes requests (``django_apps``). A mounted Starlette ``TestClient`` inside
its ``with`` block gets its deliveries on its own portal's loop, next to the lifespan it runs.
Each kind of app is called through its adapter (``adapters``, ``test_clients``); URLs no app
is mounted for go through ``network``.

Every delivery on an event loop is bounded in real time (``loop_watch``): past
``delivery_timeout`` it is cancelled and ``DeliveryTimeoutError`` raised, and one on an idle
asyncio loop is reported after a short grace. Sync code in the test's own thread (a WSGI app,
a sync callable, a sync test client) cannot be interrupted and is not bounded; in async tests
it runs in a worker thread, given up on (left running) at the timeout.

Functions on the delivery path set ``__tracebackhide__``: pytest then shows a failed
delivery from the test's call straight to the app's frame (or our error).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx

from ..errors import QStashFakeError
from . import adapters, loop_watch, network, test_clients
from .django_apps import connections_kept_open, run_in_this_thread
from .lifespan import Lifespan
from .mounts import Mount, MountTable
from .network import Pool
from .outcome import Outcome

_T = TypeVar("_T")
#: The default bound on one delivery, in real seconds: far above any real handler in a test.
DEFAULT_DELIVERY_TIMEOUT_S = 30.0
#: After the timeout, how long a thread waits for a cancelled delivery on another loop to end
#: before it gives up on it (an app blocking its loop never lets the cancellation in).
_CANCEL_GRACE_S = 1.0


class Sender:
    def __init__(
        self, mounts: MountTable, delivery_timeout_s: float = DEFAULT_DELIVERY_TIMEOUT_S
    ) -> None:
        self._mounts = mounts
        self.delivery_timeout_s = delivery_timeout_s
        self._lifespans: dict[str, Lifespan] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # One watch per event loop deliveries run on (the fake's own, a portal's, the test's).
        self._watches = loop_watch.LoopWatches()
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
            return network.send(request, anywhere=self.network, timeout_s=self.delivery_timeout_s)
        try:
            if mount.kind == "wsgi" and mount.django:
                with connections_kept_open():  # the test's own, in this thread
                    return adapters.wsgi(mount, request)
            if mount.kind == "wsgi":
                return adapters.wsgi(mount, request)
            if mount.django and mount.kind == "asgi":
                return self._django_asgi(mount, request)
            if mount.kind == "asgi":
                app = self._asgi_app(mount)
                outcome: Outcome = self._on_own_loop(adapters.asgi(app, "", request), request)
                return outcome
            if mount.kind == "client":
                return self._send_client(mount, request)
            result = mount.app(request)
            if inspect.isawaitable(result):
                result = self._on_own_loop(adapters.awaited(result), request)
            return adapters.callable_outcome(result)
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
                return self._on_portal(
                    portal, adapters.asgi, *test_clients.test_client_app(client), request
                )
            # Outside it, the TestClient starts no lifespan either: the app as it is.
            app, root_path = test_clients.test_client_app(client)
            return self._on_own_loop(adapters.asgi(app, root_path, request), request)
        if mount.client in ("httpx-async", "django-async"):
            return self._on_own_loop(test_clients.through_async_client(mount, request), request)
        return test_clients.through_sync_client(mount, request)

    def _django_asgi(self, mount: Mount, request: httpx.Request) -> Outcome:
        """Django's ASGI handler, from a sync test: its sync code runs in the test's thread.
        That code runs off the loop, where the idle watch cannot see it: bounded by the
        timeout alone."""
        __tracebackhide__ = True

        def delivery() -> Coroutine[Any, Any, Outcome]:
            return self._bounded(adapters.asgi(mount.app, "", request), request, idle_watch=False)

        with connections_kept_open():
            return run_in_this_thread(delivery)

    async def asend(self, request: httpx.Request) -> Outcome:
        __tracebackhide__ = True
        mount = self._mounts.resolve(str(request.url))
        if mount is None:
            return await network.asend(
                request,
                anywhere=self.network,
                timeout_s=self.delivery_timeout_s,
                pool=self.pool,
            )
        try:
            if (mount.kind == "asgi" and mount.lifespan) or (
                mount.client == "starlette" and getattr(mount.app, "portal", None) is not None
            ):
                # Its lifespan runs on another loop (the fake's own, or the TestClient's
                # portal's): so do its requests, bounded there, from a worker thread.
                return await anyio.to_thread.run_sync(self.send, request)
            if mount.kind == "wsgi":
                return await self._in_thread(adapters.wsgi, mount, request)
            if mount.client in ("httpx", "werkzeug", "django"):
                return await self._in_thread(test_clients.through_sync_client, mount, request)
            async with loop_watch.settling_background_tasks():
                if mount.django and mount.kind == "asgi":
                    # Django's sync code runs in threads of its own, on their connections
                    # (never the test's), which it closes as usual; off the watch's sight.
                    return await self._bounded(
                        adapters.asgi(mount.app, "", request), request, idle_watch=False
                    )
                if mount.kind == "asgi":
                    return await self._bounded(adapters.asgi(mount.app, "", request), request)
                if mount.client == "starlette":
                    app, root_path = test_clients.test_client_app(mount.app)
                    return await self._bounded(adapters.asgi(app, root_path, request), request)
                if mount.kind == "client":
                    return await self._bounded(
                        test_clients.through_async_client(mount, request), request
                    )
                result = mount.app(request)
                if inspect.isawaitable(result):
                    result = await self._bounded(adapters.awaited(result), request)
                return adapters.callable_outcome(result)
        except QStashFakeError:
            raise  # the fake's own API misused from a handler: the test's bug, not the app's
        except Exception as exc:
            return Outcome.of_exception(exc)

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
        for _ in range(loop_watch.BACKGROUND_PASSES):
            if not loop_watch.ready_to_run(loop):
                break
            loop.run_until_complete(asyncio.sleep(0))
        return result

    def _bounded(
        self, coroutine: Awaitable[_T], request: httpx.Request, *, idle_watch: bool = True
    ) -> Coroutine[Any, Any, _T]:
        """The delivery, bounded by the timeout on the loop it runs on (``loop_watch``)."""
        return self._watches.bounded(
            coroutine, request, self.delivery_timeout_s, idle_watch=idle_watch
        )

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
            raise loop_watch.delivery_timeout_error(
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
        raise loop_watch.delivery_timeout_error(
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


_ABANDON = (
    "abandon_on_cancel"
    if "abandon_on_cancel" in inspect.signature(anyio.to_thread.run_sync).parameters
    else "cancellable"  # AnyIO before 4.1
)


async def _run_sync_abandoning(func: Callable[..., _T], *args: Any) -> _T:
    run_sync: Callable[..., Awaitable[_T]] = anyio.to_thread.run_sync
    return await run_sync(func, *args, **{_ABANDON: True})
