"""The engine on its own: a store, a clock, seeded ids and the scheduler, with no HTTP, no
SDK and no app. Each test drives one transition the black-box suites reach through the SDKs,
and reads what the engine decided."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from pytest_qstash.state.account import Account
from pytest_qstash.state.attempts import Attempt, AttemptResult
from pytest_qstash.state.clock import VirtualClock
from pytest_qstash.state.ids import IdGenerator
from pytest_qstash.state.models import DlqEntry, Message, MessageOptions, Waiter
from pytest_qstash.state.plans import PLANS, DailyQuotaExceeded, Plan
from pytest_qstash.state.scheduler import Scheduler
from pytest_qstash.state.schedules import CronExpression
from pytest_qstash.state.store import Store
from pytest_qstash.state.trigger import trigger_run

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
    run_id = trigger_run(store, "https://app.test/workflow", {"order": 1})
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
    run_id = trigger_run(store, "https://app.test/workflow")
    run = store.workflows.get(run_id)
    assert run is not None
    [init] = run.messages
    store.end_refused_runs([run_id, "wfr_unknown"], "POST /v2/batch answered 400: bad")
    assert run.state == "RUN_FAILED"
    assert run.refused == ["POST /v2/batch answered 400: bad"]
    assert init.state == "CANCELED"
