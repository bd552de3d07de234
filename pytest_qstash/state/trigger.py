"""Starting a workflow run as a workflow client does (``qstash.trigger``): the init message,
published straight into the store with the headers the Upstash workflow clients send.

No HTTP is involved: the test acts as the outside world, as ``qstash.notify`` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

import httpx

from .deliverable import checked_header, checked_url
from .options import InvalidOption, parse_options
from .store import Store
from .workflows import WorkflowRun

#: What the workflow SDKs send with every run message they publish.
FEATURE_SET = "LazyFetch,InitialBody,WF_DetectTrigger,WF_TriggerOnConfig"
SDK_VERSION_HEADER = "Upstash-Workflow-Sdk-Version"


def trigger_run(
    store: Store,
    url: str,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    *,
    run_id: str | None = None,
    retries: int | None = None,
    failure_url: str | Literal[False] | None = None,
    label: str | None = None,
) -> str:
    """Start a run at ``url`` as a workflow client does, under a run id chosen here.

    As the Upstash workflow client does, the init announces ``WF_TriggerOnConfig``: its
    retries, label and a ``failure_url`` given hold for every later step that does not set
    its own (``RunSettings``). The default failure URL, the workflow URL itself (where
    ``serve()``'s ``failure_function`` answers it), is the first delivery's only;
    ``failure_url=False`` sets none.

    The run's first message is an init message that already carries the protocol version
    (``Upstash-Forward-Upstash-Workflow-Sdk-Version: 1``): its delivery is the steps array
    ``[initial payload]`` with ``Upstash-Workflow-RunId``, which the SDK's ``serve()`` takes
    as a later invocation of *this* run and answers by running the first step. (Without the
    version header the SDK would treat it as a new request and start a run of its own, under
    an id it mints.)
    """
    url = checked_url(url, "workflow url")  # ValueError saying what is wrong
    if headers is not None and (
        not isinstance(headers, Mapping) or not all(isinstance(n, str) for n in headers)
    ):
        raise TypeError(f"invalid headers {headers!r}: expected a mapping of name to value")
    if run_id is not None and (not isinstance(run_id, str) or not run_id):
        raise ValueError(f"invalid run_id {run_id!r}: expected a non-empty string")
    if run_id is not None:
        checked_header("Upstash-Workflow-RunId", run_id, "run_id")  # it is sent as a header
    if failure_url:
        failure_url = checked_url(failure_url, "failure_url")
    run_id = run_id or "wfr_" + store.ids.token(21)
    if store.workflows.get(run_id) is not None:
        raise ValueError(f"a workflow run {run_id!r} already exists")
    content, content_type = _payload(body)
    publish: dict[str, str] = {}
    forwarded: dict[str, str] = {}
    for name, value in (headers or {}).items():
        if name.lower() == "content-type":
            content_type = value  # QStash honours the top-level Content-Type only
        else:
            forwarded[name] = value
            publish[f"Upstash-Forward-{name}"] = value
    publish.update(
        {
            "Content-Type": content_type,
            "Upstash-Workflow-Init": "true",
            "Upstash-Workflow-RunId": run_id,
            "Upstash-Workflow-Url": url,
            "Upstash-Feature-Set": FEATURE_SET,
            f"Upstash-Forward-{SDK_VERSION_HEADER}": "1",
        }
    )
    if retries is not None:
        publish["Upstash-Retries"] = str(retries)
    if label is not None:
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"invalid label {label!r}: expected a non-empty string")
        publish["Upstash-Label"] = label
    implicit_failure_url = failure_url is None
    if failure_url is None:
        failure_url = url
    if failure_url:
        # What the workflow SDKs send with a failure URL: the failure call names the run and
        # carries the user's headers too (a failure_function reads them).
        publish["Upstash-Failure-Callback"] = failure_url
        publish["Upstash-Failure-Callback-Forward-Upstash-Workflow-Is-Failure"] = "true"
        publish["Upstash-Failure-Callback-Forward-Upstash-Workflow-Failure-Callback"] = "true"
        publish["Upstash-Failure-Callback-Workflow-Runid"] = run_id
        publish["Upstash-Failure-Callback-Workflow-Init"] = "false"
        publish["Upstash-Failure-Callback-Workflow-Url"] = url
        publish["Upstash-Failure-Callback-Workflow-Calltype"] = "failureCall"
        publish["Upstash-Failure-Callback-Feature-Set"] = "LazyFetch,InitialBody"
        for name, value in forwarded.items():
            publish[f"Upstash-Failure-Callback-Forward-{name}"] = value
        if retries is not None:
            publish["Upstash-Failure-Callback-Retries"] = str(retries)
    try:
        opts = parse_options(publish)
    except InvalidOption as exc:
        raise ValueError(str(exc)) from None
    store.publish(url, content, opts)
    run = store.workflows.get(run_id)
    if run is not None and implicit_failure_url:
        # The default failure URL (the workflow URL) is for the first delivery only: a
        # Python serve() without a failure_function cannot answer a failure callback, and
        # one with it sends its own with every step.
        run.settings = replace(run.settings, failure_callback=None, failure_callback_headers=None)
    return run_id


def _payload(body: Any) -> tuple[bytes, str]:
    if body is None:
        return b"", "application/json"
    if isinstance(body, bytes):
        return body, "application/octet-stream"
    if isinstance(body, str):
        return body.encode(), "text/plain"
    # As the SDK's own init publish does: anything else is sent as JSON.
    return json.dumps(body).encode(), "application/json"


def trigger_request(
    store: Store, url: str, content: bytes, headers: httpx.Headers
) -> tuple[WorkflowRun, bool]:
    """Start a run as ``POST /v2/trigger/{url}`` does: the request's ``Upstash-*`` headers
    (retries, delay, label, flow control, failure callback and its ``-Forward-*`` headers,
    ``Upstash-Forward-*``) become the run's settings, for every step; the run id is
    ``Upstash-Workflow-RunId`` or a new one. The failure callback goes, unless the request
    names one, to the workflow URL (where ``serve()``'s failure function answers). Returns the
    run and whether it existed already (a trigger naming a run id twice starts it once).
    Raises ``InvalidOption`` for a bad header (nothing is published then)."""
    if not url.startswith(("http://", "https://")):
        raise InvalidOption(f"invalid workflow url {url!r}: expected an http:// or https:// URL")
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
    publish.setdefault("content-type", "application/json")
    publish.update(
        {
            "upstash-workflow-init": "true",
            "upstash-workflow-runid": run_id,
            "upstash-workflow-url": url,
            "upstash-feature-set": FEATURE_SET,
            f"upstash-forward-{SDK_VERSION_HEADER.lower()}": "1",
        }
    )
    publish.setdefault("upstash-failure-callback", url)
    for name, value in _failure_call_headers(run_id, url, publish).items():
        publish.setdefault(name, value)
    opts = parse_options(publish)
    published, _ = store.publish(url, content, opts)
    run = store.workflows.get(run_id)
    if run is not None:
        return run, False
    # Deduplicated: the init publish was taken for an earlier message with the same
    # deduplication id (or content), whose run, if it started one, is the answer.
    earlier = next((p.message for p in published if p.deduplicated), None)
    run = store.workflows.get(earlier.workflow_run_id or "") if earlier is not None else None
    if run is None:
        raise InvalidOption(
            "the trigger was deduplicated against a message that started no workflow run: "
            "use another Upstash-Deduplication-Id, or none"
        )
    return run, True


def _failure_call_headers(run_id: str, url: str, publish: Mapping[str, str]) -> dict[str, str]:
    """What makes the failure callback a message of the run (as the workflow SDKs send it),
    with the run's forwarded headers and retries."""
    out = {
        "upstash-failure-callback-forward-upstash-workflow-is-failure": "true",
        "upstash-failure-callback-forward-upstash-workflow-failure-callback": "true",
        "upstash-failure-callback-workflow-runid": run_id,
        "upstash-failure-callback-workflow-init": "false",
        "upstash-failure-callback-workflow-url": url,
        "upstash-failure-callback-workflow-calltype": "failureCall",
        "upstash-failure-callback-feature-set": "LazyFetch,InitialBody",
    }
    for name, value in publish.items():
        if name.startswith("upstash-forward-"):
            out.setdefault("upstash-failure-callback-" + name[len("upstash-") :], value)
    if "upstash-retries" in publish:
        out.setdefault("upstash-failure-callback-retries", publish["upstash-retries"])
    return out
