"""What a QStash API base is, and whether a request is for one: decided here, and only here.

A base is a host, a port and an optional path prefix (a proxy's
``https://gateway.example.com/qstash``). QStash's own hosts (``qstash.upstash.io`` and the
regional ``qstash-<region>.upstash.io``) are bases on any port; ``QSTASH_URL`` and a fake's
``base_urls`` add bases of their own. The fakes' interception of httpx and httpx2 and the
network guard all ask ``qstash_prefix`` the same question about a request's URL.

Hosts are compared in one spelling, ``canonical_host``: every spelling that reaches the same
server is the same host. Lower case; IDNA (``bücher.example`` is ``xn--bcher-kva.example``,
the name DNS is asked); no trailing dot (``qstash.upstash.io.`` is the same name, fully
qualified); no percent-escapes; IP literals in their standard form (``[2001:DB8:0::1]`` is
``2001:db8::1``, ``[::ffff:10.0.0.1]`` and ``10.1`` are ``10.0.0.1``, as the resolver reads
them). Any other character that httpx accepts (an underscore, as docker compose names
services) is a host like any other.

Only the standard library is imported here (and ``idna``, for a host that is not ASCII), so
that the pytest plugin can check ``QSTASH_URL`` when pytest starts without loading httpx.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import SplitResult, quote, unquote, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
#: QStash's own hosts, in canonical spelling: the global one and the regional ones.
_UPSTASH_QSTASH = re.compile(r"qstash(-[a-z0-9-]+)?\.upstash\.io")
#: What a host name may hold (RFC 3986's reg-name: unreserved and sub-delimiters).
_NAME = re.compile(r"[a-z0-9_.~!$&'()*+,;=-]+")
#: What the resolver may read as an IPv4 address in a short or numeric form (inet_aton's).
_NUMERIC_V4 = re.compile(r"[0-9][0-9a-fx.]*")

ACCEPTED = (
    "expected http(s)://host[:port][/path prefix]: the host a name (letters, digits, '-', '_', "
    "'.'), an IPv4 address or an [IPv6] address, the port 1 to 65535, no query or fragment; "
    "e.g. 'http://127.0.0.1:8080', 'http://qstash_dev:8080' or 'https://qstash.upstash.io'"
)


class URLLike(Protocol):
    """What is read of a request's URL: ``httpx.URL`` and ``httpx2.URL`` both are."""

    @property
    def scheme(self) -> str: ...
    @property
    def raw_host(self) -> bytes: ...
    @property
    def port(self) -> int | None: ...
    @property
    def raw_path(self) -> bytes: ...


@functools.lru_cache(maxsize=512)  # asked for every request a client sends
def canonical_host(host: str | bytes) -> str:
    """The one spelling of ``host`` that this module compares (see the module's docstring)."""
    text = host.decode("ascii", "replace") if isinstance(host, bytes) else host
    text = unquote(text)
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.lower().rstrip(".")
    address = _ip_literal(text)
    if address is not None:
        return address
    return text if text.isascii() else _idna(text)


def _ip_literal(host: str) -> str | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:  # '::ffff:10.0.0.7' is 10.0.0.7, reached over IPv6
        return str(getattr(address, "ipv4_mapped", None) or address)
    if _NUMERIC_V4.fullmatch(host):
        try:  # '10.1', '0x7f.1', '2130706433': what getaddrinfo connects to
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _idna(host: str) -> str:
    try:
        import idna  # httpx's own dependency: the encoding httpx sends

        return str(idna.encode(host, uts46=True).decode("ascii"))
    except ImportError:
        pass
    except Exception:  # idna.IDNAError: not a name httpx could connect to either
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def is_loopback(host: str | bytes) -> bool:
    """Whether ``host`` is this machine (a local QStash dev server is no network)."""
    name = canonical_host(host)
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.partition("%")[0])
    except ValueError:
        return False
    # 0.0.0.0 and :: connect to this machine too.
    return bool(address.is_loopback or address.is_unspecified)


def is_upstash_qstash_host(host: str | bytes) -> bool:
    """Whether ``host`` is one of QStash's own (global or regional), on any port."""
    return _UPSTASH_QSTASH.fullmatch(canonical_host(host)) is not None


@dataclass(frozen=True)
class ApiBase:
    """Where a QStash API lives: a canonical host, a port and a path prefix (``""`` for
    none), which is taken off a request's path before it is routed."""

    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> ApiBase:
        """The base ``url`` names, or ValueError saying what is wrong and what is accepted."""
        problem = _problem(url)
        if problem is not None:
            raise ValueError(f"not a QStash base URL: {url!r}: {problem}; {ACCEPTED}")
        parts = _split(url)
        return cls(
            canonical_host(parts.hostname or ""),
            parts.port or DEFAULT_PORTS[parts.scheme],
            # As httpx sends it: a path prefix is compared with the request's raw path.
            quote(parts.path.rstrip("/"), safe="/%!$&'()*+,;=:@~"),
        )

    def prefix_of(self, host: str, port: int | None, path: str) -> str | None:
        """The prefix to strip when this base serves a request to ``host`` (canonical),
        ``port`` and ``path`` (raw, without the query), else None."""
        if host != self.host or port != self.port:
            return None
        if not self.prefix or path == self.prefix or path.startswith(f"{self.prefix}/"):
            return self.prefix
        return None


def _split(url: str) -> SplitResult:
    # QSTASH_URL is sometimes set to a bare host; the SDKs would add https:// to nothing,
    # but reading it as https is the only sensible guess.
    return urlsplit(url.strip() if "://" in url else f"https://{url.strip()}")


def _problem(url: str) -> str | None:
    """What makes ``url`` unusable as a base, or None."""
    if not url.strip():
        return "it is empty"
    try:
        parts = _split(url)
        port = parts.port
    except ValueError as exc:  # a bad port or bracket, as urllib says it
        return str(exc)
    if parts.scheme not in DEFAULT_PORTS:
        return f"the scheme {parts.scheme!r} is not http or https"
    if not parts.hostname:
        return "it has no host"
    if port == 0:
        return "port 0 is no port"
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        return "a base has no query or fragment (the SDKs append the API path to it)"
    host = canonical_host(parts.hostname)
    if _ip_literal(host) is None and not _NAME.fullmatch(host):
        return f"{parts.hostname!r} is not a host name or an IP address"
    return None


def base_problem(url: str) -> str | None:
    """The error ``ApiBase.parse`` would raise for ``url``, or None when it is a base."""
    try:
        ApiBase.parse(url)
    except ValueError as exc:
        return str(exc)
    return None


def parse_bases(urls: Iterable[str]) -> tuple[ApiBase, ...]:
    return tuple(ApiBase.parse(url) for url in urls)


# -- QSTASH_URL, read per request (a test may set it after the fake started) ------------------
_env_cache: tuple[str | None, ApiBase | None] = (None, None)


def env_base() -> ApiBase | None:
    """``QSTASH_URL``'s base, or None when unset. The plugin refuses a value that is no base
    when pytest starts and a fake refuses one when it starts (``check_env``); one set later
    (by a test without a fake) still names the server it sends to, whole: see ``_reached``."""
    global _env_cache
    value = os.environ.get("QSTASH_URL") or None
    if value != _env_cache[0]:
        try:
            base = ApiBase.parse(value) if value else None
        except ValueError:
            base = _reached(value or "")
        _env_cache = (value, base)
    return _env_cache[1]


def _reached(url: str) -> ApiBase | None:
    """The server a client still reaches with ``url`` though it is no base (a query, say: the
    SDKs append the API path to it, and send it there), every path of it; None when no client
    could send to it at all (no host, a bad port, another scheme)."""
    try:
        parts = _split(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return ApiBase(canonical_host(parts.hostname), port or DEFAULT_PORTS[parts.scheme], "")


class QStashUrlError(ValueError):
    """``QSTASH_URL`` is set to something that is not a QStash base."""


def check_env() -> None:
    """Raise ``QStashUrlError`` when ``QSTASH_URL`` is set to something that is not a QStash
    base."""
    value = os.environ.get("QSTASH_URL")
    if value:
        problem = base_problem(value)
        if problem is not None:
            raise QStashUrlError(f"QSTASH_URL is {problem}")


# -- bases the session's fakes were given: the network guard stops them too ------------------
_declared: dict[ApiBase, None] = {}


def declare(bases: Iterable[ApiBase]) -> None:
    """Remember ``bases`` (a fake's ``base_urls``) as QStash's for the rest of the process."""
    for base in bases:
        _declared[base] = None


def declared() -> tuple[ApiBase, ...]:
    return tuple(_declared)


# -- the one question ------------------------------------------------------------------------
def target(url: URLLike) -> tuple[str, int | None, str]:
    """A request URL's canonical host, port (the scheme's default when not given) and raw
    path without the query."""
    path = url.raw_path.decode("ascii", "replace").partition("?")[0]
    return canonical_host(url.raw_host), url.port or DEFAULT_PORTS.get(url.scheme), path


def qstash_prefix(url: URLLike, bases: Iterable[ApiBase]) -> str | None:
    """The path prefix to take off a request for a QStash base (``""`` for none), or None
    when ``url`` is not QStash's: QStash's own hosts, ``bases`` and ``QSTASH_URL``'s."""
    host, port, path = target(url)
    if is_upstash_qstash_host(host):
        return ""
    prefixes = [
        prefix
        for base in (*bases, env_base())
        if base is not None and (prefix := base.prefix_of(host, port, path)) is not None
    ]
    return max(prefixes, key=len) if prefixes else None
