"""Starting workflow runs through the API: ``POST /v2/trigger/{workflowUrl}`` and
``POST /v2/batch/trigger`` (the Workflow REST API's own trigger; the SDK clients publish the
init message themselves)."""

from __future__ import annotations

from typing import Any

import httpx

from ..engine.deliverable import Undeliverable, checked_url
from ..engine.models import Message
from ..engine.options import InvalidOption
from ..engine.store import Store
from ..engine.trigger import start_run
from ..engine.workflows import WorkflowRun
from ._http import ApiError, cause_of, json_response, read_json
from .publish_headers import parse_options


def trigger(store: Store, request: httpx.Request, destination: str) -> httpx.Response:
    try:
        run, _ = trigger_request(
            store, destination, request.content, request.headers, cause_of(request)
        )
    except InvalidOption as exc:
        raise ApiError(400, str(exc)) from None
    return json_response({"workflowRunId": run.run_id, "workflowCreatedAt": run.created_ms})


def batch_trigger(store: Store, request: httpx.Request) -> httpx.Response:
    """``[{"destination", "body"?, "headers"?}, ...]``: each started as a single trigger
    would be; every item is checked before any run starts."""
    items = read_json(request)
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ApiError(400, 'invalid body: expected [{"destination": "<workflow url>", ...}]')
    requests: list[tuple[str, bytes, httpx.Headers]] = []
    for position, item in enumerate(items):
        destination, body, headers = (
            item.get("destination"),
            item.get("body", ""),
            item.get("headers", {}),
        )
        try:
            destination = checked_url(destination, "destination")
        except Undeliverable as exc:
            raise ApiError(400, f"invalid destination at [{position}]: {exc}") from None
        if not isinstance(body, str):
            raise ApiError(400, f"invalid body at [{position}]: expected a string")
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ApiError(400, f"invalid headers at [{position}]: expected strings by name")
        try:
            parse_options(headers)  # a bad option fails the call before any run starts
        except InvalidOption as exc:
            raise ApiError(400, f"invalid headers at [{position}]: {exc}") from None
        requests.append((destination, body.encode(), httpx.Headers(headers)))
    out: list[dict[str, Any]] = []
    for destination, content, headers in requests:
        try:
            run, deduplicated = trigger_request(
                store, destination, content, headers, cause_of(request)
            )
        except InvalidOption as exc:
            raise ApiError(400, str(exc)) from None
        out.append(
            {
                "workflowRunId": run.run_id,
                "workflowCreatedAt": run.created_ms,
                "deduplicated": deduplicated,
            }
        )
    return json_response(out, 201)


def trigger_request(
    store: Store,
    url: str,
    content: bytes,
    headers: httpx.Headers,
    cause: Message | None = None,
) -> tuple[WorkflowRun, bool]:
    """Start a run as ``POST /v2/trigger/{url}`` does: the request's ``Upstash-*`` headers
    (retries, delay, label, flow control, failure callback and its ``-Forward-*`` headers,
    ``Upstash-Forward-*``) become the run's settings, for every step; the run id is
    ``Upstash-Workflow-RunId`` or a new one. The failure callback goes, unless the request
    names one, to the workflow URL (where ``serve()``'s failure function answers). Returns the
    run and whether it existed already (a trigger naming a run id twice starts it once).
    Raises ``InvalidOption`` for a bad header (nothing is published then)."""
    try:
        url = checked_url(url, "workflow url")
    except Undeliverable as exc:
        raise InvalidOption(str(exc)) from None
    run_id = (headers.get("upstash-workflow-runid") or "").strip() or "wfr_" + store.ids.token(21)
    existing = store.workflows.get(run_id)
    if existing is not None:
        return existing, True
    publish: dict[str, str] = {}
    for name, value in headers.multi_items():
        lowered = name.lower()
        if lowered == "content-type" or (
            lowered.startswith("upstash-") and not lowered.startswith("upstash-workflow-")
        ):
            publish[lowered] = value
    opts = parse_options(publish)
    return start_run(store, url, content, opts, run_id, url, cause=cause)
