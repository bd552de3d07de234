"""Interception of the QStash hosts, and only those, with respx.

Our router sits on respx's ``httpx`` mocker (``Client._transport_for_url``), above the
transports: QStash calls are answered before pytest-httpx or a user's respx router (on the
default ``httpcore`` mocker) could see them, and every other request passes on to exactly
where it would have gone without us. There is no catch-all route to shadow anyone.

Under the fakes, for the whole pytest session, ``NetworkGuard`` sits on the ``httpcore``
mocker, where only requests bound for the network arrive: a QStash call that no fake (and no
test's own mock) answered is stopped there rather than sent to the real QStash.

Which requests are QStash's, both routers ask ``hosts``. httpx2 clients are served by
``httpx2_support``, which builds on this module (never the other way round).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import httpx
import respx
from respx.models import AllMockedAssertionError, PassThrough

from ..wire import hosts
from .compat import httpx_transports_patched


class QStashRouter(respx.MockRouter):
    def __init__(
        self,
        api: Callable[[httpx.Request], httpx.Response],
        extra_urls: Iterable[str],
        using: str = "httpx",
    ) -> None:
        super().__init__(assert_all_called=False, assert_all_mocked=True, using=using)
        self.bind(api, extra_urls)

    # respx snapshots a router's routes and calls on start and rolls them back on stop, with
    # a new mock-backed list each time (about 60 us, on every test). This router has no
    # routes, and ``stop()`` still clears its calls (``reset``): there is nothing to keep.
    def snapshot(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def bind(
        self, api: Callable[[httpx.Request], httpx.Response], extra_urls: Iterable[str]
    ) -> None:
        """Answer ``api`` from now on, for QStash's hosts and ``extra_urls`` (a router
        reused by another fake)."""
        self._api = api
        self.api_bases = hosts.parse_bases(extra_urls)

    def _prefix(self, request: httpx.Request) -> str | None:
        """The path prefix to take off a request to a QStash API, or None: not ours."""
        return self.prefix_for(request.url)

    def prefix_for(self, url: hosts.URLLike) -> str | None:
        """The same for any URL httpx or httpx2 would send to (``hosts`` decides)."""
        return hosts.qstash_prefix(url, self.api_bases)

    def answer(self, request: httpx.Request, prefix: str) -> httpx.Response:
        """Answer a QStash API request whose path starts with ``prefix`` (taken off first),
        and record the call: what httpx's and httpx2's interception both end in."""
        if prefix:
            raw = request.url.raw_path[len(prefix) :] or b"/"
            request = httpx.Request(
                request.method,
                request.url.copy_with(raw_path=raw),
                headers=request.headers,
                content=request.content,
            )
        response = self._api(request)
        self.calls.record(request, response)
        return response

    def start(self) -> None:
        super().start()
        # The newest fake answers first (a FakeQStash started inside the fixture's, say);
        # when it stops, the one before it answers again.
        routers = self.Mocker.routers if self.Mocker else []
        if self in routers:
            routers.remove(self)
            routers.insert(0, self)

    def handler(self, request: httpx.Request) -> httpx.Response:
        prefix = self._prefix(request)
        if prefix is None:
            raise self._decline(request)
        request.read()
        return self.answer(request, prefix)

    async def async_handler(self, request: httpx.Request) -> httpx.Response:
        prefix = self._prefix(request)
        if prefix is None:
            raise self._decline(request)
        await request.aread()
        return self.answer(request, prefix)

    def _decline(self, request: httpx.Request) -> Exception:
        # A router after us on the same mocker decides for itself; last, we step aside and
        # the request goes where it was going.
        routers = self.Mocker.routers if self.Mocker else []
        if self in routers and routers[-1] is not self:
            return AllMockedAssertionError(f"not a QStash request: {request!r}")
        return PassThrough(
            f"not a QStash request: {request!r}",
            request=request,
            origin=None,  # type: ignore[arg-type]  # respx only reads it for its own routes
        )


# -- fakes' routers, reused -----------------------------------------------------------------
# A respx router is costly to build (its call list is a ``unittest.mock`` object, a class made
# per instance: about half of what a fake cost a test), and holds nothing a test leaves behind
# once stopped (``stop()`` clears its calls). So a stopped fake's router waits here for the
# next fake to start, which rebinds it to its own API: one router per fake active at once,
# built once per process (each xdist worker has its own).
_idle: list[QStashRouter] = []
_idle_lock = threading.Lock()
_IDLE_KEPT = 8  # fakes nested this deep at most keep their routers; more are built afresh


def lend_router(
    api: Callable[[httpx.Request], httpx.Response], extra_urls: Iterable[str]
) -> QStashRouter:
    """A stopped router answering ``api`` from now on (a new one when none is idle)."""
    with _idle_lock:
        router = _idle.pop() if _idle else None
    if router is None:
        return QStashRouter(api, extra_urls)
    router.bind(api, extra_urls)
    return router


def return_router(router: QStashRouter) -> None:
    """``router``, stopped, is free for the next fake (it forgets the API it answered)."""
    router.calls.clear()
    router.bind(_never_called, ())
    with _idle_lock:
        if len(_idle) < _IDLE_KEPT and router not in _idle:
            _idle.append(router)


class NetworkGuard(QStashRouter):
    """Session-wide, under every fake: a QStash call made while no fake answers it (a fixture
    that starts the app before the ``qstash`` fixture, say) gets a 503 naming the fix and a
    warning, instead of reaching the real QStash. It sits on respx's httpcore mocker, where
    only requests bound for the network pass (a client given its own transport, such as
    ``qstash.transport``, never gets there), and steps aside for a test's own respx route
    matching the call and for loopback hosts (pytest-httpx's mocks answer before it)."""

    def __init__(self, using: str = "httpcore") -> None:
        super().__init__(self.refuse, [], using=using)
        #: What was stopped since the plugin last reported it (as a warning, at teardown:
        #: a warning raised here, under ``-W error``, would be retried by the SDK).
        self.refused: list[str] = []

    def start(self) -> None:
        respx.MockRouter.start(self)  # behind the test's own respx routers, registered later

    def started(self) -> NetworkGuard:
        self.start()
        return self

    @classmethod
    def running(cls) -> NetworkGuard | None:
        from respx.mocks import HTTPCoreMocker

        return next((r for r in HTTPCoreMocker.routers if isinstance(r, cls)), None)

    def _prefix(self, request: httpx.Request) -> str | None:
        # Loopback is no network (a local QStash dev server in QSTASH_URL); a test's own respx
        # route for the call answers it. pytest-httpx needs no such care: what it mocks never
        # gets this far.
        if hosts.is_loopback(request.url.raw_host) or _user_route_matches(request):
            return None
        return super()._prefix(request)

    def prefix_for(self, url: hosts.URLLike) -> str | None:
        # Besides QStash's own hosts and QSTASH_URL's: every base a fake of this process was
        # given, though no fake is active now to say so.
        return hosts.qstash_prefix(url, hosts.declared())

    def refuse(self, request: httpx.Request) -> httpx.Response:
        """Stop a QStash call no fake answered: a 503 naming the fix, kept in ``refused``."""
        path = request.url.raw_path.decode("ascii").partition("?")[0]
        message = (
            f"pytest-qstash: {request.method} {path} reached QStash while no fake was active, "
            "and was stopped before the network. Make the fixture that starts your app (a "
            "TestClient `with` block, a lifespan) depend on `qstash`, or call QStash inside "
            "the test; turn this guard off with the ini option qstash_network_guard = false."
        )
        self.refused.append(message)
        return httpx.Response(503, json={"error": message})


class KeepHttpxPatched(QStashRouter):
    """Session-wide, answering nothing: keeps respx's httpx patch in place between tests.
    respx patches ``Client._transport_for_url`` when the first router on its httpx mocker
    starts and undoes it when the last stops; with a fake in every test that was a
    ``mock.patch`` made and undone per test (about 0.1 ms, half the fixture's cost). Under
    it, a request no fake answers steps aside, as it does during a test with a fake."""

    def __init__(self) -> None:
        super().__init__(_never_called, [])

    def start(self) -> None:
        respx.MockRouter.start(self)  # behind every fake and router registered later

    def started(self) -> KeepHttpxPatched:
        self.start()
        return self

    @classmethod
    def running(cls) -> KeepHttpxPatched | None:
        from respx.mocks import HTTPXMocker

        return next((r for r in HTTPXMocker.routers if isinstance(r, cls)), None)

    def _prefix(self, request: httpx.Request) -> str | None:
        return None


def _never_called(request: httpx.Request) -> httpx.Response:
    raise AssertionError("KeepHttpxPatched answers nothing")


class QStashOutsideFakeWarning(UserWarning):
    """A QStash call was made while no fake was active (see ``NetworkGuard``)."""


def _user_route_matches(request: httpx.Request) -> bool:
    """Whether a test's own respx router has a route for this request (its pattern is
    matched without running the route's side effect)."""
    from respx.mocks import Mocker

    for mocker in Mocker.registry.values():
        for router in mocker.routers:
            if isinstance(router, QStashRouter):
                continue
            for route in router.routes:
                if route.pattern is None or route.pattern.match(request):
                    return True
    return False


def user_interceptors_active() -> bool:
    """Whether the test's own interception is in place: a respx router that is not one of
    ours, or pytest-httpx (which patches httpx's transports)."""
    from respx.mocks import Mocker

    for mocker in Mocker.registry.values():
        if any(not isinstance(router, QStashRouter) for router in mocker.routers):
            return True
    return httpx_transports_patched()


def httpx_mocks_active() -> bool:
    """Whether the test mocks httpx itself: a respx router of its own on httpx or httpcore,
    or pytest-httpx (httpx2's mocks, on httpcore2, are not counted)."""
    from respx.mocks import Mocker

    for name in ("httpx", "httpcore"):
        mocker = Mocker.registry.get(name)
        if mocker is not None and any(not isinstance(r, QStashRouter) for r in mocker.routers):
            return True
    return httpx_transports_patched()
