"""Upstash Workflow endpoints: ending and cancelling runs, the run logs.

Waits, notifies and webhooks are in ``waiters.py``.
"""

from __future__ import annotations

from typing import Any

import httpx

from ..state.models import Message
from ..state.options import MessageOptions
from ..state.store import Store
from ..state.workflows import NOT_FOUND, STEP, WorkflowRun
from ._http import (
    ApiError,
    Filters,
    empty_response,
    int_filter,
    json_response,
    query_filters,
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


# -- endpoints ------------------------------------------------------------------------------
def end_run(store: Store, request: httpx.Request, run_id: str) -> httpx.Response:
    """``DELETE /v2/workflows/runs/{id}?cancel=false`` is the SDK reporting that the route
    function returned; without ``cancel=false`` (Upstash's "Cancel Workflow Run", what a test
    or an app sends by hand) it cancels the run and what it still owes."""
    run = store.workflows.get(run_id)
    if run is None or not run.active:
        raise ApiError(404, NOT_FOUND)
    if request.url.params.get("cancel", "true").lower() != "false":
        _cancel(store, run)
    else:
        text = request.content.decode("utf-8", errors="replace")
        store.workflows.succeed(run, store.clock.now_ms, text)
    return empty_response(200)


_CANCEL_FILTERS = ("workflowRunIds", "workflowUrl", "workflowUrlExactMatch", "fromDate", "toDate")


def cancel_runs(store: Store, request: httpx.Request) -> httpx.Response:
    """``DELETE /v2/workflows/runs``: cancel the runs named, or those matching the filters
    (every active run when there are none); answers how many were cancelled."""
    filters = query_filters(request, _CANCEL_FILTERS, "workflow run")
    ids = filters.get("workflowRunIds")
    if ids:
        targets = [run for run_id in ids if (run := store.workflows.get(run_id)) is not None]
    else:
        exact = (filters.get("workflowUrlExactMatch") or ["false"])[0].lower() == "true"
        targets = [run for run in store.workflows if _matches(run, filters, exact)]
    cancelled = 0
    for run in dict.fromkeys(targets):  # a run named twice is cancelled once
        if run.active:
            _cancel(store, run)
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
)


def list_logs(store: Store, request: httpx.Request) -> httpx.Response:
    """``GET /v2/workflows/logs`` (and ``/v2/workflows/events``, which the TypeScript client
    calls): runs newest first, ``count`` (at most 10) a page, with an offset cursor."""
    filters = query_filters(request, _LOG_FILTERS, "workflow log")
    count = min(int_filter(filters, "count", minimum=1) or LOGS_PAGE, LOGS_PAGE)
    start = int_filter(filters, "cursor") or 0
    runs = [run for run in store.workflows if _matches(run, filters, exact=True)]
    runs.sort(key=lambda run: run.created_ms, reverse=True)  # stable: same ms, newest last
    page = runs[start : start + count]
    out: dict[str, Any] = {"runs": [_run_json(run) for run in page]}
    if start + count < len(runs):
        out["cursor"] = str(start + count)
    return json_response(out)


# -- internals ------------------------------------------------------------------------------
def _cancel(store: Store, run: WorkflowRun) -> None:
    for message in store.workflows.cancel(run, store.clock.now_ms):
        store.cancel(message)


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
    # Python SDK runs have no labels or flow-control keys: such a filter matches none.
    return not ("label" in filters or "flowControlKey" in filters)


def _run_json(run: WorkflowRun) -> dict[str, Any]:
    out: dict[str, Any] = {
        "workflowRunId": run.run_id,
        "workflowUrl": run.url,
        "workflowState": run.state,
        "workflowRunCreatedAt": run.created_ms,
        # The docs' snippet and the OpenAPI disagree on this name: both are sent.
        "workflowCreatedAt": run.created_ms,
        "workflowRunCallerIp": run.messages[0].caller_ip if run.messages else "127.0.0.1",
    }
    if run.completed_ms is not None:
        out["workflowRunCompletedAt"] = run.completed_ms
    if run.response:
        out["workflowRunResponse"] = run.response
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
    for step in run.steps:
        info: dict[str, Any] = {
            "stepId": step.step_id,
            "stepName": step.name,
            "stepType": step.type,
            "callType": STEP,
            "messageId": step.message_id,
            "out": step.raw.get("out"),
            "concurrent": step.concurrent,
            "state": "STEP_SUCCESS",
            "createdAt": step.message.created_ms,
        }
        if step.sleep_for is not None:
            info["sleepFor"] = step.sleep_for
        if step.sleep_until is not None:
            info["sleepUntil"] = step.sleep_until
        if step.type == "Call" and isinstance(step.out, dict):
            info["callResponseStatus"] = step.out.get("status")
            info["callResponseBody"] = step.out.get("body")
            info["callResponseHeaders"] = step.out.get("header")
        groups.append({"type": "sequential", "steps": [info]})
    pending = [_pending_json(m) for m in run.messages if not m.done]
    if pending and run.active:
        groups.append({"type": "next", "steps": pending})
    out["steps"] = groups
    return out


def _initial_step_json(message: Message) -> dict[str, Any]:
    return {
        "stepId": 0,
        "stepName": "init",
        "stepType": "Initial",
        "callType": STEP,
        "messageId": message.message_id,
        "out": message.body,
        "concurrent": 1,
        "state": "STEP_SUCCESS" if message.state == "DELIVERED" else "STEP_PROGRESS",
        "createdAt": message.created_ms,
    }


def _pending_json(message: Message) -> dict[str, Any]:
    return {
        "messageId": message.message_id,
        "state": "STEP_RETRY" if message.retried else "STEP_PROGRESS",
        "retries": message.retried,
        "nextDeliveryTime": message.not_before_ms,
    }


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
    last = message.last_delivery
    if last is not None and last.status is not None:
        out["responseStatus"] = last.status
        out["responseBody"] = last.response_body
    return out
