"""Virtual time: now, tick, advance, advance_to (and their async forms), the app's clock."""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import freezegun
import httpx
import pydantic
import pytest
import time_machine
from apps import WebApp, make_fastapi_app, make_flask_app
from ci_requirements import BY_DESIGN
from inner_pytest import run_inner
from qstash import AsyncQStash, QStash
from qstash.message import PublishResponse

from pytest_qstash import AppClockWarning, AsyncContextError, DeliveryLoopError, FakeQStash
from pytest_qstash.testing import appclock

BASE = "https://app.example.com"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
at_start = pytest.mark.qstash(start="2026-01-01T00:00:00Z")


@pytest.fixture
def web(qstash: FakeQStash) -> WebApp:
    app = make_fastapi_app()
    qstash.mount(BASE, app.app)
    return app


def publish(
    client: QStash, url: str = f"{BASE}/webhook", body: str = "b", **options: object
) -> str:
    response = client.message.publish(url=url, body=body, **options)  # type: ignore[arg-type]
    assert isinstance(response, PublishResponse)
    return response.message_id


# -- now ---------------------------------------------------------------------------------------
def test_now_starts_at_the_real_time_and_is_aware_utc() -> None:
    before = datetime.now(timezone.utc)
    fake = FakeQStash()
    after = datetime.now(timezone.utc)

    assert fake.now.tzinfo is not None
    assert fake.now.utcoffset() == timedelta(0)
    # The real time, to the whole second (so whole-second sleeps land on whole seconds).
    assert before.replace(microsecond=0) <= fake.now <= after
    assert fake.now.microsecond == 0


@at_start
def test_start_from_the_marker_and_the_clock_stands_still(qstash: FakeQStash) -> None:
    assert qstash.now == START
    # The test's own clock reads the fake's too, and does not tick by itself.
    assert time.time() == START.timestamp()
    assert datetime.now(timezone.utc) == START
    assert qstash.tick() == []
    assert qstash.now == START


@pytest.mark.parametrize(
    "start", ["2026-03-01T12:00:00Z", "2026-03-01T12:00:00.250Z", "2026-03-01T12:00:00.999Z"]
)
def test_the_app_reads_the_start_to_the_millisecond(start: str) -> None:
    """Whole seconds and milliseconds alike: the app's wall clock is exactly the fake's."""
    with FakeQStash(start=start) as fake:
        assert time.time_ns() == round(fake.now.timestamp() * 1000) * 1_000_000
        assert datetime.now(timezone.utc) == fake.now
        assert datetime.now(timezone.utc) == datetime.fromisoformat(start.replace("Z", "+00:00"))


@pytest.mark.parametrize(
    "start",
    [
        START,
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00+00:00",
        START.timestamp(),
        START.replace(tzinfo=None),  # naive: read as UTC
    ],
)
def test_start_forms(start: datetime | str | float) -> None:
    assert FakeQStash(start=start).now == START


def test_bad_start_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="ISO 8601"):
        FakeQStash(start="next tuesday")


# -- advance -----------------------------------------------------------------------------------
@at_start
@pytest.mark.parametrize(
    ("duration", "expected"),
    [
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("500ms", timedelta(milliseconds=500)),
        ("90s", timedelta(seconds=90)),
        ("7d", timedelta(days=7)),
        (90, timedelta(seconds=90)),
        (1.5, timedelta(seconds=1.5)),
        (0, timedelta(0)),
        (timedelta(minutes=5), timedelta(minutes=5)),
    ],
)
def test_advance_durations(
    qstash: FakeQStash, duration: str | float | timedelta, expected: timedelta
) -> None:
    assert qstash.advance(duration) == []
    assert qstash.now == START + expected
    assert time.time() == (START + expected).timestamp()


@pytest.mark.parametrize("bad", ["7x", "1h30", "", "h", "1.2.3s", "1d 2h"])
def test_advance_bad_duration_names_the_units(qstash: FakeQStash, bad: str) -> None:
    before = qstash.now
    with pytest.raises(ValueError, match=r"units: ms, s, m, h, d"):
        qstash.advance(bad)
    assert qstash.now == before


@pytest.mark.parametrize("negative", [-1, -0.5, "-5s", timedelta(seconds=-1)])
def test_time_never_goes_backwards(qstash: FakeQStash, negative: str | float | timedelta) -> None:
    before = qstash.now
    with pytest.raises(ValueError, match=r"it is negative, and time only moves forward"):
        qstash.advance(negative)
    assert qstash.now == before


@pytest.mark.parametrize("far", [1e12, "3000000000d", timedelta(days=3_000_000)])
def test_advance_beyond_the_year_9999_is_refused(qstash: FakeQStash, far: object) -> None:
    before = qstash.now
    with pytest.raises(ValueError, match=r"past the year 9999"):
        qstash.advance(far)  # type: ignore[arg-type]
    assert qstash.now == before
    assert repr(qstash)  # the fake is still whole


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), True])
def test_advance_refuses_non_durations(qstash: FakeQStash, bad: float) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        qstash.advance(bad)


@at_start
def test_compound_duration_with_milliseconds(qstash: FakeQStash) -> None:
    qstash.advance("1d2h3m4s500ms")
    assert qstash.now == START + timedelta(days=1, hours=2, minutes=3, seconds=4, milliseconds=500)


def test_advance_to_the_past_is_a_value_error(qstash: FakeQStash) -> None:
    with pytest.raises(ValueError, match="backwards"):
        qstash.advance_to(qstash.now - timedelta(seconds=1))
    assert qstash.advance_to(qstash.now) == []  # now itself is fine


@at_start
def test_advance_to_forms(qstash: FakeQStash) -> None:
    qstash.advance_to("2026-01-02T00:00:00Z")
    assert qstash.now == START + timedelta(days=1)
    qstash.advance_to(datetime(2026, 1, 3))  # naive: read as UTC
    assert qstash.now == START + timedelta(days=2)
    qstash.advance_to(START + timedelta(days=3, hours=1))
    assert qstash.now == START + timedelta(days=3, hours=1)


@at_start
def test_ten_idle_years_are_instant(qstash: FakeQStash) -> None:
    assert qstash.advance("3650d") == []
    assert qstash.now == START + timedelta(days=3650)


# -- delivering on time ------------------------------------------------------------------------
@at_start
def test_each_message_is_delivered_at_its_own_time_in_order(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    not_before = int((START + timedelta(hours=2, minutes=30)).timestamp())
    publish(client, body="3h", delay="3h")
    publish(client, body="1m", delay="1m")
    publish(client, body="now")
    publish(client, body="2h30m", not_before=not_before)
    publish(client, body="10s", delay=10)

    deliveries = qstash.advance("1d")

    assert [d.body for d in deliveries] == ["now", "10s", "1m", "2h30m", "3h"]
    assert [d.at - START for d in deliveries] == [
        timedelta(0),
        timedelta(seconds=10),
        timedelta(minutes=1),
        timedelta(hours=2, minutes=30),
        timedelta(hours=3),
    ]
    # The app saw its own clock at each delivery's moment.
    assert [r.now for r in web.inbox.received] == [d.at for d in deliveries]
    assert [r.time for r in web.inbox.received] == [d.at.timestamp() for d in deliveries]
    assert web.inbox.signature_errors == []
    assert qstash.now == START + timedelta(days=1)


@at_start
def test_advance_stops_at_its_target(qstash: FakeQStash, client: QStash, web: WebApp) -> None:
    publish(client, body="soon", delay="1h")
    publish(client, body="later", delay="2h")

    assert [d.body for d in qstash.advance("1h")] == ["soon"]  # due exactly at the target
    assert qstash.advance("59m59s") == []
    assert [d.body for d in qstash.advance("1s")] == ["later"]


@at_start
def test_retries_are_delivered_at_their_backoff(qstash: FakeQStash, client: QStash) -> None:
    app = make_flask_app()
    qstash.mount(BASE, app.app)
    publish(client, f"{BASE}/http-500")

    deliveries = qstash.advance("7d")

    # QStash's default backoff: 12.182 s, 2 m 28.413 s, 30 m 8.042 s after each failure.
    offsets = [timedelta(0)]
    for step_ms in (12_182, 148_413, 1_808_042):
        offsets.append(offsets[-1] + timedelta(milliseconds=step_ms))
    assert [d.at - START for d in deliveries] == offsets
    assert [d.retried for d in deliveries] == [0, 1, 2, 3]
    assert [r.now for r in app.inbox.received] == [d.at for d in deliveries]
    assert qstash.messages[0].state == "FAILED"


@pytest.mark.parametrize(
    "library",
    [
        pytest.param("time-machine", marks=pytest.mark.qstash(time_library="time-machine")),
        pytest.param("freezegun", marks=pytest.mark.qstash(time_library="freezegun")),
    ],
)
def test_signatures_verify_after_a_long_advance(
    qstash: FakeQStash, client: QStash, web: WebApp, library: str
) -> None:
    start = qstash.now
    publish(client, body="in a month", delay="30d")

    [delivery] = qstash.advance("30d")

    # The Receiver checks exp against the app's clock, which is on the virtual one.
    assert delivery.status == 200
    assert web.inbox.signature_errors == []
    [received] = web.inbox.received
    assert received.now == start + timedelta(days=30)
    assert received.time == (start + timedelta(days=30)).timestamp()


@pytest.mark.parametrize(
    "library",
    [
        pytest.param("time-machine", marks=pytest.mark.qstash(time_library="time-machine")),
        pytest.param("freezegun", marks=pytest.mark.qstash(time_library="freezegun")),
    ],
)
def test_only_wall_time_is_virtual_timers_keep_running(qstash: FakeQStash, library: str) -> None:
    # A deadline loop or a timeout measured with monotonic/perf_counter must still end: the
    # timers read the real ones (frozen, they would read the virtual wall clock).
    def timers() -> list[float]:
        return [
            time.monotonic(),
            time.perf_counter(),
            time.monotonic_ns() / 1e9,
            time.perf_counter_ns() / 1e9,
        ]

    assert time.time() == qstash.now.timestamp()  # the wall clock is on qstash.now
    assert all(abs(reading - time.time()) > 3600 for reading in timers())
    qstash.advance("1h")
    assert time.time() == qstash.now.timestamp()
    assert all(abs(reading - time.time()) > 3600 for reading in timers())


@pytest.mark.parametrize(
    "off",
    [
        pytest.param("freeze_time=False", marks=pytest.mark.qstash(freeze_time=False)),
        pytest.param("time_library=none", marks=pytest.mark.qstash(time_library="none")),
    ],
)
@pytest.mark.qstash(start="2030-06-01T00:00:00Z")
def test_freeze_time_off_reads_the_real_clock(
    qstash: FakeQStash, client: QStash, web: WebApp, off: str
) -> None:
    publish(client, body="real time", delay="1h")

    [delivery] = qstash.advance("2h")

    assert delivery.at == datetime(2030, 6, 1, 1, tzinfo=timezone.utc)  # virtual time moved
    assert delivery.status == 200  # signed with the real clock, which the app reads
    assert web.inbox.signature_errors == []
    [received] = web.inbox.received
    assert abs(received.time - time.time()) < 60
    assert received.now.year < 2030


# -- async -------------------------------------------------------------------------------------
@pytest.mark.asyncio
@at_start
async def test_async_forms(qstash: FakeQStash, aclient: AsyncQStash, web: WebApp) -> None:
    await aclient.message.publish(url=f"{BASE}/webhook", body="a", delay="1m")
    await aclient.message.publish(url=f"{BASE}/webhook", body="b", delay="1h")
    await aclient.message.publish(url=f"{BASE}/webhook", body="c", delay="1d")

    assert await qstash.atick() == []
    assert [d.body for d in await qstash.aadvance("1m")] == ["a"]
    assert [d.body for d in await qstash.aadvance(timedelta(minutes=59))] == ["b"]
    assert [d.body for d in await qstash.aadvance_to("2026-01-02T00:00:00Z")] == ["c"]
    assert [r.now - START for r in web.inbox.received] == [
        timedelta(minutes=1),
        timedelta(hours=1),  # delays count from the publish, not from the last advance
        timedelta(days=1),
    ]
    assert web.inbox.signature_errors == []


@pytest.mark.asyncio
@pytest.mark.qstash(time_library="freezegun", start="2026-01-01T00:00:00Z")
@pytest.mark.parametrize("factory", [make_fastapi_app, make_flask_app])
async def test_async_delivery_under_freezegun(
    qstash: FakeQStash, aclient: AsyncQStash, factory: Callable[[], WebApp]
) -> None:
    # freezegun leaves the loop's monotonic clock alone, so the app still runs on the loop.
    app = factory()
    qstash.mount(BASE, app.app)
    await aclient.message.publish(url=f"{BASE}/webhook", body="frozen", delay="2h")

    [delivery] = await qstash.aadvance("1d")

    assert delivery.status == 200
    assert app.inbox.signature_errors == []
    assert [r.now for r in app.inbox.received] == [START + timedelta(hours=2)]
    assert time.time() == (START + timedelta(days=1)).timestamp()


@pytest.mark.anyio
async def test_async_bad_arguments(qstash: FakeQStash) -> None:
    with pytest.raises(ValueError, match="units"):
        await qstash.aadvance("7x")
    with pytest.raises(ValueError, match="backwards"):
        await qstash.aadvance_to(qstash.now - timedelta(days=1))


@pytest.mark.asyncio
async def test_sync_forms_inside_a_running_loop_say_to_await(qstash: FakeQStash) -> None:
    with pytest.raises(AsyncContextError, match=r"await qstash\.atick\("):
        qstash.tick()
    with pytest.raises(AsyncContextError, match=r"await qstash\.aadvance\("):
        qstash.advance("1s")
    with pytest.raises(RuntimeError, match=r"await qstash\.aadvance_to\("):
        qstash.advance_to(qstash.now)


_TZ_AT_IMPORT = os.environ.get("TZ")


@pytest.mark.qstash(time_library="time-machine")
def test_the_process_time_zone_is_left_alone(qstash: FakeQStash) -> None:
    # Only the instant moves: an app formatting local times keeps its own zone.
    assert os.environ.get("TZ") == _TZ_AT_IMPORT


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> object:
    """The process in New York's time zone for one test (TZ is read by tzset)."""
    if not hasattr(time, "tzset"):
        pytest.skip(BY_DESIGN.tzset)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("library", ["freezegun", "time-machine"])
def test_the_apps_local_time_follows_the_zone_and_its_dst(new_york: object, library: str) -> None:
    # Naive datetime.now() is local time, whichever library moves the clock; 2026-03-08 is
    # New York's spring-forward day, so the offset changes during the advance.
    with FakeQStash(start="2026-03-07T12:00:00Z", time_library=library) as fake:
        assert datetime.now() == datetime(2026, 3, 7, 7, 0)
        assert datetime.now().astimezone() == fake.now
        fake.advance("2d")
        assert datetime.now() == datetime(2026, 3, 9, 8, 0)
        assert datetime.now().astimezone().utcoffset() == timedelta(hours=-4)
        assert datetime.now().astimezone() == fake.now


@pytest.mark.parametrize(
    ("moment", "error"),
    [
        (None, TypeError),
        (float("inf"), ValueError),
        (float("nan"), ValueError),
        (datetime.max, ValueError),
        (1e20, ValueError),  # far beyond 9999: a timestamp in microseconds, say
        (-1, ValueError),
    ],
)
def test_advance_to_refuses_what_is_no_moment(
    qstash: FakeQStash, moment: object, error: type[Exception]
) -> None:
    before = qstash.now
    with pytest.raises(error, match="invalid moment"):
        qstash.advance_to(moment)  # type: ignore[arg-type]
    assert qstash.now == before
    assert qstash.advance("1s") == []  # the fake is still whole


@pytest.mark.parametrize("start", [1e20, float("nan"), "1e20"])
def test_a_start_out_of_range_is_refused_at_once(start: object) -> None:
    with pytest.raises(ValueError, match="invalid moment"):
        FakeQStash(start=start)  # type: ignore[arg-type]


def test_a_start_in_unix_seconds_may_be_a_string() -> None:
    assert FakeQStash(start="1767225600").now == datetime(2026, 1, 1, tzinfo=timezone.utc)


# -- drain -------------------------------------------------------------------------------------
@at_start
def test_drain_delivers_everything_and_stops_at_the_last_delivery(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    publish(client, delay="10m")
    publish(client, f"{BASE}/http-500", retries=2)  # attempts at 0, 12.182 s, 160.595 s

    deliveries = qstash.drain()

    assert [d.at - START for d in deliveries] == [
        timedelta(0),
        timedelta(seconds=12.182),
        timedelta(seconds=160.595),
        timedelta(minutes=10),
    ]
    assert qstash.now == START + timedelta(minutes=10)  # not 30 days on
    assert {m.state for m in qstash.messages} == {"DELIVERED", "FAILED"}
    assert qstash.next_due() is None
    assert qstash.drain() == []  # idle: nothing moves
    assert qstash.now == START + timedelta(minutes=10)


@at_start
def test_drain_leaves_what_is_due_beyond_its_limit(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    publish(client, delay="2d")
    publish(client, delay="150m")
    client.schedule.create(destination=f"{BASE}/webhook", cron="0 * * * *")

    deliveries = qstash.drain("3h")

    # The hourly firings before the last pending delivery happen on the way; the schedule
    # alone does not keep the drain going, and the 2-day message is beyond the limit.
    assert [d.at - START for d in deliveries] == [
        timedelta(hours=1),
        timedelta(hours=2),
        timedelta(minutes=150),
    ]
    assert qstash.now == START + timedelta(minutes=150)
    assert qstash.messages[0].state == "CREATED"


@at_start
@pytest.mark.qstash(max_deliveries_per_call=20)
def test_drain_of_a_handler_that_keeps_republishing_stops(
    qstash: FakeQStash, client: QStash
) -> None:
    republisher = QStash(os.environ["QSTASH_TOKEN"], retry=False)

    def again(request: object) -> None:
        republisher.message.publish(url=f"{BASE}/again", body="x", delay="1m")

    qstash.mount(BASE, again)
    publish(client, f"{BASE}/again")

    with pytest.raises(DeliveryLoopError, match=r"drain\(\) stopped after 20 deliveries"):
        qstash.drain()
    assert len(qstash.deliveries) == 20


@pytest.mark.asyncio
@at_start
async def test_adrain(qstash: FakeQStash, aclient: AsyncQStash, web: WebApp) -> None:
    await aclient.message.publish(url=f"{BASE}/webhook", body="later", delay="1h")

    [delivery] = await qstash.adrain()

    assert delivery.at == START + timedelta(hours=1)
    assert qstash.now == START + timedelta(hours=1)
    with pytest.raises(AsyncContextError, match="adrain"):
        qstash.drain()


# -- a test's own freezer ----------------------------------------------------------------------
@freezegun.freeze_time("2026-01-01T00:00:00Z")
def test_a_freeze_time_decorator_on_the_test_still_verifies(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    # The decorator wraps the test body, so it starts after the fixture and overrides the
    # app's clock: deliveries are signed on the clock the app reads, and still verify.
    publish(client)
    qstash.advance("1h")
    publish(client)

    deliveries = qstash.tick()

    assert [d.status for d in qstash.deliveries] == [200, 200]
    assert [d.status for d in deliveries] == [200]
    assert web.inbox.routes == ["webhook", "webhook"]


@time_machine.travel("2026-01-01T00:00:00Z", tick=False)
def test_a_time_machine_decorator_on_the_test_still_verifies(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    publish(client, delay="1d")
    qstash.advance("1d")
    assert [d.status for d in qstash.deliveries] == [200]


def test_freezegun_local_time_is_whole(new_york: object) -> None:
    # freezegun alone leaves tm_gmtoff None and ignores daylight saving in localtime();
    # pydantic's PastDatetime reads it and would fail on every delivery.

    class Signup(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        born: pydantic.PastDatetime  # type: ignore[name-defined]

    with FakeQStash(start="2026-07-01T12:00:00Z", time_library="freezegun"):
        now = time.localtime()
        assert (now.tm_hour, now.tm_gmtoff, now.tm_isdst) == (8, -4 * 3600, 1)
        assert time.strftime("%H:%M %z") == "08:00 -0400"
        born = datetime(1990, 1, 1, tzinfo=timezone.utc)
        assert Signup(born=born).born == born
    assert time.localtime().tm_gmtoff is not None  # freezegun's own stop put the real back


@at_start
def test_drain_is_not_kept_going_by_what_a_schedule_leads_to(
    qstash: FakeQStash, client: QStash
) -> None:
    # Each minutely firing's handler publishes a follow-up due ten minutes later: a schedule's
    # work never ends, so it must not keep the drain going past the test's own message.
    republisher = QStash(os.environ["QSTASH_TOKEN"], retry=False)

    def tick_handler(request: httpx.Request) -> None:
        if request.url.path == "/tick":
            republisher.message.publish(url=f"{BASE}/follow-up", body="x", delay="10m")

    qstash.mount(BASE, tick_handler)
    client.schedule.create(destination=f"{BASE}/tick", cron="* * * * *")
    publish(client, f"{BASE}/mine", delay="5m")

    qstash.drain("1d")

    assert qstash.now == START + timedelta(minutes=5)
    assert qstash.messages.one(url=f"{BASE}/mine").state == "DELIVERED"
    assert len(qstash.deliveries) == 6  # five firings on the way, and the test's message


@freezegun.freeze_time("2026-01-01T00:00:00Z", tz_offset=-6)
def test_a_freezer_with_a_tz_offset_on_the_test_still_verifies(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    # freezegun adds tz_offset to aware now(tz) as well, which PyJWT reads: tokens are issued
    # on that same reading, so they verify even under a freezer that shifts it.
    publish(client)
    qstash.advance("1h")
    publish(client)
    qstash.tick()

    assert [d.status for d in qstash.deliveries] == [200, 200]
    assert web.inbox.signature_errors == []


def test_a_suites_own_freezer_is_overridden_then_resumes(new_york: object) -> None:
    # An autouse freezer started before the fake: the fake starts from its moment, moves the
    # app's clock (local time correct, across New York's spring-forward), then hands it back.
    with freezegun.freeze_time("2026-03-07T12:00:00Z") as frozen:
        before = time.monotonic()
        with FakeQStash(time_library="auto") as fake:
            assert fake.now == datetime(2026, 3, 7, 12, tzinfo=timezone.utc)
            fake.advance("2d")
            assert datetime.now(timezone.utc) == fake.now
            assert datetime.now() == datetime(2026, 3, 9, 8, 0)
            assert time.localtime().tm_gmtoff == -4 * 3600
        # The suite's freezer is as it was: its moment, its frozen timers, its naive UTC now().
        assert datetime.now(timezone.utc) == datetime(2026, 3, 7, 12, tzinfo=timezone.utc)
        assert datetime.now() == datetime(2026, 3, 7, 12, 0)
        assert time.monotonic() == before
        frozen.tick(60)
        assert time.time() == datetime(2026, 3, 7, 12, 1, tzinfo=timezone.utc).timestamp()


def test_time_machine_asked_for_under_a_freezer_says_to_use_auto() -> None:
    fake = FakeQStash(time_library="time-machine")
    with (
        freezegun.freeze_time("2026-01-01"),
        pytest.raises(RuntimeError, match=r"freezegun freezer is active.*time_library='auto'"),
    ):
        fake.start()
    assert not fake.active


@pytest.fixture
def without_time_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on an install where time-machine cannot be imported (None in sys.modules makes
    ``import time_machine`` raise ImportError)."""
    monkeypatch.setitem(sys.modules, "time_machine", None)
    monkeypatch.setattr(appclock, "_warned", set())


def test_time_machine_asked_for_but_missing_says_what_to_install(
    without_time_machine: None,
) -> None:
    with pytest.raises(ValueError, match=r"time-machine cannot be imported") as raised:
        FakeQStash(time_library="time-machine")
    assert "pip install time-machine" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_an_unknown_time_library_lists_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match=r"auto, time-machine, freezegun, none"):
        FakeQStash(time_library="arrow")


def test_auto_without_time_machine_falls_back_to_freezegun_and_says_so_once(
    without_time_machine: None, new_york: object
) -> None:
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        with FakeQStash(start="2026-07-01T12:00:00Z") as fake:
            assert datetime.now() == datetime(2026, 7, 1, 8, 0)
            assert datetime.now(timezone.utc) == fake.now
        with FakeQStash(start="2026-07-01T12:00:00Z"):
            assert datetime.__name__ == "FakeDatetime"  # freezegun's class
    [warning] = [w for w in warned if w.category is AppClockWarning]
    assert "falls back to freezegun" in str(warning.message)
    assert "pip install time-machine" in str(warning.message)


def test_the_marker_with_time_machine_missing_fails_in_one_line(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest("import sys\nsys.modules['time_machine'] = None\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.qstash(time_library="time-machine")
        def test_x(qstash):
            pass
        """
    )

    result = run_inner(pytester)

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*bad qstash setting: time_library='time-machine' but time-machine cannot be imported*"]
    )
    result.stdout.no_fnmatch_line("*Traceback*")


FACTORY_IN_A_TEST = """
import freezegun
import pytest
from datetime import date, datetime, timezone
from fastapi import FastAPI
from qstash import QStash, Receiver
import os

@pytest.fixture(params=["time-machine", "freezegun", "own-freezer"])
def backend(request):
    if request.param == "own-freezer":
        with freezegun.freeze_time("2026-03-07T12:00:00Z"):
            yield "auto"
    else:
        yield request.param

@pytest.fixture
def qstash(backend):
    from pytest_qstash import FakeQStash
    with FakeQStash(time_library=backend) as fake:
        yield fake

def test_factory(qstash):
    # Built while the fake is active: the route's `date` parameter makes FastAPI import
    # pydantic.v1 for the first time in this process.
    app = FastAPI()
    receiver = Receiver(
        os.environ["QSTASH_CURRENT_SIGNING_KEY"], os.environ["QSTASH_NEXT_SIGNING_KEY"]
    )
    days = []

    @app.post("/day")
    async def day(request: __import__("fastapi").Request, day: date):
        receiver.verify(
            signature=request.headers["upstash-signature"],
            body=(await request.body()).decode(),
            url=str(request.url),
        )
        days.append(day)
        return {"ok": True}

    qstash.mount("https://app.test", app)
    client = QStash(os.environ["QSTASH_TOKEN"])
    client.message.publish(url="https://app.test/day?day=2026-03-08", body="x")
    [delivery] = qstash.tick()
    assert delivery.status == 200, delivery.response_body
    assert days == [date(2026, 3, 8)]

def test_pydantic_v1_still_whole_afterwards():
    from pydantic.v1 import BaseModel
    class Old(BaseModel):
        day: date
    assert Old(day="2026-03-08").day == date(2026, 3, 8)
"""


def test_an_app_factory_inside_a_test_on_every_backend(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh process, in a zone with DST: pydantic.v1 is imported lazily during the test.
    monkeypatch.setenv("TZ", "America/Chicago")
    pytester.makepyfile(FACTORY_IN_A_TEST)

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")

    result.assert_outcomes(passed=4)
