"""The app's clock and signatures in non-UTC local zones, on every backend, across DST.

Each test runs in America/Chicago and Australia/Lord_Howe (half-hour offset and half-hour
daylight saving), on time-machine, on freezegun, and under a suite's own freezegun freezer
started before the fake (see ``zones.py``). Deliveries go through the real ``qstash.Receiver``
(and upstash-workflow's ``serve``), which PyJWT checks against ``datetime.now(timezone.utc)``.
"""

from __future__ import annotations

import json
import os
import time
from datetime import date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pydantic
from apps import make_fastapi_app
from fastapi import FastAPI, Request
from qstash import QStash
from workflow_apps import STOCK_URL, Journal, fastapi_workflow_app, stock_app
from zones import START, app_clock, zone

from pytest_qstash import FakeQStash

__all__ = ["app_clock", "zone"]  # fixtures, imported to be found

BASE = "https://app.example.com"


def _zone_name() -> str:
    return os.environ["TZ"]


def assert_app_clock_is(moment: datetime) -> None:
    """What an app reads, by every common path, is ``moment`` in the process's zone."""
    zone_info = ZoneInfo(_zone_name())
    wall = moment.astimezone(zone_info)
    offset = wall.utcoffset()
    assert offset is not None
    assert time.time() == moment.timestamp()
    assert datetime.now(timezone.utc) == moment
    assert datetime.now(zone_info).timestamp() == moment.timestamp()
    assert datetime.now(zone_info).utcoffset() == offset
    assert datetime.now() == wall.replace(tzinfo=None)
    assert datetime.now().timestamp() == moment.timestamp()
    assert datetime.now().astimezone().utcoffset() == offset
    assert datetime.fromtimestamp(moment.timestamp()) == wall.replace(tzinfo=None)
    assert date.today() == wall.date()
    now = time.localtime()
    assert (now.tm_hour, now.tm_min, now.tm_gmtoff) == (
        wall.hour,
        wall.minute,
        offset.total_seconds(),
    )


def test_signatures_verify_across_daylight_saving(
    app_clock: str, qstash: FakeQStash, client: QStash
) -> None:
    web = make_fastapi_app()
    qstash.mount(BASE, web.app)
    assert qstash.now == START
    assert_app_clock_is(START)
    client.message.publish(url=f"{BASE}/webhook", body="now")
    client.message.publish(url=f"{BASE}/webhook", body="in a month", delay="30d")

    deliveries = qstash.advance("30d")

    # Both zones changed their offset on the way (Chicago +1 h, Lord Howe -30 min).
    assert [d.status for d in deliveries] == [200, 200]
    assert web.inbox.signature_errors == []
    later = START + timedelta(days=30)
    assert [r.now for r in web.inbox.received] == [START, later]
    assert [r.time for r in web.inbox.received] == [START.timestamp(), later.timestamp()]
    assert_app_clock_is(later)
    before, after = (ZoneInfo(_zone_name()).utcoffset(m) for m in (START, later))
    assert before != after


def test_retries_verify_after_many_small_steps(
    app_clock: str, qstash: FakeQStash, client: QStash
) -> None:
    # Retries span Chicago's change (08:00Z on the 8th): each token is issued, and checked,
    # at its own attempt's moment.
    web = make_fastapi_app()
    qstash.mount(BASE, web.app)
    qstash.advance("19h30m")  # 07:30Z on the 8th
    client.message.publish(url=f"{BASE}/http-500", body="x", retries=3)

    deliveries = qstash.advance("1h")

    assert [d.status for d in deliveries] == [500, 500, 500, 500]
    assert web.inbox.signature_errors == []
    assert [r.now for r in web.inbox.received] == [d.at for d in deliveries]
    assert_app_clock_is(qstash.now)


def test_workflow_runs_verify_across_daylight_saving(app_clock: str, qstash: FakeQStash) -> None:
    journal = Journal()
    qstash.mount(BASE, fastapi_workflow_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal))
    ship_at = int((START + timedelta(days=30)).timestamp())
    payload = {"order": 7, "sku": "A-1", "qty": 2, "ship_at": ship_at}

    run_id = qstash.trigger(f"{BASE}/order", payload)
    qstash.advance("31d")

    [run] = qstash.runs
    assert run.state == "RUN_SUCCESS"
    assert journal.names(run_id) == ["validate", "confirm"]
    # serve() verifies every delivery with the SDK's Receiver (a refused one is a 500).
    assert all(d.status == 200 for d in qstash.deliveries), qstash.deliveries
    assert run.completed_at is not None
    assert run.completed_at.timestamp() == ship_at


class Stamp(pydantic.BaseModel):
    day: date
    at: datetime


def test_apps_and_models_built_during_the_test(
    app_clock: str, qstash: FakeQStash, client: QStash
) -> None:
    # An app factory run while the fake is active: a route with a `date` parameter and a
    # model with `date`/`datetime` fields, defined now (under freezegun, `date` and
    # `datetime` here may be freezegun's classes).
    class Booking(pydantic.BaseModel):
        day: date
        at: datetime

    app = FastAPI()
    seen: list[Any] = []

    @app.post("/book")
    async def book(request: Request, day: date) -> dict[str, str]:
        booking = Booking.model_validate_json(await request.body())
        seen.append((day, booking, datetime.now()))
        return {"day": day.isoformat(), "stamp": Stamp(day=day, at=booking.at).at.isoformat()}

    qstash.mount(BASE, app)
    body = json.dumps({"day": "2026-03-08", "at": "2026-03-08T09:30:00Z"})
    client.message.publish(
        url=f"{BASE}/book?day=2026-03-09", body=body, headers={"Content-Type": "application/json"}
    )

    [delivery] = qstash.tick()

    assert delivery.status == 200, delivery.response_body
    assert json.loads(delivery.response_body) == {
        "day": "2026-03-09",
        "stamp": "2026-03-08T09:30:00+00:00",
    }
    [(day, booking, local_now)] = seen
    assert day == date(2026, 3, 9)
    assert booking.day == date(2026, 3, 8)
    assert booking.at == datetime(2026, 3, 8, 9, 30, tzinfo=timezone.utc)
    assert local_now == START.astimezone(ZoneInfo(_zone_name())).replace(tzinfo=None)
