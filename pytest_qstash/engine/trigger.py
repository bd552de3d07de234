"""Starting a workflow run as a workflow client does: the init message, with what the Upstash
workflow clients send, published straight into the store. ``qstash.trigger`` builds its
options here; ``POST /v2/trigger`` reads them from the request and starts the run here too.

No HTTP is involved: the test acts as the outside world, as ``qstash.notify`` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from .deliverable import Undeliverable, checked_header, checked_url, encoded_headers, is_forwarded
from .engine import Engine
from .models import Message
from .options import InvalidOption, MessageOptions, canonical
from .verb_specs import Trigger
from .workflows import WorkflowRun

#: What the workflow SDKs send with every run message they publish.
FEATURE_SET = "LazyFetch,InitialBody,WF_DetectTrigger,WF_TriggerOnConfig"
SDK_VERSION_HEADER = "Upstash-Workflow-Sdk-Version"


def trigger_run(store: Engine, call: Trigger, *, cause: Message | None = None) -> str:
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
    url, body, headers, run_id = call.url, call.body, call.headers, call.run_id
    retries, failure_url, label = call.retries, call.failure_url, call.label
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
    if retries is not None and (type(retries) is not int or retries < 0):
        raise ValueError(
            f"invalid Upstash-Retries {str(retries)!r}: expected a whole number of retries (a "
            "non-negative integer)"
        )
    if label is not None and (not isinstance(label, str) or not label.strip()):
        raise ValueError(f"invalid label {label!r}: expected a non-empty string")
    content, content_type = _payload(body)
    forwarded: list[tuple[str, str]] = []
    try:
        for name, value in (headers or {}).items():
            if name.lower() == "content-type":
                # QStash honours the top-level Content-Type only.
                content_type = checked_header("Content-Type", value, "Content-Type")
                continue
            value = checked_header(name, value, canonical(f"Upstash-Forward-{name}"))
            if is_forwarded(name):
                forwarded.append((canonical(name), value))
    except Undeliverable as exc:
        raise ValueError(str(exc)) from None
    opts = MessageOptions(
        headers=encoded_headers([*forwarded, ("Content-Type", content_type)]),
        retries=retries,
        label=label.strip() if label is not None else None,
    )
    implicit_failure_url = failure_url is None
    failure = url if failure_url is None else failure_url or None
    run, _ = start_run(store, url, content, opts, run_id, failure, cause=cause)
    if implicit_failure_url:
        # The default failure URL (the workflow URL) is for the first delivery only: a
        # Python serve() without a failure_function cannot answer a failure callback, and
        # one with it sends its own with every step.
        run.settings = run.settings.with_options(
            failure_callback=None,
            failure_callback_headers=None,
            failure_callback_options=None,
        )
    return run_id


def start_run(
    store: Engine,
    url: str,
    content: bytes,
    opts: MessageOptions,
    run_id: str,
    failure_url: str | None,
    *,
    cause: Message | None = None,
) -> tuple[WorkflowRun, bool]:
    """Publish the init message of run ``run_id`` at ``url`` as the workflow clients do:
    ``opts`` (its forwarded headers, retries, label, flow control, delay, ...) with the
    protocol's own, and, when it names a failure callback or ``failure_url`` is given, the
    failure call that makes that callback a message of the run. Returns the run and whether
    it existed already (the init was deduplicated against an earlier one). Raises
    ``InvalidOption`` when it was deduplicated against a message that started no run."""
    opts = opts.copy()
    user = [(name, value) for name, value in _items(opts.headers) if name.lower() != "content-type"]
    content_type = opts.headers.get("content-type", "application/json")
    # A run's message forwards the version (the SDK reads it); its own Content-Type last.
    opts.headers = encoded_headers(
        [*user, (SDK_VERSION_HEADER, "1"), ("Content-Type", content_type)],
    )
    opts.workflow_headers = {
        "upstash-workflow-init": "true",
        "upstash-workflow-runid": run_id,
        "upstash-workflow-url": url,
        "upstash-feature-set": FEATURE_SET,
    }
    if opts.failure_callback is None:
        opts.failure_callback = failure_url
    if opts.failure_callback is not None:
        shown, call = _failure_call(opts, run_id, url, user)
        opts.failure_callback_headers, opts.failure_callback_options = shown, call
    published, _ = store.publish(url, content, opts, cause=cause)
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


def _failure_call(
    opts: MessageOptions, run_id: str, url: str, user: list[tuple[str, str]]
) -> tuple[httpx.Headers, MessageOptions]:
    """What makes the failure callback a message of the run, as the workflow SDKs send it,
    with the run's forwarded user headers and retries, under what the publish set itself:
    its ``Upstash-Failure-Callback-*`` headers (as QStash shows them) and the options they
    say."""
    protocol = {
        "Workflow-Runid": run_id,
        "Workflow-Init": "false",
        "Workflow-Url": url,
        "Workflow-Calltype": "failureCall",
        "Feature-Set": "LazyFetch,InitialBody",
    }
    forwards = [
        ("Upstash-Workflow-Is-Failure", "true"),
        ("Upstash-Workflow-Failure-Callback", "true"),
        *user,
    ]
    prefix = "Upstash-Failure-Callback-"
    given = [
        *((f"Forward-{name}", value) for name, value in forwards),
        *protocol.items(),
        *([] if opts.retries is None else [("Retries", str(opts.retries))]),
    ]
    shown = _items(opts.failure_callback_headers)
    present = {name.lower() for name, _ in shown}
    for name, value in given:
        if (prefix + name).lower() not in present:
            present.add((prefix + name).lower())
            shown.append((prefix + name, value))

    own = opts.failure_callback_options
    call = own.copy() if own is not None else MessageOptions()
    for name, value in protocol.items():
        call.workflow_headers.setdefault(f"upstash-{name.lower()}", value)
    kept = _items(call.headers)
    names = {name.lower() for name, _ in kept}
    kept += [(n, v) for n, v in forwards if n.lower() not in names and is_forwarded(n)]
    call.headers = encoded_headers(kept)
    if call.retries is None:
        call.retries = opts.retries
    return encoded_headers(shown), call


def _items(headers: httpx.Headers | None) -> list[tuple[str, str]]:
    """Headers as (name, value) text, names as they were given."""
    if headers is None:
        return []
    return [(n.decode(headers.encoding), v.decode(headers.encoding)) for n, v in headers.raw]


def _payload(body: Any) -> tuple[bytes, str]:
    if body is None:
        return b"", "application/json"
    if isinstance(body, bytes):
        return body, "application/octet-stream"
    if isinstance(body, str):
        return body.encode(), "text/plain"
    # As the SDK's own init publish does: anything else is sent as JSON.
    return json.dumps(body).encode(), "application/json"
