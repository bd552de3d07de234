"""What the dashboard's lists carry: a row per item, cheap to build and bounded in size.

A row holds what a list shows (a message's state, its last attempt's status and error, its
labels) with every body cut to ``CLIP`` characters and its whole size beside it; the whole
item (``records``) is sent only when a person opens it. Rows are built from the stored bytes,
so a 20 MiB body costs its first few KiB, not a decode and a JSON encoding of all of it.

Each list also says how to search an item (``haystack``), what its state is for the filters
(``state_of``) and the id its URL carries (``key_of``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ...engine.models import Delivery, DlqEntry, Event, Message
from ...engine.workflows import WorkflowRun
from ..control import records

#: The characters of a body (or any long text) a row carries.
CLIP = 2048
#: How much of a body the search box looks into (bytes).
SEARCHED_BODY = 16 * 1024
#: The steps a run's row carries for its timeline (the opened run has them all).
ROW_STEPS = 100


def clip_bytes(data: bytes | None) -> tuple[str | None, int]:
    """The first ``CLIP`` characters of ``data`` as text, and its whole size in bytes."""
    if data is None:
        return None, 0
    # A few bytes more than the characters kept: UTF-8 spends up to four on one.
    text = data[: CLIP * 4].decode("utf-8", errors="replace")[:CLIP]
    return text, len(data)


def clip_text(text: str | None) -> str | None:
    return None if text is None or len(text) <= CLIP else text[:CLIP]


def _with_body(row: dict[str, Any], name: str, data: bytes | None) -> None:
    text, size = clip_bytes(data)
    row[name] = text
    row[f"{name}_size"] = size


def _attempt(item: Delivery) -> dict[str, Any]:
    row = {
        "at": records.iso_time(item.at),
        "attempt": item.retried + 1,
        "status": item.status,
        "ok": item.ok,
        "error": clip_text(item.error),
    }
    _with_body(row, "response_body", item.response_content)
    return row


#: A message row's fields as its record writes them (``records.MESSAGE``).
_MESSAGE_FIELDS = records.MESSAGE.only(
    (
        "message_id",
        "state",
        "method",
        "url",
        "labels",
        "created_at",
        "not_before",
        "done",
        "queue",
        "url_group",
        "schedule_id",
        "workflow_run_id",
        "callback_for",
        "retried_from",
    )
)


def message_row(item: Message) -> dict[str, Any]:
    last = item.deliveries[-1] if item.deliveries else None
    row = _MESSAGE_FIELDS(item)
    # Attempts made and allowed: what the row and the opened message both count.
    row["attempts"] = len(item.deliveries)
    row["max_attempts"] = item.max_retries + 1
    row["last"] = None if last is None else _attempt(last)
    _with_body(row, "body", item.content)
    return row


#: A DLQ row's fields as its record writes them (``records.DLQ_ENTRY``), and its message's.
_DLQ_FIELDS = records.DLQ_ENTRY.only(
    ("dlq_id", "message_id", "url", "created_at", "response_status")
)
_DLQ_MESSAGE_FIELDS = records.MESSAGE.only(("method", "labels", "workflow_run_id", "retried_from"))


def dlq_row(item: DlqEntry) -> dict[str, Any]:
    message = item.message
    row = _DLQ_FIELDS(item)
    row.update(_DLQ_MESSAGE_FIELDS(message))
    row["attempts"] = len(message.deliveries)
    row["error"] = clip_text(item.error)
    _with_body(row, "response_body", item.response_content)
    _with_body(row, "body", message.content)
    return row


#: A log line's row fields as its record writes them (``records.EVENT``).
_EVENT_FIELDS = records.EVENT.only(
    ("message_id", "state", "time", "url", "next_delivery_time", "response_status")
)


def event_row(item: Event) -> dict[str, Any]:
    row = _EVENT_FIELDS(item)
    row["error"] = clip_text(item.error)
    _with_body(row, "response_body", item.response_content)
    return row


def run_row(item: WorkflowRun) -> dict[str, Any]:
    row = records.run(item)
    steps = row["steps"]
    for step in steps:
        step.pop("out", None)  # the timeline shows no results; the opened run has them
    row["steps"] = steps[:ROW_STEPS]
    row["steps_total"] = len(steps)
    body = row.get("body")
    row["body"] = clip_text(body) if isinstance(body, str) else body
    return row


def generic_row(write: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    """A row for a list without its own: the inspection record, its long texts clipped."""

    def row(item: Any) -> dict[str, Any]:
        clipped: dict[str, Any] = _clipped(write(item))
        return clipped

    return row


def _clipped(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= CLIP else value[:CLIP]
    if isinstance(value, dict):
        out = {}
        for name, inner in value.items():
            out[name] = _clipped(inner)
            if isinstance(inner, str) and len(inner) > CLIP:
                out[f"{name}_size"] = len(inner.encode())
        return out
    if isinstance(value, list):
        return [_clipped(inner) for inner in value]
    return value


@dataclass(frozen=True)
class View:
    """How the dashboard shows one inspection list."""

    row: Callable[[Any], dict[str, Any]]
    #: The id of an item in its URL (``None``: its items have no page of their own).
    key_of: Callable[[Any], str] | None
    state_of: Callable[[Any], str | None]
    #: The texts the search box matches (lowercased by the caller) and a body's bytes.
    haystack: Callable[[Any], tuple[Iterable[str | None], bytes | None]]


def _paused(item: Any) -> str:
    return "paused" if item.paused else "active"


def _status(status: int | None) -> str:
    return "no answer" if status is None else str(status)


VIEWS: dict[str, View] = {
    "messages": View(
        message_row,
        lambda m: m.message_id,
        lambda m: m.state,
        lambda m: (
            (m.message_id, m.url, m.label, m.queue, m.url_group, m.schedule_id, m.workflow_run_id),
            m.content,
        ),
    ),
    "dlq": View(
        dlq_row,
        lambda d: d.dlq_id,
        lambda d: _status(d.response_status),
        lambda d: (
            (d.dlq_id, d.message_id, d.url, d.message.label, d.error),
            d.message.content[:SEARCHED_BODY] + b"\n" + d.response_content[:SEARCHED_BODY],
        ),
    ),
    "events": View(
        event_row,
        None,
        lambda e: e.state,
        lambda e: ((e.message_id, e.url, e.state, e.error), e.response_content),
    ),
    "runs": View(
        run_row,
        lambda r: r.run_id,
        lambda r: r.state,
        lambda r: ((r.run_id, r.url, *r.labels), None),
    ),
    "schedules": View(
        generic_row(records.schedule),
        lambda s: s.schedule_id,
        _paused,
        lambda s: ((s.schedule_id, s.destination, s.cron, s.queue), s.content),
    ),
    "queues": View(
        generic_row(records.queue), lambda q: q.name, _paused, lambda q: ((q.name,), None)
    ),
    "url_groups": View(
        generic_row(records.url_group),
        lambda g: g.name,
        lambda g: None,
        lambda g: ((g.name, *(e.url for e in g.endpoints), *(e.name for e in g.endpoints)), None),
    ),
    "flow_keys": View(
        generic_row(records.flow_key), lambda k: k.key, _paused, lambda k: ((k.key,), None)
    ),
    "waiters": View(
        generic_row(records.waiter),
        lambda w: f"{w.run_id}/{w.event_id}",
        lambda w: w.step_type,
        lambda w: ((w.event_id, w.run_id, w.url, w.step_name), None),
    ),
    "workflow_dlq": View(
        generic_row(records.workflow_dlq_entry),
        lambda d: d.dlq_id,
        lambda d: _status(d.response_status),
        lambda d: ((d.dlq_id, d.run_id, d.workflow_url, d.url, *d.labels), None),
    ),
}


def view(name: str) -> View:
    """The view of list ``name``; a list added to ``records.LISTS`` later gets a plain one."""
    found = VIEWS.get(name)
    if found is not None:
        return found
    write, _kind = records.LISTS[name]

    def everything(item: Any) -> tuple[Iterable[str | None], bytes | None]:
        return (json.dumps(write(item)),), None

    return View(generic_row(write), None, lambda item: None, everything)


def matches(found: View, item: Any, needle: str) -> bool:
    """Whether ``item`` has ``needle`` (lowercased) in an id, URL, label or its body's start."""
    texts, body = found.haystack(item)
    if any(needle in text.lower() for text in texts if text):
        return True
    return body is not None and needle.encode() in body[:SEARCHED_BODY].lower()
