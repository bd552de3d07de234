"""The QStash HTTP API as plain functions from ``httpx.Request`` to ``httpx.Response``.

``handle`` authenticates first (before a fault armed with ``fail_next`` or any parsing),
routes on the raw path (destinations such as ``/v2/publish/https://app.test/x?y=1`` keep
their ``//`` and query; ids are percent-decoded) and turns ``ApiError`` into QStash's
``{"error": ...}`` answers. Being a plain function, it serves respx side effects for sync and
async clients alike.
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import httpx

from ..engine.account import DEFAULT_TOKEN
from ..engine.models import Message
from ..engine.rejections import RejectedCall
from ..engine.store import Store
from . import (
    dlq,
    events,
    flow_control,
    keys,
    messages,
    publish,
    queues,
    schedules,
    url_groups,
    waiters,
    workflow_dlq,
    workflow_runs,
    workflows,
)
from ._http import CAUSE, ApiError, error_response, request_path
from .faults import FaultTable
from .refusals import store_refusals

Handler = Callable[..., httpx.Response]

_TABLE: list[tuple[str, str, Handler]] = [
    ("POST", r"/v2/publish/(?P<destination>.+)", publish.publish),
    ("POST", r"/v2/enqueue/(?P<queue>[^/]+)/(?P<destination>.+)", publish.enqueue),
    ("POST", r"/v2/batch", publish.batch),
    ("GET", r"/v2/messages/(?P<message_id>[^/]+)", messages.get_message),
    ("DELETE", r"/v2/messages/(?P<message_id>[^/]+)", messages.cancel_message),
    ("POST", r"/v2/messages/(?P<message_id>[^/]+)/retry", messages.run_message_now),
    ("DELETE", r"/v2/messages/?", messages.cancel_messages),
    ("GET", r"/v2/keys", keys.get_keys),
    ("POST", r"/v2/keys/rotate", keys.rotate_keys),
    ("POST", r"/v2/topics/(?P<name>[^/]+)/endpoints", url_groups.upsert_endpoints),
    ("DELETE", r"/v2/topics/(?P<name>[^/]+)/endpoints", url_groups.remove_endpoints),
    ("GET", r"/v2/topics/?", url_groups.list_url_groups),
    ("GET", r"/v2/topics/(?P<name>[^/]+)", url_groups.get_url_group),
    ("DELETE", r"/v2/topics/(?P<name>[^/]+)", url_groups.delete_url_group),
    ("PATCH", r"/v2/topics/(?P<name>[^/]+)", url_groups.set_default_headers),
    ("GET", r"/v2/events/?", events.list_events),
    ("GET", r"/v2/logs/?", events.list_logs),
    # Retry before the per-id routes: "/v2/dlq/retry" also reads as a DLQ id.
    ("POST", r"/v2/dlq/retry/?", dlq.retry_dlq_many),
    ("POST", r"/v2/dlq/retry/(?P<dlq_id>[^/]+)", dlq.retry_dlq),
    ("GET", r"/v2/dlq/?", dlq.list_dlq),
    ("DELETE", r"/v2/dlq/?", dlq.delete_dlq_many),
    ("GET", r"/v2/dlq/(?P<dlq_id>[^/]+)", dlq.get_dlq),
    ("DELETE", r"/v2/dlq/(?P<dlq_id>[^/]+)", dlq.delete_dlq),
    # Pause/resume before create: "/v2/schedules/{id}/pause" also reads as a destination.
    # The SDK sends PATCH, the docs say POST: both are served.
    *[
        (method, rf"/v2/schedules/(?P<schedule_id>[^/]+)/{action}", handler)
        for method in ("PATCH", "POST")
        for action, handler in (
            ("pause", schedules.pause_schedule),
            ("resume", schedules.resume_schedule),
        )
    ],
    ("POST", r"/v2/queues/?", queues.upsert_queue),
    ("GET", r"/v2/queues/?", queues.list_queues),
    ("GET", r"/v2/queues/(?P<name>[^/]+)", queues.get_queue),
    ("DELETE", r"/v2/queues/(?P<name>[^/]+)", queues.delete_queue),
    ("POST", r"/v2/queues/(?P<name>[^/]+)/pause", queues.pause_queue),
    ("POST", r"/v2/queues/(?P<name>[^/]+)/resume", queues.resume_queue),
    ("GET", r"/v2/flowControl/?", flow_control.list_flow_keys),
    ("GET", r"/v2/flowControl/(?P<key>[^/]+)", flow_control.get_flow_key),
    ("POST", r"/v2/flowControl/(?P<key>[^/]+)/pause", flow_control.pause_flow_key),
    ("POST", r"/v2/flowControl/(?P<key>[^/]+)/resume", flow_control.resume_flow_key),
    ("POST", r"/v2/flowControl/(?P<key>[^/]+)/pin", flow_control.pin_flow_key),
    ("POST", r"/v2/flowControl/(?P<key>[^/]+)/unpin", flow_control.unpin_flow_key),
    ("POST", r"/v2/flowControl/(?P<key>[^/]+)/reset(?:Rate)?", flow_control.reset_rate),
    ("GET", r"/v2/globalParallelism", flow_control.global_parallelism),
    ("GET", r"/v2/schedules/?", schedules.list_schedules),
    ("GET", r"/v2/schedules/(?P<schedule_id>[^/]+)", schedules.get_schedule),
    ("DELETE", r"/v2/schedules/(?P<schedule_id>[^/]+)", schedules.delete_schedule),
    ("POST", r"/v2/schedules/(?P<destination>.+)", schedules.create_schedule),
    # The workflow DLQ: the action routes before the per-id ones ("resume" reads as an id).
    ("GET", r"/v2/workflows/dlq/?", workflow_dlq.list_entries),
    ("DELETE", r"/v2/workflows/dlq/?", workflow_dlq.delete_entries),
    ("POST", r"/v2/workflows/dlq/resume/?", workflow_dlq.resume_many),
    ("POST", r"/v2/workflows/dlq/resume/(?P<dlq_id>[^/]+)", workflow_dlq.resume_one),
    ("POST", r"/v2/workflows/dlq/restart/?", workflow_dlq.restart_many),
    ("POST", r"/v2/workflows/dlq/restart/(?P<dlq_id>[^/]+)", workflow_dlq.restart_one),
    ("POST", r"/v2/workflows/dlq/callback/(?P<dlq_id>[^/]+)", workflow_dlq.retry_callback),
    (
        "DELETE",
        r"/v2/workflows/dlq/callback/(?P<dlq_id>[^/]+)",
        workflow_dlq.cancel_callback,
    ),
    ("GET", r"/v2/workflows/dlq/(?P<dlq_id>[^/]+)", workflow_dlq.get_entry),
    ("DELETE", r"/v2/workflows/dlq/(?P<dlq_id>[^/]+)", workflow_dlq.delete_entry),
    ("POST", r"/v2/trigger/(?P<destination>.+)", workflow_runs.trigger),
    ("POST", r"/v2/batch/trigger/?", workflow_runs.batch_trigger),
    ("DELETE", r"/v2/workflows/runs/(?P<run_id>[^/]+)", workflows.end_run),
    ("DELETE", r"/v2/workflows/runs/?", workflows.cancel_runs),
    ("GET", r"/v2/workflows/runs/(?P<run_id>[^/]+)", workflows.get_run_steps),
    ("GET", r"/v2/workflows/(?:logs|events)/?", workflows.list_logs),
    ("POST", r"/v2/wait/(?P<event_id>[^/]+)", waiters.wait),
    ("POST", r"/v2/notify/(?P<run_id>[^/]+)/(?P<event_id>[^/]+)", waiters.notify_run),
    ("POST", r"/v2/notify/(?P<event_id>[^/]+)", waiters.notify_event),
    ("GET", r"/v2/waiters/(?P<event_id>[^/]+)", waiters.list_waiters),
    # A webhook (context.createWebhook) takes any method, and no token (see _authenticate).
    *[
        (method, r"/v2/workflows/hooks/(?P<hook>.*)", waiters.webhook)
        for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
    ],
]
_ROUTES = [(method, re.compile(pattern), handler) for method, pattern, handler in _TABLE]

_log = logging.getLogger("pytest_qstash")


def handle(
    store: Store,
    request: httpx.Request,
    faults: FaultTable | None = None,
    cause: Message | None = None,
) -> httpx.Response:
    """Answer one QStash API request: authentication first, then an armed fault
    (``qstash.fail_next``), else the endpoint's handler; every error answer is kept for the
    failure report. Nothing raises out of here but an injected network fault: an SDK retries
    an exception five times with real sleeps, while it reports an answer at once.

    ``cause``: the message whose delivery is making this call, if any; what it publishes
    follows from that delivery (the loop guard, ``drain``). The handlers read it from the
    request (``_http.cause_of``)."""
    request.extensions = {**request.extensions, CAUSE: cause}
    path, _, query = request_path(request).partition("?")
    endpoint = f"{request.method} {path}"
    try:
        if not path.startswith(waiters.WEBHOOK_PREFIX):  # called by third parties, no token
            _authenticate(store, request)
    except ApiError as exc:
        response = error_response(exc.status, exc.message)
        _record_rejection(store, request, response)
        return response
    if faults is not None:
        injected = faults.intercept(request)
        if injected is not None:
            _record_rejection(store, request, injected, injected=True)
            return injected
    refused: str | None = None  # why a 400 refused the call
    try:
        handler, params = _route(request.method, path, query, endpoint)
        with store_refusals():  # as QStash answers them
            response = handler(store, request, **params)
    except ApiError as exc:
        response = error_response(exc.status, exc.message)
        response.headers.update(exc.headers)
        refused = exc.message if exc.status == 400 else None
    except Exception as exc:  # a bug: answer it rather than raise it into the app's SDK
        _log.exception("pytest-qstash failed to answer %s", endpoint)
        refused = (
            f"pytest-qstash could not handle {endpoint} ({type(exc).__name__}: {exc}); "
            "this is a bug in pytest-qstash, please report it with the request"
        )
        response = error_response(400, refused)
    if not 200 <= response.status_code < 300:
        _record_rejection(store, request, response)
    if refused is not None:
        workflows.note_refused_step(store, request, refused)
    return response


def _record_rejection(
    store: Store, request: httpx.Request, response: httpx.Response, injected: bool = False
) -> None:
    """Keep an error answer for the failure report: an app may swallow the SDK's exception."""
    path = request_path(request).partition("?")[0]
    try:
        error = str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        error = response.text
    store.record_rejection(
        RejectedCall(
            request.method, path, response.status_code, error, store.clock.now_ms, injected
        )
    )


def _authenticate(store: Store, request: httpx.Request) -> None:
    auth = request.headers.get("authorization")
    if auth is None:  # the query's token, read only without the header (it costs a parse)
        token = request.url.params.get("qstash_token")
        if token is None:
            raise ApiError(401, "authorization header is missing")
    else:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer":
            raise ApiError(401, "authorization header must be 'Bearer <QSTASH_TOKEN>'")
    if not same_token(token, store.account.token):
        message = "invalid token: it is not this account's QSTASH_TOKEN"
        if same_token(token, DEFAULT_TOKEN):
            # The client holds the plugin's session value; QSTASH_TOKEN changed since.
            message += (
                " (the request carries the token pytest-qstash set for the session, but "
                "QSTASH_TOKEN was changed after the client was built, e.g. by "
                "monkeypatch.setenv: set it before the app is imported, or not at all)"
            )
        raise ApiError(401, message)


def same_token(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, in time that does not depend on where they differ."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode())


def _route(method: str, path: str, query: str, endpoint: str) -> tuple[Handler, dict[str, Any]]:
    path_matched = False
    for route_method, pattern, handler in _ROUTES:
        match = pattern.fullmatch(path)
        if match is None:
            continue
        path_matched = True
        if route_method != method:
            continue
        # Ids are percent-decoded (a queue named in Unicode arrives as %C3%BC...); a
        # destination is taken as sent.
        params = {
            name: _destination(value, query) if name == "destination" else unquote(value)
            for name, value in match.groupdict().items()
        }
        return handler, params
    if path_matched:  # a served path, the wrong method: 405, as for every resource
        raise ApiError(405, f"{endpoint}: method not allowed")
    raise ApiError(404, f"{endpoint} is not a QStash endpoint")


def _destination(raw: str, query: str) -> str:
    # The destination is sent unencoded in the path: its query string arrives as ours, less
    # what QStash itself reads there (the token, and `upstash-*` options in webhook mode).
    kept = "&".join(
        p
        for p in query.split("&")
        if p and not p.startswith("qstash_token=") and not p.lower().startswith("upstash-")
    )
    return f"{raw}?{kept}" if kept else raw
