"""The workflow runs of an export, read back as the messages that made them.

A run in progress is loaded at its recorded step: its delivered messages are its history, and
the message QStash would deliver next (a sleep's step, a step being retried) is planned as
recorded, carrying the run's steps so far. A run whose next move is not a step of its own
(waiting for an event, a ``context.call`` in flight) resumes from its last step: the app's
route replays the steps and asks for the wait or the call again; a wait keeps the deadline
recorded (``waitTimeoutDeadline``), so it times out when it would have on QStash. A failed
run (in the workflow DLQ) is loaded whole, its dead letter in the failed message's place, so
the workflow DLQ's resume and restart work on it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from ..engine.attempts import AttemptResult
from ..engine.run_settings import RunSettings
from ..engine.store_loading import RecordedMessage, RecordedRunMessage
from ..engine.workflows import STEP
from .export_entries import (
    At,
    entries,
    labels_of,
    message_options,
    recorded_answer,
    recorded_message,
)

#: What the logs show as a step's retry delay when the publish set none.
_DEFAULT_RETRY_DELAY = "pow(2, retried) * 1000"


# -- the plan: everything read, nothing applied yet ------------------------------------------
@dataclass
class DeadLetter:
    dlq_id: str
    message: RecordedMessage
    created_ms: int
    #: The last answer it got (or why it got none).
    answer: AttemptResult


@dataclass
class RecordedRun:
    run_id: str
    url: str
    created_ms: int
    settings: RunSettings
    members: list[RecordedRunMessage]
    #: A failed run: the dead letter that failed it and when it ended.
    failed: DeadLetter | None = None
    ended_ms: int = 0
    #: The deadlines of its waits in progress, by event id.
    wait_deadlines: dict[str, int] = field(default_factory=dict)


def read_workflows(root: At, now_ms: int) -> tuple[list[DeadLetter], list[RecordedRun]]:
    """The export's dead letters (a workflow DLQ entry whose run is not in the export among
    them, as a plain one) and its runs to load: those in progress and the failed ones."""
    dead_letters: list[DeadLetter] = []
    runs: list[RecordedRun] = []
    failed_runs: dict[str, At] = {}
    for run in entries(root, "failed_workflow_runs"):
        failed_runs[run.text("workflowRunId")] = run
    in_workflow_dlq: set[str] = set()
    for entry in entries(root, "workflow_dlq"):
        letter = dead_letter(entry)
        in_workflow_dlq.add(letter.dlq_id)
        run_at = failed_runs.get(entry.text("workflowRunId"))
        if run_at is None:
            dead_letters.append(letter)  # its steps are not in the export: a plain one
            continue
        failed = _run(run_at, now_ms, active=False)
        failed.failed = letter
        failed.ended_ms = run_at.moment("workflowRunCompletedAt", default=letter.created_ms)
        runs.append(failed)
    for entry in entries(root, "dlq"):
        letter = dead_letter(entry)
        if letter.dlq_id not in in_workflow_dlq:  # a run's: listed in both, loaded once
            dead_letters.append(letter)
    for run_at in entries(root, "workflow_runs"):
        state = run_at.optional_text("workflowState") or "RUN_STARTED"
        if state != "RUN_STARTED":
            continue  # over: nothing to resume (the export reads the runs in progress)
        runs.append(_run(run_at, now_ms, active=True))
    return dead_letters, runs


def dead_letter(entry: At) -> DeadLetter:
    message = recorded_message(entry)
    return DeadLetter(
        dlq_id=entry.text("dlqId"),
        message=message,
        created_ms=entry.moment("createdAt", default=message.created_ms),
        answer=recorded_answer(entry),
    )


def _run(entry: At, now_ms: int, *, active: bool) -> RecordedRun:
    run_id = entry.text("workflowRunId")
    url = entry.url("workflowUrl")
    created = entry.moment("workflowRunCreatedAt", default=entry.moment("workflowCreatedAt", 0))
    members: list[RecordedRunMessage] = []
    plans: list[RecordedRunMessage] = []
    results: list[RecordedRunMessage] = []
    pending: dict[str, int] = {}
    deadlines: dict[str, int] = {}
    for group in entry.key("steps").items("step groups"):
        group = group.obj()
        kind = group.text("type")
        for step in group.key("steps").items("steps"):
            step = step.obj()
            if kind == "next":
                if step.has("waitEventId") and step.has("waitTimeoutDeadline"):
                    deadlines[step.text("waitEventId")] = step.moment("waitTimeoutDeadline")
                if step.has("messageId"):
                    message_id = step.text("messageId")
                    pending[message_id] = step.moment("nextDeliveryTime", default=now_ms)
                    known = any(m.message.message_id == message_id for m in members)
                    if not known and members and _is_result(step):
                        # A step published and not delivered yet, shown only as what is next.
                        results.append(_step_message(step, url, run_id, created, initial=False))
                continue
            if kind not in ("sequential", "parallel"):
                raise group.key("type").fail(f"expected sequential, parallel or next, got {kind!r}")
            if kind == "parallel" and not _is_plan(step):
                # The logs show a parallel step's result alone; the SDK replays the plan the
                # app published before the group ran as well (one plan step per branch).
                plans.append(_step_message(step, url, run_id, created, initial=False, plan=True))
            elif kind == "parallel":
                plans.append(_step_message(step, url, run_id, created, initial=False))
                continue
            results.append(_step_message(step, url, run_id, created, initial=not members))
        members += plans + results
        plans, results = [], []
    if not members:
        raise entry.key("steps").fail("expected the run's steps, its initial one first")
    if active:
        if not any(m.message.message_id in pending for m in members):
            # Waiting, or a call in flight: it resumes from its last step, due now.
            last_id = members[-1].message.message_id
            pending[last_id] = now_ms
        members = [
            replace(
                member,
                message=replace(member.message, not_before_ms=pending[member.message.message_id]),
                pending=True,
            )
            if member.message.message_id in pending
            else member
            for member in members
        ]
    first = members[0].message.options
    settings = RunSettings.of(first).with_options(label=",".join(labels_of(entry)) or None)
    return RecordedRun(run_id, url, created, settings, members, wait_deadlines=deadlines)


#: Step types whose entry among what is next is an outcome still awaited, not a result.
_AWAITED = frozenset({"Wait", "WaitForWebhook", "Call", "Invoke"})


def _is_result(step: At) -> bool:
    """Whether an entry of what is next is a step result the app published (its delivery
    resumes the run), rather than a wait, a call or an invoke still awaited."""
    kind = step.value.get("stepType")
    return (
        isinstance(kind, str)
        and step.has("stepName")
        and kind not in _AWAITED
        and not step.has("waitEventId")
    )


def _step_message(
    step: At, url: str, run_id: str, run_created_ms: int, *, initial: bool, plan: bool = False
) -> RecordedRunMessage:
    """A step as the logs show it, back as the message that carried it: the init message
    (its ``out`` is the run's initial payload) or a step result the app published (the step
    JSON the SDKs send)."""
    step_type = step.text("stepType", default="Run")
    headers = step.header_items("headers")
    retries = step.optional_number("retries")
    delay = step.optional_text("retryDelay")
    shown = {
        "header": {name: [v for n, v in headers if n == name] for name, _ in headers},
        "maxRetries": retries,
        "retryDelayExpression": None if delay == _DEFAULT_RETRY_DELAY else delay,
    }
    options = message_options(At({k: v for k, v in shown.items() if v is not None}, step.path))
    out = step.value.get("out")
    if out is not None and not isinstance(out, str):
        out = json.dumps(out)  # documented as a string; a hand-made file may hold the JSON
    message_id = step.text("messageId")
    if initial or step_type == "Initial":
        content = (out or "").encode("utf-8", "surrogatepass")
    else:
        raw = _step_json(step, step_type, out, plan=plan)
        content = json.dumps(raw, separators=(",", ":")).encode()
        if plan and not _is_plan(step):
            message_id += "-plan"  # the plan's own message is not in the logs: named after it
    created = step.moment("createdAt", default=run_created_ms)
    return RecordedRunMessage(
        RecordedMessage(
            message_id=message_id,
            url=url,
            content=content,
            options=options,
            created_ms=created,
            not_before_ms=created,
            max_retries=retries,
        ),
        # A step shown is a step result the app published (a call's too, once its answer came
        # back), whatever call type the logs show the exchange under: the steps array
        # carries it as a step, as the SDK published it.
        STEP,
    )


def _is_plan(step: At) -> bool:
    """A parallel step not finished yet: the logs show its plan step."""
    return (
        step.optional_text("state") == "STEP_PROGRESS" and step.number("concurrent", default=1) > 1
    )


def _step_json(step: At, step_type: str, out: str | None, *, plan: bool = False) -> dict[str, Any]:
    """The step JSON the SDK published: what its ``serve()`` reads back on each delivery (a
    plan step for ``plan``, or when the logs show one)."""
    plan_step = plan or _is_plan(step)
    step_id = step.number("stepId", default=0)
    raw: dict[str, Any] = {
        "stepId": 0 if plan_step else step_id,
        "stepName": step.text("stepName"),
        "stepType": step_type,
        "concurrent": step.number("concurrent", default=1, minimum=1),
    }
    if plan_step:
        raw["targetStep"] = step_id
    else:
        # The logs show a step without a result (a sleep) as "": its JSON is null, which both
        # SDKs read back (the Python one requires the key).
        raw["out"] = out or "null"
    for name in ("sleepFor", "sleepUntil"):
        value = step.value.get(name)
        if value is not None:
            raw[name] = value
    return raw
