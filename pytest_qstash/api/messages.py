"""``GET``/``DELETE /v2/messages/{id}`` and bulk cancel (``DELETE /v2/messages``)."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from ..state.models import Message
from ..state.store import Store
from ._http import ApiError, json_response, message_json, read_json


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
    store.run_now(message)
    return json_response({"messageId": message_id})


def cancel_messages(store: Store, request: httpx.Request) -> httpx.Response:
    """Bulk cancel. The SDK sends ``{"messageIds": [...]}``; an empty list, or no body at
    all, cancels every message. Newer clients send the same filters as query parameters."""
    body = read_json(request)
    filters: dict[str, list[str]] = {}
    if isinstance(body, dict):
        for key, value in body.items():
            values = value if isinstance(value, list) else [value]
            filters[key] = [str(v) for v in values if v is not None and v != ""]
    elif body is not None:
        raise ApiError(400, "invalid bulk cancel body: expected a JSON object")
    for key in set(request.url.params.keys()):
        values = [p for v in request.url.params.get_list(key) for p in v.split(",") if p]
        filters.setdefault(key, []).extend(values)
    ids = filters.pop("messageIds", None)
    if ids:
        targets = [store.messages[i] for i in ids if i in store.messages]
    else:
        targets = [m for m in store.pending() if _matches(m, filters)]
    cancelled = sum(1 for message in targets if store.cancel(message))
    return json_response({"cancelled": cancelled})


def _waiting(store: Store, message_id: str) -> Message:
    message = store.messages.get(message_id)
    # Delivered, failed and cancelled messages are gone from this endpoint, as on QStash.
    if message is None or message.done:
        raise ApiError(404, f"message {message_id} not found")
    return message


_FIELDS: dict[str, Callable[[Message], str | None]] = {
    "url": lambda m: m.url,
    "topicName": lambda m: m.url_group,
    "queueName": lambda m: m.queue,
    "scheduleId": lambda m: m.schedule_id,
    "label": lambda m: m.label,
    "callerIP": lambda m: m.caller_ip,
    "callerIp": lambda m: m.caller_ip,
    "flowControlKey": lambda m: m.flow_control.key if m.flow_control else None,
}


def _matches(message: Message, filters: dict[str, list[str]]) -> bool:
    for key, values in filters.items():
        if not values or key in ("count", "cursor"):
            continue
        if key == "fromDate":
            if message.created_ms < int(values[0]):
                return False
        elif key == "toDate":
            if message.created_ms > int(values[0]):
                return False
        elif key in _FIELDS:
            if _FIELDS[key](message) not in values:
                return False
        else:
            raise ApiError(400, f"unknown bulk cancel filter {key!r}")
    return True
