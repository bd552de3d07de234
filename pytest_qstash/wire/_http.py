"""What every endpoint shares: JSON answers, QStash-shaped errors, message serialisation."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Collection
from typing import Any

import httpx

from ..engine.models import Message
from ..engine.options import FlowControl, MessageOptions, canonical, header_lists

#: Query filters of a list or bulk endpoint: name -> the values given (OR-ed).
Filters = dict[str, list[str]]


class ApiError(Exception):
    """Raised inside an endpoint; becomes ``status`` with ``{"error": message}``."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        #: Headers the answer carries (a rate limit's ``RateLimit-*``, say).
        self.headers = headers or {}


#: The request extension ``handle`` puts the request's cause in.
CAUSE = "pytest_qstash.cause"


def cause_of(request: httpx.Request) -> Message | None:
    """The message whose delivery made this API call (the app publishing while it handles
    one), as the caller of ``handle`` said; None for a call from outside a delivery."""
    cause = request.extensions.get(CAUSE)
    return cause if isinstance(cause, Message) else None


def request_path(request: httpx.Request) -> str:
    """The raw path and query as sent (bytes beyond ASCII, which no client should send, are
    escaped rather than refused)."""
    return request.url.raw_path.decode("ascii", "backslashreplace")


def json_response(data: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(
        status,
        content=json.dumps(data, separators=(",", ":")).encode(),
        headers={"Content-Type": "application/json"},
    )


def error_response(status: int, message: str) -> httpx.Response:
    return json_response({"error": message}, status)


def empty_response(status: int = 200) -> httpx.Response:
    return httpx.Response(status)


def read_json(request: httpx.Request) -> Any:
    if not request.content.strip():
        return None
    try:
        return json.loads(request.content)
    except ValueError as exc:
        raise ApiError(400, f"invalid JSON body: {exc}") from None
    except RecursionError:
        raise ApiError(400, "invalid JSON body: nested too deeply") from None


def header_map(headers: httpx.Headers, redact: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Headers as QStash shows them: canonical names mapped to lists of values, with the
    message's redacted headers hidden."""
    if not redact:
        return header_lists(headers)
    out: dict[str, list[str]] = {}
    redact_all = "header" in redact or "headers" in redact
    for name, value in headers.multi_items():
        shown = canonical(name)
        if redact_all or _redacted_header(shown, redact):
            value = redacted(value.encode())
        out.setdefault(shown, []).append(value)
    return out


def _redacted_header(name: str, redact: tuple[str, ...]) -> bool:
    lowered = name.lower()
    for field in redact:
        if "[" in field and field.split("[", 1)[1].rstrip("]").lower() == lowered:
            return True
    return False


def redacted(data: bytes) -> str:
    return "REDACTED:" + hashlib.sha256(data).hexdigest()


def put_body(out: dict[str, Any], content: bytes, key: str = "body", redact: bool = False) -> None:
    """``body`` when the bytes are UTF-8, else ``bodyBase64``; nothing for an empty body."""
    if not content:
        return
    if redact:
        out[key] = redacted(content)
        return
    try:
        out[key] = content.decode("utf-8")
    except UnicodeDecodeError:
        out[key + "Base64"] = base64.b64encode(content).decode()


def flow_control_fields(fc: FlowControl | None) -> dict[str, Any]:
    """A message's (or schedule's) flow control as QStash shows it; nothing without a key."""
    if fc is None or not fc.key:
        return {}
    out: dict[str, Any] = {"flowControlKey": fc.key, "period": fc.period}
    if fc.parallelism is not None:
        out["parallelism"] = fc.parallelism
    if fc.rate is not None:
        out["rate"] = fc.rate
    return out


def message_fields(message: Message) -> dict[str, Any]:
    """The optional fields every view of a message shares (API, DLQ, log), None left out."""
    fields: dict[str, Any] = {
        "topicName": message.url_group,
        "endpointName": message.endpoint_name,
        "queueName": message.queue,
        "scheduleId": message.schedule_id,
        "callback": message.callback,
        "failureCallback": message.failure_callback,
        # `Upstash-Label: a,b` is two labels: `label` shows the first, `labels` them all.
        "label": message.labels[0] if message.labels else None,
        "labels": list(message.labels) or None,
        "workflowRunId": message.workflow_run_id,
        "retryDelayExpression": backoff_text(message.options),
    }
    out = {k: v for k, v in fields.items() if v is not None}
    out.update(flow_control_fields(message.flow_control))
    return out


def backoff_text(options: MessageOptions) -> str | None:
    """The retry-delay expression a message or schedule was published with, as given."""
    expression = options.retry_delay
    return None if expression is None else expression.text


def message_json(message: Message) -> dict[str, Any]:
    """A message as ``GET /v2/messages/{id}`` (and the DLQ) shows it."""
    out: dict[str, Any] = {
        "messageId": message.message_id,
        "url": message.url,
        "method": message.method,
        "maxRetries": message.max_retries,
        "notBefore": message.not_before_ms,
        "createdAt": message.created_ms,
        "callerIP": message.caller_ip,
        "callerIp": message.caller_ip,
    }
    if message.headers:
        out["header"] = header_map(message.headers, message.redact)
    put_body(out, message.content, redact="body" in message.redact)
    out.update(message_fields(message))
    if message.callback_headers:
        out["callbackHeader"] = header_map(message.callback_headers)
    if message.failure_callback_headers:
        out["failureCallbackHeader"] = header_map(message.failure_callback_headers)
    if message.timeout_ms is not None:
        out["timeout"] = message.timeout_ms // 1000
    return out


def query_filters(request: httpx.Request, allowed: Collection[str], what: str) -> Filters:
    """The query string of a list or bulk endpoint as ``name -> values``.

    A filter may be repeated (``label=a&label=b``) or comma-joined (``label=a,b``); values of
    one filter are OR-ed. A comma-joined value is kept whole too, so a URL containing a comma
    still matches itself. ``qstash_token`` (authentication) is left out; any other name not in
    ``allowed`` answers 400 naming the accepted ones, rather than being silently ignored.
    """
    filters: Filters = {}
    for name in request.url.params:
        if name == "qstash_token":
            continue
        if name not in allowed:
            raise ApiError(
                400, f"unknown {what} filter {name!r}: expected one of {', '.join(allowed)}"
            )
        values = filters.setdefault(name, [])
        for raw in request.url.params.get_list(name):
            if not raw:
                continue
            values.append(raw)
            if "," in raw:
                values.extend(part.strip() for part in raw.split(",") if part.strip())
    return {name: values for name, values in filters.items() if values}


def int_filter(filters: Filters, name: str, *, minimum: int = 0) -> int | None:
    """The integer value of a single-valued filter (``count``, ``fromDate``, ...), or None."""
    values = filters.get(name)
    if not values:
        return None
    try:
        number = int(values[0])
    except ValueError:
        raise ApiError(400, f"invalid {name} {values[0]!r}: expected an integer") from None
    if number < minimum:
        raise ApiError(400, f"invalid {name} {number}: must be at least {minimum}")
    return number
