"""QStash's log: ``GET /v2/events`` (the SDK's name) and ``GET /v2/logs`` (the docs' name).

Entries are listed newest first, filtered (filters AND-ed, values of one filter OR-ed), and
paged with an opaque ``<time ms>-<position>`` cursor that is omitted on the last page: the
SDK's pagination loop stops only when ``cursor`` is absent.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Collection, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..engine.models import Event, Message
from ..engine.store import Store
from ._http import (
    ApiError,
    Filters,
    header_map,
    int_filter,
    json_response,
    message_fields,
    query_filters,
    redacted,
)

#: Default and largest page size (the SDK's docstring says both are 1000).
MAX_EVENTS_PAGE = 1000

#: States the ``state`` filter accepts; IN_PROGRESS stands for a message still being worked on.
STATE_FILTERS: dict[str, frozenset[str]] = {
    **{
        state: frozenset({state})
        for state in (
            "CREATED",
            "ACTIVE",
            "RETRY",
            "ERROR",
            "DELIVERED",
            "FAILED",
            "CANCEL_REQUESTED",
            "CANCELED",
        )
    },
    "CANCELLED": frozenset({"CANCELED"}),  # the docs' spelling
    "IN_PROGRESS": frozenset({"ACTIVE", "RETRY", "ERROR"}),
}


def _host(message: Message) -> tuple[str, ...]:
    return (urlsplit(message.url).hostname or "",)


def _path(message: Message) -> tuple[str, ...]:
    return (urlsplit(message.url).path,)


def _labels(message: Message) -> tuple[str, ...]:
    # A filter matches the whole label as set, or one of the labels it names.
    if not message.label:
        return ()
    return (message.label, *message.labels)


def _one(getter: Callable[[Message], str | None]) -> Callable[[Message], tuple[str, ...]]:
    def values(message: Message) -> tuple[str, ...]:
        value = getter(message)
        return () if value is None else (value,)

    return values


#: Filters on the message an entry is about, shared by the log and the DLQ listings.
MESSAGE_FILTERS: dict[str, Callable[[Message], tuple[str, ...]]] = {
    "messageId": _one(lambda m: m.message_id),
    "url": _one(lambda m: m.url),
    "topicName": _one(lambda m: m.url_group),
    "endpointName": _one(lambda m: m.endpoint_name),
    "queueName": _one(lambda m: m.queue),
    "scheduleId": _one(lambda m: m.schedule_id),
    "label": _labels,
    "callerIp": _one(lambda m: m.caller_ip),
    "callerIP": _one(lambda m: m.caller_ip),
    "flowControlKey": _one(lambda m: m.flow_control.key if m.flow_control else None),
    "host": _host,
    "path": _path,
}

EVENT_FILTERS: tuple[str, ...] = (
    "cursor",
    "count",
    "order",
    "messageIds",
    "state",
    "fromDate",
    "toDate",
    *MESSAGE_FILTERS,
)


def message_matches(message: Message | None, filters: Filters) -> bool:
    """Whether ``message`` passes every message filter present in ``filters``."""
    for name, values_of in MESSAGE_FILTERS.items():
        wanted = filters.get(name)
        if wanted is None:
            continue
        if message is None or not any(value in wanted for value in values_of(message)):
            return False
    return True


def newest_first(filters: Filters) -> bool:
    """The ``order`` filter: ``latestFirst`` (the default) or ``earliestFirst``."""
    order = filters.get("order", ["latestFirst"])[0]
    if order not in ("latestFirst", "earliestFirst"):
        raise ApiError(400, f"invalid order {order!r}: expected latestFirst or earliestFirst")
    return order == "latestFirst"


_CURSOR = re.compile(r"(\d+)-(\d+)")


def parse_cursor(filters: Filters) -> tuple[int, int] | None:
    """A ``<ms>-<seq>`` cursor as a pair of integers (None when absent)."""
    values = filters.get("cursor")
    if not values:
        return None
    match = _CURSOR.fullmatch(values[0])
    if match is None:
        raise ApiError(400, f"invalid cursor {values[0]!r}: pass back a cursor this API returned")
    return int(match[1]), int(match[2])


def page_size(filters: Filters, maximum: int) -> int:
    count = int_filter(filters, "count", minimum=1)
    return maximum if count is None else min(count, maximum)


# -- endpoints ------------------------------------------------------------------------------
def list_events(store: Store, request: httpx.Request) -> httpx.Response:
    return json_response(_page(store, request))


def list_logs(store: Store, request: httpx.Request) -> httpx.Response:
    page = _page(store, request)
    # Current docs name the list `logs`; older docs and the SDK read `events`: send both.
    page["logs"] = page["events"]
    return json_response(page)


def _page(store: Store, request: httpx.Request) -> dict[str, Any]:
    filters = query_filters(request, EVENT_FILTERS, "log")
    count = page_size(filters, MAX_EVENTS_PAGE)
    latest_first = newest_first(filters)
    cursor = parse_cursor(filters)
    states = _states(filters.get("state"))
    ids = set(filters.get("messageIds", ()))
    from_ms = int_filter(filters, "fromDate")
    to_ms = int_filter(filters, "toDate")

    # Start at the cursor, not at the top: paging through the whole log stays linear. A
    # cursor's position counts the entries retention dropped too, so it outlives a drop.
    size, dropped = len(store.events), store.events.dropped
    if latest_first:
        top = size - 1 if cursor is None else min(cursor[1] - dropped, size - 1)
        positions: Iterable[int] = range(top, -1, -1)
    else:
        positions = range(0 if cursor is None else max(cursor[1] - dropped, 0), size)
    listed: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    for position in positions:
        event = store.events[position]
        if (
            (states is not None and event.state not in states)
            or (ids and event.message_id not in ids)
            or (from_ms is not None and event.time_ms < from_ms)
            or (to_ms is not None and event.time_ms > to_ms)
            or not message_matches(event.message, filters)
        ):
            continue
        if len(listed) == count:
            out["cursor"] = f"{event.time_ms}-{position + dropped}"
            break
        listed.append(event_json(event))
    out["events"] = listed
    return out


def _states(values: Collection[str] | None) -> frozenset[str] | None:
    if values is None:
        return None
    states: set[str] = set()
    for value in values:
        if value not in STATE_FILTERS:
            raise ApiError(
                400, f"invalid state {value!r}: expected one of {', '.join(STATE_FILTERS)}"
            )
        states |= STATE_FILTERS[value]
    return frozenset(states)


def _b64(content: bytes) -> str:
    return base64.b64encode(content).decode("ascii")


def event_json(event: Event) -> dict[str, Any]:
    """One log entry as ``GET /v2/events`` shows it (bodies base64, both spellings of the
    keys the SDK and the docs name differently)."""
    out: dict[str, Any] = {
        "time": event.time_ms,
        "messageId": event.message_id,
        "state": event.state,
        "url": event.url,
    }
    if event.error is not None:
        out["error"] = event.error
    if event.next_delivery_ms is not None:
        out["nextDeliveryTime"] = event.next_delivery_ms
    if event.response_status is not None:
        out["responseStatus"] = event.response_status
    if event.response_headers:
        out["responseHeader"] = out["responseHeaders"] = header_map(event.response_headers)
    if event.response_content:
        out["responseBody"] = _b64(event.response_content)
    if event.message is not None:
        out.update(_message_fields(event.message))
    return out


def _message_fields(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"method": message.method, "maxRetries": message.max_retries}
    if message.headers:
        out["header"] = header_map(message.headers, message.redact)
    if message.content:
        out["body"] = (
            redacted(message.content) if "body" in message.redact else _b64(message.content)
        )
    out.update(message_fields(message))
    if "retryDelayExpression" in out:  # the log names it twice
        out["retryDelayExpr"] = out["retryDelayExpression"]
    if message.timeout_ms is not None:
        out["timeout"] = message.timeout_ms  # milliseconds here, as the log docs say
    if message.callback_headers:
        out["callbackHeaders"] = header_map(message.callback_headers)
    if message.failure_callback_headers:
        out["failureCallbackHeaders"] = header_map(message.failure_callback_headers)
    return out
