"""Fixtures that run a test in a non-UTC local zone, on each app-clock backend.

Import them into a test module (``from zones import app_clock, zone``): ``app_clock`` must be
named before ``qstash`` in a test's arguments, so that the zone is set and a test's own
freezer is running before the fake starts, as in a user's suite with an autouse freezer.

The start, 2026-03-07T12:00:00Z, is a day before Chicago's spring-forward (2026-03-08
08:00Z) and four weeks before Lord Howe Island's half-hour fall-back (2026-04-04 15:00Z):
an ``advance("30d")`` crosses both.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone

import freezegun
import pytest
from ci_requirements import BY_DESIGN

START = datetime(2026, 3, 7, 12, tzinfo=timezone.utc)
ZONES = ["America/Chicago", "Australia/Lord_Howe"]
BACKENDS = [
    pytest.param(
        "time-machine", marks=pytest.mark.qstash(time_library="time-machine", start=START)
    ),
    pytest.param("freezegun", marks=pytest.mark.qstash(time_library="freezegun", start=START)),
    # A suite's own autouse freezer, running when the fake starts (time_library is "auto").
    # The start is given here too: an ini qstash_start (CI runs one) would otherwise win over
    # the freezer's moment. Starting from that moment is pinned in test_clock.py.
    pytest.param("own-freezer", marks=pytest.mark.qstash(start=START)),
]


@pytest.fixture(params=ZONES)
def zone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The process in this local zone for one test (TZ is read by tzset)."""
    if not hasattr(time, "tzset"):
        pytest.skip(BY_DESIGN.tzset)
    name: str = request.param
    monkeypatch.setenv("TZ", name)
    time.tzset()
    yield name
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(params=BACKENDS)
def app_clock(request: pytest.FixtureRequest, zone: str) -> Iterator[str]:
    """The backend moving the app's clock; "own-freezer" starts a freezegun freezer at START
    first, which the fake then starts under."""
    backend: str = request.param
    if backend == "own-freezer":
        with freezegun.freeze_time(START):
            yield backend
    else:
        yield backend
