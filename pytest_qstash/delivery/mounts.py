"""Which app answers a URL: the mount table (longest base URL wins) and app-kind detection.

Besides apps, a test client can be mounted (kind ``"client"``): deliveries then go through it,
to the app it wraps, where the test's own requests go (a Starlette ``TestClient``'s portal and
lifespan, say). Clients are recognised by class, without importing their frameworks."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from .django_apps import django_handler

AppKind = Literal["asgi", "wsgi", "callable", "client"]
_KINDS = ("asgi", "wsgi", "callable", "client")

#: Which test client a "client" mount holds: what decides how a delivery is sent through it.
ClientFlavour = Literal["starlette", "httpx", "httpx-async", "werkzeug", "django", "django-async"]
_CLIENT_CLASSES: dict[str, ClientFlavour] = {
    "starlette.testclient.TestClient": "starlette",
    "werkzeug.test.Client": "werkzeug",  # Flask's app.test_client() is a subclass
    "django.test.client.AsyncClient": "django-async",
    "django.test.client.Client": "django",
}


@dataclass(frozen=True, slots=True)
class Mount:
    base_url: str
    app: Any
    kind: AppKind
    #: Run the ASGI app's lifespan (startup before its first delivery, shutdown at stop).
    lifespan: bool = False
    #: For a "client" mount: which kind of test client it is.
    client: ClientFlavour | None = None
    #: A Django handler (WSGI or ASGI): delivered to as Django's test client makes requests.
    django: bool = False

    def matches(self, url: str) -> bool:
        return _under(url, self.base_url)


def _under(url: str, base_url: str) -> bool:
    if not url.startswith(base_url):
        return False
    # "https://app.test/api" must not match "https://app.test/apiary".
    rest = url[len(base_url) :]
    return not rest or base_url.endswith("/") or rest[0] in "/?#"


def normalize_base_url(base_url: str) -> str:
    """The base URL as deliveries spell their URLs (httpx's form: lower-case scheme and host,
    no default port, no trailing slash), so ``https://App.example.com:443/hooks/`` is the same
    base as ``https://app.example.com/hooks``."""
    # httpx keeps the default port when the scheme is spelled in capitals: lower it first.
    scheme, sep, rest = base_url.partition("://")
    return str(httpx.URL(scheme.lower() + sep + rest)).rstrip("/")


def client_flavour(app: Any) -> ClientFlavour | None:
    """The kind of test client ``app`` is, or None when it is no test client we know."""
    for cls in type(app).__mro__:
        flavour = _CLIENT_CLASSES.get(f"{cls.__module__}.{cls.__qualname__}")
        if flavour is not None:
            return flavour
    if isinstance(app, httpx.AsyncClient):
        return "httpx-async"
    if isinstance(app, httpx.Client):
        return "httpx"
    return None


def _check_client(app: Any, flavour: ClientFlavour) -> None:
    if flavour not in ("httpx", "httpx-async"):
        return
    # A client built without a transport of its own would send deliveries to the network.
    transport = getattr(app, "_transport", None)
    if isinstance(transport, (httpx.HTTPTransport, httpx.AsyncHTTPTransport)):
        raise ValueError(
            f"cannot mount {app!r}: it has no transport of its own, so it would send "
            "deliveries to the network. Give it one (httpx.Client(transport="
            "httpx.WSGITransport(app=app)), httpx.AsyncClient(transport="
            "httpx.ASGITransport(app=app))) or mount the app itself"
        )


def detect_kind(app: Any) -> AppKind:
    """ASGI apps take ``(scope, receive, send)`` and are async; WSGI apps take
    ``(environ, start_response)``; test clients are known by class; anything else callable
    takes an ``httpx.Request``."""
    if client_flavour(app) is not None:
        return "client"
    if not callable(app):
        raise TypeError(
            f"cannot mount {app!r}: it is not callable (expected an ASGI or WSGI app, a "
            "callable taking an httpx.Request, or a test client: Starlette's TestClient, an "
            "httpx.Client/AsyncClient with a transport, Flask's test_client(), Django's Client)"
        )
    call: Callable[..., Any] = app
    is_async = inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(
        getattr(call, "__call__", None)  # noqa: B004 - we want the bound __call__ of instances
    )
    try:
        params = [
            p
            for p in inspect.signature(call).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    if len(params) == 3 and is_async:
        return "asgi"
    if len(params) == 2:
        return "wsgi"
    if len(params) == 3:
        return "asgi"  # e.g. an ASGI app wrapped in a sync-looking decorator
    if not params and not _takes_varargs(call):
        raise TypeError(
            f"cannot mount {app!r}: it takes no argument. Expected an ASGI app "
            "(scope, receive, send), a WSGI app (environ, start_response), or a callable "
            "taking the httpx.Request"
        )
    return "callable"


_KIND_SHAPES = {
    "asgi": "ASGI (an async callable taking scope, receive, send)",
    "wsgi": "WSGI (a callable taking environ, start_response)",
    "client": "a test client",
}


def _check_kind(base_url: str, app: Any, kind: str, detected: AppKind | None) -> None:
    """An explicit ``kind=`` that contradicts what the app plainly is would fail at the first
    delivery with a raw TypeError deep in a transport: say so at mount instead."""
    if detected is None or kind == detected:
        return
    if kind == "client" and detected == "callable":
        raise ValueError(
            f"cannot mount {app!r} at {base_url!r} with kind='client': it is no test client "
            "pytest-qstash knows (Starlette's TestClient, an httpx.Client/AsyncClient with a "
            "transport, Flask's test_client(), Django's Client or AsyncClient)"
        )
    if detected in ("asgi", "wsgi", "client"):
        raise ValueError(
            f"cannot mount {app!r} at {base_url!r} with kind={kind!r}: it looks like "
            f"{_KIND_SHAPES[detected]}. Mount it with kind={detected!r}, or leave kind out "
            "to have it detected"
        )


def _takes_varargs(call: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(call).parameters.values()
    except (TypeError, ValueError):
        return True  # a builtin or C callable: let the call itself say what it takes
    return any(p.kind is p.VAR_POSITIONAL for p in parameters)


class MountTable:
    def __init__(self) -> None:
        self._mounts: list[Mount] = []

    def add(
        self, base_url: str, app: Any, kind: str | None = None, *, lifespan: bool = False
    ) -> Mount:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"cannot mount at {base_url!r}: expected an absolute http:// or https:// base "
                "URL with a host, e.g. 'https://app.example.com'"
            )
        if parts.query or parts.fragment or base_url.endswith(("?", "#")):
            raise ValueError(
                f"cannot mount at {base_url!r}: a base URL is a scheme, host and optional path "
                "prefix, without a query or fragment"
            )
        if kind is not None and kind not in _KINDS:
            raise ValueError(f"unknown app kind {kind!r}: expected one of {', '.join(_KINDS)}")
        detected = detect_kind(app) if kind in (None, "asgi", "wsgi", "client") else None
        resolved: AppKind = kind if kind is not None else detected  # type: ignore[assignment]
        _check_kind(base_url, app, resolved, detected)
        flavour = client_flavour(app) if resolved == "client" else None
        if flavour is not None:
            _check_client(app, flavour)
        if lifespan and resolved != "asgi":
            hint = (
                ": a TestClient runs the app's lifespan itself, inside `with TestClient(app) "
                "as client:`; mount that client without lifespan=True"
                if flavour == "starlette"
                else ""
            )
            raise ValueError(
                f"lifespan=True needs an ASGI app; the app mounted at {base_url!r} is "
                f"{resolved}{hint}"
            )
        django = resolved in ("wsgi", "asgi") and django_handler(app) is not None
        mount = Mount(normalize_base_url(base_url), app, resolved, lifespan, flavour, django)
        self._mounts = [m for m in self._mounts if m.base_url != mount.base_url] + [mount]
        # Longest base URL first, so the most specific mount answers.
        self._mounts.sort(key=lambda m: len(m.base_url), reverse=True)
        return mount

    def remove(self, base_url: str) -> bool:
        """Unmount ``base_url``; False if nothing was mounted there."""
        base_url = normalize_base_url(base_url)
        kept = [m for m in self._mounts if m.base_url != base_url]
        removed = len(kept) != len(self._mounts)
        self._mounts = kept
        return removed

    def resolve(self, url: str) -> Mount | None:
        for mount in self._mounts:
            if mount.matches(url):
                return mount
        return None

    @property
    def mounts(self) -> list[Mount]:
        return list(self._mounts)

    @property
    def base_urls(self) -> list[str]:
        return [m.base_url for m in self._mounts]


# -- the server's outbound mounts -------------------------------------------------------------
#: One outbound mount of the server: a URL prefix and the base URL its requests go to instead.
Redirect = tuple[str, str]


def check_redirect(prefix: str, to: str) -> Redirect:
    """``(prefix, to)`` in the form ``redirect`` matches on, or ``ValueError`` saying what is
    accepted: both absolute http(s) URLs with a host, without a query or fragment."""
    return mount_url(prefix, "prefix"), mount_url(to, "to")


def mount_url(url: str, name: str = "prefix") -> str:
    """One side of an outbound mount, normalized as ``normalize_base_url`` does."""
    example = "https://api.openai.com" if name == "prefix" else "http://127.0.0.1:9000"
    if not isinstance(url, str):
        raise ValueError(f"cannot mount with {name} {url!r}: expected a URL, e.g. {example!r}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - read for its check: a port out of range raises here
    except ValueError as exc:
        raise ValueError(f"cannot mount with {name} {url!r}: {exc}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"cannot mount with {name} {url!r}: expected an absolute http:// or https:// URL "
            f"with a host, e.g. {example!r}"
        )
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError(
            f"cannot mount with {name} {url!r}: expected a scheme, host and optional path, "
            "without a query or fragment"
        )
    try:
        return normalize_base_url(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"cannot mount with {name} {url!r}: {exc}") from None


def merge_redirects(
    old: tuple[Redirect, ...], new: tuple[Redirect, ...] | list[Redirect]
) -> tuple[Redirect, ...]:
    """``old`` with ``new`` added: a prefix in both takes its target from ``new``."""
    merged = dict(old)
    for prefix, to in new:
        merged.pop(prefix, None)  # a prefix given again goes last, with its new target
        merged[prefix] = to
    return tuple(merged.items())


def redirect(url: str, redirects: list[Redirect] | tuple[Redirect, ...]) -> str | None:
    """Where a request to ``url`` goes under the longest prefix it starts with (at a path
    boundary: ``https://a.test/api`` takes ``/api/x`` and ``/api?q``, never ``/apiary``): that
    prefix's target plus the rest of the path and query. None when no prefix matches."""
    best: Redirect | None = None
    for prefix, to in redirects:
        if (best is None or len(prefix) > len(best[0])) and _under(url, prefix):
            best = (prefix, to)
    if best is None:
        return None
    prefix, to = best
    return to + url[len(prefix) :]
