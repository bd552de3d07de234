"""The workflow DLQ endpoints (``/v2/workflows/dlq...``, and ``GET /v2/dlq?source=workflow``,
which the TypeScript workflow client lists with): list, get, delete one or many, resume and
restart one or many, retry or cancel a run's failure function.

Bulk operations take ``dlqIds`` or the listing's filters (every entry without any), a page of
``count`` (at most 100) at a time with a cursor; resume and restart take the request's
``Upstash-*`` headers as overrides of the run's settings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from ..engine import workflow_dlq as wdlq
from ..engine.options import header_lists
from ..engine.store import Store
from ..engine.workflow_dlq import FailureFunctionNotRetryable, NotAWorkflowEntry, WorkflowDlqEntry
from ..engine.workflows import WorkflowRun
from ._http import (
    ApiError,
    Filters,
    cause_of,
    empty_response,
    header_map,
    int_filter,
    json_response,
    put_body,
    query_filters,
)
from .publish import override_options

#: Default and largest page of the listing and of the bulk operations.
MAX_PAGE = 100

FILTERS = (
    "cursor",
    "count",
    "dlqIds",
    "fromDate",
    "toDate",
    "workflowUrl",
    "workflowRunId",
    "workflowCreatedAt",
    "label",
    "failureFunctionState",
    "callerIp",
    "flowControlKey",
    # What older clients send: `url` for workflowUrl, `responseStatus`; `all` (every entry,
    # the same as no filter); `source` (the `/v2/dlq?source=workflow` form of the listing).
    "url",
    "responseStatus",
    "all",
    "source",
    "order",
)


def entry_json(item: WorkflowDlqEntry) -> dict[str, Any]:
    """A ``WorkflowDLQMessage`` (with the fields the TypeScript client reads besides)."""
    entry, run, message = item.entry, item.run, item.message
    # The run's redaction holds for each of its messages, as /v2/dlq and /v2/logs show them.
    redact = message.redact or run.redact
    out: dict[str, Any] = {
        "dlqId": entry.dlq_id,
        "messageId": message.message_id,
        "workflowUrl": run.url,
        "workflowRunId": run.run_id,
        "workflowCreatedAt": run.created_ms,
        "url": message.url,
        "method": message.method,
        "header": header_map(message.headers, redact),
        "maxRetries": message.max_retries,
        "notBefore": message.not_before_ms,
        "createdAt": entry.created_ms,
        "callerIP": message.caller_ip,
        "responseStatus": entry.response_status if entry.response_status is not None else 0,
        "responseHeader": header_lists(entry.response_headers),
    }
    put_body(out, message.content, redact="body" in redact)
    put_body(out, entry.response_content, key="responseBody")
    if run.labels:
        out["label"], out["labels"] = run.labels[0], list(run.labels)
    if run.flow_control_key:
        out["flowControlKey"] = run.flow_control_key
    if item.failure_callback:
        out["failureCallback"] = item.failure_callback
    state = item.failure_function_state
    if state is not None:
        out["failureFunctionState"] = state
        info: dict[str, Any] = {"state": state}
        call = run.failure_call
        last = call.last_delivery if call is not None else None
        if last is not None and last.status is not None:
            info["responseStatus"] = last.status
            info["responseBody"] = last.response_body
            info["responseHeaders"] = header_lists(last.response_headers)
        out["failureCallbackInfo"] = info
    if entry.error is not None:
        out["error"] = entry.error
    return out


# -- endpoints ------------------------------------------------------------------------------
def list_entries(store: Store, request: httpx.Request) -> httpx.Response:
    """``GET /v2/workflows/dlq``: the failed runs, newest first, a page at a time."""
    page, cursor = _select(store, _filters(request), newest_first=True)
    out: dict[str, Any] = {"messages": [entry_json(item) for item in page]}
    if cursor is not None:
        out["cursor"] = cursor
    return json_response(out)


def get_entry(store: Store, request: httpx.Request, dlq_id: str) -> httpx.Response:
    return json_response(entry_json(_get(store, dlq_id)))


def delete_entry(store: Store, request: httpx.Request, dlq_id: str) -> httpx.Response:
    store.delete_dead_letter(_get(store, dlq_id).dlq_id)
    return empty_response()


def delete_entries(store: Store, request: httpx.Request) -> httpx.Response:
    """``DELETE /v2/workflows/dlq``: the entries ``dlqIds`` names (unknown ones skipped), or a
    page of those the filters match."""
    targets, cursor = _targets(store, request, strict=False)
    deleted = sum(1 for item in targets if store.delete_dead_letter(item.dlq_id))
    out: dict[str, Any] = {"deleted": deleted}
    if cursor is not None:
        out["cursor"] = cursor
    return json_response(out)


def resume_one(store: Store, request: httpx.Request, dlq_id: str) -> httpx.Response:
    return json_response(run_json(_act(store, request, wdlq.resume, dlq_id)))


def restart_one(store: Store, request: httpx.Request, dlq_id: str) -> httpx.Response:
    return json_response(run_json(_act(store, request, wdlq.restart, dlq_id)))


def resume_many(store: Store, request: httpx.Request) -> httpx.Response:
    return _act_many(store, request, wdlq.resume)


def restart_many(store: Store, request: httpx.Request) -> httpx.Response:
    return _act_many(store, request, wdlq.restart)


def retry_callback(store: Store, request: httpx.Request, dlq_id: str) -> httpx.Response:
    """``POST /v2/workflows/dlq/callback/{dlqId}``: call the failure function again (400
    unless its call failed)."""
    _get(store, dlq_id)
    try:
        run = wdlq.retry_failure_function(store, dlq_id, cause=cause_of(request))
    except FailureFunctionNotRetryable as exc:
        raise ApiError(400, str(exc)) from None
    return json_response(run_json(run))


def cancel_callback(store: Store, request: httpx.Request, dlq_id: str) -> httpx.Response:
    """``DELETE /v2/workflows/dlq/callback/{dlqId}``: cancel the failure function call in
    progress; answered 302, as the document says (400 when none is in progress)."""
    _get(store, dlq_id)
    try:
        wdlq.cancel_failure_function(store, dlq_id)
    except FailureFunctionNotRetryable as exc:
        raise ApiError(400, str(exc)) from None
    return empty_response(302)


# -- internals ------------------------------------------------------------------------------
Action = Callable[..., WorkflowRun]


def _get(store: Store, dlq_id: str) -> WorkflowDlqEntry:
    try:
        return wdlq.get(store, dlq_id)
    except NotAWorkflowEntry:
        raise ApiError(404, f"DLQ message {dlq_id} not found") from None


def _act(store: Store, request: httpx.Request, action: Action, dlq_id: str) -> WorkflowRun:
    _get(store, dlq_id)
    return action(store, dlq_id, override_options(store, request.headers), cause=cause_of(request))


def _act_many(store: Store, request: httpx.Request, action: Action) -> httpx.Response:
    """Resume or restart the entries named (404 when one is unknown, before any is acted on)
    or a page of those the filters match, oldest first; ``{"workflowRuns": [...]}``."""
    targets, cursor = _targets(store, request, strict=True, fresh=True)
    overrides = override_options(store, request.headers)
    cause = cause_of(request)
    runs = [action(store, item.dlq_id, overrides, cause=cause) for item in targets]
    out: dict[str, Any] = {"workflowRuns": [run_json(run) for run in runs]}
    if cursor is not None:
        out["cursor"] = cursor
    return json_response(out)


def _filters(request: httpx.Request) -> Filters:
    filters = query_filters(request, FILTERS, "workflow DLQ")
    source = filters.pop("source", None)
    if source is not None and source != ["workflow"]:
        raise ApiError(400, f"invalid source {source[0]!r}: the workflow DLQ's is 'workflow'")
    filters.pop("all", None)  # every entry: the same as no filter
    if "url" in filters:
        filters.setdefault("workflowUrl", []).extend(filters.pop("url"))
    return filters


def _targets(
    store: Store, request: httpx.Request, *, strict: bool, fresh: bool = False
) -> tuple[list[WorkflowDlqEntry], str | None]:
    """The entries ``dlqIds`` names, else a page of those the filters match (with
    ``fresh``, only entries no run resumed or restarted yet: a bulk resume repeated, or
    walked page by page, acts on each entry once)."""
    filters = _filters(request)
    ids = filters.pop("dlqIds", None)
    if ids is None:
        return _select(store, filters, newest_first=False, fresh=fresh)
    found: list[WorkflowDlqEntry] = []
    for dlq_id in dict.fromkeys(ids):
        try:
            found.append(wdlq.get(store, dlq_id))
        except NotAWorkflowEntry:
            if strict:
                raise ApiError(404, f"DLQ message {dlq_id} not found") from None
    return found, None


def _select(
    store: Store, filters: Filters, *, newest_first: bool, fresh: bool = False
) -> tuple[list[WorkflowDlqEntry], str | None]:
    """A page of the entries the filters match, and the cursor (an offset) of the next."""
    count = min(int_filter(filters, "count", minimum=1) or MAX_PAGE, MAX_PAGE)
    start = _cursor(filters)
    if filters.get("order") == ["latestFirst"]:
        newest_first = True
    elif filters.get("order") == ["earliestFirst"]:
        newest_first = False
    matching = [
        item
        for item in wdlq.entries(store)
        if _matches(item, filters) and not (fresh and wdlq.continuations(store, item.dlq_id))
    ]
    if newest_first:
        matching.reverse()
    page = matching[start : start + count]
    return page, str(start + count) if start + count < len(matching) else None


def _cursor(filters: Filters) -> int:
    values = filters.get("cursor")
    if not values:
        return 0
    if not values[0].isdigit():
        raise ApiError(400, f"invalid cursor {values[0]!r}: pass the cursor of the previous page")
    return int(values[0])


def _matches(item: WorkflowDlqEntry, filters: Filters) -> bool:
    run, entry = item.run, item.entry
    checks: list[tuple[str, Callable[[], list[str]]]] = [
        ("workflowUrl", lambda: [run.url]),
        ("workflowRunId", lambda: [run.run_id]),
        ("workflowCreatedAt", lambda: [str(run.created_ms)]),
        ("label", lambda: list(run.labels)),
        ("failureFunctionState", lambda: [item.failure_function_state or ""]),
        ("callerIp", lambda: [item.message.caller_ip]),
        ("flowControlKey", lambda: [run.flow_control_key or ""]),
        ("responseStatus", lambda: [str(entry.response_status or 0)]),
    ]
    for name, values in checks:
        wanted = filters.get(name)
        if wanted and not set(wanted) & set(values()):
            return False
    from_ms = int_filter(filters, "fromDate")
    to_ms = int_filter(filters, "toDate")
    return not (
        (from_ms is not None and entry.created_ms < from_ms)
        or (to_ms is not None and entry.created_ms > to_ms)
    )


def run_json(run: WorkflowRun) -> dict[str, Any]:
    """A run as the Workflow API answers an action on a failed run."""
    return {"workflowRunId": run.run_id, "workflowCreatedAt": run.created_ms}
