"""What an opened item of the dashboard links to: a message's DLQ entry, the copy a DLQ retry
made of it and the message it was made from, its log lines, its callbacks and its workflow
run; a run's messages, waiters, the runs it invoked and the run that invoked it; a schedule's
messages; the faults a simulation injected on a message or a run's messages. Links are ids
(the page turns them into its URLs, ``#messages/<id>``...).
"""

from __future__ import annotations

from typing import Any

from ...engine.models import DlqEntry, Message
from ...engine.schedules import Schedule
from ...engine.workflows import WorkflowRun
from ...testing.fake import FakeQStash
from ..control import records

#: The most items of one kind an opened item lists (a run may have thousands of messages).
MAX_LINKS = 200


def links(fake: FakeQStash, name: str, item: Any) -> dict[str, Any]:
    if name == "messages":
        return _message(fake, item)
    if name == "dlq":
        return _dlq_entry(fake, item)
    if name == "runs":
        return _run(fake, item)
    if name == "schedules":
        return _schedule(fake, item)
    return {}


def _ids(values: Any) -> list[str]:
    out: list[str] = []
    for value in values:
        out.append(value)
        if len(out) >= MAX_LINKS:
            break
    return out


def _message(fake: FakeQStash, message: Message) -> dict[str, Any]:
    store = fake.store
    own = message.message_id
    log = [
        {
            "state": event.state,
            "time": records.iso_time(event.time),
            "error": event.error,
            "response_status": event.response_status,
        }
        for event in store.events
        if event.message_id == own
    ]
    return {
        "dlq": _ids(e.dlq_id for e in store.dlq.values() if e.message_id == own),
        "retried_from": message.retried_from,
        "retried_as": _ids(m.message_id for m in store.messages.values() if m.retried_from == own),
        "callback_for": message.callback_for,
        "callbacks": _ids(m.message_id for m in store.messages.values() if m.callback_for == own),
        "run": message.workflow_run_id,
        "started_run": message.started_run_id,
        "schedule": message.schedule_id,
        "log": log[-MAX_LINKS:],
        "faults": _faults(fake, {own}),
    }


def _dlq_entry(fake: FakeQStash, entry: DlqEntry) -> dict[str, Any]:
    store = fake.store
    own = entry.message_id
    return {
        "message": own,
        "retried_from": entry.message.retried_from,
        "retried_as": _ids(m.message_id for m in store.messages.values() if m.retried_from == own),
        "run": entry.message.workflow_run_id,
    }


def _run(fake: FakeQStash, run: WorkflowRun) -> dict[str, Any]:
    store = fake.store
    own = run.run_id
    return {
        "messages": _ids(m.message_id for m in store.messages.values() if m.workflow_run_id == own),
        "started_by": next(
            (m.message_id for m in store.messages.values() if m.started_run_id == own), None
        ),
        "waiters": [
            {
                "event_id": w.event_id,
                "step_name": w.step_name,
                "deadline": records.iso_time(w.deadline),
            }
            for w in store.waiters
            if w.run_id == own
        ][:MAX_LINKS],
        "invoked": _ids(
            r.run_id for r in fake.runs if r.invoker is not None and r.invoker.run_id == own
        ),
        "invoker": run.invoker.run_id if run.invoker is not None else None,
        "dlq": run.dlq_id,
        "resumed_from": run.resumed_from,
        "faults": _faults(
            fake, {m.message_id for m in store.messages.values() if m.workflow_run_id == own}
        ),
    }


def _faults(fake: FakeQStash, message_ids: set[str]) -> list[dict[str, Any]]:
    """The faults a simulation injected on these messages (``serve --simulate``), in order."""
    simulation = fake.simulation
    if simulation is None:
        return []
    return [
        {
            "kind": fault.kind,
            "message": fault.message_id,
            "time": records.iso_time(fault.at),
            "description": fault.description,
        }
        for fault in simulation.injected
        if fault.message_id in message_ids
    ][:MAX_LINKS]


def _schedule(fake: FakeQStash, schedule: Schedule) -> dict[str, Any]:
    own = schedule.schedule_id
    return {
        "messages": _ids(
            m.message_id for m in fake.store.messages.values() if m.schedule_id == own
        ),
    }
