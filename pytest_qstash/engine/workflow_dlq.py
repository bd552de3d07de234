"""The workflow DLQ: the runs that failed, each by the DLQ entry of the message that failed it,
and what can be done with one: resume it (a new run from the failed step, the steps that had
succeeded kept), restart it (a new run from the start), retry or cancel its failure function.

An entry is an ordinary DLQ entry (``store.dlq``) whose message ended a run as RUN_FAILED; the
workflow DLQ is that view of the DLQ, so deleting through either removes it from both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import httpx

from .engine import Engine
from .models import DlqEntry, Message, ms_to_datetime
from .options import MessageOptions
from .run_settings import RESUME_OVERRIDES, RunSettings
from .workflows import FAILURE_CALL, STEP, FailureFunctionState, WorkflowRun


class NotAWorkflowEntry(ValueError, KeyError):
    """No failed workflow run has this DLQ id (a ``ValueError``, and a ``KeyError``)."""


class FailureFunctionNotRetryable(ValueError):
    """The run's failure function cannot be retried (or cancelled) in its present state."""


@dataclass(frozen=True, slots=True)
class WorkflowDlqEntry:
    """A failed workflow run as the workflow DLQ shows it."""

    entry: DlqEntry
    run: WorkflowRun

    @property
    def dlq_id(self) -> str:
        return self.entry.dlq_id

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def workflow_url(self) -> str:
        return self.run.url

    @property
    def message(self) -> Message:
        """The message (step) whose failure ended the run."""
        return self.entry.message

    @property
    def url(self) -> str:
        return self.entry.url

    @property
    def body(self) -> str:
        return self.entry.body

    @property
    def response_status(self) -> int | None:
        return self.entry.response_status

    @property
    def response_body(self) -> str:
        return self.entry.response_body

    @property
    def labels(self) -> tuple[str, ...]:
        return self.run.labels

    @property
    def failure_callback(self) -> str | None:
        return self.run.settings.failure_callback or self.message.failure_callback

    @property
    def failure_function_state(self) -> FailureFunctionState | None:
        return self.run.failure_function_state

    @property
    def created_at(self) -> datetime:
        return ms_to_datetime(self.entry.created_ms)

    def __repr__(self) -> str:
        return (
            f"<WorkflowDlqEntry {self.dlq_id} run={self.run_id} {self.workflow_url} "
            f"response_status={self.response_status}>"
        )


def entries(store: Engine) -> Iterator[WorkflowDlqEntry]:
    """The workflow DLQ, in the order the runs failed."""
    for entry in store.dlq.values():
        found = store.workflows.membership(entry.message_id)
        if found is not None and found[0].dlq_id == entry.dlq_id:
            yield WorkflowDlqEntry(entry, found[0])


def get(store: Engine, dlq_id: str) -> WorkflowDlqEntry:
    entry = store.dlq.get(dlq_id)
    found = store.workflows.membership(entry.message_id) if entry is not None else None
    if entry is None or found is None or found[0].dlq_id != dlq_id:
        raise NotAWorkflowEntry(f"no failed workflow run has the DLQ id {dlq_id!r}")
    return WorkflowDlqEntry(entry, found[0])


def resume(
    store: Engine,
    dlq_id: str,
    overrides: MessageOptions | None = None,
    *,
    cause: Message | None = None,
) -> WorkflowRun:
    """A new run that goes on from the step that failed: it starts with the failed run's
    messages up to that step (the initial payload, the steps that succeeded) and delivers the
    failed message again, under a new run id, with the run's settings (``overrides``, what
    the request's ``Upstash-*`` headers said, replace them; None: it named none). The entry
    stays in the DLQ."""
    failed = get(store, dlq_id)
    headers = overrides
    position = store.workflows.position(failed.message)
    run = _new_run(store, failed, headers)
    store.workflows.carry(run, failed.run, position)
    call_type = store.workflows.call_type(failed.message)
    _republish(store, run, failed.message, headers, call_type, cause)
    return run


def restart(
    store: Engine,
    dlq_id: str,
    overrides: MessageOptions | None = None,
    *,
    cause: Message | None = None,
) -> WorkflowRun:
    """A new run from the start: the failed run's initial message published again (same
    payload and headers) under a new run id, with the run's settings or ``overrides``."""
    failed = get(store, dlq_id)
    headers = overrides
    init = failed.run.messages[0]
    run = _new_run(store, failed, headers)
    _republish(store, run, init, headers, STEP, cause)
    return run


def retry_failure_function(
    store: Engine, dlq_id: str, *, cause: Message | None = None
) -> WorkflowRun:
    """Call the run's failure function (or failure URL) again, when its call failed."""
    failed = get(store, dlq_id)
    run = failed.run
    call = run.failure_call
    if call is None or run.failure_function_state != "CALLBACK_FAIL":
        state = run.failure_function_state or "none: the run has no failure function"
        raise FailureFunctionNotRetryable(
            f"the failure function of workflow run {run.run_id} can be retried only once its "
            f"call has failed (CALLBACK_FAIL); its state is {state}"
        )
    for entry in list(store.dlq.values()):
        if entry.message is call:  # the failed call's own dead letter goes with the retry
            del store.dlq[entry.dlq_id]
    retry = _republish(store, run, call, None, FAILURE_CALL, cause)
    retry.callback_for, retry.is_failure_callback = call.callback_for, True
    return run


def cancel_failure_function(store: Engine, dlq_id: str) -> WorkflowRun:
    """Cancel the run's failure function call while it is in progress."""
    failed = get(store, dlq_id)
    run = failed.run
    call = run.failure_call
    if call is None or run.failure_function_state != "CALLBACK_INPROGRESS":
        state = run.failure_function_state or "none: the run has no failure function"
        raise FailureFunctionNotRetryable(
            f"the failure function of workflow run {run.run_id} can be cancelled only while "
            f"it is in progress (CALLBACK_INPROGRESS); its state is {state}"
        )
    store.cancel(call)
    return run


def continuations(store: Engine, dlq_id: str) -> list[WorkflowRun]:
    """The runs that resumed or restarted the entry ``dlq_id``."""
    return [run for run in store.workflows if run.resumed_from == dlq_id]


# -- internals ------------------------------------------------------------------------------
def _new_run(
    store: Engine, failed: WorkflowDlqEntry, overrides: MessageOptions | None
) -> WorkflowRun:
    run_id = "wfr_" + store.ids.token(21)
    settings: RunSettings = failed.run.settings.overridden(
        overrides or MessageOptions(), run_wide=overrides is not None
    )
    if settings.failure_callback_headers is not None:
        retargeted = httpx.Headers(_retargeted(settings.failure_callback_headers, run_id))
        settings = settings.with_options(failure_callback_headers=retargeted)
    if settings.failure_callback_options is not None:
        settings = settings.with_options(
            failure_callback_options=_in_run(settings.failure_callback_options, run_id)
        )
    return store.workflows.start(
        run_id, failed.run.url, store.clock.now_ms, settings, resumed_from=failed.dlq_id
    )


def _retargeted(headers: httpx.Headers, run_id: str) -> list[tuple[bytes, bytes]]:
    """Headers that name the failed run (``...-Workflow-Runid``, which makes the failure
    call or a call's callback a message of that run) naming ``run_id`` instead."""
    return [
        (name, run_id.encode() if name.lower().endswith(b"workflow-runid") else value)
        for name, value in headers.raw
    ]


def _in_run(opts: MessageOptions, run_id: str) -> MessageOptions:
    """Callback options that make their message one of the failed run, of ``run_id``."""
    if "upstash-workflow-runid" not in opts.workflow_headers:
        return opts
    out = opts.copy()
    out.workflow_headers["upstash-workflow-runid"] = run_id
    return out


def _republish(
    store: Engine,
    run: WorkflowRun,
    source: Message,
    overrides: MessageOptions | None,
    call_type: str,
    cause: Message | None,
) -> Message:
    """``source`` published again as a message of ``run``: same URL, body and headers, its
    retries counted from zero, the run's settings where the overrides name one."""
    opts = source.options.republished()
    opts.retries = source.max_retries
    for name in ("callback_headers", "failure_callback_headers"):
        shown = getattr(opts, name)
        if shown is not None:
            setattr(opts, name, httpx.Headers(_retargeted(shown, run.run_id)))
    for name in ("callback_options", "failure_callback_options"):
        nested = getattr(opts, name)
        if nested is not None:
            setattr(opts, name, _in_run(nested, run.run_id))
    if overrides is not None:
        opts = opts.overridden(overrides, only=RESUME_OVERRIDES)
    message = store.create_message(source.url, source.content, opts, cause=cause)
    store.workflows.adopt(run, message, call_type)
    return message
