"""Cron schedules through the real SDK: created, listed, fired on virtual time, paused."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pytest_qstash import FakeQStash, Message

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
        ("? * * * *", "invalid cron"),  # "?" stands for "any" in the day fields only
        ("@every 1h", "@hourly"),  # the refusal lists the descriptors taken
        ("@reboot", "expected 5 fields"),
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


# -- one-time options, pausing, overwriting ---------------------------------------------------
API = "https://qstash.upstash.io"


def raw_create(destination: str, body: str = "", **headers: str) -> httpx.Response:
    """A schedule creation with headers the SDK never sends on schedules (deduplication,
    Upstash-Not-Before), straight to the API."""
    sent = {"Authorization": f"Bearer {os.environ['QSTASH_TOKEN']}", **headers}
    with httpx.Client() as http:
        return http.post(f"{API}/v2/schedules/{destination}", headers=sent, content=body)


@pytest.mark.qstash(start="2026-03-01T10:00:00Z")
def test_a_deduplication_id_deduplicates_the_creation_not_the_firings(
    qstash: FakeQStash, client: QStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    first = raw_create(
        f"{BASE}/tick", "x", **{"Upstash-Cron": "* * * * *", "Upstash-Deduplication-Id": "once"}
    )
    again = raw_create(
        f"{BASE}/tick", "x", **{"Upstash-Cron": "* * * * *", "Upstash-Deduplication-Id": "once"}
    )

    assert first.status_code == 200
    # A duplicate creation is accepted, answered with the existing schedule's id.
    assert (again.status_code, again.json()) == (202, first.json())
    assert [s.schedule_id for s in client.schedule.list()] == [first.json()["scheduleId"]]

    # Every firing is delivered: none is deduplicated into the one before.
    assert len(qstash.advance("30m")) == 30
    assert {m.deduplication_id for m in qstash.messages} == {None}

    # The id is remembered for the deduplication window (10 minutes), as for a publish.
    later = raw_create(
        f"{BASE}/tick", "x", **{"Upstash-Cron": "* * * * *", "Upstash-Deduplication-Id": "once"}
    )
    assert later.status_code == 200
    assert later.json() != first.json()


@pytest.mark.qstash(start="2026-03-01T10:00:00Z")
def test_content_based_deduplication_deduplicates_the_creation_not_the_firings(
    qstash: FakeQStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    options = {"Upstash-Cron": "* * * * *", "Upstash-Content-Based-Deduplication": "true"}
    first = raw_create(f"{BASE}/tick", "same", **options)
    duplicate = raw_create(f"{BASE}/tick", "same", **options)
    other_body = raw_create(f"{BASE}/tick", "other", **options)
    other_cron = raw_create(f"{BASE}/tick", "same", **{**options, "Upstash-Cron": "*/10 * * * *"})

    assert duplicate.json() == first.json()
    assert duplicate.status_code == 202
    ids = {r.json()["scheduleId"] for r in (first, other_body, other_cron)}
    assert len(ids) == 3
    assert {s.schedule_id for s in qstash.schedules} == ids

    # Two minutely schedules and one every 10 minutes: 30 + 30 + 3 firings, each delivered.
    assert len(qstash.advance("30m")) == 63


@pytest.mark.qstash(start="2026-03-01T10:00:00Z")
def test_not_before_does_not_apply_to_a_schedule(
    qstash: FakeQStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    tomorrow = int(datetime(2026, 3, 2, tzinfo=timezone.utc).timestamp())
    response = raw_create(
        f"{BASE}/tick",
        **{
            "Upstash-Cron": "* * * * *",
            "Upstash-Not-Before": str(tomorrow),
            "Upstash-Delay": "30s",
        },
    )
    assert response.status_code == 200

    # Ignored, it neither holds each firing's message until tomorrow nor hides the delay.
    deliveries = qstash.advance("3m")
    start = datetime(2026, 3, 1, 10, 0, 30, tzinfo=timezone.utc)
    assert [d.at for d in deliveries] == [start + timedelta(minutes=i) for i in (1, 2)]


@pytest.mark.qstash(start="2026-03-01T10:00:00Z")
def test_a_paused_schedule_costs_nothing_while_the_clock_moves(
    qstash: FakeQStash,
    client: QStash,
    received: list[tuple[datetime, str, dict[str, str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schedule_id = client.schedule.create(destination=f"{BASE}/tick", cron="* * * * *")
    assert len(qstash.advance("5m")) == 5
    client.schedule.pause(schedule_id)
    next_when_paused = client.schedule.get(schedule_id).next_schedule_time
    assert qstash.next_due() is None

    firings: list[str] = []
    fire = qstash.store.fire_schedule

    def counting_fire(schedule_id: str, generation: int) -> list[Message]:
        firings.append(schedule_id)
        return fire(schedule_id, generation)

    monkeypatch.setattr(qstash.store, "fire_schedule", counting_fire)

    assert qstash.advance("365d") == []

    # At most the one firing planned before the pause was looked at (and skipped): nothing
    # is planned per skipped minute, and nothing is left on the clock.
    assert len(firings) <= 1
    assert len(qstash.clock) == 0
    schedule = client.schedule.get(schedule_id)
    assert schedule.paused is True
    # Pausing does not move nextScheduleTime (QStash's documented behaviour).
    assert schedule.next_schedule_time == next_when_paused
    assert schedule.last_schedule_time == int(
        datetime(2026, 3, 1, 10, 5, tzinfo=timezone.utc).timestamp() * 1000
    )

    client.schedule.resume(schedule_id)
    resumed_at = qstash.now
    assert qstash.next_due() == resumed_at + timedelta(minutes=1)
    assert qstash.schedules[0].next_run == resumed_at + timedelta(minutes=1)
    assert [d.at for d in qstash.advance("2m")] == [
        resumed_at + timedelta(minutes=1),
        resumed_at + timedelta(minutes=2),
    ]


@pytest.mark.qstash(start="2026-03-01T10:00:00Z")
def test_overwriting_a_paused_schedule_keeps_it_paused_and_keeps_its_creation_time(
    qstash: FakeQStash, client: QStash, received: list[tuple[datetime, str, dict[str, str]]]
) -> None:
    client.schedule.create(destination=f"{BASE}/tick", cron="0 * * * *", schedule_id="sync")
    created_at = client.schedule.get("sync").created_at
    qstash.advance("2h")
    client.schedule.pause("sync")

    client.schedule.create(
        destination=f"{BASE}/tick", cron="*/10 * * * *", body="new", schedule_id="sync"
    )

    schedule = client.schedule.get("sync")
    assert (schedule.cron, schedule.body) == ("*/10 * * * *", "new")
    assert schedule.paused is True
    assert schedule.created_at == created_at
    assert qstash.advance("1h") == []

    client.schedule.resume("sync")
    assert len(qstash.advance("1h")) == 6
    assert {body for _, body, _ in received[2:]} == {"new"}


def test_a_schedule_held_by_the_test_shows_an_overwrite(qstash: FakeQStash, client: QStash) -> None:
    client.schedule.create(destination=f"{BASE}/tick", cron="0 9 * * *", schedule_id="daily")
    [held] = qstash.schedules

    client.schedule.create(destination=f"{BASE}/tick", cron="30 9 * * *", schedule_id="daily")
    client.schedule.pause("daily")

    assert qstash.schedules == [held]  # the same object, updated in place
    assert (held.cron, held.paused) == ("30 9 * * *", True)


@pytest.mark.parametrize(
    ("cron", "advance", "expected"),
    [
        ("@hourly", "2h", ["2026-03-01T11:00", "2026-03-01T12:00"]),
        ("@daily", "2d", ["2026-03-02T00:00", "2026-03-03T00:00"]),
        ("@midnight", "1d", ["2026-03-02T00:00"]),
        ("@weekly", "14d", ["2026-03-08T00:00", "2026-03-15T00:00"]),  # Sundays
        ("@monthly", "62d", ["2026-04-01T00:00", "2026-05-01T00:00"]),
        ("@yearly", "400d", ["2027-01-01T00:00"]),
        ("@annually", "400d", ["2027-01-01T00:00"]),
        ("0 9 ? * MON", "8d", ["2026-03-02T09:00", "2026-03-09T09:00"]),
        ("30 8 1 * ?", "40d", ["2026-04-01T08:30"]),
        # EST (UTC-5) until the 2026-03-08 switch to daylight-saving time.
        ("CRON_TZ=America/New_York @daily", "1d", ["2026-03-02T05:00"]),
    ],
)
@pytest.mark.qstash(start="2026-03-01T10:30:00Z")
def test_question_marks_and_descriptors_are_taken_as_robfig_cron_reads_them(
    qstash: FakeQStash, client: QStash, cron: str, advance: str, expected: list[str]
) -> None:
    qstash.mount("https://count.test", lambda request: None)
    schedule_id = client.schedule.create(destination="https://count.test/", cron=cron)

    deliveries = qstash.advance(advance)

    assert [d.at.strftime("%Y-%m-%dT%H:%M") for d in deliveries] == expected
    assert client.schedule.get(schedule_id).cron == cron  # stored as given


def test_url_group_default_headers_are_not_served_yet(qstash: FakeQStash) -> None:
    # PATCH /v2/topics/{name} is documented in one line, not how its headers combine with a
    # message's own: a clear 501, as for other endpoints not served, not a 405.
    response = httpx.patch(
        f"{API}/v2/topics/orders",
        headers={"Authorization": f"Bearer {os.environ['QSTASH_TOKEN']}"},
        json={"headers": {"X-Tenant": "acme"}},
    )
    assert response.status_code == 501
    error = response.json()["error"]
    assert "PATCH /v2/topics/orders is not implemented by pytest-qstash yet" in error
