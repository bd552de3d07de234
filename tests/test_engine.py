"""The engine on its own: a store, a clock, seeded ids and the scheduler, with no HTTP, no
SDK and no app. Each test drives one transition the black-box suites reach through the SDKs,
and reads what the engine decided."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import httpx
import pytest

from pytest_qstash.engine import trigger, workflow_dlq
from pytest_qstash.engine.account import Account
from pytest_qstash.engine.attempts import Attempt, AttemptResult
from pytest_qstash.engine.clock import VirtualClock
from pytest_qstash.engine.deliverable import INVALID_DESTINATION, Undeliverable
from pytest_qstash.engine.ids import IdGenerator
from pytest_qstash.engine.models import DlqEntry, InvalidTransition, Message
from pytest_qstash.engine.options import MessageOptions
from pytest_qstash.engine.plans import PLANS, DailyQuotaExceeded, Plan, PlanLimitExceeded
from pytest_qstash.engine.provisioned import carry_over
from pytest_qstash.engine.scheduler import Scheduler
from pytest_qstash.engine.schedules import CronExpression
from pytest_qstash.engine.store import Store
from pytest_qstash.engine.url_groups import UrlGroup
from pytest_qstash.engine.verb_specs import Trigger
from pytest_qstash.engine.waiters import Waiter
from pytest_qstash.engine.workflow_dlq import FailureFunctionNotRetryable, NotAWorkflowEntry
from pytest_qstash.engine.workflows import WorkflowRun

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
URL = "https://app.test/hook"


def engine(plan: Plan | None = None) -> tuple[Store, Scheduler]:
    """The engine in a few lines: a store on a virtual clock with seeded ids, and its
    scheduler."""
    store = Store(VirtualClock(START_MS), IdGenerator(7), Account("token"), plan=plan)
    return store, Scheduler(store)


def publish(
    store: Store, opts: MessageOptions | None = None, cause: Message | None = None
) -> Message:
    published, _ = store.publish(URL, b"hello", opts or MessageOptions(), cause=cause)
    return published[0].message


def attempt(
    store: Store, scheduler: Scheduler, status: int, until_ms: int | None = None
) -> tuple[Message, DlqEntry | None]:
    """Make the next due attempt, answered ``status`` at once."""
    work = scheduler.pop_work(store.clock.now_ms if until_ms is None else until_ms)
    assert isinstance(work, Message), f"nothing due, got {work!r}"
    started = store.start_attempt(work)
    assert store.answered(started, AttemptResult(status, httpx.Headers(), b"no"), 0)
    _, entry = store.end_attempt(started)
    return work, entry


def _answered(store: Store, message: Message) -> Attempt:
    started = store.start_attempt(message)
    assert store.answered(started, AttemptResult(200, httpx.Headers(), b""), 0)
    return started


def states(store: Store, message: Message) -> list[str]:
    return [e.state for e in store.events if e.message_id == message.message_id]


def test_a_message_is_due_attempted_retried_and_dead_lettered() -> None:
    store, scheduler = engine()
    message = publish(store, MessageOptions(retries=1))
    assert scheduler.next_due_ms() == START_MS
    assert scheduler.due_now() == [message]

    first, entry = attempt(store, scheduler, 500)
    assert first is message
    assert entry is None
    assert message.state == "RETRY"
    retry_ms = scheduler.next_due_ms()
    assert retry_ms is not None
    assert retry_ms > START_MS
    assert scheduler.pop_work(START_MS) is None  # not due before its backoff

    again, entry = attempt(store, scheduler, 500, retry_ms)
    assert again is message
    assert store.clock.now_ms == retry_ms
    assert store.messages[message.message_id].state == "FAILED"
    assert entry is not None
    assert store.dlq[entry.dlq_id].message is message
    assert states(store, message) == [
        "CREATED",
        "ACTIVE",
        "ERROR",
        "RETRY",
        "ACTIVE",
        "ERROR",
        "FAILED",
    ]
    assert scheduler.next_due_ms() is None


def test_a_delay_makes_a_message_due_later_and_not_before() -> None:
    store, scheduler = engine()
    message = publish(store, MessageOptions(delay_ms=60_000))
    assert message.not_before_ms == START_MS + 60_000
    assert scheduler.next_due_ms() == START_MS + 60_000
    assert scheduler.due_now() == []
    assert scheduler.pop_work(START_MS + 59_999) is None
    delivered, _ = attempt(store, scheduler, 200, START_MS + 60_000)
    assert delivered is message
    assert message.state == "DELIVERED"


def test_a_schedule_fires_on_its_cron_and_its_message_is_its_work() -> None:
    store, scheduler = engine()
    schedule, _ = store.schedules.put(
        URL, CronExpression.parse("*/5 * * * *"), b"tick", MessageOptions()
    )
    assert scheduler.next_due_ms() == START_MS + 5 * 60_000
    assert scheduler.next_due_ms(scheduled=False) is None  # a drain does not wait for it

    fired, _ = attempt(store, scheduler, 200, START_MS + 5 * 60_000)
    assert fired.schedule_id == schedule.schedule_id
    assert fired.from_schedule
    assert fired.content == b"tick"
    assert scheduler.next_due_ms() == START_MS + 10 * 60_000  # the next firing is planned


def test_the_cause_of_a_publish_is_what_it_follows_from() -> None:
    store, scheduler = engine()
    parent = publish(store)
    work = scheduler.pop_work(START_MS)
    assert work is parent
    store.start_attempt(parent)
    child = publish(store, cause=parent)  # the app published while handling parent
    stranger = publish(store)
    assert child.cascade_depth == parent.cascade_depth + 1
    assert stranger.cascade_depth == 0
    later = publish(store, MessageOptions(delay_ms=1000), cause=parent)
    assert later.cascade_depth == 0  # due later: no cascade at this instant


def test_a_callback_follows_from_its_source_and_takes_its_options() -> None:
    store, scheduler = engine()
    callback_opts = MessageOptions(retries=0)
    source = publish(
        store, MessageOptions(callback="https://app.test/cb", callback_options=callback_opts)
    )
    attempt(store, scheduler, 200)
    [callback] = [m for m in store.messages.values() if m.callback_for == source.message_id]
    assert callback.url == "https://app.test/cb"
    assert callback.max_retries == 0
    assert callback.cascade_depth == source.cascade_depth + 1
    assert json.loads(callback.content)["sourceMessageId"] == source.message_id
    assert callback.headers["content-type"] == "application/json"


def test_a_dead_letter_retried_keeps_its_options_but_what_the_overrides_name() -> None:
    store, scheduler = engine()
    headers = httpx.Headers({"X-Order": "42"})
    failed = publish(store, MessageOptions(headers=headers, retries=0, label="orders"))
    _, entry = attempt(store, scheduler, 500)
    assert entry is not None
    overrides = MessageOptions(retries=4, given={"retries"})
    retried = store.retry_dlq_entry(entry.dlq_id, overrides)
    assert retried is not failed
    assert retried.max_retries == 4
    assert retried.label == "orders"
    assert retried.headers["x-order"] == "42"
    assert entry.dlq_id not in store.dlq
    assert scheduler.due_now() == [retried]


def test_a_wait_ends_by_a_notify_or_by_its_timeout() -> None:
    store, scheduler = engine()
    run_id = trigger.trigger_run(store, Trigger("https://app.test/workflow", {"order": 1}))
    run = store.workflows.get(run_id)
    assert run is not None
    step_opts = MessageOptions(
        workflow_headers={
            "upstash-workflow-runid": run_id,
            "upstash-workflow-init": "false",
            "upstash-workflow-calltype": "step",
        }
    )
    body = {"timeout": "1h", "step": {"stepId": 2, "stepName": "await", "stepType": "Wait"}}
    waiter = store.wait(run, "paid", body, {}, step_opts, step_opts.copy())
    assert isinstance(waiter, Waiter)
    assert waiter.deadline_ms == START_MS + 3_600_000

    [(reached, notified, resumed)] = store.notify("paid", b"yes")
    assert reached is run
    assert notified is waiter
    assert resumed is not None
    step = json.loads(resumed.content)
    assert step["waitTimeout"] is False
    assert base64.b64decode(step["out"]) == b"yes"
    assert resumed.workflow_run_id == run_id

    second = store.wait(run, "shipped", body, {}, step_opts, step_opts.copy())
    assert isinstance(second, Waiter)
    assert store.notify("other-event", b"") == []
    # Its timeout is an event the scheduler handles on the way to what is due.
    while (work := scheduler.pop_work(START_MS + 3_600_000)) is not None:
        assert isinstance(work, Message)
        store.end_attempt(_answered(store, work))
    [timed_out] = [m for m in run.messages if b'"waitTimeout": true' in m.content]
    assert timed_out.created_ms == START_MS + 3_600_000
    assert json.loads(timed_out.content)["stepName"] == "await"


def test_the_daily_quota_refuses_a_whole_batch_and_resets_the_next_day() -> None:
    store, _ = engine(plan=PLANS["free"])
    limit = PLANS["free"].messages_per_day
    assert limit is not None
    store.count_daily(limit - 1)
    with pytest.raises(DailyQuotaExceeded) as refused:
        store.count_daily(2)
    assert refused.value.used == limit - 1
    assert refused.value.reset_ms == START_MS + 86_400_000
    store.count_daily(1)  # the refused batch counted nothing
    store.clock.move_to(START_MS + 86_400_000)
    store.count_daily(limit)


def test_a_refused_step_ends_its_run() -> None:
    store, _ = engine()
    run_id = trigger.trigger_run(store, Trigger("https://app.test/workflow"))
    run = store.workflows.get(run_id)
    assert run is not None
    [init] = run.messages
    store.end_refused_runs([run_id, "wfr_unknown"], "POST /v2/batch answered 400: bad")
    assert run.state == "RUN_FAILED"
    assert run.refused == ["POST /v2/batch answered 400: bad"]
    assert init.state == "CANCELED"


# -- the models' transitions ----------------------------------------------------------------
def answer(status: int) -> AttemptResult:
    return AttemptResult(status, httpx.Headers({"x-answer": str(status)}), b"body")


def test_a_message_transition_returns_the_entry_the_store_logs() -> None:
    store, _ = engine()
    message = publish(store, MessageOptions(retries=2))
    assert [e.state for e in store.events] == ["CREATED"]

    started = store.start_attempt(message)
    assert (message.state, started.previous_state) == ("ACTIVE", "CREATED")
    active = store.events[-1]
    assert (active.state, active.message) == ("ACTIVE", message)

    logged = len(store.events)
    failed = answer(503)
    error = message.error(failed, START_MS + 5)
    assert message.state == "ACTIVE"  # an error is logged; the outcome is still to come
    assert (error.state, error.time_ms, error.response_status) == ("ERROR", START_MS + 5, 503)
    assert error.response_content is failed.content
    assert error.error == "the endpoint answered 503"
    retry = message.retry(START_MS + 9_000, START_MS + 5)
    assert (message.state, message.retried, message.not_before_ms) == (
        "RETRY",
        1,
        START_MS + 9_000,
    )
    assert (retry.state, retry.next_delivery_ms) == ("RETRY", START_MS + 9_000)
    assert len(store.events) == logged  # the model returns its entries; it logs nothing


@pytest.mark.parametrize(
    ("transition", "state"),
    [
        (lambda m: m.succeed(answer(200), START_MS), "CREATED"),
        (lambda m: m.fail(answer(500), START_MS), "CREATED"),
        (lambda m: m.retry(START_MS + 1, START_MS), "CREATED"),
        (lambda m: m.redeliver(START_MS), "CREATED"),
        (lambda m: m.start(START_MS), "DELIVERED"),
        (lambda m: m.cancel(START_MS), "DELIVERED"),
        (lambda m: m.run_now(START_MS), "DELIVERED"),
        (lambda m: m.put_back("CREATED"), "DELIVERED"),
    ],
)
def test_a_transition_the_state_does_not_allow_is_refused_and_changes_nothing(
    transition: Callable[[Message], object], state: str
) -> None:
    store, scheduler = engine()
    message = publish(store)
    if state == "DELIVERED":
        attempt(store, scheduler, 200)
    assert message.state == state
    before = (message.retried, message.not_before_ms, len(store.events))
    with pytest.raises(InvalidTransition, match=f"it is {state}"):
        transition(message)
    assert message.state == state
    assert (message.retried, message.not_before_ms, len(store.events)) == before


def test_a_delivered_message_is_delivered_again_and_a_pending_one_is_not() -> None:
    store, scheduler = engine()
    message = publish(store, MessageOptions(delay_ms=60_000))
    with pytest.raises(ValueError, match="only a DELIVERED message is delivered again"):
        store.redeliver(message)
    attempt(store, scheduler, 200, START_MS + 60_000)
    store.clock.move_to(START_MS + 120_000)
    store.redeliver(message)
    assert (message.state, message.not_before_ms) == ("CREATED", START_MS + 120_000)
    assert scheduler.due_now() == [message]
    attempt(store, scheduler, 200)
    assert states(store, message) == ["CREATED", "ACTIVE", "DELIVERED", "ACTIVE", "DELIVERED"]


def test_a_message_in_flight_cannot_be_run_now() -> None:
    store, scheduler = engine()
    message = publish(store)
    work = scheduler.pop_work(START_MS)
    assert work is message
    started = store.start_attempt(message)
    assert not store.answered(started, answer(200), 30_000)  # in flight for 30 s
    with pytest.raises(InvalidTransition, match="cannot run now: it is ACTIVE"):
        store.run_now(message)
    assert scheduler.next_due_ms() == START_MS + 30_000  # only its end is due


def test_an_attempt_put_back_restores_the_state_it_started_from() -> None:
    store, scheduler = engine()
    message = publish(store, MessageOptions(retries=1))
    attempt(store, scheduler, 500)
    assert message.state == "RETRY"
    retry_ms = message.not_before_ms
    work = scheduler.pop_work(retry_ms)
    assert work is message
    store.requeue(store.start_attempt(message))
    assert message.state == "RETRY"
    assert states(store, message)[-1] == "RETRY"  # the ACTIVE of no attempt is forgotten
    assert scheduler.due_now() == [message]


def test_an_attempt_abandoned_after_its_message_was_cancelled_leaves_it_cancelled() -> None:
    store, scheduler = engine()
    message = publish(store)
    work = scheduler.pop_work(START_MS)
    assert work is message
    started = store.start_attempt(message)  # its app is being called...
    assert store.cancel(message)  # ...and cancels it, then the call is cut short
    store.requeue(started)
    assert message.state == "CANCELED"
    assert store.in_flight == {}
    assert scheduler.next_due_ms() is None  # never delivered again
    assert not store.cancel(message)  # cancelling what is done does nothing


def _run(store: Store) -> WorkflowRun:
    run = store.workflows.get(trigger.trigger_run(store, Trigger("https://app.test/workflow")))
    assert run is not None
    return run


def test_a_run_that_ended_cannot_end_again() -> None:
    store, _ = engine()
    run = _run(store)
    store.succeed_run(run, "done")
    assert (run.state, run.response, run.completed_ms) == ("RUN_SUCCESS", "done", START_MS)
    with pytest.raises(InvalidTransition, match="it is RUN_SUCCESS"):
        run.cancel(START_MS)
    with pytest.raises(InvalidTransition, match="it is RUN_SUCCESS"):
        run.fail(START_MS, "dlq")
    with pytest.raises(InvalidTransition, match="cannot be resumed: it is RUN_SUCCESS"):
        run.resume()
    assert run.state == "RUN_SUCCESS"
    # A refused step of a run that ended is kept for the report, and ends nothing.
    assert run.refuse("POST /v2/publish answered 400: late", START_MS) == []
    assert (run.state, run.refused) == ("RUN_SUCCESS", ["POST /v2/publish answered 400: late"])


def test_a_cancelled_run_cancels_what_it_still_owes() -> None:
    store, scheduler = engine()
    run = _run(store)
    [init] = run.messages
    store.cancel_run(run)
    assert (run.state, run.completed_ms) == ("RUN_CANCELED", START_MS)
    assert init.state == "CANCELED"
    assert scheduler.next_due_ms() is None


def test_a_run_failed_by_a_dead_letter_runs_again_when_it_is_retried() -> None:
    store, scheduler = engine()
    run_id = trigger.trigger_run(
        store, Trigger("https://app.test/workflow", retries=0, failure_url=False)
    )
    run = store.workflows.get(run_id)
    assert run is not None
    _, entry = attempt(store, scheduler, 500)
    assert entry is not None
    assert (run.state, run.dlq_id, run.completed_ms) == ("RUN_FAILED", entry.dlq_id, START_MS)

    again = store.retry_dlq_entry(entry.dlq_id)
    assert (run.state, run.dlq_id, run.completed_ms) == ("RUN_STARTED", None, None)
    assert run.messages == [again]  # the copy took the failed message's place
    assert store.workflows.steps_body(again.message_id).count(b"messageId") == 1


def _failed_run(store: Store, scheduler: Scheduler) -> tuple[WorkflowRun, DlqEntry]:
    run_id = trigger.trigger_run(
        store, Trigger("https://app.test/workflow", {"order": 1}, retries=0, failure_url=False)
    )
    run = store.workflows.get(run_id)
    assert run is not None
    _, entry = attempt(store, scheduler, 500)
    assert entry is not None
    assert run.state == "RUN_FAILED"
    return run, entry


def test_a_run_is_triggered_through_the_store() -> None:
    store, scheduler = engine()
    run_id = trigger.trigger_run(
        store, Trigger("https://app.test/workflow", {"order": 1}, run_id="wfr_mine")
    )
    run = store.workflows.get(run_id)
    assert run is not None
    assert (run_id, run.state) == ("wfr_mine", "RUN_STARTED")
    assert scheduler.due_now() == run.messages
    # As POST /v2/trigger starts one: the init publish, and the run it started.
    other, existed = trigger.start_run(
        store, "https://app.test/other", b"{}", MessageOptions(), "wfr_other", None
    )
    assert (other.run_id, other.url, existed) == ("wfr_other", "https://app.test/other", False)
    assert other.messages[0].workflow_run_id == "wfr_other"


def test_a_failed_run_resumed_or_restarted_through_the_store_is_a_new_run() -> None:
    store, scheduler = engine()
    failed, entry = _failed_run(store, scheduler)
    resumed = workflow_dlq.resume(store, entry.dlq_id, MessageOptions(retries=2, given={"retries"}))
    restarted = workflow_dlq.restart(store, entry.dlq_id)
    for run in (resumed, restarted):
        assert run.run_id != failed.run_id
        assert (run.state, run.resumed_from) == ("RUN_STARTED", entry.dlq_id)
    assert resumed.messages[-1].max_retries == 2
    assert restarted.messages[-1].max_retries == 0
    assert entry.dlq_id in store.dlq  # the entry stays
    with pytest.raises(NotAWorkflowEntry):
        workflow_dlq.resume(store, "no-such-entry")


def test_a_failure_function_not_failed_is_neither_retried_nor_cancelled() -> None:
    store, scheduler = engine()
    _, entry = _failed_run(store, scheduler)
    with pytest.raises(FailureFunctionNotRetryable, match="only once its call has failed"):
        workflow_dlq.retry_failure_function(store, entry.dlq_id)
    with pytest.raises(FailureFunctionNotRetryable, match="only while it is in progress"):
        workflow_dlq.cancel_failure_function(store, entry.dlq_id)


def test_a_fresh_store_carries_over_what_was_provisioned_and_no_history() -> None:
    old, _ = engine()
    old.queue("orders").parallelism = 2
    publish(old, MessageOptions())
    new, _ = engine()
    carry_over(old, new, {"queues"})
    assert [(q.name, q.parallelism) for q in new.queues.values()] == [("orders", 2)]
    assert (list(new.messages), list(new.url_groups)) == ([], [])


def test_what_the_plan_does_not_allow_is_refused_with_its_status_and_message() -> None:
    store, _ = engine(plan=PLANS["free"])
    with pytest.raises(PlanLimitExceeded) as too_big:
        store.check_message(MessageOptions(), b"x" * (1024 * 1024 + 1))
    assert too_big.value.status == 413
    assert too_big.value.message == (
        "message size 1048577 bytes exceeds the limit of the free plan (1048576 bytes)"
    )
    with pytest.raises(PlanLimitExceeded, match="maximum retries of the free plan") as retries:
        store.check_message(MessageOptions(retries=4), b"")
    assert retries.value.status == 400
    with pytest.raises(PlanLimitExceeded, match=r"parallelism 3 exceeds .* free plan \(2\)"):
        store.check_queues(["a"], parallelism=3)
    store.check_new_url_group("orders")
    store.url_groups["orders"] = UrlGroup("orders", START_MS, START_MS)
    store.check_new_url_group("orders")  # one that exists creates nothing
    with pytest.raises(PlanLimitExceeded, match=r"url group limit of the free plan") as groups:
        store.check_new_url_group("more")
    assert groups.value.status == 412
    with pytest.raises(PlanLimitExceeded) as quota:
        store.count_daily(1_001)
    assert isinstance(quota.value, DailyQuotaExceeded)
    assert quota.value.status == 429
    assert list(store.events) == []  # refusing publishes nothing


def test_a_destination_is_a_deliverable_url_or_a_url_group() -> None:
    store, _ = engine()
    assert store.checked_destination("HTTPS://app.test/x", group_needs_endpoints=True) == (
        "https://app.test/x"
    )
    with pytest.raises(Undeliverable, match="it has no host"):
        store.checked_destination("https://", group_needs_endpoints=True)
    with pytest.raises(Undeliverable) as unknown:
        store.checked_destination("no-such-group", group_needs_endpoints=False)
    assert str(unknown.value) == INVALID_DESTINATION
