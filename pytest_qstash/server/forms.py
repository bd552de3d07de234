"""Plain-data forms: how a value that is not JSON is written as plain data, once per type.

For the control API's JSON, a ``Kind`` per form (``encode`` on the server, ``decode`` in the
client): moments as ISO 8601 text, bytes as text with base64 beside when the text is not the
bytes, headers as ``[name, value]`` pairs, retry-delay and cron expressions as their text. For
the data dir, where values are found by their type, one tagged object per type (``TAGGED``,
read back by ``UNTAGGED``): bytes as base64, headers as Latin-1 pairs (byte for byte),
expressions as their text, parsed again on reading. A field takes its type's form
(``form_of``) unless the registry (``fields``) says another (a moment kept as milliseconds).
"""

from __future__ import annotations

import base64
import dataclasses
import types
import typing
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx

from ..engine.models import Message
from ..engine.retry import RetryDelayExpression
from ..engine.schedules import CronExpression

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


def iso_time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def read_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- forms: how one value travels in the control API's JSON ---------------------------------
class Kind:
    """A value's form in the control API's JSON: ``encode`` for the server, ``decode`` for
    the client. None travels as null and comes back as None, whatever the kind."""

    def encode(self, value: Any) -> Any:
        return value

    def decode(self, value: Any) -> Any:
        return value

    def bind(self, model_of: Callable[[type], Any]) -> Kind:
        """The form itself, its nested classes' models found by ``model_of`` (records)."""
        return self


class _Plain(Kind):
    pass


#: Moments already written (a batch's messages share one): cleared when it grows past
#: ``_MOMENTS_KEPT``, so it stays small whatever the clock does.
_moments: dict[int, str] = {}
_MOMENTS_KEPT = 4096


class _Millis(Kind):
    """Integer milliseconds since the epoch, as an ISO 8601 moment."""

    def encode(self, value: Any) -> Any:
        text = _moments.get(value)
        if text is None:
            text = (_EPOCH + value * _MS).isoformat().replace("+00:00", "Z")
            if type(value) is int:
                if len(_moments) >= _MOMENTS_KEPT:
                    _moments.clear()
                _moments[value] = text
        return text

    def decode(self, value: Any) -> Any:
        return (read_time(value) - _EPOCH) // _MS


class _Moment(Kind):
    """A datetime (a derived field: rendered only)."""

    def encode(self, value: Any) -> Any:
        return iso_time(value)


class Bytes(Kind):
    """Bytes as two JSON fields: ``name``, the text (what ``.body`` shows), and
    ``name_base64``, null when that text is the bytes in UTF-8, else base64 of the bytes
    (QStash's ``body``/``bodyBase64`` rule, with the text kept for readers that know only it)."""

    #: The suffix of the base64 field's name.
    suffix = "_base64"

    def encode(self, value: Any) -> Any:
        return bytes_as_text(value)[0]

    def decode(self, value: Any) -> Any:
        return str(value).encode()

    def read(self, text: Any, encoded: Any) -> bytes:
        """The bytes of a ``name`` and ``name_base64`` pair."""
        if encoded is None:
            return str(text).encode()
        return base64.b64decode(str(encoded), validate=True)


def bytes_as_text(value: bytes) -> tuple[str, str | None]:
    """``value`` as its text and, when that text is not the bytes in UTF-8, base64 of them."""
    try:
        return value.decode(), None
    except UnicodeDecodeError:
        return value.decode(errors="replace"), base64.b64encode(value).decode("ascii")


class _Headers(Kind):
    def encode(self, value: Any) -> Any:
        if not value:
            return []
        return [[k, v] for k, v in value.multi_items()]

    def decode(self, value: Any) -> Any:
        # As bytes: a value beyond ASCII (UTF-8, as QStash forwards it) is kept.
        return httpx.Headers([(str(k).encode(), str(v).encode()) for k, v in value])


class _Url(Kind):
    def encode(self, value: Any) -> Any:
        return str(value)

    def decode(self, value: Any) -> Any:
        return httpx.URL(value)


class _Tuple(Kind):
    def encode(self, value: Any) -> Any:
        return list(value)

    def decode(self, value: Any) -> Any:
        return tuple(value)


class _Keys(Kind):
    """An insertion-ordered ``dict[str, None]`` (a set that keeps its order), as a list."""

    def encode(self, value: Any) -> Any:
        return list(value)

    def decode(self, value: Any) -> Any:
        return dict.fromkeys(value)


class _Set(Kind):
    def encode(self, value: Any) -> Any:
        return sorted(value)

    def decode(self, value: Any) -> Any:
        return set(value)


class _Expression(Kind):
    """A retry-delay or cron expression, as its text (parsed again when read)."""

    def __init__(self, parse: Callable[[str], Any]) -> None:
        self.parse = parse

    def encode(self, value: Any) -> Any:
        return value.text

    def decode(self, value: Any) -> Any:
        return self.parse(value)


class _Outstanding(Kind):
    """A flow-control key's limits in use: ``{(parallelism, rate, period): count}``."""

    def encode(self, value: Any) -> Any:
        return [[*limits, count] for limits, count in value.items()]

    def decode(self, value: Any) -> Any:
        return {(p, r, s): n for p, r, s, n in value}


class ListOf(Kind):
    def __init__(self, kind: Kind) -> None:
        self.kind = kind

    def encode(self, value: Any) -> Any:
        return [None if v is None else self.kind.encode(v) for v in value]

    def decode(self, value: Any) -> Any:
        return [None if v is None else self.kind.decode(v) for v in value]

    def bind(self, model_of: Callable[[type], Any]) -> Kind:
        return ListOf(self.kind.bind(model_of))


class Nested(Kind):
    """An object of another registered class, as that class's own JSON."""

    def __init__(self, cls: type, model: Any = None) -> None:
        self.cls = cls
        self.model = model

    def encode(self, value: Any) -> Any:
        return self.model.render(value)

    def decode(self, value: Any) -> Any:
        return self.model.read(value)

    def bind(self, model_of: Callable[[type], Any]) -> Kind:
        return Nested(self.cls, model_of(self.cls))


class _RunMessages(Kind):
    """A run's messages with the call type each joined it under."""

    def __init__(self, model: Any = None) -> None:
        self.model = model

    def encode(self, value: Any) -> Any:
        render = self.model.render
        return [
            {"call_type": call_type, "message": render(message)} for message, call_type in value
        ]

    def decode(self, value: Any) -> Any:
        read = self.model.read
        return [(read(item["message"]), str(item["call_type"])) for item in value]

    def bind(self, model_of: Callable[[type], Any]) -> Kind:
        return _RunMessages(model_of(Message))


PLAIN: Kind = _Plain()
MILLIS: Kind = _Millis()
MOMENT: Kind = _Moment()
BYTES = Bytes()
HEADERS: Kind = _Headers()
URL: Kind = _Url()
TUPLE: Kind = _Tuple()
KEYS: Kind = _Keys()
SET: Kind = _Set()
BACKOFF: Kind = _Expression(RetryDelayExpression)
CRON: Kind = _Expression(CronExpression.parse)
OUTSTANDING: Kind = _Outstanding()
RUN_MESSAGES: Kind = _RunMessages()


# -- forms in the data dir: one tagged object per type that is not JSON ---------------------
def _latin1(pairs: Iterable[tuple[bytes, bytes]]) -> list[list[str]]:
    return [[name.decode("latin-1"), value.decode("latin-1")] for name, value in pairs]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _text(value: Any) -> str:
    if type(value) is not str:
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def _unb64(value: Any) -> bytes:
    try:
        return base64.b64decode(_text(value), validate=True)
    except ValueError:
        raise ValueError("unreadable bytes (not base64)") from None


def _pairs(value: Any) -> list[tuple[bytes, bytes]]:
    if type(value) is not list or not all(type(p) is list and len(p) == 2 for p in value):
        raise TypeError("headers are a list of [name, value]")
    try:
        return [(_text(name).encode("latin-1"), _text(v).encode("latin-1")) for name, v in value]
    except UnicodeEncodeError:
        raise ValueError("a header beyond latin-1") from None


def _request(value: Any) -> httpx.Request:
    if type(value) is not list or len(value) != 4:
        raise TypeError("a request is [method, url, headers, body]")
    method, url, headers, content = value
    try:
        return httpx.Request(
            _text(method), _text(url), headers=_pairs(headers), content=_unb64(content)
        )
    except httpx.InvalidURL as exc:
        raise ValueError(f"an unreadable request: {exc}") from None


#: Per type: its tag and its plain value.
TAGGED: dict[type, tuple[str, Callable[[Any], Any]]] = {
    bytes: ("$bytes", _b64),
    httpx.Headers: ("$headers", lambda v: _latin1(v.raw)),
    httpx.URL: ("$url", str),
    httpx.Request: (
        "$request",
        lambda v: [v.method, str(v.url), _latin1(v.headers.raw), _b64(v.content)],
    ),
    RetryDelayExpression: ("$retry_delay", BACKOFF.encode),
    CronExpression: ("$cron", CRON.encode),
}

#: Per tag: the value rebuilt from its plain form (``ValueError``/``TypeError`` when it is
#: none: the data dir's reader says so).
UNTAGGED: dict[str, Callable[[Any], Any]] = {
    "$bytes": _unb64,
    "$headers": lambda v: httpx.Headers(_pairs(v)),
    "$url": lambda v: httpx.URL(_text(v)),
    "$request": _request,
    "$retry_delay": lambda v: BACKOFF.decode(_text(v)),
    "$cron": lambda v: CRON.decode(_text(v)),
}


#: The form a field takes by its type, when the registry says none (one form per type).
_BY_TYPE: dict[Any, Kind] = {
    bytes: BYTES,
    httpx.Headers: HEADERS,
    httpx.URL: URL,
    RetryDelayExpression: BACKOFF,
    CronExpression: CRON,
    tuple: TUPLE,
    set: SET,
}


def form_of(annotation: Any) -> Kind:
    """The form of a value of type ``annotation`` (a field's resolved type hint): its type's
    own (bytes, headers, expressions...), a dataclass's JSON (``Nested``), a list of them,
    else itself (``PLAIN``). ``X | None`` is ``X``'s: None travels as null anyway."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return form_of(args[0])
    if origin is list and len(args) == 1:
        inner = form_of(args[0])
        return PLAIN if inner is PLAIN else ListOf(inner)
    kind = _BY_TYPE.get(origin or annotation)
    if kind is not None:
        return kind
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return Nested(annotation)
    return PLAIN
