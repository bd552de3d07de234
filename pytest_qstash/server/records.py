"""What the server's inspection endpoints answer: the fake's lists as JSON, and back.

The server turns each item a test reads (``Message``, ``Delivery``, ...) into a JSON object of
the same field names; the client turns those objects into ``Record``s, whose attributes,
``json()`` and ``filter``/``one`` lookups read as the in-process fixture's do. Times travel as
ISO 8601 strings and come back as aware ``datetime``s; headers as ``[name, value]`` pairs and
come back as ``httpx.Headers``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx

from ..state.flow_control import FlowKey
from ..state.models import Delivery, DlqEntry, Event, Message, Waiter
from ..state.queues import Queue
from ..state.schedules import Schedule
from ..state.url_groups import UrlGroup
from ..state.workflow_dlq import WorkflowDlqEntry
from ..state.workflows import WorkflowRun, WorkflowStep

#: Fields sent as ISO 8601 strings, read back as datetimes.
TIME_FIELDS = frozenset(
    {
        "at",
        "created_at",
        "updated_at",
        "not_before",
        "time",
        "next_delivery_time",
        "next_run",
        "last_run",
        "completed_at",
        "resumes_at",
        "deadline",
    }
)
#: Fields sent as ``[name, value]`` pairs, read back as ``httpx.Headers``.
HEADER_FIELDS = frozenset({"headers", "response_headers"})


def iso_time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def _headers(headers: httpx.Headers | None) -> list[list[str]] | None:
    return None if headers is None else [[k, v] for k, v in headers.multi_items()]


def delivery(item: Delivery) -> dict[str, Any]:
    return {
        "message_id": item.message_id,
        "url": item.url,
        "method": item.method,
        "headers": _headers(item.headers),
        "body": item.body,
        "at": iso_time(item.at),
        "retried": item.retried,
        "status": item.status,
        "ok": item.ok,
        "response_headers": _headers(item.response_headers),
        "response_body": item.response_body,
        "error": item.error,
    }


def message(item: Message) -> dict[str, Any]:
    return {
        "message_id": item.message_id,
        "url": item.url,
        "method": item.method,
        "headers": _headers(item.headers),
        "body": item.body,
        "content_type": item.content_type,
        "state": item.state,
        "retried": item.retried,
        "max_retries": item.max_retries,
        "not_before": iso_time(item.not_before),
        "created_at": iso_time(item.created_at),
        "queue": item.queue,
        "url_group": item.url_group,
        "endpoint_name": item.endpoint_name,
        "schedule_id": item.schedule_id,
        "label": item.label,
        "labels": list(item.labels),  # split as the QStash API shows them, and as a run's are
        "deduplication_id": item.deduplication_id,
        "callback": item.callback,
        "failure_callback": item.failure_callback,
        "callback_for": item.callback_for,
        "workflow_run_id": item.workflow_run_id,
        "done": item.done,
        "deliveries": [delivery(d) for d in item.deliveries],
    }


def dlq_entry(item: DlqEntry) -> dict[str, Any]:
    return {
        "dlq_id": item.dlq_id,
        "message_id": item.message_id,
        "url": item.url,
        "body": item.body,
        "created_at": iso_time(item.created_at),
        "response_status": item.response_status,
        "response_headers": _headers(item.response_headers),
        "response_body": item.response_body,
        "retried": item.retried,
        "error": item.error,
        "workflow_run_id": item.workflow_run_id,
    }


def event(item: Event) -> dict[str, Any]:
    return {
        "message_id": item.message_id,
        "state": item.state,
        "time": iso_time(item.time),
        "url": item.url,
        "error": item.error,
        "next_delivery_time": iso_time(item.next_delivery_time),
        "response_status": item.response_status,
        "response_body": item.response_body,
    }


def schedule(item: Schedule) -> dict[str, Any]:
    return {
        "schedule_id": item.schedule_id,
        "destination": item.destination,
        "cron": item.cron,
        "method": item.method,
        "body": item.body,
        "paused": item.paused,
        "queue": item.queue,
        "created_at": iso_time(item.created_at),
        "next_run": iso_time(item.next_run),
        "last_run": iso_time(item.last_run),
        "error": item.error,
    }


def queue(item: Queue) -> dict[str, Any]:
    return {
        "name": item.name,
        "parallelism": item.parallelism,
        "paused": item.paused,
        "lag": item.lag,
        "created_at": iso_time(item.created_at),
    }


def url_group(item: UrlGroup) -> dict[str, Any]:
    return {
        "name": item.name,
        "endpoints": [{"url": e.url, "name": e.name} for e in item.endpoints],
        "created_at": iso_time(item.created_at),
        "updated_at": iso_time(item.updated_at),
    }


def _step(item: WorkflowStep) -> dict[str, Any]:
    return {
        "step_id": item.step_id,
        "name": item.name,
        "type": item.type,
        "out": item.out,
        "concurrent": item.concurrent,
        # A parallel group's plan step (the TypeScript SDK's) names the step it stands for.
        "target_step": item.raw.get("targetStep"),
        "message_id": item.message_id,
        "created_at": iso_time(item.created_at),
        "resumes_at": iso_time(item.resumes_at),
    }


def run(item: WorkflowRun) -> dict[str, Any]:
    return {
        "run_id": item.run_id,
        "url": item.url,
        "state": item.state,
        "body": item.body,
        "created_at": iso_time(item.created_at),
        "completed_at": iso_time(item.completed_at),
        "dlq_id": item.dlq_id,
        "invoker_run_id": item.invoker.run_id if item.invoker is not None else None,
        "labels": list(item.labels),
        "resumed_from": item.resumed_from,
        "refused": list(item.refused),
        "steps": [_step(s) for s in item.steps],
    }


def flow_key(item: FlowKey) -> dict[str, Any]:
    return {
        "key": item.key,
        "parallelism": item.parallelism,
        "rate": item.rate,
        "period": item.period_s,
        "paused": item.paused,
        "active": item.active,
        "waiting": item.wait_list_size,
    }


def workflow_dlq_entry(item: WorkflowDlqEntry) -> dict[str, Any]:
    return {
        "dlq_id": item.dlq_id,
        "run_id": item.run_id,
        "workflow_url": item.workflow_url,
        "url": item.url,
        "body": item.body,
        "created_at": iso_time(item.created_at),
        "response_status": item.response_status,
        "response_body": item.response_body,
        "labels": list(item.labels),
        "failure_callback": item.failure_callback,
        "failure_function_state": item.failure_function_state,
    }


def waiter(item: Waiter) -> dict[str, Any]:
    return {
        "event_id": item.event_id,
        "run_id": item.run_id,
        "url": item.url,
        "step_name": item.step_name,
        "step_type": item.step_type,
        "created_at": iso_time(item.created_at),
        "deadline": iso_time(item.deadline),
        "timeout_url": item.timeout_url,
    }


#: Each inspection list: the fake's attribute, how one item is written, its kind's name.
LISTS: dict[str, tuple[Callable[[Any], dict[str, Any]], str]] = {
    "messages": (message, "message"),
    "deliveries": (delivery, "delivery"),
    "dlq": (dlq_entry, "DLQ entry"),
    "events": (event, "event"),
    "schedules": (schedule, "schedule"),
    "queues": (queue, "queue"),
    "url_groups": (url_group, "URL group"),
    "runs": (run, "workflow run"),
    "flow_keys": (flow_key, "flow-control key"),
    "waiters": (waiter, "waiter"),
    "workflow_dlq": (workflow_dlq_entry, "workflow DLQ entry"),
}


class Record:
    """One item of a server's inspection list, read like the fixture's: attributes named as
    the in-process objects' (``delivery.status``, ``message.state``), ``json()`` of the body,
    datetimes and ``httpx.Headers`` where those have them."""

    __slots__ = ("_fields", "_kind")

    def __init__(self, kind: str, fields: dict[str, Any]) -> None:
        self._kind = kind
        self._fields = {name: _read(name, value) for name, value in fields.items()}

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(
                f"{self._kind} has no field {name!r}; it has: {', '.join(sorted(self._fields))}"
            ) from None

    def __dir__(self) -> list[str]:
        return sorted({*self._fields, "json"})

    def json(self) -> Any:
        """The body, decoded as JSON."""
        return json.loads(self._fields["body"])

    def as_dict(self) -> dict[str, Any]:
        return dict(self._fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and other._fields == self._fields

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = [
            f"{name}={self._fields[name]!r}"
            for name in ("message_id", "dlq_id", "schedule_id", "run_id", "name", "url")
            if self._fields.get(name) is not None
        ]
        for name in ("state", "status", "error"):
            if self._fields.get(name) is not None:
                shown.append(f"{name}={self._fields[name]!r}")
        return f"<{self._kind} {' '.join(shown)}>"


def _read(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in TIME_FIELDS:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    if name in HEADER_FIELDS:
        # As bytes: a value beyond ASCII (UTF-8, as QStash forwards it) is kept.
        return httpx.Headers([(k.encode(), v.encode()) for k, v in value])
    if name == "deliveries":
        return [Record("delivery", d) for d in value]
    if name == "steps":
        return [Record("workflow step", s) for s in value]
    if name == "endpoints":
        return [Record("endpoint", e) for e in value]
    return value
