"""What a message can be delivered with: destination URLs and forwarded headers.

The one place that decides whether a URL (a destination, a callback, a URL group's endpoint,
a workflow URL) or a forwarded header can ever go out over HTTP. Publish, enqueue, batch,
schedules, URL groups and the Python API (``qstash.trigger``) all ask here, so what could only
fail every attempt until the DLQ is refused when it is published, naming the field.

Decisions where QStash's documents say nothing (see docs/fidelity.md):

- header values may carry any bytes but control characters (HTAB excepted), as HTTP (and Go,
  which QStash is written in) allows: UTF-8 such as ``Zoë`` is delivered as its UTF-8 bytes;
  leading and trailing blanks are dropped, as every HTTP hop drops them;
- header names must be HTTP tokens (no spaces, CR/LF, NUL, ``:``...);
- hop-by-hop and framing headers are not forwarded: they describe one connection, and the
  delivery's own are set by the transport;
- a URL needs the scheme ``http`` or ``https`` (any case; kept lower-cased), a host without
  blanks or control characters, and a port from 1 to 65535.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx

from .url_groups import UrlGroup


class Undeliverable(ValueError):
    """A URL or header that no delivery could ever be made with; the text names the field,
    what is wrong, and what is accepted."""


#: Headers about one connection or its framing: never forwarded to the destination.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "content-length",
        "host",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_HOST_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")
_URL_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SCHEME = re.compile(r"(?i)https?://")

ACCEPTED_URL = "an http:// or https:// URL with a host (and a port from 1 to 65535)"
ACCEPTED_NAME = (
    "a header name is letters, digits and !#$%&'*+-.^_`|~ (no spaces, colons or control characters)"
)
ACCEPTED_VALUE = "a header value is any text without control characters (tab excepted)"


#: What QStash answers a destination that is neither an http(s) URL nor a URL group.
INVALID_DESTINATION = (
    "invalid destination url: endpoint has invalid scheme, add http:// or https://"
)


def checked_destination(
    destination: str, url_groups: Mapping[str, UrlGroup], *, group_needs_endpoints: bool
) -> str:
    """The destination to publish to (a URL's scheme lower-cased), or ``Undeliverable``: for
    what is neither an http(s) URL nor a URL group (``group_needs_endpoints``: nor a group
    with no endpoint), and for a URL nothing could be delivered to (no host, port 99999...)."""
    if is_url(destination):
        return checked_url(destination, "destination url")
    group = url_groups.get(destination)
    if group is None or (group_needs_endpoints and not group.endpoints):
        raise Undeliverable(INVALID_DESTINATION)
    return destination


def is_url(target: str) -> bool:
    """Whether ``target`` is meant as a URL (``http://``/``https://``, any case) rather than
    a URL group's name."""
    return _SCHEME.match(target) is not None


def checked_url(url: object, field: str) -> str:
    """``url`` if it can be delivered to, with its scheme lower-cased; else ``Undeliverable``
    saying why, naming ``field`` (``"destination url"``, ``"Upstash-Callback"``...)."""
    if not isinstance(url, str):
        raise Undeliverable(f"invalid {field} {url!r}: expected {ACCEPTED_URL}")
    problem = _url_problem(url)
    if problem is not None:
        raise Undeliverable(f"invalid {field} {url!r}: {problem}; expected {ACCEPTED_URL}")
    scheme, rest = url.split("://", 1)
    return f"{scheme.lower()}://{rest}"


@functools.lru_cache(maxsize=4096)  # a pure function of the text; apps publish to few URLs
def _url_problem(url: str) -> str | None:
    if not is_url(url):
        return "endpoint has invalid scheme, add http:// or https://"
    if _URL_CONTROL.search(url):
        return "it contains a control character"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"it does not parse ({exc})"
    host = parts.hostname
    if not host:
        return "it has no host"
    if _HOST_FORBIDDEN.search(host):
        return f"its host {host!r} contains a blank or a control character"
    if port == 0:
        return "port 0 cannot be connected to"
    try:
        httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:  # an IDN that does not encode, say
        return f"it does not parse ({exc})"
    return None


def checked_header(name: str, value: str, field: str) -> str:
    """The value to deliver for a forwarded header (blanks around it dropped), or
    ``Undeliverable`` naming ``field`` (the header as sent, ``Upstash-Forward-X``)."""
    if not isinstance(name, str) or not isinstance(value, str):
        raise Undeliverable(f"invalid header {field!r}: {value!r}: expected text for both")
    if not _TOKEN.fullmatch(name):
        raise Undeliverable(f"invalid header name {field!r}: {ACCEPTED_NAME}")
    if _VALUE_CONTROL.search(value):
        raise Undeliverable(
            f"invalid value of header {field!r}: {value!r} contains a control character "
            f"(CR, LF, NUL...); {ACCEPTED_VALUE}"
        )
    return value.strip(" \t")


def is_forwarded(name: str) -> bool:
    """Whether a header the publisher asked to forward is delivered (hop-by-hop ones are
    not)."""
    return name.lower() not in HOP_BY_HOP


def encoded_headers(items: list[tuple[str, str]], encoding: str = "utf-8") -> httpx.Headers:
    """Headers holding ``items`` as bytes in ``encoding`` (what they arrived in), so text
    beyond ASCII is kept and delivered as sent (httpx would refuse it as ``str``)."""
    return httpx.Headers([(n.encode(encoding), v.encode(encoding)) for n, v in items])
