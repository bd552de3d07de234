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
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .models import Message, ms_to_datetime
from .options import InvalidOption, parse_options

if TYPE_CHECKING:
    from .store import Store
    from .workflows import WorkflowRun

_INVOKE = "upstash-workflow-invoke"
_INIT = "upstash-workflow-init"


@dataclass(eq=False, slots=True)
class Invoker:
    """The run whose ``context.invoke`` started a run, and how to resume it."""

    run_id: str
    url: str
    created_ms: int | None
    #: The invoke step as the SDK sent it (``stepId``, ``stepName``, ``stepType: Invoke``).
    step: dict[str, Any] = field(repr=False)
    #: The publish headers of the step that resumes the invoker.
    headers: dict[str, str] = field(repr=False)

    @property
    def created_at(self) -> datetime | None:
        return None if self.created_ms is None else ms_to_datetime(self.created_ms)

    def __repr__(self) -> str:
        return f"<Invoker {self.run_id} {self.url} step={self.step.get('stepName')!r}>"


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
    if not (
        isinstance(url, str) and url.startswith(("http://", "https://")) and urlsplit(url).hostname
    ):
        raise InvalidOption(
            f"invalid invoke: the invoker's workflowUrl {url!r} is not an http(s) URL"
        )
    invoker = Invoker(
        run_id=envelope["workflowRunId"],
        url=url,
        created_ms=created if isinstance(created, int) else None,
        step=dict(step) if isinstance(step, dict) else {},
        headers=_single_values(envelope.get("headers")),
    )
    parse_options(invoker.headers)  # what resumes the invoker must be publishable: now, or 400
    return inner, invoker


def report(store: Store, run: WorkflowRun) -> Message | None:
    """``run`` ended: when another run invoked it, publish the invoke step back into that
    run with the outcome (a run that ended since takes nothing)."""
    invoker = run.invoker
    if invoker is None or run.state == "RUN_STARTED" or not invoker.url:
        return None
    target = store.workflows.get(invoker.run_id)
    if target is None or not target.active:
        return None
    result: dict[str, Any] = {
        "isFailed": run.state == "RUN_FAILED",
        "isCanceled": run.state == "RUN_CANCELED",
    }
    if run.state == "RUN_SUCCESS" and run.response is not None:
        result["body"] = run.response
    elif run.state == "RUN_FAILED":
        result["body"] = _failure_body(store, run)
    step = {**invoker.step, "out": json.dumps(result)}
    headers = dict(invoker.headers)
    for name in [k for k in headers if k.lower() in (_INIT, "upstash-workflow-calltype")]:
        del headers[name]
    headers.update(
        {
            "Upstash-Workflow-Init": "false",
            "Upstash-Workflow-CallType": "step",
            "Upstash-Workflow-RunId": invoker.run_id,
        }
    )
    published, _ = store.publish(invoker.url, json.dumps(step).encode(), parse_options(headers))
    return published[0].message


def _failure_body(store: Store, run: WorkflowRun) -> str | None:
    entry = store.dlq.get(run.dlq_id) if run.dlq_id else None
    return None if entry is None else entry.response_body


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
