"""Upstash Workflow endpoints: ending and cancelling runs, the run logs.

Waits, notifies and webhooks are in ``waiters.py``; the workflow DLQ in ``workflow_dlq.py``;
the trigger endpoints in ``workflow_runs.py``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx

from ..engine.models import Delivery, Message
from ..engine.options import MessageOptions
from ..engine.retry import DEFAULT_RETRY_DELAY
from ..engine.store import Store
from ..engine.waiters import Waiter
from ..engine.workflow_steps import WorkflowStep
from ..engine.workflows import NOT_FOUND, STEP, WorkflowRun
from ._http import (
    ApiError,
    Filters,
    backoff_text,
    empty_response,
    header_map,
    int_filter,
    json_response,
    query_filters,
    redacted,
)

#: Runs listed per page of the logs, by default and at most (the OpenAPI's run mode).
LOGS_PAGE = 10


# -- publishing -----------------------------------------------------------------------------
def refuse_ended_run(store: Store, opts: MessageOptions) -> None:
    """Refuse a step published for a run QStash does not know (404) or that has ended (400)."""
    if not opts.workflow_headers:
        return
    target = store.workflows.target_of(opts.workflow_headers)
    if target is None:
        return
    run_id, run = target
    if run is None:
        raise ApiError(404, f"workflow run {run_id} not found")
    if not run.active:
        raise ApiError(400, f"workflow run {run_id} is not active (state {run.state})")


def note_refused_step(store: Store, request: httpx.Request, error: str) -> None:
    """A publish answered 400 with ``error`` (an invalid option, say): the runs it was a
    step of end (``Store.end_refused_runs``), as the SDK reads the answer as a cancel."""
    if request.method != "POST":
        return
    path = request.url.raw_path.decode("ascii").partition("?")[0]
    run_ids = _step_run_ids(request, path)
    if run_ids:
        store.end_refused_runs(run_ids, f"POST {path} answered 400: {error}")


def _step_run_ids(request: httpx.Request, path: str) -> list[str]:
    """The runs a refused publish was a later step of: from its headers, or for a batch
    (what the SDKs publish steps with) from its items' headers."""
    header_sets: list[Any] = [request.headers]
    if path.rstrip("/") == "/v2/batch":
        try:
            items = json.loads(request.content)
        except (ValueError, RecursionError):  # the 400 said why
            return []
        if not isinstance(items, list):
            return []
        header_sets = [item.get("headers") for item in items if isinstance(item, dict)]
    elif not path.startswith(("/v2/publish/", "/v2/enqueue/")):
        return []
    run_ids: list[str] = []
    for headers in header_sets:
        if not isinstance(headers, dict | httpx.Headers):
            continue
        lowered = {str(k).lower(): str(v) for k, v in headers.items()}
        run_id = lowered.get("upstash-workflow-runid", "").strip()
        if run_id and lowered.get("upstash-workflow-init", "").lower() != "true":
            run_ids.append(run_id)
    return list(dict.fromkeys(run_ids))


# -- endpoints ------------------------------------------------------------------------------
def end_run(store: Store, request: httpx.Request, run_id: str) -> httpx.Response:
    """``DELETE /v2/workflows/runs/{id}?cancel=false`` is the SDK reporting that the route
    function returned; without ``cancel=false`` (Upstash's "Cancel Workflow Run", what a test
    or an app sends by hand) it cancels the run and what it still owes."""
    run = store.workflows.get(run_id)
    cancel = request.url.params.get("cancel", "true").lower() != "false"
    if run is not None and not run.active and not cancel:
        # The SDK reports the route's end again (a retried delivery, a run that a failure
        # or a cancel ended first): the run stays as it ended, and the SDK gets no error.
        return empty_response(200)
    if run is None or not run.active:
        raise ApiError(404, NOT_FOUND)
    if cancel:
        store.cancel_run(run)
    else:
        text = request.content.decode("utf-8", errors="replace")
        store.succeed_run(run, text)
    return empty_response(200)


_CANCEL_FILTERS = (
    "workflowRunIds",
    "workflowUrl",
    "workflowUrlExactMatch",
    "fromDate",
    "toDate",
    "callerIp",
    "label",
    "flowControlKey",
    "count",
    # Older clients: `urlStartingWith` (a prefix of the workflow URL), `all` (every run).
    "urlStartingWith",
    "all",
)
#: Runs a bulk cancel cancels at most, by default (the document's `count`).
CANCEL_COUNT = 100


def cancel_runs(store: Store, request: httpx.Request) -> httpx.Response:
    """``DELETE /v2/workflows/runs``: cancel the runs named, or those matching the filters
    (every active run when there are none); answers how many were cancelled."""
    filters = query_filters(request, _CANCEL_FILTERS, "workflow run")
    limit = int_filter(filters, "count", minimum=1) or CANCEL_COUNT
    filters.pop("all", None)  # every run: the same as no filter
    if "urlStartingWith" in filters:
        filters.setdefault("workflowUrl", []).extend(filters.pop("urlStartingWith"))
    ids = filters.get("workflowRunIds")
    if ids:
        targets = [run for run_id in ids if (run := store.workflows.get(run_id)) is not None]
    else:
        exact = (filters.get("workflowUrlExactMatch") or ["false"])[0].lower() == "true"
        targets = [run for run in store.workflows if _matches(run, filters, exact)]
    cancelled = 0
    for run in dict.fromkeys(targets):  # a run named twice is cancelled once
        if run.active and cancelled < limit:
            store.cancel_run(run)
            cancelled += 1
    return json_response({"cancelled": cancelled})


def get_run_steps(store: Store, request: httpx.Request, run_id: str) -> httpx.Response:
    """``GET /v2/workflows/runs/{id}``: the run's raw steps (what the TypeScript SDK fetches
    when QStash sends it an empty body); 404 once the run has ended."""
    run = store.workflows.get(run_id)
    if run is None or not run.active:
        raise ApiError(404, NOT_FOUND)
    return json_response(store.workflows.raw_steps(run))


_LOG_FILTERS = (
    "cursor",
    "count",
    "workflowRunId",
    "workflowUrl",
    "workflowCreatedAt",
    "state",
    "fromDate",
    "toDate",
    "messageId",
    "groupBy",
    "trimBody",
    "label",
    "flowControlKey",
    "callerIp",
    "workflowRuns",
)


def list_logs(store: Store, request: httpx.Request) -> httpx.Response:
    """``GET /v2/workflows/logs`` (and ``/v2/workflows/events``, which the TypeScript client
    calls): runs newest first, ``count`` (at most 10) a page, with an offset cursor."""
    filters = query_filters(request, _LOG_FILTERS, "workflow log")
    count = min(int_filter(filters, "count", minimum=1) or LOGS_PAGE, LOGS_PAGE)
    start = int_filter(filters, "cursor") or 0
    pairs = _run_pairs(filters)
    if pairs is not None:  # `ID@createdAt,...`: those runs, whatever the other filters say
        runs = [run for run in store.workflows if (run.run_id, str(run.created_ms)) in pairs]
    else:
        runs = [run for run in store.workflows if _matches(run, filters, exact=True)]
    runs.sort(key=lambda run: run.created_ms, reverse=True)  # stable: same ms, newest last
    page = runs[start : start + count]
    out: dict[str, Any] = {
        "runs": [_run_json(run, store.waiters.of_run(run.run_id)) for run in page]
    }
    if start + count < len(runs):
        out["cursor"] = str(start + count)
    return json_response(out)


# -- internals ------------------------------------------------------------------------------
def _matches(run: WorkflowRun, filters: Filters, exact: bool) -> bool:
    if "workflowRunId" in filters and run.run_id not in filters["workflowRunId"]:
        return False
    urls = filters.get("workflowUrl")
    if urls and not any(run.url == u if exact else run.url.startswith(u) for u in urls):
        return False
    if "state" in filters and run.state not in filters["state"]:
        return False
    created = filters.get("workflowCreatedAt")
    if created and str(run.created_ms) not in created:
        return False
    from_ms = int_filter(filters, "fromDate")
    to_ms = int_filter(filters, "toDate")
    if (from_ms is not None and run.created_ms < from_ms) or (
        to_ms is not None and run.created_ms > to_ms
    ):
        return False
    ids = filters.get("messageId")
    if ids and not any(m.message_id in ids for m in run.messages):
        return False
    labels = filters.get("label")
    if labels and not set(labels) & set(run.labels):
        return False
    keys = filters.get("flowControlKey")
    if keys and run.flow_control_key not in keys:
        return False
    ips = filters.get("callerIp")
    return not (ips and (run.messages[0].caller_ip if run.messages else "") not in ips)


def _run_pairs(filters: Filters) -> set[tuple[str, str]] | None:
    values = filters.get("workflowRuns")
    if not values:
        return None
    pairs: set[tuple[str, str]] = set()
    for value in values:
        if "," in value:
            continue  # the whole of a comma-joined value; its parts follow it
        run_id, at, created = value.partition("@")
        if not at or not run_id or not created.isdigit():
            raise ApiError(
                400,
                f"invalid workflowRuns {value!r}: expected workflowRunId@workflowCreatedAt "
                "pairs, comma separated",
            )
        pairs.add((run_id, created))
    return pairs


def _run_json(run: WorkflowRun, waits: list[Waiter]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "workflowRunId": run.run_id,
        "workflowUrl": run.url,
        "workflowState": run.state,
        "workflowRunCreatedAt": run.created_ms,
        # The docs' snippet and the OpenAPI disagree on this name: both are sent.
        "workflowCreatedAt": run.created_ms,
        "workflowRunCallerIp": run.messages[0].caller_ip if run.messages else "127.0.0.1",
    }
    if run.labels:
        out["label"], out["labels"] = run.labels[0], list(run.labels)
    if run.flow_control_key:
        out["flowControlKey"] = run.flow_control_key
    if run.completed_ms is not None:
        out["workflowRunCompletedAt"] = run.completed_ms
    if run.response:
        out["workflowRunResponse"] = _shown(run.response, run.redact)
    if run.dlq_id:
        out["dlqId"] = run.dlq_id
    if run.invoker is not None:
        out["invoker"] = {
            "workflowRunId": run.invoker.run_id,
            "workflowUrl": run.invoker.url,
            "workflowRunCreatedAt": run.invoker.created_ms,
        }
    failure = _failure_function_json(run)
    if failure:
        out["failureFunction"] = failure
    groups: list[dict[str, Any]] = []
    if run.messages:
        groups.append({"type": "sequential", "steps": [_initial_step_json(run.messages[0])]})
    calls = _call_requests(run)  # in step order, one for each call step
    for group in run.step_groups:
        steps = [_step_json(step, calls, run.redact) for step in group.steps]
        groups.append({"type": group.type, "steps": steps})
    pending = [_pending_json(m) for m in run.messages if not m.done]
    pending += [_wait_json(waiter, run.redact) for waiter in waits]
    if pending and run.active:
        groups.append({"type": "next", "steps": pending})
    out["steps"] = groups
    return out


def _shown(text: str, redact: tuple[str, ...]) -> str:
    """A body or output as the logs show it: ``REDACTED:<sha256>`` when the run's body is
    redacted (the docs: the step outputs are hidden too); nothing stays nothing."""
    return redacted(text.encode()) if text and "body" in redact else text


def _step_json(step: WorkflowStep, calls: list[Message], redact: tuple[str, ...]) -> dict[str, Any]:
    out = step.raw.get("out")
    message = step.message
    info: dict[str, Any] = {
        "stepId": step.target_step,
        "stepName": step.name,
        "stepType": step.type,
        "callType": STEP,
        "messageId": step.message_id,
        # Documented as a string: a sleep (which has no result) shows an empty one.
        "out": _shown(
            out if isinstance(out, str) else ("" if out is None else json.dumps(out)), redact
        ),
        "concurrent": step.concurrent,
        # A plan step stands for a parallel step that has not finished yet.
        "state": "STEP_PROGRESS" if step.is_plan else "STEP_SUCCESS",
        "createdAt": message.created_ms,
        **_delivery_settings(message),
    }
    if step.sleep_for is not None:
        info["sleepFor"] = step.sleep_for
    if step.sleep_until is not None:
        info["sleepUntil"] = step.sleep_until
    if step.type == "Call" and isinstance(step.out, dict):
        info.update(_call_request_json(calls.pop(0) if calls else None, redact))
        info["callResponseStatus"] = step.out.get("status")
        body = step.out.get("body")
        info["callResponseBody"] = _shown(body, redact) if isinstance(body, str) else body
        info["callResponseHeaders"] = step.out.get("header")
    return info


def _initial_step_json(message: Message) -> dict[str, Any]:
    return {
        "stepId": 0,
        "stepName": "init",
        "stepType": "Initial",
        "callType": STEP,
        "messageId": message.message_id,
        "out": _shown(message.body, message.redact),
        "concurrent": 1,
        "state": "STEP_SUCCESS" if message.state == "DELIVERED" else "STEP_PROGRESS",
        "createdAt": message.created_ms,
        **_delivery_settings(message),
    }


def _call_requests(run: WorkflowRun) -> list[Message]:
    """The requests the run's call steps sent to third parties, in order: the run's messages
    that a callback reported on (a call step is the SDK's answer to that callback)."""
    reported = {
        m.callback_for
        for m in run.messages
        if m.callback_for is not None and not m.is_failure_callback
    }
    return [m for m in run.messages if m.message_id in reported]


def _call_request_json(message: Message | None, redact: tuple[str, ...]) -> dict[str, Any]:
    """What a call step sent: ``callUrl``, ``callMethod``, ``callBody``, ``callHeaders``
    (hidden as the run's redaction says)."""
    if message is None:
        return {}
    return {
        "callUrl": message.url,
        "callMethod": message.method,
        "callBody": _shown(message.body, redact),
        "callHeaders": header_map(message.headers, redact),
    }


def _pending_json(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
        "messageId": message.message_id,
        "state": "STEP_RETRY" if message.retried else "STEP_PROGRESS",
        "nextDeliveryTime": message.not_before_ms,
        **_delivery_settings(message),
    }
    errors = [_attempt_error(d) for d in message.deliveries if not d.ok]
    if errors:
        out["errors"] = errors
    return out


def _wait_json(waiter: Waiter, redact: tuple[str, ...]) -> dict[str, Any]:
    """A wait in progress (``context.waitForEvent``) as what is next: its step, the event it
    waits for and when it times out (the SDK's ``waitEventId``, ``waitTimeoutDuration``,
    ``waitTimeoutDeadline``, ``waitTimeout``)."""
    step = waiter.step
    headers = httpx.Headers(list(waiter.headers.items()))
    return {
        "stepId": step.get("stepId", 0),
        "stepName": waiter.step_name,
        "stepType": waiter.step_type,
        "callType": STEP,
        "concurrent": step.get("concurrent", 1),
        "state": "STEP_PROGRESS",
        "createdAt": waiter.created_ms,
        "headers": header_map(headers, redact),
        "waitEventId": waiter.event_id,
        "waitTimeoutDuration": f"{(waiter.deadline_ms - waiter.created_ms) // 1000}s",
        "waitTimeoutDeadline": waiter.deadline_ms,
        "waitTimeout": False,
    }


def _delivery_settings(message: Message) -> dict[str, Any]:
    """What every step of the logs shows of its message: the headers it is delivered with,
    its retries (the most it is retried) and its retry delay. Redacted headers stay hidden,
    as ``/v2/logs`` hides them."""
    return {
        "headers": header_map(message.headers, message.redact),
        "retries": message.max_retries,
        "retryDelay": backoff_text(message.options) or DEFAULT_RETRY_DELAY,
    }


def _attempt_error(delivery: Delivery) -> dict[str, Any]:
    error: dict[str, Any] = {"time": delivery.at_ms}
    if delivery.status is not None:
        error["responseStatus"] = delivery.status
        error["responseBody"] = delivery.response_body
    if delivery.error is not None:
        error["error"] = delivery.error
    return error


def _failure_function_json(run: WorkflowRun) -> dict[str, Any]:
    message, state = run.failure_call, run.failure_function_state
    if message is None or state is None:
        return {}
    out: dict[str, Any] = {
        "messageId": message.message_id,
        "url": message.url,
        "state": state,
        "maxRetries": message.max_retries,
    }
    if run.dlq_id:
        out["dlqId"] = run.dlq_id
    # The failed step's answer, as the failure callback carried it (status, headers, body).
    try:
        failed = message.json()
    except ValueError:  # a failure URL the app publishes to may get any body
        failed = None
    if isinstance(failed, dict):
        if isinstance(failed.get("status"), int):
            out["failStatus"] = failed["status"]
        if isinstance(failed.get("header"), dict):
            out["failHeaders"] = failed["header"]
        if isinstance(failed.get("body"), str):
            out["failResponse"] = _decoded(failed["body"])
    last = message.last_delivery
    if last is not None and last.status is not None:
        out["responseStatus"] = last.status
        out["responseBody"] = last.response_body
        out["responseHeaders"] = header_map(last.response_headers)
    return out


def _decoded(body: str) -> str:
    """A callback's base64 body as text (as given when it is not base64 of UTF-8)."""
    try:
        return base64.b64decode(body, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return body
