"""The Store's verbs on workflow runs: waits and notifies, a run's end (succeeded, cancelled,
refused), invocations reporting back, and the verbs whose rules live in ``workflow_dlq.py``
(a failed run resumed, restarted, its failure function retried) and ``trigger.py`` (a run
started as a workflow client starts one).

``RunVerbs`` is part of the ``Store`` (its base): each verb takes the store as ``self``, seen
through ``Engine``, the seam the rules modules use, so it changes state only through the
store's own collections and transitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .engine import Engine
from .invocations import outcome_step
from .models import Invoker, Message
from .options import MessageOptions
from .waiters import Waiter, new_waiter, resume_step
from .workflows import WorkflowRun


class RunVerbs:
    """What the API, the fixture and the scheduler ask of workflow runs."""

    def wait(
        self: Engine,
        run: WorkflowRun,
        event_id: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        options: MessageOptions,
        timeout_options: MessageOptions,
        *,
        cause: Message | None = None,
    ) -> Waiter | Message:
        """The run waits for ``event_id``: a ``Waiter`` until a notify or its timeout, or, when
        a notify for the run was kept, the resumed step's message at once (``waiters.py``).
        ``options`` publish the step when notified, ``timeout_options`` when timed out.
        ``ValueError`` for a timeout that is not a duration."""
        now = self.clock.now_ms
        waiter = new_waiter(
            run, event_id, body, headers, now, self.waiters.new_id(), options, timeout_options
        )
        recorded = run.take_wait_deadline(event_id)
        if recorded is not None:  # a loaded run waits again: it times out when it would have
            waiter.deadline_ms = max(recorded, now)
        saved = self.waiters.take_saved(run.run_id, event_id)
        if saved is not None:
            return _resume(self, waiter, saved, cause)
        self.waiters.add(waiter)
        waiter.generation = 1
        self.clock.schedule(waiter.deadline_ms, "wait", waiter.waiter_id, waiter.generation)
        return waiter

    def notify(
        self: Engine,
        event_id: str,
        data: bytes,
        run_id: str | None = None,
        *,
        cause: Message | None = None,
    ) -> list[tuple[WorkflowRun, Waiter | None, Message | None]]:
        """Notify ``event_id``: every run waiting for it (``run_id`` None; the event is lost
        when none waits), or the run ``run_id``, whose notify is kept when it is not waiting.
        Returns, per run reached, the waiter notified and the message resuming it (both None
        when kept). ``KeyError`` when ``run_id`` names no active run."""
        if run_id is not None:
            run = self.workflows.get(run_id)
            if run is None or not run.active:
                raise KeyError(run_id)
            mine = [w for w in self.waiters.of_event(event_id) if w.run_id == run_id]
            if not mine:
                self.waiters.save(run_id, event_id, data)
                return [(run, None, None)]
            targets = mine
        else:
            targets = self.waiters.of_event(event_id)
        out: list[tuple[WorkflowRun, Waiter | None, Message | None]] = []
        for waiter in targets:
            run = self.workflows.get(waiter.run_id)
            self.waiters.remove(waiter)
            if run is None or not run.active:
                continue
            out.append((run, waiter, _resume(self, waiter, data, cause)))
        return out

    def wait_timed_out(self: Engine, waiter_id: str, generation: int) -> Message | None:
        """A wait's timeout came: its step goes back to the run timed out."""
        waiter = self.waiters.live(waiter_id, generation)
        if waiter is None:
            return None
        self.waiters.remove(waiter)
        run = self.workflows.get(waiter.run_id)
        if run is None or not run.active:
            return None
        return _resume(self, waiter, None, None)

    def succeed_run(self: Engine, run: WorkflowRun, response: str | None = None) -> None:
        """The app reported that a run's route returned (``response``: what it returned)."""
        self.workflows.succeed(run, self.clock.now_ms, response)

    def cancel_run(self: Engine, run: WorkflowRun) -> None:
        """Cancel an active run, and its messages still owed a delivery with it."""
        for message in self.workflows.cancel(run, self.clock.now_ms):
            self.cancel(message)

    def end_refused_runs(self: Engine, run_ids: Iterable[str], reason: str) -> None:
        """The API refused a step publish of these runs (``reason``): the SDK takes that
        answer for a cancel and stops, so each active one ends RUN_FAILED, the reason kept,
        and its messages still owed a delivery are cancelled."""
        for run_id in run_ids:
            run = self.workflows.get(run_id)
            if run is not None and run.active:
                for message in self.workflows.refuse_step(run, reason, self.clock.now_ms):
                    self.cancel(message)

    def record_invoker(self: Engine, started: Iterable[Message], invoker: Invoker) -> None:
        """The runs the messages ``started`` (an invoke's publish) remember ``invoker``, to
        report their outcome to it; a run that has one already keeps it."""
        for message in started:
            run_id = message.workflow_run_id
            run = self.workflows.get(run_id) if run_id else None
            if run is not None and run.invoker is None:
                run.invoker = invoker

    def _run_ended(self: Engine, run: WorkflowRun) -> None:
        """A workflow run ended: its waits end with it, and a run another one invoked
        reports its outcome to that run."""
        self.waiters.forget_run(run.run_id)
        _report_invocation(self, run)
        if self.retention is not None:
            self.retention.run_ended(run.run_id, self.clock.now_ms)


def _resume(store: Engine, waiter: Waiter, data: bytes | None, cause: Message | None) -> Message:
    """Publish the wait step back into its run: notified with ``data``, or timed out."""
    url, content, opts = resume_step(waiter, data)
    published, _ = store.publish(url, content, opts, cause=cause)
    return published[0].message


def _report_invocation(store: Engine, run: WorkflowRun) -> Message | None:
    """When another run invoked ``run``, publish the invoke step back into that run with
    the outcome (a run that ended since takes nothing)."""
    invoker = run.invoker
    if invoker is None or run.state == "RUN_STARTED" or not invoker.url or not invoker.options:
        return None
    target = store.workflows.get(invoker.run_id)
    if target is None or not target.active:
        return None
    entry = store.dlq.get(run.dlq_id) if run.dlq_id else None
    url, content, opts = outcome_step(run, None if entry is None else entry.response_body)
    published, _ = store.publish(url, content, opts)
    return published[0].message
