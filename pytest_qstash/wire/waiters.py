"""Workflow waits over HTTP: ``/v2/wait``, ``/v2/notify``, ``/v2/waiters`` and webhooks.

The rules are in ``engine/waiters.py``; here are the requests and QStash's answers (the
Workflow OpenAPI's ``NotifyResponse`` and ``Waiter``). A webhook
(``/v2/workflows/hooks/{userId}/{runId}/{eventId}``, the URL the TypeScript SDK's
``context.createWebhook`` builds) is called by a third party without the QStash token, with
any method: the request is a notify of that run's event, its data the request as
``waitForWebhook`` decodes it (method, scheme, host, URL, headers, base64 body).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx

from ..engine import waiters as rules
from ..engine.deliverable import Undeliverable, checked_url
from ..engine.models import Message
from ..engine.options import InvalidOption, canonical
from ..engine.store import Store
from ..engine.waiters import Waiter
from ..engine.workflows import WorkflowRun
from ._http import ApiError, cause_of, json_response, read_json
from .publish_headers import parse_options

#: The path webhooks are served under: no token needed, any method.
WEBHOOK_PREFIX = "/v2/workflows/hooks/"

_INVALID_RUN = "Invalid workflow run ID or event ID"


def wait(store: Store, request: httpx.Request, event_id: str) -> httpx.Response:
    """``POST /v2/wait/{eventId}``: the run in ``Upstash-Workflow-RunId`` waits for the event.
    Answered 200 with no body (the SDK does not read it)."""
    run_id = request.headers.get("upstash-workflow-runid", "").strip()
    run = store.workflows.get(run_id) if run_id else None
    if run is None or not run.active:
        raise ApiError(400, _INVALID_RUN)
    body = read_json(request)
    if not isinstance(body, dict):
        raise ApiError(400, "invalid wait request: expected a JSON object with a step")
    headers = {
        name.decode("latin-1"): value.decode("latin-1") for name, value in request.headers.raw
    }
    for field in ("url", "timeoutUrl"):
        value = body.get(field)
        if value is not None:
            try:
                checked_url(value, field)
            except Undeliverable as exc:
                raise ApiError(400, f"invalid wait request: {exc}") from None
    try:
        step = rules.step_headers(headers)
        timeout_headers = rules.header_lists_of(body.get("timeoutHeaders"))
        notified = parse_options(_resume_headers(step, run.run_id, {}))
        timed_out = parse_options(_resume_headers(step, run.run_id, timeout_headers))
        store.wait(run, event_id, body, headers, notified, timed_out, cause=cause_of(request))
    except (InvalidOption, ValueError, TypeError) as exc:
        raise ApiError(400, f"invalid wait request: {exc}") from None
    return httpx.Response(200)


def _resume_headers(
    headers: dict[str, str], run_id: str, timeout_headers: dict[str, list[str]]
) -> dict[str, str]:
    """The publish headers of a wait step going back into its run: the wait's own, and when
    timed out, the wait's ``timeoutHeaders`` forwarded."""
    out = dict(headers)
    present = {name.lower() for name in out}
    for name, values in timeout_headers.items():
        lowered = name.lower()
        # The run's own protocol headers are in the wait's headers already.
        if lowered.startswith("upstash-") or f"upstash-forward-{lowered}" in present:
            continue
        if values:
            out[f"Upstash-Forward-{name}"] = values[0]
    _set(out, "upstash-workflow-init", "false")
    _set(out, "upstash-workflow-calltype", "step")
    _set(out, "upstash-workflow-runid", run_id)
    return out


def _set(headers: dict[str, str], name: str, value: str) -> None:
    for existing in [k for k in headers if k.lower() == name]:
        del headers[existing]
    headers[name] = value


def notify_event(store: Store, request: httpx.Request, event_id: str) -> httpx.Response:
    """``POST /v2/notify/{eventId}``: every run waiting for the event resumes with the body
    as the event's data; one ``NotifyResponse`` each, ``[]`` when none waits (the event is
    then lost)."""
    reached = store.notify(event_id, request.content, cause=cause_of(request))
    return json_response([notify_answer(*item) for item in reached], 201)


def notify_run(store: Store, request: httpx.Request, run_id: str, event_id: str) -> httpx.Response:
    """``POST /v2/notify/{runId}/{eventId}``: the run resumes if it waits for the event,
    else the notify is kept for its next wait; 400 for a run that is unknown or ended."""
    try:
        [item] = store.notify(event_id, request.content, run_id=run_id, cause=cause_of(request))
    except KeyError:
        raise ApiError(400, _INVALID_RUN) from None
    return json_response(notify_answer(*item), 201)


def list_waiters(store: Store, request: httpx.Request, event_id: str) -> httpx.Response:
    """``GET /v2/waiters/{eventId}``: the waits in progress for the event, oldest first."""
    return json_response([waiter_json(w) for w in store.waiters.of_event(event_id)])


def webhook(store: Store, request: httpx.Request, hook: str) -> httpx.Response:
    """A call to a webhook URL (``hook`` is ``{userId}/{runId}/{eventId}``): the run's
    ``waitForWebhook`` resumes with the request (or takes it when it waits later). 404 for a
    path of another shape or another account's user id."""
    parts = hook.split("/")
    if len(parts) != 3 or not all(parts):
        raise ApiError(
            404,
            f"{request.method} {WEBHOOK_PREFIX}{hook} is not a webhook URL: expected "
            f"{WEBHOOK_PREFIX}{{userId}}/{{workflowRunId}}/{{eventId}}",
        )
    user_id, run_id, event_id = parts
    own = store.account.user_id
    if own is not None and user_id != own:
        raise ApiError(404, f"no webhook for user {user_id!r} on this account")
    data = json.dumps(webhook_request(request), separators=(",", ":")).encode()
    try:
        [item] = store.notify(event_id, data, run_id=run_id, cause=cause_of(request))
    except KeyError:
        raise ApiError(400, _INVALID_RUN) from None
    return json_response(notify_answer(*item), 200)


def webhook_request(request: httpx.Request) -> dict[str, Any]:
    """A request as ``waitForWebhook`` rebuilds it: ``{method, proto, host, url, header,
    body}``, ``url`` the path and query, ``header`` canonical names to lists, ``body``
    base64."""
    header: dict[str, list[str]] = {}
    for name, value in request.headers.multi_items():
        header.setdefault(canonical(name), []).append(value)
    raw_path = request.url.raw_path.decode("ascii")
    return {
        "method": request.method,
        "proto": request.url.scheme,
        "host": request.headers.get("host") or request.url.netloc.decode("ascii"),
        "url": raw_path,
        "header": header,
        "body": base64.b64encode(request.content).decode("ascii"),
    }


def notify_answer(run: WorkflowRun, waiter: Waiter | None, message: Message | None) -> Any:
    """A ``NotifyResponse``: the run reached, the waiter notified and the message resuming
    it (neither when the notify was kept for the run's next wait)."""
    out: dict[str, Any] = {
        "workflowRunId": run.run_id,
        "workflowCreatedAt": run.created_ms,
        "error": "",
    }
    if waiter is not None:
        out["waiter"] = waiter_json(waiter)
    if message is not None:
        out["messageId"] = message.message_id
    return out


def waiter_json(waiter: Waiter) -> dict[str, Any]:
    """A waiter as the Workflow API's ``Waiter`` schema has it."""
    out: dict[str, Any] = {
        "url": waiter.url,
        "headers": {name: [value] for name, value in waiter.headers.items()},
        "deadline": waiter.deadline_ms // 1000,
        "timeoutUrl": waiter.timeout_url,
        "timeoutHeaders": waiter.timeout_headers,
    }
    if waiter.timeout_body is not None:
        out["timeoutBody"] = waiter.timeout_body
    return out
