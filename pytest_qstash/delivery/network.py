"""Unmounted deliveries: a URL no app is mounted for goes through httpx, so a user's respx
routes, pytest-httpx or httpx2's mocks can answer it; the network is only used for loopback
hosts (or any host, for a server: ``anywhere``). What nothing could answer is ``Unrouted``."""

from __future__ import annotations

import functools
import ssl
import sys
from typing import Any, Protocol

import httpx

from ..engine.attempts import timeout_error
from ..intercept.compat import PYTEST_HTTPX_NO_RESPONSE, httpx_transports_patched
from ..intercept.compat import unrecord_in_pytest_httpx as _unrecord_in_pytest_httpx
from ..wire.hosts import is_loopback
from .outcome import Outcome, Unrouted


class Pool(Protocol):
    async def send(self, request: httpx.Request) -> httpx.Response: ...


def send(request: httpx.Request, *, anywhere: bool, timeout_s: float) -> Outcome:
    """Send an unmounted delivery from sync code. ``anywhere``: to any host (a server's
    choice), not only loopback or a user's mocks; ``timeout_s`` bounds it inside a test."""
    __tracebackhide__ = True
    _check_can_route(request, anywhere)
    try:
        httpx2 = _httpx2_mocks()
        if httpx2 is not None:  # only httpx2's mocks can answer it
            return Outcome.of_response(httpx2.send(request))
        with httpx.Client(verify=_ssl_context()) as client:
            bounded = _bounded_in_real_time(request, anywhere, timeout_s)
            return Outcome.of_response(client.send(bounded))
    except Exception as exc:
        return _unmounted_failure(exc, request, anywhere)


async def asend(
    request: httpx.Request, *, anywhere: bool, timeout_s: float, pool: Pool | None
) -> Outcome:
    """``send`` from async code; through ``pool`` (connections kept alive) when given, else
    on a client of its own."""
    _check_can_route(request, anywhere)
    try:
        httpx2 = _httpx2_mocks()
        if httpx2 is not None:
            return Outcome.of_response(await httpx2.asend(request))
        bounded = _bounded_in_real_time(request, anywhere, timeout_s)
        if pool is not None:
            return Outcome.of_response(await pool.send(bounded))
        async with httpx.AsyncClient(verify=_ssl_context()) as client:
            return Outcome.of_response(await client.send(bounded))
    except Exception as exc:
        return _unmounted_failure(exc, request, anywhere)


def _bounded_in_real_time(
    request: httpx.Request, anywhere: bool, timeout_s: float
) -> httpx.Request:
    """A real endpoint gets the attempt's deadline (set by the dispatcher), as QStash gives
    it; inside a test no longer than ``delivery_timeout``, which no test waits past. A
    server (``anywhere``) waits the whole deadline, as QStash does."""
    deadline = request.extensions.get("timeout", {}).get("read")
    if anywhere or deadline is None or deadline <= timeout_s:
        return request
    request.extensions["timeout"] = httpx.Timeout(timeout_s).as_dict()
    return request


def _unmounted_failure(exc: Exception, request: httpx.Request, anywhere: bool) -> Outcome:
    if isinstance(exc, httpx.ReadTimeout):
        # No answer by the deadline: QStash cut the attempt (a failed attempt, retried), in
        # its words. A connect timeout is the network's failure, said as it is.
        error = timeout_error(request.method, str(request.url))
        return Outcome(None, httpx.Headers(), b"", error)
    if anywhere and isinstance(exc, httpx.TransportError):
        # A server's deliveries go to real endpoints: one that is down (a loopback port
        # too) is a failed attempt, retried, as on QStash; there is nothing to mount.
        return Outcome(None, httpx.Headers(), b"", f"{type(exc).__name__}: {exc}")
    return _network_failure(exc)


def _check_can_route(request: httpx.Request, anywhere: bool) -> None:
    if anywhere or is_loopback(request.url.host) or _user_interceptors_active():
        return
    raise Unrouted("no respx route or pytest-httpx mock is active to answer it either")


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
