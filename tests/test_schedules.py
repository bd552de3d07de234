"""Cron schedules through the real SDK: created, listed, fired on virtual time, paused."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pytest
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pytest_qstash import FakeQStash

BASE = "https://cron.test"


def make_app(received: list[tuple[datetime, str, dict[str, str]]]) -> Starlette:
    async def tick(request: Request) -> Response:
        received.append(
            (datetime.now(timezone.utc), (await request.body()).decode(), dict(request.headers))
        )
        return Response("ok")

    return Starlette(routes=[Route("/tick", tick, methods=["POST", "PUT"])])


@pytest.fixture
def received(qstash: FakeQStash) -> list[tuple[datetime, str, dict[str, str]]]:
    got: list[tuple[datetime, str, dict[str, str]]] = []
    qstash.mount(BASE, make_app(got))
    return got


@pytest.mark.qstash(start="2026-03-01T10:00:30Z")
def test_minutely_schedule_fires_once_a_minute_on_the_minute(
    qstash: FakeQStash, client: QStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    schedule_id = client.schedule.create(
        destination=f"{BASE}/tick", cron="* * * * *", body="hello", retries=1
    )

    deliveries = qstash.advance("10m")

    assert len(deliveries) == 10
    first = datetime(2026, 3, 1, 10, 1, tzinfo=timezone.utc)
    assert [d.at for d in deliveries] == [first + timedelta(minutes=i) for i in range(10)]
    # The app's clock reads the firing time, and each delivery names its schedule.
    assert [when for when, _, _ in received] == [d.at for d in deliveries]
    assert {headers["upstash-schedule-id"] for _, _, headers in received} == {schedule_id}
    assert {body for _, body, _ in received} == {"hello"}
    assert all(m.schedule_id == schedule_id and m.max_retries == 1 for m in qstash.messages)


@pytest.mark.qstash(start="2026-03-01T00:00:00Z")
def test_get_and_list_show_the_schedule_as_the_sdk_reads_it(
    qstash: FakeQStash, client: QStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    schedule_id = client.schedule.create_json(
        destination=f"{BASE}/tick",
        cron=" */15 * * * * ",
        body={"report": "daily"},
        method="PUT",
        headers={"X-Tenant": "acme"},
        delay="30s",
        schedule_id="report.every-15",
        label="reports",
    )
    assert schedule_id == "report.every-15"

    schedule = client.schedule.get(schedule_id)
    assert schedule.cron == "*/15 * * * *"  # stored trimmed
    assert schedule.destination == f"{BASE}/tick"
    assert schedule.method == "PUT"
    assert schedule.body == '{"report": "daily"}'
    assert schedule.headers == {"Content-Type": ["application/json"], "X-Tenant": ["acme"]}
    assert schedule.delay == 30
    assert schedule.retries == 3
    assert schedule.label == "reports"
    assert schedule.paused is False
    assert schedule.next_schedule_time == int(
        datetime(2026, 3, 1, 0, 15, tzinfo=timezone.utc).timestamp() * 1000
    )
    assert [s.schedule_id for s in client.schedule.list()] == [schedule_id]
    assert qstash.schedules[0].next_run == datetime(2026, 3, 1, 0, 15, tzinfo=timezone.utc)

    # The delay shifts each produced message, not the schedule.
    deliveries = qstash.advance("16m")
    assert [d.at for d in deliveries] == [datetime(2026, 3, 1, 0, 15, 30, tzinfo=timezone.utc)]
    assert deliveries[0].method == "PUT"
    states = client.schedule.get(schedule_id).last_schedule_states
    assert states is not None
    assert [s.value for s in states.values()] == ["SUCCESS"]


@pytest.mark.qstash(start="2026-03-01T00:00:00Z")
def test_paused_schedule_skips_firings_and_resumes_on_its_cron(
    qstash: FakeQStash, client: QStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    schedule_id = client.schedule.create(destination=f"{BASE}/tick", cron="0 * * * *")
    client.schedule.pause(schedule_id)
    assert client.schedule.get(schedule_id).paused is True

    assert qstash.advance("5h") == []

    client.schedule.resume(schedule_id)
    deliveries = qstash.advance("2h")
    assert [d.at.hour for d in deliveries] == [6, 7]


def test_overwriting_a_schedule_replaces_every_setting(
    qstash: FakeQStash, client: QStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    client.schedule.create(
        destination=f"{BASE}/tick", cron="* * * * *", body="old", schedule_id="sync"
    )
    client.schedule.create(destination=f"{BASE}/tick", cron="*/2 * * * *", schedule_id="sync")

    schedule = client.schedule.get("sync")
    assert schedule.cron == "*/2 * * * *"
    assert schedule.body is None
    assert len(client.schedule.list()) == 1
    qstash.advance("10m")
    assert len(received) == 5
    assert {body for _, body, _ in received} == {""}


def test_deleted_schedule_never_fires_again(
    qstash: FakeQStash, client: QStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    schedule_id = client.schedule.create(destination=f"{BASE}/tick", cron="* * * * *")
    qstash.advance("3m")
    client.schedule.delete(schedule_id)

    assert qstash.advance("365d") == []
    assert len(received) == 3
    with pytest.raises(QStashError, match="404"):
        client.schedule.get(schedule_id)


@pytest.mark.qstash(start="2026-03-07T12:00:00Z")
def test_cron_tz_prefix_follows_the_zone_across_dst(
    qstash: FakeQStash, client: QStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    # 04:00 in New York is 09:00 UTC before the 2026-03-08 DST change and 08:00 after it.
    client.schedule.create(destination=f"{BASE}/tick", cron="CRON_TZ=America/New_York 0 4 * * *")
    deliveries = qstash.advance("2d")
    assert [d.at for d in deliveries] == [
        datetime(2026, 3, 8, 8, 0, tzinfo=timezone.utc),
        datetime(2026, 3, 9, 8, 0, tzinfo=timezone.utc),
    ]


def test_schedule_to_a_url_group_fans_out_at_each_firing(
    qstash: FakeQStash, client: QStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    client.url_group.upsert_endpoints(
        url_group="tickers",
        endpoints=[{"url": f"{BASE}/tick?n=1"}, {"url": f"{BASE}/tick?n=2"}],
    )
    client.schedule.create(destination="tickers", cron="*/5 * * * *")

    deliveries = qstash.advance("10m")

    assert sorted(d.url for d in deliveries) == sorted([f"{BASE}/tick?n=1", f"{BASE}/tick?n=2"] * 2)
    assert {headers["upstash-topic-name"] for _, _, headers in received} == {"tickers"}


@pytest.mark.parametrize(
    ("cron", "fragment"),
    [
        ("* * * *", "expected 5 fields"),
        ("61 * * * *", "invalid cron"),
        ("CRON_TZ=Mars/Olympus 0 4 * * *", "unknown time zone"),
    ],
)
def test_bad_cron_is_refused_with_400(
    qstash: FakeQStash, client: QStash, cron: str, fragment: str
) -> None:
    with pytest.raises(QStashError, match="400") as info:
        client.schedule.create(destination=f"{BASE}/tick", cron=cron)
    assert fragment in str(info.value)
    assert qstash.schedules == []


def test_schedule_to_unknown_destination_is_refused(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match="invalid destination url"):
        client.schedule.create(destination="no-such-group", cron="* * * * *")


def test_a_month_of_an_hourly_schedule_fires_once_per_hour(
    qstash: FakeQStash, client: QStash
) -> None:
    fired: list[int] = []
    qstash.mount("https://count.test", lambda request: fired.append(1))
    client.schedule.create(destination="https://count.test/", cron="0 * * * *")
    qstash.advance("30d")
    assert len(fired) == 30 * 24


@pytest.mark.asyncio
async def test_async_client_creates_and_fires_a_schedule(
    qstash: FakeQStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    client = AsyncQStash(os.environ["QSTASH_TOKEN"])
    schedule_id = await client.schedule.create(
        destination=f"{BASE}/tick", cron="* * * * *", body="async"
    )
    deliveries = await qstash.aadvance("2m")
    assert len(deliveries) == 2
    assert (await client.schedule.get(schedule_id)).cron == "* * * * *"
    await client.schedule.pause(schedule_id)
    assert await qstash.aadvance("10m") == []


@pytest.mark.qstash(max_deliveries_per_instant=10)
def test_firings_at_different_times_are_no_cascade(
    qstash: FakeQStash, client: QStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    # Each firing is at its own minute: however many one advance() crosses, the loop guard
    # (here 10 deliveries in a chain at one instant) has nothing to stop.
    client.schedule.create(destination=f"{BASE}/tick", cron="* * * * *")
    assert len(qstash.advance("1h")) == 60
