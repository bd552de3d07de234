"""A readable account of what the fake saw, shown when a test that used it fails."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TypeVar

from ..engine.models import Delivery, Message, ms_to_datetime
from ..engine.store import Store, is_non_retryable
from ..engine.workflows import STEP, TO_CALLBACK, WorkflowRun
from .step_failures import FailedStep

_T = TypeVar("_T")

# In a runaway the newest messages tell what loops, the first ones how it started.
_FIRST_MESSAGES = 10
_LAST_MESSAGES = 20
_FIRST_ATTEMPTS = 3
_LAST_ATTEMPTS = 4
_LAST_REJECTED = 20
_REFUSED_STATUSES = (400, 401, 403)


def section(
    store: Store,
    deliveries_total: int,
    failed_steps: Mapping[str, FailedStep] | None = None,
    *,
    fixture: str = "qstash",
) -> str | None:
    """The report section's text, or None when the fake saw nothing. Never raises: a broken
    report must not turn a failing test into an INTERNALERROR for the whole session.
    ``failed_steps``: the step each workflow run failed at last, by run id, as the SDK
    logged it (see ``step_failures``). ``fixture``: the name the test knows the fake by,
    which the verbs the report suggests are called on (``qstash_server.notify(...)``)."""
    try:
        if not _anything_happened(store):
            return None
        return timeline(store, deliveries_total, failed_steps or {}, fixture=fixture)
    except Exception as exc:  # any bug here must stay inside the section
        return f"qstash report failed: {type(exc).__name__}: {exc}"


def _anything_happened(store: Store) -> bool:
    return bool(store.messages or store.schedules or store.workflows.runs or len(store.api_errors))


def timeline(
    store: Store,
    deliveries_total: int,
    failed_steps: Mapping[str, FailedStep] | None = None,
    *,
    fixture: str = "qstash",
) -> str:
    now = store.clock.now_ms
    # What failed first: a failing workflow step is what the reader is looking for, and
    # the message list below shows it only as "the delivery after the step that worked".
    failing: list[str] = []
    shown: set[str] = set()  # messages whose attempts the failing-step lines list already
    for run in store.workflows:
        lines_of_run = _failing_step_lines(store, run, (failed_steps or {}).get(run.run_id))
        found = _failing_message(store, run)
        if lines_of_run and found is not None:
            failing.extend(lines_of_run)
            shown.add(found.message_id)
    summary = (
        f"{len(store.messages)} message(s), {deliveries_total} delivery attempt(s), "
        f"{len(store.dlq)} in the DLQ"
    )
    if store.schedules:
        summary += f", {len(store.schedules)} schedule(s)"
    if store.api_errors.total:
        summary += f", {store.api_errors.total} rejected API call(s)"
    lines = [*failing, f"virtual time now: {_when(now)}", summary]

    dlq_ids = {entry.message_id: entry.dlq_id for entry in store.dlq.values()}
    first, skipped, last = _head_tail(
        list(store.messages.values()), _FIRST_MESSAGES, _LAST_MESSAGES
    )
    for message in first:
        lines.extend(_message_lines(store, message, now, dlq_ids.get(message.message_id), shown))
    if skipped:
        lines.append(f"  ... {skipped} more message(s) ...")
    for message in last:
        lines.extend(_message_lines(store, message, now, dlq_ids.get(message.message_id), shown))

    lines.extend(_schedule_lines(store))
    lines.extend(_rejected_lines(store))
    for run in store.workflows:
        steps = ", ".join(f"{step.name} ({step.type})" for step in run.steps) or "none yet"
        failed = _failing_step(store, run, (failed_steps or {}).get(run.run_id))
        at = f" at {failed[1]} (shown first, above)" if failed and run.state == "RUN_FAILED" else ""
        lines.append(f"  workflow run {run.run_id} at {run.url} {run.state}{at}; steps: {steps}")
        for refusal in run.refused:
            lines.append(f"    a step publish of this run was refused: {refusal}")
        if run.state == "RUN_STARTED" and _stalled_at_a_plain_endpoint(run.messages):
            lines.append(
                "    stalled: the last delivery was answered 2xx without "
                "Upstash-Workflow-Sdk-Version and nothing is pending: is that URL a workflow "
                "route (serve())?"
            )
        lines.extend(_waiting_lines(store, run, fixture))

    lines.extend(_refused_call_lines(store))
    hint = _signature_hint(store, fixture)
    if hint:
        lines.append(hint)
    return "\n".join(lines)


def _waiting_lines(store: Store, run: WorkflowRun, fixture: str) -> list[str]:
    """What a run in progress waits for: the event, the step, until when, and what ends it."""
    out = []
    for waiter in store.waiters.of_run(run.run_id):
        if waiter.step_type == "WaitForWebhook":
            what, ends = "a request to its webhook", "a request to the webhook URL resumes it"
        else:
            what = f"event {waiter.event_id!r}"
            ends = f"{fixture}.notify({waiter.event_id!r}, data) resumes it"
        out.append(
            f"    waiting for {what} at step {waiter.step_name!r} ({waiter.step_type}) until "
            f"{_when(waiter.deadline_ms)}, when it times out; {ends}"
        )
    return out


def _stalled_at_a_plain_endpoint(messages: Sequence[Message]) -> bool:
    """A run whose messages are all done, the last one answered 2xx by something that is
    not a workflow route (a workflow route always answers with its SDK version)."""
    if not messages or not all(m.done for m in messages):
        return False
    deliveries = messages[-1].deliveries
    last = deliveries[-1] if deliveries else None
    return (
        last is not None
        and last.ok
        and "upstash-workflow-sdk-version" not in last.response_headers
        and messages[-1].callback_for is None
    )


def _failing_message(store: Store, run: WorkflowRun) -> Message | None:
    """The step message whose deliveries fail: the one that failed the run, or the newest
    one of a running run that is being retried."""
    entry = store.dlq.get(run.dlq_id) if run.dlq_id is not None else None
    if run.state == "RUN_FAILED" and entry is not None:
        return entry.message
    if run.state not in ("RUN_STARTED", "RUN_FAILED"):
        return None
    # A running run's step being retried; or, once the DLQ entry is gone (deleted by the
    # test), the message that failed the run.
    wanted = (
        (lambda m: not m.done) if run.state == "RUN_STARTED" else (lambda m: m.state == "FAILED")
    )
    for message in reversed(run.messages):
        found = store.workflows.membership(message.message_id)
        last = message.last_delivery
        if found is None or found[1] != STEP or last is None or last.ok or not wanted(message):
            continue
        return message
    return None


def failing_step(store: Store, run: WorkflowRun) -> tuple[Message, str] | None:
    """The message of ``run`` whose deliveries fail and the step they fail at, as words
    ("step 2, the one after 'charge' (Run)"); None when nothing of the run fails."""
    return _failing_step(store, run, None)


def _failing_step(
    store: Store, run: WorkflowRun, logged: FailedStep | None
) -> tuple[Message, str] | None:
    """The message whose deliveries fail and the step they fail at, as words."""
    message = _failing_message(store, run)
    if message is None or not message.deliveries:
        return None
    found = store.workflows.membership(message.message_id)
    if found is not None and found[1] != STEP:  # a context.call's result, say
        return message, f"its {found[1]} message"
    carried = next((step for step in run.steps if step.message is message), None)
    # A step message's delivery replays the steps so far and runs the next one.
    number = 1 if carried is None else carried.step_id + 1
    if logged is not None and logged.number == number:
        return message, f"step {number}, {logged.name!r} ({logged.type})"
    if carried is None:
        return message, f"step {number}, its first step"
    return message, f"step {number}, the one after {carried.name!r} ({carried.type})"


def _failing_step_lines(store: Store, run: WorkflowRun, logged: FailedStep | None) -> list[str]:
    failing = _failing_step(store, run, logged)
    if failing is None:
        return []
    message, step = failing
    last = message.deliveries[-1]
    what = "failed at" if run.state == "RUN_FAILED" else "is retrying"
    lines = [
        f"workflow run {run.run_id} at {run.url} {what} {step}: {_error_of(last)}",
    ]
    attempts = len(message.deliveries)
    if run.state == "RUN_FAILED":
        if run.dlq_id in store.dlq:
            where = f"now in the DLQ as dlq_id={run.dlq_id}"
        else:
            where = f"its DLQ entry {run.dlq_id} since deleted"
    else:
        where = f"next attempt due {_when(message.not_before_ms)}"
    lines.append(
        f"  {attempts} attempt(s) of {message.message_id} "
        f"(retried={message.retried}/{message.max_retries}), {where}:"
    )
    first, skipped, tail = _head_tail(message.deliveries, _FIRST_ATTEMPTS, _LAST_ATTEMPTS)
    lines.extend(f"    {_when(d.at_ms)} retried={d.retried} -> {_error_of(d)}" for d in first)
    if skipped:
        lines.append(f"    ... {skipped} more attempt(s) ...")
    lines.extend(f"    {_when(d.at_ms)} retried={d.retried} -> {_error_of(d)}" for d in tail)
    before = ", ".join(f"{s.name} ({s.type})" for s in run.steps) or "none"
    lines.append(f"  steps that succeeded before it: {before}")
    if run.failure_function_state is not None:
        lines.append(f"  failure callback: {run.failure_function_state}")
    return lines


def _error_of(delivery: Delivery) -> str:
    """What the app said: upstash-workflow answers a failed step with ``{"error": <class>,
    "message": <str(exception)>}``."""
    if delivery.status is None:
        return str(delivery.error)
    if delivery.error:
        return f"{delivery.status} ({delivery.error})"
    try:
        answer = json.loads(delivery.response_content)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        text = f"{answer['error']}: {answer.get('message', '')}"
        return f"{delivery.status} {_clip(' '.join(text.split()), 200)}"
    body = f" {_short(delivery.response_body, 160)}" if delivery.response_content else ""
    return f"{delivery.status}{body}"


def _run_position(store: Store, message: Message) -> str | None:
    """Where a workflow step message stands in its run: the result of the step it carries
    (its delivery runs the step after it), or the run's start."""
    if message.workflow_run_id is None:
        return None
    found = store.workflows.membership(message.message_id)
    if found is None or found[1] != STEP:
        return None
    run = found[0]
    if run.messages and run.messages[0] is message:
        begun_by = next(
            (m.message_id for m in store.messages.values() if m.started_run_id == run.run_id),
            None,
        )
        by = f", begun by {begun_by}" if begun_by else ""
        return f"run {run.run_id}: start{by}"
    carried = next((step for step in run.steps if step.message is message), None)
    if carried is None:
        return None
    return f"run {run.run_id}: carries {carried.name!r}, runs the step after it"


def _message_lines(
    store: Store,
    message: Message,
    now_ms: int,
    dlq_id: str | None,
    shown: set[str] | frozenset[str] = frozenset(),
) -> list[str]:
    extras = []
    position = _run_position(store, message)
    if position:
        extras.append(position)
    if message.started_run_id:
        extras.append(f"began workflow run {message.started_run_id}")
    if message.queue:
        extras.append(f"queue={message.queue}")
    if message.url_group:
        extras.append(f"url_group={message.url_group}")
    if message.schedule_id:
        extras.append(f"schedule={message.schedule_id}")
    if message.callback_for:
        kind = "failure callback" if message.is_failure_callback else "callback"
        extras.append(f"{kind} for {message.callback_for}")
    extra = f" [{', '.join(extras)}]" if extras else ""
    # Once a message is finished its not-before is only its last attempt's time: noise.
    waiting = message.state in ("CREATED", "RETRY") or (
        not message.done and message.not_before_ms > now_ms
    )
    due = f" due={_when(message.not_before_ms)}" if waiting else ""
    dlq = f" dlq_id={dlq_id}" if dlq_id else ""
    lines = [
        f"  {message.message_id} {message.method} {message.url} {message.state} "
        f"retried={message.retried}/{message.max_retries}{due}{dlq}{extra} "
        f"body={_short(message.body)}"
    ]
    if message.message_id in shown:
        lines.append(f"    {len(message.deliveries)} attempt(s), shown first, above")
        return lines
    first, skipped, last = _head_tail(message.deliveries, _FIRST_ATTEMPTS, _LAST_ATTEMPTS)
    lines.extend(_attempt_line(delivery) for delivery in first)
    if skipped:
        lines.append(f"    ... {skipped} more attempt(s) ...")
    lines.extend(_attempt_line(delivery) for delivery in last)
    return lines


def _attempt_line(delivery: Delivery) -> str:
    if delivery.status is None:
        outcome = f"-> {delivery.error}"
    elif delivery.error:
        outcome = f"-> {delivery.status} ({delivery.error})"
    elif not delivery.ok and delivery.response_content:
        outcome = f"-> {delivery.status} {_short(delivery.response_body, 160)}"
    else:
        outcome = f"-> {delivery.status}"
    if is_non_retryable(delivery.status, delivery.response_headers):
        outcome += " non-retryable (489 + Upstash-NonRetryable-Error)"
    return f"    {_when(delivery.at_ms)} attempt retried={delivery.retried} {outcome}"


def _schedule_lines(store: Store) -> list[str]:
    if not store.schedules:
        return []
    produced = Counter(m.schedule_id for m in store.messages.values() if m.schedule_id)
    lines = ["schedules:"]
    for schedule in store.schedules.values():
        state = "paused" if schedule.paused else f"next_run={_when(schedule.next_ms)}"
        error = f" error={_short(schedule.error)}" if schedule.error else ""
        lines.append(
            f"  {schedule.schedule_id} {schedule.method} {schedule.destination} "
            f"cron={schedule.cron!r} {state} "
            f"produced {produced[schedule.schedule_id]} message(s){error}"
        )
    return lines


def _rejected_lines(store: Store) -> list[str]:
    calls = list(store.api_errors)
    if not calls:
        return []
    shown = calls[-_LAST_REJECTED:]
    lines = ["rejected API calls (the app got an error answer):"]
    earlier = store.api_errors.total - len(shown)
    if earlier:
        lines.append(f"  ... {earlier} earlier rejected call(s) not shown ...")
    for call in shown:
        injected = " (injected by fail_next)" if call.injected else ""
        error = _clip(" ".join(call.error.split()), 160)  # the API's own words, unquoted
        lines.append(
            f"  {_when(call.at_ms)} {call.method} {_clip(call.path, 100)} -> {call.status} "
            f"{error}{injected}"
        )
    return lines


def _third_party_call(store: Store, message: Message) -> WorkflowRun | None:
    """The run whose ``context.call`` this message is (a request to a third party, not to
    the app), or None."""
    if message.workflow_run_id is None:
        return None
    found = store.workflows.membership(message.message_id)
    return found[0] if found is not None and found[1] == TO_CALLBACK else None


def _refused_call_lines(store: Store) -> list[str]:
    """A workflow's ``context.call`` the third party refused (an API key it does not take,
    say): the URL, the status and the first line of its answer."""
    lines = []
    for message in store.messages.values():
        refused = [d for d in message.deliveries if d.status in _REFUSED_STATUSES]
        run = _third_party_call(store, message) if refused else None
        if run is None:
            continue
        last = refused[-1]
        first_line = next(iter(last.response_body.splitlines()), "")
        lines.append(
            f"a context.call of workflow run {run.run_id} was refused by the third party: "
            f"{message.method} {message.url} -> {last.status} {_short(first_line, 160)}"
        )
    return lines


def _signature_hint(store: Store, fixture: str) -> str | None:
    """Only deliveries to the app's own endpoints count: a third party refusing a
    workflow's ``context.call`` says nothing of the app's signature check."""
    refused = signature_error = False
    for message in store.messages.values():
        if _third_party_call(store, message) is not None:
            continue
        for delivery in message.deliveries:
            refused = refused or delivery.status in _REFUSED_STATUSES
            signature_error = (
                signature_error
                or _raised_signature_error(delivery)
                or _WORKFLOW_SIGNATURE_REFUSAL in delivery.response_content
            )
    if not (refused or signature_error):
        return None
    causes = []
    if refused:
        causes.append("a delivery was refused (400/401/403)")
    if signature_error:
        causes.append("the app could not verify a delivery's signature")
    clock = _IN_PROCESS_CLOCK if fixture == "qstash" else ""
    hint = f"hint: {' and '.join(causes)}. {_SIGNATURE_HINT.format(fixture=fixture, clock=clock)}"
    if refused:
        hint += " " + _WORKFLOW_HINT
    return hint


# What upstash-workflow's serve() answers (a 500) when the signature does not verify.
_WORKFLOW_SIGNATURE_REFUSAL = b"Failed to verify that the Workflow request comes from QStash"


def _raised_signature_error(delivery: Delivery) -> bool:
    # qstash.Receiver raises qstash.errors.SignatureError; matched by name, so an app's own
    # exception of that name (or a subclass of the SDK's) counts too.
    if delivery.exception is not None:
        return any(cls.__name__ == "SignatureError" for cls in type(delivery.exception).__mro__)
    return (delivery.error or "").startswith("SignatureError:")


_SIGNATURE_HINT = (
    "If the app verifies Upstash-Signature: the token's `sub` is the exact URL called (scheme, "
    "host, path and query: pass that URL to Receiver.verify), it is signed with "
    "QSTASH_CURRENT_SIGNING_KEY as the fake reads it, and its iat/exp follow {fixture}.now"
    "{clock}."
)
_IN_PROCESS_CLOCK = " (the app's clock too, unless freeze_time=False)"
_WORKFLOW_HINT = (
    "An Upstash Workflow route also answers 400 when its route function returns before "
    "reaching any step."
)


def _when(ms: int) -> str:
    """ISO 8601, or the raw milliseconds when the time is beyond what datetime can show."""
    try:
        return ms_to_datetime(ms).isoformat()
    except (OverflowError, ValueError, OSError):
        return f"{ms}ms-since-epoch (out of datetime's range)"


def _head_tail(items: Sequence[_T], head: int, tail: int) -> tuple[list[_T], int, list[_T]]:
    """The first ``head`` and last ``tail`` items, and how many lie between them."""
    if len(items) <= head + tail:
        return list(items), 0, []
    return list(items[:head]), len(items) - head - tail, list(items[-tail:])


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(text: str, limit: int = 80) -> str:
    return repr(_clip(text.replace("\n", " "), limit))
