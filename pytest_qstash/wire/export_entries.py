"""Reading an export file (``pytest-qstash export``'s, or one assembled by hand from QStash's
answers): the document, its entries whatever their pages, and the message fields QStash shows
turned back into what a publish asked for.

Each field QStash shows of a message (``maxRetries``, ``callback``, ``labels``,
``flowControlKey``...) becomes the ``Upstash-*`` header that sets it, and the headers are read
by the one header edge, ``publish_headers.parse_options``: a loaded message has exactly the
options a publish with those headers gives. Whatever cannot be read is ``LoadError``, one
sentence naming the entry's place in the file (``dlq[0].messages[3].header``).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from ..engine.attempts import AttemptResult
from ..engine.deliverable import Undeliverable, checked_url
from ..engine.options import LATEST_MS, InvalidOption, MessageOptions
from ..engine.store_loading import RecordedMessage
from .publish_headers import parse_options

#: The export format's versions this release reads.
FORMAT_VERSIONS = (1,)
#: The resources an export may hold: the paged ones (with the key of each page's list) and
#: the plain lists.
PAGED = {
    "dlq": "messages",
    "workflow_runs": "runs",
    "failed_workflow_runs": "runs",
    "workflow_dlq": "messages",
}
PLAIN = ("schedules", "queues", "url_groups", "flow_control")


#: The largest number QStash's answers hold (a signed 64-bit integer).
INT64_MAX = 2**63 - 1


class LoadError(ValueError):
    """Why an export cannot be loaded: one sentence naming the entry's place in the file."""


# -- reading the document ---------------------------------------------------------------------
def read_document(source: str | os.PathLike[str] | Mapping[str, Any]) -> Mapping[str, Any]:
    """The export document: ``source`` itself when it is a mapping (a parsed file), else the
    JSON file it names."""
    if isinstance(source, Mapping):
        return source
    if not isinstance(source, str | os.PathLike):
        raise LoadError(
            f"cannot load {source!r}: expected the path of an export file or its parsed JSON "
            "(a dict)"
        )
    path = Path(source).expanduser()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LoadError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise LoadError(f"{path} is not JSON ({_reason(exc)}): is it an export file?") from None
    if not isinstance(document, dict):
        raise LoadError(f"{path} holds a JSON {type(document).__name__}, not an export object")
    return document


def _reason(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc)


class At:
    """A value of the document and where it is (``dlq[0].messages[3]``), for the error."""

    __slots__ = ("path", "value")

    def __init__(self, value: Any, path: str) -> None:
        self.value, self.path = value, path

    def fail(self, what: str) -> LoadError:
        return LoadError(f"{self.path or 'the export'}: {what}")

    def key(self, name: str) -> At:
        return At(self.value.get(name), f"{self.path}.{name}" if self.path else name)

    def has(self, name: str) -> bool:
        return self.value.get(name) is not None

    def items(self, what: str) -> Iterator[At]:
        if not isinstance(self.value, list):
            raise self.fail(f"expected a list of {what}, got {kind(self.value)}")
        for index, item in enumerate(self.value):
            yield At(item, f"{self.path}[{index}]")

    def obj(self) -> At:
        if not isinstance(self.value, dict):
            raise self.fail(f"expected an object, got {kind(self.value)}")
        return self

    def text(self, name: str, default: str | None = None) -> str:
        value = self.value.get(name)
        if value is None and default is not None:
            return default
        if not isinstance(value, str) or not value:
            raise self.key(name).fail(f"expected a non-empty string, got {kind(value)}")
        return value

    def optional_text(self, name: str) -> str | None:
        value = self.value.get(name)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise self.key(name).fail(f"expected a string, got {kind(value)}")
        return value

    def number(
        self,
        name: str,
        default: int | None = None,
        minimum: int = 0,
        maximum: int = INT64_MAX,
    ) -> int:
        """A whole number from ``minimum`` to ``maximum`` (QStash's numbers are 64-bit)."""
        value = self.value.get(name)
        if value is None and default is not None:
            return default
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)  # a cursor-like id some answers quote
        if type(value) is not int or not minimum <= value <= maximum:
            raise self.key(name).fail(
                f"expected a whole number from {minimum} to {maximum}, got {kind(value)}"
            )
        return value

    def optional_number(self, name: str, minimum: int = 0) -> int | None:
        return None if self.value.get(name) is None else self.number(name, minimum=minimum)

    def moment(self, name: str, default: int | None = None) -> int:
        """A time in milliseconds since 1970, up to the end of the year 9999 (as the engine's
        clock and QStash's answers hold them)."""
        return self.number(name, default, maximum=LATEST_MS)

    def optional_moment(self, name: str) -> int | None:
        return None if self.value.get(name) is None else self.moment(name)

    def url(self, name: str) -> str:
        """A URL something is delivered to (http or https, a host), as QStash takes one."""
        try:
            return checked_url(self.text(name), name)
        except Undeliverable as exc:
            raise self.key(name).fail(str(exc)) from None

    def flag(self, name: str) -> bool:
        value = self.value.get(name)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.key(name).fail(f"expected true or false, got {kind(value)}")
        return value

    def header_items(self, name: str) -> list[tuple[str, str]]:
        """A header map as QStash shows one (``{name: [values]}``, or ``{name: value}``)."""
        value = self.value.get(name)
        if value is None:
            return []
        where = self.key(name)
        if not isinstance(value, dict):
            raise where.fail(f"expected an object of header names, got {kind(value)}")
        out: list[tuple[str, str]] = []
        for header, values in value.items():
            listed = values if isinstance(values, list) else [values]
            for item in listed:
                if not isinstance(item, str):
                    raise where.fail(
                        f"header {header!r}: expected a string or a list of strings, got "
                        f"{kind(item)}"
                    )
                out.append((header, item))
        return out

    def body(self, name: str = "body") -> bytes:
        """``body`` (text) or ``bodyBase64`` (bytes that are not UTF-8), as QStash shows one."""
        encoded = self.value.get(name + "Base64")
        if encoded is not None:
            if not isinstance(encoded, str):
                raise self.key(name + "Base64").fail(f"expected base64 text, got {kind(encoded)}")
            try:
                return base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise self.key(name + "Base64").fail("expected base64 text") from None
        text = self.value.get(name)
        if text is None:
            return b""
        if not isinstance(text, str):
            raise self.key(name).fail(f"expected a string, got {kind(text)}")
        return text.encode("utf-8", "surrogatepass")


def kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"the string {shown!r}"
    return f"{type(value).__name__} {value!r}"


def entries(document: At, name: str) -> Iterator[At]:
    """The entries of one resource, whatever the pages: each page's list (a paged resource)
    or each answer's list (a plain one). A bare answer (not wrapped in a list of answers, as
    one assembled by hand may be) is read as the one answer."""
    if not document.has(name):
        return
    answers = document.key(name)
    items_key = PAGED.get(name)
    value = answers.value
    if items_key is not None and isinstance(value, dict):
        answers = At([value], answers.path)  # one page, not wrapped
    elif items_key is None and isinstance(value, list) and value and isinstance(value[0], dict):
        answers = At([value], answers.path)  # one plain answer, not wrapped
    for answer in answers.items("answers (one per request)"):
        if items_key is None:
            yield from (item.obj() for item in answer.items(f"{name} entries"))
            continue
        page = answer.obj()
        if not page.has(items_key):
            continue  # an empty page (QStash leaves the list out when there is nothing)
        yield from (item.obj() for item in page.key(items_key).items(f"{name} entries"))


# -- the options a shown message was published with ------------------------------------------
def message_options(entry: At, *, retries_field: str = "maxRetries") -> MessageOptions:
    """The options that give a message (or a schedule) the fields QStash shows of it: each
    turned back into the ``Upstash-*`` header that sets it, all read by ``parse_options``."""
    headers: list[tuple[str, str]] = []
    for name, value in entry.header_items("header"):
        if name.lower() == "content-type":
            headers.append(("Content-Type", value))
        else:
            headers.append((f"Upstash-Forward-{name}", value))
    for name in ("callbackHeader", "failureCallbackHeader"):
        headers.extend(entry.header_items(name))  # shown as they were sent, prefixed
    method_name = entry.optional_text("method")
    if method_name is not None:
        headers.append(("Upstash-Method", method_name))
    retries = entry.optional_number(retries_field)
    if retries is not None:
        headers.append(("Upstash-Retries", str(retries)))
    for name, header in (
        ("callback", "Upstash-Callback"),
        ("failureCallback", "Upstash-Failure-Callback"),
        ("retryDelayExpression", "Upstash-Retry-Delay"),
    ):
        text = entry.optional_text(name)
        if text is not None:
            headers.append((header, text))
    queue = entry.optional_text("queueName")
    if queue is not None:  # a schedule's queue (a message's own is the store's to say)
        headers.append(("Upstash-Queue-Name", queue))
    labels = labels_of(entry)
    if labels:
        headers.append(("Upstash-Label", ",".join(labels)))
    for name, header in (("timeout", "Upstash-Timeout"), ("delay", "Upstash-Delay")):
        seconds = entry.optional_number(name)
        if seconds:
            headers.append((header, f"{seconds}s"))
    key = entry.optional_text("flowControlKey")
    if key is not None:
        headers.append(("Upstash-Flow-Control-Key", key))
        limits = [
            f"{name}={entry.number(name, minimum=1)}"
            for name in ("parallelism", "rate", "period")
            if entry.has(name)
        ]
        if limits:
            headers.append(("Upstash-Flow-Control-Value", ", ".join(limits)))
    try:
        return parse_options(httpx.Headers(headers))
    except InvalidOption as exc:
        raise entry.fail(str(exc)) from None
    except (UnicodeEncodeError, ValueError) as exc:
        raise entry.fail(f"a header cannot be sent as recorded ({exc})") from None


def labels_of(entry: At) -> list[str]:
    value = entry.value.get("labels")
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v for v in value if v]
    if value is not None:
        raise entry.key("labels").fail(f"expected a list of strings, got {kind(value)}")
    label = entry.optional_text("label")
    return [label] if label else []


def recorded_message(entry: At, *, url_key: str = "url") -> RecordedMessage:
    """A message as QStash shows it (``GET /v2/messages``, the DLQ)."""
    created = entry.moment("createdAt", default=0)
    return RecordedMessage(
        # The workflow DLQ's document shows no message id: one is made from the entry's.
        message_id=entry.optional_text("messageId") or f"msg_{entry.text('dlqId')}",
        url=entry.url(url_key),
        content=entry.body(),
        options=message_options(entry),
        created_ms=created,
        not_before_ms=entry.moment("notBefore", default=created),
        max_retries=entry.optional_number("maxRetries"),
        retried=entry.number("retried", default=0),
        queue=entry.optional_text("queueName"),
        url_group=entry.optional_text("topicName"),
        endpoint_name=entry.optional_text("endpointName"),
        schedule_id=entry.optional_text("scheduleId"),
        caller_ip=entry.optional_text("callerIp") or entry.optional_text("callerIP") or "127.0.0.1",
    )


def recorded_answer(entry: At) -> AttemptResult:
    """The last answer a dead letter got (or why it got none)."""
    status = entry.number("responseStatus", default=0)
    headers = entry.header_items("responseHeader") or entry.header_items("responseHeaders")
    return AttemptResult(
        status=status or None,  # 0: no answer (a network error), as the DLQ shows one
        headers=httpx.Headers(headers),
        content=entry.body("responseBody"),
        error=entry.optional_text("error"),
    )


def export_time_ms(root: At) -> int | None:
    value = root.value.get("exported_at")
    if value is None:
        return None
    if not isinstance(value, str):
        raise root.key("exported_at").fail(f"expected an ISO 8601 time, got {kind(value)}")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise root.key("exported_at").fail(
            f"expected an ISO 8601 time such as 2026-12-07T11:20:29Z, got {value!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return round(moment.timestamp() * 1000)
