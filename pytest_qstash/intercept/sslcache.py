"""One TLS context for every default httpx transport built while a fake is active.

Each new httpx client builds an ``ssl.SSLContext`` and loads the CA bundle into it, about
15 ms. SDKs that build a client per call pay that per call: upstash-workflow's ``serve()``
builds a throwaway ``AsyncQStash`` on every request, so under the fake (where no QStash call
reaches a transport at all) 95% of a workflow step went there.

While a fake is active, ``HTTPTransport``/``AsyncHTTPTransport`` built with httpx's defaults
(``verify=True``, no ``cert``) get a context built once, by httpx's own ``create_ssl_context``
with the same arguments and the same environment (``SSL_CERT_FILE``, ``SSL_CERT_DIR``,
``SSLKEYLOGFILE`` and ``trust_env`` are part of the cache key, read at each construction), and
kept per ``http2`` (httpcore sets the ALPN protocols on the context before each handshake, so
HTTP/1.1 and HTTP/2 transports never share one). A client that does reach the network gets
the context it would have built. A transport given its own ``verify`` (a path, a context,
``False``) or ``cert``, or built with positional arguments, is left entirely alone.

Only while a fake is active: outside the tests that use one, httpx behaves as untouched (a
pytest session holds the patch from one fake to the next, idle in between: it passes every
argument on as given). When httpx's transports or ``create_ssl_context`` do not look as
expected (the checks below), nothing is patched and every client builds its own context, as
without the fake.
"""

from __future__ import annotations

import inspect
import os
import ssl
import threading
from collections.abc import Callable
from typing import Any

import httpx

_TRANSPORTS: tuple[type[Any], ...] = (httpx.HTTPTransport, httpx.AsyncHTTPTransport)
_NEEDED = ("verify", "cert", "trust_env", "http2")
#: Environment a default context depends on (httpx reads the first two, ``ssl`` the third).
_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE")
_MAX_CONTEXTS = 16  # distinct environments seen; past that the cache starts afresh

_lock = threading.Lock()
_users = 0
#: Whether the transports stay patched while no fake is active (``hold``).
_held = False
_originals: dict[type[Any], Callable[..., None]] = {}
_contexts: dict[tuple[object, ...], ssl.SSLContext] = {}
_checked: dict[tuple[object, ...], bool] = {}


def acquire() -> None:
    """A fake started: share default contexts until the matching ``release()``."""
    global _users
    with _lock:
        _users += 1
        if _users != 1:
            return
        supported = _supported()  # asked again: httpx may have changed since the patch
        if _originals and not supported:
            _unpatch()
        elif supported and not _originals:
            for transport in _TRANSPORTS:
                _originals[transport] = transport.__init__
                transport.__init__ = _sharing_init(transport.__init__)


def release() -> None:
    """A fake stopped: when no other is active, transports build their own contexts again."""
    global _users
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if not _users and not _held:
            _unpatch()


def hold() -> None:
    """Keep the transports patched between fakes, for a pytest session (patching them for
    each test cost more than the rest of a fake's start). With no fake active, the patched
    ``__init__`` is the original's, untouched: ``_users`` is 0."""
    global _held
    with _lock:
        _held = True


def held() -> bool:
    return _held


def unhold() -> None:
    """The session ended: unpatched when no fake is active, else when the last one stops."""
    global _held
    with _lock:
        _held = False
        if not _users:
            _unpatch()


def _unpatch() -> None:
    for transport, original in _originals.items():
        # Someone patched over us meanwhile: ours stays under theirs, idle (``_users`` is 0),
        # rather than undoing their patch.
        if getattr(transport.__init__, "__wrapped__", None) is original:
            transport.__init__ = original
    _originals.clear()


def active() -> bool:
    """Whether default transports share a context now (a fake is active)."""
    return bool(_originals) and _users > 0


def _supported() -> bool:
    """Whether this httpx builds contexts as the patch assumes (0.27 and 0.28 do). Asked at
    every first fake, answered once per set of functions (``inspect.signature`` is slow)."""
    create = getattr(getattr(httpx, "_config", None), "create_ssl_context", None)
    functions = (create, *(transport.__init__ for transport in _TRANSPORTS))
    known = _checked.get(functions)
    if known is None:
        known = _checked[functions] = _shaped_as_expected(create)
    return known


def _shaped_as_expected(create: Callable[..., Any] | None) -> bool:
    if create is None:
        return False
    try:
        needed = {"verify", "cert", "trust_env"}
        if not needed <= set(inspect.signature(create).parameters):
            return False
        for transport in _TRANSPORTS:
            parameters = inspect.signature(transport.__init__).parameters
            for name in _NEEDED:
                parameter = parameters.get(name)
                if parameter is None or parameter.kind not in (
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    inspect.Parameter.KEYWORD_ONLY,
                ):
                    return False
            if parameters["verify"].default is not True or parameters["cert"].default is not None:
                return False
    except (TypeError, ValueError):
        return False
    return True


def _sharing_init(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        default_tls = kwargs.get("verify", True) is True and kwargs.get("cert") is None
        if _users and default_tls and not args:
            trust_env, http2 = kwargs.get("trust_env", True), kwargs.get("http2", False)
            context = _shared_context(bool(trust_env), bool(http2))
            if context is not None:
                kwargs["verify"] = context
        original(self, *args, **kwargs)

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    return __init__


def _shared_context(trust_env: bool, http2: bool) -> ssl.SSLContext | None:
    key = (trust_env, http2, *(os.environ.get(name) for name in _ENV))
    context = _contexts.get(key)
    if context is not None:
        return context
    try:
        # What the transport itself would call with these arguments, in this environment.
        context = httpx._config.create_ssl_context(verify=True, cert=None, trust_env=trust_env)
    except Exception:
        return None  # the transport builds its own, and raises what it raises
    if not isinstance(context, ssl.SSLContext):
        return None
    with _lock:
        if len(_contexts) >= _MAX_CONTEXTS:
            _contexts.clear()
        _contexts[key] = context
    return context
