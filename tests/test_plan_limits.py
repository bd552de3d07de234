"""Plan limits through the real SDK: what each plan refuses, with QStash's status, and the
default (the most permissive plan) refusing none of what tests ordinarily do."""

from __future__ import annotations

import pytest
from qstash import QStash
from qstash.errors import DailyMessageLimitExceededError, QStashError

from pytest_qstash import FakeQStash

START = "2026-05-01T00:00:00Z"
URL = "https://api.test/x"
free = pytest.mark.qstash(plan="free", start=START)


@free
def test_free_plan_refuses_an_oversized_body(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match=r"413.*exceeds the limit of the free plan"):
        client.message.publish(url=URL, body="x" * (1024 * 1024 + 1))
    client.message.publish(url=URL, body="x" * (1024 * 1024))
    assert len(qstash.messages) == 1


@free
def test_free_plan_refuses_a_delay_past_seven_days(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match=r"400.*maximum delay of the free plan"):
        client.message.publish(url=URL, body="x", delay="8d")
    client.message.publish(url=URL, body="x", delay="7d")


@free
def test_free_plan_refuses_more_retries_than_it_allows(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match=r"400.*maximum retries of the free plan"):
        client.message.publish(url=URL, body="x", retries=4)
    assert qstash.messages == []


@free
def test_free_plan_caps_a_long_timeout_at_its_response_duration(
    qstash: FakeQStash, client: QStash
) -> None:
    qstash.mount("https://api.test", lambda request: None, duration="1h")
    client.message.publish(url=URL, body="x", timeout="3h", retries=0)
    [cut] = qstash.advance("2h")
    assert cut.duration.total_seconds() == 15 * 60


@free
def test_free_plan_daily_limit_answers_as_qstash_does(qstash: FakeQStash, client: QStash) -> None:
    qstash.mount("https://api.test", lambda request: None)
    for _ in range(1000):
        client.message.publish(url=URL, body="x", delay="1h")
    with pytest.raises(DailyMessageLimitExceededError) as caught:
        client.message.publish(url=URL, body="x")
    assert (caught.value.limit, caught.value.remaining) == ("1000", "0")  # as the SDK keeps them
    assert len(qstash.messages) == 1000
    qstash.advance("1d")  # a new day, a new quota
    client.message.publish(url=URL, body="x")


@free
def test_free_plan_holds_one_url_group_and_ten_active_schedules(
    qstash: FakeQStash, client: QStash
) -> None:
    client.url_group.upsert_endpoints("first", [{"url": URL}])
    client.url_group.upsert_endpoints("first", [{"url": URL + "2"}])  # the same group
    with pytest.raises(QStashError, match=r"412.*url group limit of the free plan"):
        client.url_group.upsert_endpoints("second", [{"url": URL}])
    for i in range(10):
        client.schedule.create(destination=URL, cron="* * * * *", schedule_id=f"s{i}")
    client.schedule.create(destination=URL, cron="0 * * * *", schedule_id="s0")  # overwrite
    with pytest.raises(QStashError, match=r"412.*active schedule limit of the free plan"):
        client.schedule.create(destination=URL, cron="* * * * *")


def test_the_default_plan_is_the_most_permissive(qstash: FakeQStash, client: QStash) -> None:
    client.message.publish(url=URL, body="x" * (5 * 1024 * 1024), delay="400d", retries=20)
    assert qstash.messages[0].max_retries == 20


def test_an_unknown_plan_is_refused_naming_the_plans() -> None:
    with pytest.raises(ValueError, match="unknown plan 'gold': expected one of free, "):
        FakeQStash(plan="gold")
    assert FakeQStash(plan="Pay as you go").store.plan.name == "pay_as_you_go"


@free
def test_free_plan_caps_queue_parallelism(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match=r"412.*queue parallelism 3 exceeds the maximum of the"):
        client.queue.upsert("q", parallelism=3)
    assert qstash.store.queues == {}  # nothing created
    client.queue.upsert("q", parallelism=2)
    with pytest.raises(QStashError, match=r"412.*queue parallelism 3"):
        client.queue.upsert("q", parallelism=3)  # an existing queue is capped too
    assert client.queue.get("q").parallelism == 2


@free
def test_free_plan_holds_ten_queues(qstash: FakeQStash, client: QStash) -> None:
    for i in range(9):
        client.queue.upsert(f"q{i}")
    client.message.enqueue(queue="q9", url=URL, body="x")  # the tenth, made by enqueue
    client.queue.upsert("q0", parallelism=2)  # an existing queue creates nothing
    client.message.enqueue(queue="q9", url=URL, body="x")
    with pytest.raises(QStashError, match=r"412.*queue limit of the free plan reached \(10"):
        client.queue.upsert("q10")
    with pytest.raises(QStashError, match=r"412.*queue limit of the free plan"):
        client.message.enqueue(queue="q10", url=URL, body="x")
    with pytest.raises(QStashError, match=r"412.*queue limit of the free plan"):
        client.message.batch([{"queue": "q10", "url": URL, "body": "x"}])
    assert len(client.queue.list()) == 10
    assert len(qstash.messages) == 2  # the refused ones lost nothing, created nothing
    client.queue.delete("q0")
    client.queue.upsert("q10")


@free
def test_free_plan_counts_a_resumed_schedule_as_active(qstash: FakeQStash, client: QStash) -> None:
    for i in range(10):
        client.schedule.create(destination=URL, cron="* * * * *", schedule_id=f"s{i}")
    client.schedule.pause("s0")
    client.schedule.create(destination=URL, cron="* * * * *", schedule_id="s10")
    with pytest.raises(QStashError, match=r"412.*active schedule limit of the free plan"):
        client.schedule.resume("s0")
    assert client.schedule.get("s0").paused
    client.schedule.resume("s1")  # not paused: resuming it activates nothing
    client.schedule.delete("s10")
    client.schedule.resume("s0")
    assert not client.schedule.get("s0").paused
