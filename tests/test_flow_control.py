"""Flow control through the real SDK: rate limits on virtual time, pause, pin, reset, the
values refused; and what ``next_due()`` reports for messages a key or a queue holds."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError

from pytest_qstash import FakeQStash

START = datetime(2026, 5, 1, tzinfo=timezone.utc)


@pytest.fixture
def hits(qstash: FakeQStash) -> list[datetime]:
    got: list[datetime] = []
    qstash.mount("https://api.test", lambda request: got.append(qstash.now))
    return got


def publish(client: QStash, n: int, **flow: int | str) -> None:
    for i in range(n):
        client.message.publish(
            url=f"https://api.test/{i}",
            body=str(i),
            flow_control={"key": "partner-api", **flow},  # type: ignore[typeddict-item]
        )


@pytest.mark.qstash(start=START)
def test_rate_spreads_deliveries_over_periods(
    qstash: FakeQStash, client: QStash, hits: list[datetime]
) -> None:
    publish(client, 5, rate=2, period="1m")

    assert len(qstash.tick()) == 2
    info = client.flow_control.get("partner-api")
    assert (info.rate_max, info.rate_period, info.wait_list_size) == (2, 60, 3)

    qstash.advance("10m")
    assert hits == [START] * 2 + [START + timedelta(minutes=1)] * 2 + [START + timedelta(minutes=2)]
    # Each message went out in publish order.
    assert [d.url for d in qstash.deliveries] == [f"https://api.test/{i}" for i in range(5)]
    assert client.flow_control.get("partner-api").wait_list_size == 0


@pytest.mark.qstash(start=START)
def test_message_keeps_its_flow_control_settings(
    qstash: FakeQStash, client: QStash, hits: list[datetime]
) -> None:
    publish(client, 1, rate=23, period="1h30m3s")
    message = client.message.get(qstash.messages[0].message_id)
    assert message.flow_control is not None
    assert message.flow_control.key == "partner-api"
    assert message.flow_control.rate == 23
    assert message.flow_control.period == 5403
    assert message.flow_control.parallelism is None


@pytest.mark.qstash(start=START)
def test_paused_key_holds_messages_until_resumed(
    qstash: FakeQStash, client: QStash, hits: list[datetime]
) -> None:
    publish(client, 1, parallelism=1)
    qstash.tick()
    client.flow_control.pause("partner-api")
    publish(client, 2, parallelism=1)

    qstash.advance("1d")
    assert len(hits) == 1
    assert client.flow_control.get("partner-api").is_paused is True
    assert client.flow_control.get("partner-api").wait_list_size == 2

    client.flow_control.resume("partner-api")
    qstash.tick()
    assert len(hits) == 3


@pytest.mark.qstash(start=START)
def test_pin_overrides_message_limits_and_unpin_releases_them(
    qstash: FakeQStash, client: QStash, hits: list[datetime]
) -> None:
    publish(client, 1, rate=100)
    qstash.tick()
    client.flow_control.pin("partner-api", {"parallelism": 3, "rate": 1, "period": 120})
    info = client.flow_control.get("partner-api")
    assert (info.parallelism_max, info.rate_max, info.rate_period) == (3, 1, 120)
    assert info.is_pinned_parallelism
    assert info.is_pinned_rate

    publish(client, 2, rate=100)
    qstash.tick()
    assert len(hits) == 2  # the pinned rate of 1 per 120 s wins over the messages' 100
    qstash.advance("2m")
    assert len(hits) == 3

    client.flow_control.unpin("partner-api", {"parallelism": True})
    info = client.flow_control.get("partner-api")
    assert not info.is_pinned_parallelism
    assert info.is_pinned_rate


@pytest.mark.qstash(start=START)
def test_reset_rate_starts_a_new_period_now(
    qstash: FakeQStash, client: QStash, hits: list[datetime]
) -> None:
    publish(client, 3, rate=1, period="1h")
    qstash.tick()
    assert len(hits) == 1
    client.flow_control.reset_rate("partner-api")
    qstash.tick()
    assert len(hits) == 2
    assert client.flow_control.get("partner-api").rate_count == 1


def test_flow_control_errors_and_global_parallelism(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match="404"):
        client.flow_control.get("unknown-key")
    info = client.flow_control.get_global_parallelism()
    assert info.parallelism_max > 0
    assert info.parallelism_count == 0


@pytest.mark.asyncio
@pytest.mark.qstash(start=START)
async def test_async_rate_limit(qstash: FakeQStash, hits: list[datetime]) -> None:
    client = AsyncQStash(os.environ["QSTASH_TOKEN"])
    for i in range(3):
        await client.message.publish(
            url=f"https://api.test/{i}", flow_control={"key": "k", "rate": 1, "period": 10}
        )
    await qstash.aadvance("25s")
    assert hits == [START, START + timedelta(seconds=10), START + timedelta(seconds=20)]
    assert (await client.flow_control.get("k")).wait_list_size == 0


# -- refused values ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flow", "fragment"),
    [
        ({"key": "k", "rate": 0}, "rate must be a whole number of at least 1"),
        ({"key": "k", "parallelism": 0}, "parallelism must be a whole number of at least 1"),
        ({"key": "k", "rate": -1}, "rate must be a whole number of at least 1"),
        ({"key": "", "rate": 1}, "invalid Upstash-Flow-Control-Key ''"),
        ({"key": "k", "rate": 1, "period": "8d"}, "period must be a duration from 1s to 7d"),
        ({"key": "k", "rate": 1, "period": 604801}, "period must be a duration from 1s to 7d"),
        ({"key": "k", "rate": 1, "period": "0s"}, "period must be a duration from 1s to 7d"),
        ({"key": "k", "rate": 1, "period": "soon"}, "period must be a duration from 1s to 7d"),
    ],
)
def test_invalid_flow_control_is_refused_at_publish(
    qstash: FakeQStash, client: QStash, flow: dict[str, object], fragment: str
) -> None:
    with pytest.raises(QStashError, match="400") as info:
        client.message.publish(url="https://api.test/x", flow_control=flow)  # type: ignore[arg-type]
    assert fragment in str(info.value)
    # The refusal says what is accepted.
    assert "parallelism=<int >= 1>, rate=<int >= 1>, period=<duration from 1s to 7d>" in str(
        info.value
    )
    assert qstash.messages == []


def test_invalid_flow_control_is_refused_on_a_schedule(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match="rate must be a whole number of at least 1"):
        client.schedule.create(
            destination="https://api.test/x", cron="* * * * *", flow_control={"key": "k", "rate": 0}
        )
    assert qstash.schedules == []


def test_a_flow_control_value_without_a_key_is_refused(qstash: FakeQStash) -> None:
    response = httpx.post(
        "https://qstash.upstash.io/v2/publish/https://api.test/x",
        headers={
            "Authorization": f"Bearer {os.environ['QSTASH_TOKEN']}",
            "Upstash-Flow-Control-Value": "rate=1",
        },
    )
    assert response.status_code == 400
    assert "needs an Upstash-Flow-Control-Key" in response.json()["error"]


def test_a_one_week_period_is_the_longest_taken(
    qstash: FakeQStash, client: QStash, hits: list[datetime]
) -> None:
    publish(client, 1, rate=1, period="7d")
    assert qstash.messages[0].flow_control is not None
    assert qstash.messages[0].flow_control.period == 7 * 24 * 3600
    qstash.tick()

    with pytest.raises(QStashError, match="at most 604800"):
        client.flow_control.pin("partner-api", {"rate": 1, "period": 604801})
    # A refused pin changes nothing.
    assert client.flow_control.get("partner-api").is_pinned_rate is False


# -- what next_due() reports for held messages ------------------------------------------------
@pytest.mark.qstash(start=START)
def test_next_due_skips_messages_held_by_a_paused_key(
    qstash: FakeQStash, client: QStash, hits: list[datetime]
) -> None:
    client.flow_control.pause("partner-api")
    publish(client, 1, parallelism=1)

    assert qstash.next_due() is None

    client.flow_control.resume("partner-api")
    assert qstash.next_due() == START
    assert len(qstash.tick()) == 1


@pytest.mark.qstash(start=START)
def test_next_due_of_a_message_over_its_rate_is_the_next_period(
    qstash: FakeQStash, client: QStash, hits: list[datetime]
) -> None:
    publish(client, 1, rate=1, period="1m")
    qstash.tick()
    publish(client, 1, rate=1, period="1m")

    assert qstash.next_due() == START + timedelta(minutes=1)
    assert qstash.tick() == []
    assert [d.at for d in qstash.advance("1m")] == [START + timedelta(minutes=1)]


@pytest.mark.qstash(start=START)
def test_next_due_skips_messages_waiting_in_a_paused_queue(
    qstash: FakeQStash, client: QStash, hits: list[datetime]
) -> None:
    client.queue.upsert("jobs", parallelism=1, paused=True)
    client.message.enqueue(queue="jobs", url="https://api.test/job", body="1")

    assert qstash.next_due() is None
    assert qstash.advance("1d") == []

    client.queue.resume("jobs")
    assert qstash.next_due() == START + timedelta(days=1)
    assert len(qstash.tick()) == 1
    assert qstash.next_due() is None


def test_flow_keys_are_listed(qstash: FakeQStash, client: QStash, hits: list[datetime]) -> None:
    publish(client, 3, parallelism=1)
    qstash.handler_takes("https://api.test", "10s")
    qstash.advance("1s")  # the first attempt is in flight, the other two wait for the key
    key = qstash.flow_keys.one(key="partner-api")
    assert (key.parallelism, key.active, key.wait_list_size) == (1, 1, 2)
    qstash.drain()
    assert qstash.flow_keys.one(key="partner-api").wait_list_size == 0
