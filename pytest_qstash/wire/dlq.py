"""The dead-letter queue: list, get, delete (one or many) and retry (one or many).

The SDK sends ``dlqIds`` for bulk delete in a JSON body; newer clients send them (or filters)
in the query string. Both are served. Retrying is not in the Python SDK but is part of the
API: it publishes the dead letter again, with the retry request's ``Upstash-*`` headers
overriding the stored options.
"""

from __future__ import annotations

from typing import Any

import httpx

from ..engine.models import DlqEntry
from ..engine.store import Store
from . import workflow_dlq
from ._http import (
    ApiError,
    Filters,
    cause_of,
    empty_response,
    header_map,
    int_filter,
    json_response,
    message_json,
    put_body,
    query_filters,
    read_json,
)
from .events import MESSAGE_FILTERS, message_matches, newest_first, page_size, parse_cursor
from .publish import override_options

#: Default and largest page size of the listing and of filter-based bulk operations.
MAX_DLQ_PAGE = 100

DLQ_FILTERS: tuple[str, ...] = (
    "cursor",
    "count",
    "order",
    "dlqIds",
    "fromDate",
    "toDate",
    "responseStatus",
    *MESSAGE_FILTERS,
)


def dlq_json(entry: DlqEntry) -> dict[str, Any]:
    """A DLQ message: the message's own fields plus the last attempt's response."""
    out = message_json(entry.message)
    out["dlqId"] = entry.dlq_id
    # The SDK requires responseStatus; an attempt that got no response (network error) has 0.
    out["responseStatus"] = entry.response_status if entry.response_status is not None else 0
    if entry.response_headers:
        out["responseHeader"] = header_map(entry.response_headers)
    put_body(out, entry.response_content, key="responseBody")
    if entry.error is not None:
        out["error"] = entry.error
    return out


# -- endpoints ------------------------------------------------------------------------------
def list_dlq(store: Store, request: httpx.Request) -> httpx.Response:
    if request.url.params.get("source") == "workflow":
        # The TypeScript workflow client's DLQ listing: failed runs, not messages.
        return workflow_dlq.list_entries(store, request)
    filters = query_filters(request, DLQ_FILTERS, "DLQ")
    entries, cursor = _select(store, filters)
    out: dict[str, Any] = {"messages": [dlq_json(entry) for entry in entries]}
    if cursor is not None:
        out["cursor"] = cursor
    return json_response(out)


def get_dlq(store: Store, request: httpx.Request, dlq_id: str) -> httpx.Response:
    return json_response(dlq_json(_entry(store, dlq_id)))


def delete_dlq(store: Store, request: httpx.Request, dlq_id: str) -> httpx.Response:
    if not store.delete_dead_letter(dlq_id):
        raise ApiError(404, f"dlq message {dlq_id} not found")
    return empty_response()


def delete_dlq_many(store: Store, request: httpx.Request) -> httpx.Response:
    """``{"dlqIds": [...]}`` (the SDK) or ``?dlqIds=...``: delete those (unknown ids are
    skipped; an empty list deletes nothing). Without ids, filter-based: the first page
    (``count``, at most 100) of what the filters match, with a cursor when more remain."""
    ids, filters = _targets(request)
    out: dict[str, Any] = {}
    if ids is not None:
        deleted = sum(1 for dlq_id in ids if store.delete_dead_letter(dlq_id))
    else:
        entries, cursor = _select(store, filters)
        deleted = sum(1 for entry in entries if store.delete_dead_letter(entry.dlq_id))
        if cursor is not None:
            out["cursor"] = cursor
    out["deleted"] = deleted
    return json_response(out)


def retry_dlq(store: Store, request: httpx.Request, dlq_id: str) -> httpx.Response:
    overrides = override_options(store, request.headers)
    _entry(store, dlq_id)
    message = store.retry_dlq_entry(dlq_id, overrides, cause=cause_of(request))
    return json_response({"messageId": message.message_id}, 201)


def retry_dlq_many(store: Store, request: httpx.Request) -> httpx.Response:
    """Retry the entries named by ``dlqIds`` (query or JSON body), or without ids the first
    page of what the filters match; answers ``{"responses": [{"messageId": ...}], "cursor"?}``.
    """
    overrides = override_options(store, request.headers)
    ids, filters = _targets(request)
    out: dict[str, Any] = {}
    if ids is not None:
        targets = [dlq_id for dlq_id in dict.fromkeys(ids) if dlq_id in store.dlq]
    else:
        entries, cursor = _select(store, filters)
        targets = [entry.dlq_id for entry in entries]
        if cursor is not None:
            out["cursor"] = cursor
    cause = cause_of(request)
    retried = [store.retry_dlq_entry(dlq_id, overrides, cause=cause) for dlq_id in targets]
    out["responses"] = [{"messageId": message.message_id} for message in retried]
    return json_response(out, 201)


# -- internals ------------------------------------------------------------------------------
def _entry(store: Store, dlq_id: str) -> DlqEntry:
    entry = store.dlq.get(dlq_id)
    if entry is None:
        raise ApiError(404, f"dlq message {dlq_id} not found")
    return entry


def _targets(request: httpx.Request) -> tuple[list[str] | None, Filters]:
    """Explicit ids (query ``dlqIds`` or JSON body ``{"dlqIds": [...]}``), else None and
    the filters to select by."""
    filters = query_filters(request, DLQ_FILTERS, "DLQ")
    ids = filters.pop("dlqIds", None)
    body = read_json(request)
    if body is not None:
        if not isinstance(body, dict) or set(body) - {"dlqIds"}:
            raise ApiError(400, 'invalid body: expected {"dlqIds": ["<dlqId>", ...]}')
        listed = body.get("dlqIds")
        if listed is not None:
            if not isinstance(listed, list) or not all(isinstance(i, str) for i in listed):
                raise ApiError(400, "invalid dlqIds: expected a list of DLQ ids (strings)")
            ids = [*(ids or []), *listed]
    return ids, filters


def _select(store: Store, filters: Filters) -> tuple[list[DlqEntry], str | None]:
    """One page of the entries the filters match, and the cursor of the next page."""
    count = page_size(filters, MAX_DLQ_PAGE)
    latest_first = newest_first(filters)
    cursor = parse_cursor(filters)
    ids = set(filters.get("dlqIds", ()))
    statuses = filters.get("responseStatus")
    from_ms = int_filter(filters, "fromDate")
    to_ms = int_filter(filters, "toDate")
    entries = sorted(store.dlq.values(), key=_order_key, reverse=latest_first)
    selected: list[DlqEntry] = []
    for entry in entries:
        key = _order_key(entry)
        if cursor is not None and (key > cursor if latest_first else key < cursor):
            continue
        status = entry.response_status if entry.response_status is not None else 0
        if (
            (ids and entry.dlq_id not in ids)
            or (statuses is not None and str(status) not in statuses)
            or (from_ms is not None and entry.created_ms < from_ms)
            or (to_ms is not None and entry.created_ms > to_ms)
            or not message_matches(entry.message, filters)
        ):
            continue
        if len(selected) == count:
            return selected, entry.dlq_id
        selected.append(entry)
    return selected, None


def _order_key(entry: DlqEntry) -> tuple[int, int]:
    # Ids are `<ms>-<seq>` (as on QStash): ordering by them is ordering by arrival.
    ms, _, seq = entry.dlq_id.partition("-")
    try:
        return int(ms), int(seq)
    except ValueError:  # an id not made by the store: order it by its time only
        return entry.created_ms, 0
