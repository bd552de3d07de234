"""``GET``/``DELETE /v2/messages/{id}`` and bulk cancel (``DELETE /v2/messages``)."""

from __future__ import annotations

import httpx

from ..engine.models import InvalidTransition, Message
from ..engine.store import Store
from ._http import ApiError, int_filter, json_response, message_json, query_filters, read_json
from .events import MESSAGE_FILTERS, message_matches


def get_message(store: Store, request: httpx.Request, message_id: str) -> httpx.Response:
    return json_response(message_json(_waiting(store, message_id)))


def cancel_message(store: Store, request: httpx.Request, message_id: str) -> httpx.Response:
    store.cancel(_waiting(store, message_id))
    return json_response({"cancelled": 1})


def run_message_now(store: Store, request: httpx.Request, message_id: str) -> httpx.Response:
    """Release a waiting message (delayed, or between retries) to be delivered now."""
    message = _waiting(store, message_id)
    if message.queue is not None:
        raise ApiError(
            400,
            f"message {message_id} is in queue {message.queue}: queued "
            "messages are delivered in order and cannot be run now",
        )
    try:
        store.run_now(message)
    except InvalidTransition:  # the model refuses one in flight (the one waiting state left)
        raise ApiError(
            400, f"message {message_id} is being delivered: it cannot be run now as well"
        ) from None
    return json_response({"messageId": message_id})


#: Filters bulk cancel takes, in the JSON body (the SDK) or the query string (newer clients).
CANCEL_FILTERS: tuple[str, ...] = (
    "messageIds",
    "fromDate",
    "toDate",
    "count",
    *MESSAGE_FILTERS,
)
#: The most messages one filtered bulk cancel takes (``count``), as QStash documents.
MAX_CANCEL_COUNT = 500


def cancel_messages(store: Store, request: httpx.Request) -> httpx.Response:
    """Bulk cancel. The SDK sends ``{"messageIds": [...]}``; an empty list, or no body at
    all, cancels every message. Newer clients send the same filters as query parameters;
    ``messageIds``, when given, wins over the other filters."""
    filters = query_filters(request, CANCEL_FILTERS, "bulk cancel")
    body = read_json(request)
    if isinstance(body, dict):
        for key, value in body.items():
            if key not in CANCEL_FILTERS:
                raise ApiError(400, f"unknown bulk cancel filter {key!r}")
            values = value if isinstance(value, list) else [value]
            kept = [str(v) for v in values if v is not None and v != ""]
            if kept:
                filters.setdefault(key, []).extend(kept)
    elif body is not None:
        raise ApiError(400, "invalid bulk cancel body: expected a JSON object")
    count = int_filter(filters, "count", minimum=1)
    if count is not None and count > MAX_CANCEL_COUNT:
        raise ApiError(400, f"invalid count {count}: at most {MAX_CANCEL_COUNT}")
    filters.pop("count", None)
    ids = filters.pop("messageIds", None)
    if ids:
        targets = [store.messages[i] for i in ids if i in store.messages]
    else:
        from_ms = int_filter(filters, "fromDate")
        to_ms = int_filter(filters, "toDate")
        targets = [
            m
            for m in store.pending()
            if (from_ms is None or m.created_ms >= from_ms)
            and (to_ms is None or m.created_ms <= to_ms)
            and message_matches(m, filters)
        ][:count]
    cancelled = sum(1 for message in targets if store.cancel(message))
    return json_response({"cancelled": cancelled})


def _waiting(store: Store, message_id: str) -> Message:
    message = store.messages.get(message_id)
    # Delivered, failed and cancelled messages are gone from this endpoint, as on QStash.
    if message is None or message.done:
        raise ApiError(404, f"message {message_id} not found")
    return message
