"""Workflow invocations: a run started by another run's ``context.invoke``, and its result.

The TypeScript SDK invokes a workflow by publishing the invoked run's first message
(``Upstash-Workflow-Init: true``, ``Upstash-Workflow-Invoke: true``) with an *envelope* as its
body: the invoker's run id, URL and creation time, its step, the publish headers that resume
it, and the body for the invoked run. QStash unwraps it: the invoked run starts with that body
(its headers are the publish's forwarded ones), and remembers its invoker. When the invoked
run ends (success, failure or cancel) QStash publishes the invoke step back into the invoker,
its ``out`` the JSON ``{"body", "isFailed", "isCanceled"}`` the SDK returns from
``context.invoke``. Nothing here knows HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .deliverable import Undeliverable, checked_url
from .models import Invoker
from .options import InvalidOption, MessageOptions
from .workflows import WorkflowRun

_INVOKE = "upstash-workflow-invoke"
_INIT = "upstash-workflow-init"


def unwrap(workflow_headers: Mapping[str, str], content: bytes) -> tuple[bytes, Invoker | None]:
    """For a publish that starts an invoked run: the invoked run's own body and its invoker.
    Any other publish is returned as it is, with None. An envelope that is not one (not JSON,
    no invoker run id) is kept as the body: the run starts, only it has no invoker.
    ``InvalidOption`` when the invoker could not be resumed (its URL or headers)."""
    if workflow_headers.get(_INVOKE, "").strip().lower() != "true":
        return content, None
    if workflow_headers.get(_INIT, "").strip().lower() != "true":
        return content, None
    try:
        envelope = json.loads(content)
    except ValueError:
        return content, None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("workflowRunId"), str):
        return content, None
    body = envelope.get("body")
    if body is None:
        inner = b""
    elif isinstance(body, str):
        inner = body.encode()
    else:
        inner = json.dumps(body).encode()
    created = envelope.get("workflowRunCreatedAt")
    step = envelope.get("step")
    url = envelope.get("workflowUrl")
    try:
        url = checked_url(url, "invoke: the invoker's workflowUrl")
    except Undeliverable as exc:
        raise InvalidOption(str(exc)) from None
    invoker = Invoker(
        run_id=envelope["workflowRunId"],
        url=url,
        created_ms=created if isinstance(created, int) else None,
        step=dict(step) if isinstance(step, dict) else {},
        headers=_single_values(envelope.get("headers")),
    )
    return inner, invoker


def outcome_step(run: WorkflowRun, failure_body: str | None) -> tuple[str, bytes, MessageOptions]:
    """The invoke step that reports ``run``'s end to its invoker: where it goes, its body
    (the step with ``out`` the outcome) and what it is published with. ``failure_body`` is
    what the failed run's last attempt answered."""
    invoker = run.invoker
    assert invoker is not None
    assert invoker.options is not None
    result: dict[str, Any] = {
        "isFailed": run.state == "RUN_FAILED",
        "isCanceled": run.state == "RUN_CANCELED",
    }
    if run.state == "RUN_SUCCESS" and run.response is not None:
        result["body"] = run.response
    elif run.state == "RUN_FAILED":
        result["body"] = failure_body
    step = {**invoker.step, "out": json.dumps(result)}
    return invoker.url, json.dumps(step).encode(), invoker.options.copy()


def _single_values(value: Any) -> dict[str, str]:
    """``{name: [values]}`` (as the envelope carries headers) as publish headers, less the
    invoker's credentials (the SDK copies its client's ``Authorization`` in)."""
    if not isinstance(value, dict):
        return {}
    out: dict[str, str] = {}
    for name, values in value.items():
        if str(name).lower() in ("authorization", "content-length", "host"):
            continue
        if isinstance(values, list) and values:
            out[str(name)] = str(values[0])
        elif isinstance(values, str):
            out[str(name)] = values
    return out
