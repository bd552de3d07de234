"""httpx2 (the httpx fork) and httpcore2: the same interception and guard as for httpx.

Optional: everything here is a no-op when httpx2 is not installed (the ``httpx2`` extra).

- **Interception.** While a fake is active, ``httpx2.Client._transport_for_url`` (and the async
  client's) is wrapped, as respx's httpx mocker wraps httpx's: a request to a QStash host is
  answered by the newest active fake, converted to and from the ``httpx`` types the API layer
  speaks; every other request goes, untouched, to the transport it would have used. That is
  above the transports, so pytest-httpx2 (respx on httpcore2) and a user's own mocks below it
  never see the SDK's QStash calls, and still answer everything else.
- **Network guard.** ``NetworkGuard`` starts a companion on httpcore2's connection pools (the
  respx mocker pytest-httpx2 uses, so a test's ``httpx2_mock`` routes sit beside it), where
  only requests bound for the network arrive: a QStash call no fake answered is stopped there
  too.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import httpx
from respx.mocks import HTTPCoreMocker, Mocker

# One way only: the interception knows nothing of httpx2; the fake attaches its router here
# and the plugin starts the httpcore2 guard.
from .router import NetworkGuard, QStashRouter, httpx_mocks_active

#: Whether httpx2 / httpcore2 are installed (checked without importing them).
HTTPX2_INSTALLED = importlib.util.find_spec("httpx2") is not None
HTTPCORE2_INSTALLED = importlib.util.find_spec("httpcore2") is not None

#: The respx mocker the httpcore2 guard sits on: the name pytest-httpx2 gives its own.
GUARD_MOCKER = "httpcore2"

# Active fakes' routers, newest first: the newest fake answers, as with httpx.
_routers: list[QStashRouter] = []
_originals: dict[type, Callable[..., Any]] = {}
#: Whether the clients stay patched while no fake is active (``hold``).
_held = False


# -- interception of httpx2 clients ----------------------------------------------------------
def attach(router: QStashRouter) -> None:
    """Let ``router`` answer httpx2 clients' QStash calls (called when its fake starts)."""
    if not HTTPX2_INSTALLED:
        return
    _routers.insert(0, router)
    if not _originals:
        _patch()


def detach(router: QStashRouter) -> None:
    if router in _routers:
        _routers.remove(router)
    if not _routers and _originals and not _held:
        _unpatch()


def hold() -> None:
    """Keep the clients patched between fakes, for a pytest session (patching them for each
    test cost more than the rest of a fake's start). With no fake active, a patched client
    gets the very transport it would have used: nothing of ours is in its way."""
    global _held
    _held = True


def held() -> bool:
    return _held


def unhold() -> None:
    """The session ended: unpatched when no fake is active, else when the last one stops."""
    global _held
    _held = False
    if not _routers and _originals:
        _unpatch()


def _patch() -> None:
    import httpx2

    for client_type in (httpx2.Client, httpx2.AsyncClient):
        original = client_type._transport_for_url
        _originals[client_type] = original
        setattr(client_type, "_transport_for_url", _wrapped(original, client_type))  # noqa: B010


def _unpatch() -> None:
    for client_type, original in _originals.items():
        setattr(client_type, "_transport_for_url", original)  # noqa: B010
    _originals.clear()


def _wrapped(original: Callable[..., Any], client_type: type) -> Callable[..., Any]:
    import httpx2

    is_async = issubclass(client_type, httpx2.AsyncClient)

    def _transport_for_url(self: Any, url: Any) -> Any:
        real = original(self, url)
        if not _routers:  # between fakes, held patched: the client's own transport
            return real
        return _AsyncQStashTransport(real) if is_async else _QStashTransport(real)

    return _transport_for_url


def _claim(request: Any) -> tuple[QStashRouter, str] | None:
    """The newest active router serving this httpx2 request's URL, and its path prefix."""
    for router in _routers:
        prefix = router.prefix_for(request.url)
        if prefix is not None:
            return router, prefix
    return None


def _answer(router: QStashRouter, prefix: str, request: Any) -> Any:
    import httpx2

    converted = httpx.Request(
        request.method,
        str(request.url),
        headers=request.headers.multi_items(),
        content=request.content,
    )
    try:
        response = router.answer(converted, prefix)
    except httpx.TransportError as exc:  # an injected network fault: httpx2's own error
        error_type = getattr(httpx2, type(exc).__name__, httpx2.TransportError)
        raise error_type(str(exc), request=request) from exc
    return httpx2.Response(
        response.status_code,
        headers=response.headers.multi_items(),
        content=response.content,
        request=request,
    )


class _QStashTransport:
    """What a patched sync client sends through: QStash requests to the fake, the rest on."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def handle_request(self, request: Any) -> Any:
        claim = _claim(request)
        if claim is None:
            return self._real.handle_request(request)
        request.read()
        return _answer(*claim, request)

    def close(self) -> None:
        pass  # the client closes its own transports


class _AsyncQStashTransport:
    def __init__(self, real: Any) -> None:
        self._real = real

    async def handle_async_request(self, request: Any) -> Any:
        claim = _claim(request)
        if claim is None:
            return await self._real.handle_async_request(request)
        await request.aread()
        return _answer(*claim, request)

    async def aclose(self) -> None:
        pass


# -- the network guard on httpcore2 ----------------------------------------------------------
def _guard_mocker() -> type[Mocker]:
    """The respx mocker on httpcore2's connection pools, shared with the test's own mocks.

    respx patches a method once (a second mocker on the same pools would step aside), so the
    guard and pytest-httpx2's ``httpx2_mock`` (``respx.mock(using="httpcore2")``) must be
    routers of one mocker, as the httpcore guard and a test's ``respx.mock`` are. respx allows
    one class per name: pytest-httpx2's is used when installed (imported first, so that its
    own import never finds the name taken); else one of ours, defined once per process."""
    existing = Mocker.registry.get(GUARD_MOCKER)
    if existing is None and importlib.util.find_spec("pytest_httpx2") is not None:
        importlib.import_module("pytest_httpx2")
        existing = Mocker.registry.get(GUARD_MOCKER)
    if existing is not None:
        return existing

    class Httpcore2Mocker(HTTPCoreMocker):
        name = GUARD_MOCKER
        targets = [
            "httpcore2._sync.connection.HTTPConnection",
            "httpcore2._sync.connection_pool.ConnectionPool",
            "httpcore2._sync.http_proxy.HTTPProxy",
            "httpcore2._async.connection.AsyncHTTPConnection",
            "httpcore2._async.connection_pool.AsyncConnectionPool",
            "httpcore2._async.http_proxy.AsyncHTTPProxy",
        ]

    return Httpcore2Mocker


def start_guard(owner: NetworkGuard) -> NetworkGuard | None:
    """A guard on httpcore2 reporting into ``owner`` (the httpcore guard), or None when
    httpcore2 is not installed."""
    if not HTTPCORE2_INSTALLED:
        return None
    _guard_mocker()

    class Httpcore2Guard(NetworkGuard):
        def __init__(self) -> None:
            super().__init__(using=GUARD_MOCKER)
            # What it refuses is reported with the httpcore guard's refusals.
            self._api = owner.refuse

    guard = Httpcore2Guard()
    guard.start()
    return guard


# -- deliveries nothing is mounted for -------------------------------------------------------
def takes_unmounted() -> bool:
    """Whether a delivery nothing is mounted for goes out through httpx2: the test mocks with
    httpx2 (pytest-httpx2, ``respx.mock(using="httpcore2")``) and not with httpx, so only
    httpx2's mocks can answer it."""
    if not HTTPX2_INSTALLED:
        return False
    mocker = Mocker.registry.get(GUARD_MOCKER)
    if mocker is None or all(isinstance(r, QStashRouter) for r in mocker.routers):
        return False
    return not httpx_mocks_active()


def _to_httpx2(request: httpx.Request) -> Any:
    import httpx2

    return httpx2.Request(
        request.method,
        str(request.url),
        headers=request.headers.multi_items(),
        content=request.content,
    )


def _from_httpx2(response: Any) -> httpx.Response:
    return httpx.Response(
        response.status_code, headers=response.headers.multi_items(), content=response.content
    )


def _httpx_error(exc: Exception, request: httpx.Request) -> Exception:
    """httpx2's transport errors as httpx's of the same name: what the delivery path reads."""
    import httpx2

    if isinstance(exc, httpx2.TransportError):
        error_type = getattr(httpx, type(exc).__name__, httpx.TransportError)
        error: Exception = error_type(str(exc), request=request)
        return error
    return exc


def send(request: httpx.Request) -> httpx.Response:
    import httpx2

    try:
        with httpx2.Client() as client:
            return _from_httpx2(client.send(_to_httpx2(request)))
    except Exception as exc:
        mapped = _httpx_error(exc, request)
        if mapped is exc:
            raise
        raise mapped from exc


async def asend(request: httpx.Request) -> httpx.Response:
    import httpx2

    try:
        async with httpx2.AsyncClient() as client:
            return _from_httpx2(await client.send(_to_httpx2(request)))
    except Exception as exc:
        mapped = _httpx_error(exc, request)
        if mapped is exc:
            raise
        raise mapped from exc
