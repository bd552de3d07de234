"""The app-visible clock: keeps ``time.time()`` and ``datetime.now()`` on ``qstash.now``.

Two backends, chosen once: time-machine when it is installed (it swaps the C-level clock
functions, so starting it costs microseconds), else freezegun (it rebinds names across every
loaded module, about 10 ms with a web stack imported). Only wall-clock time moves with the
fake: the timers (``time.monotonic``, ``perf_counter`` and their ``_ns`` forms) keep real time,
so deadline loops, timeouts and event loops work. time-machine never touches them; freezegun
freezes them too, so they are put back right after it starts (and event loops are kept on real
time with ``real_asyncio=True``).
"""

from __future__ import annotations

import importlib.util
import time
from datetime import datetime, timedelta
from typing import Any, Protocol

from .state.models import ms_to_datetime

LIBRARIES = ("auto", "time-machine", "freezegun", "none")


class AppClock(Protocol):
    name: str

    def start(self, ms: int) -> None: ...
    def move_to(self, ms: int) -> None: ...
    def stop(self) -> None: ...


class NoAppClock:
    """``freeze_time=False``: the app reads the real clock."""

    name = "none"

    def start(self, ms: int) -> None:
        pass

    def move_to(self, ms: int) -> None:
        pass

    def stop(self) -> None:
        pass


class TimeMachineClock:
    name = "time-machine"

    def __init__(self) -> None:
        self._travel: Any = None
        self._traveller: Any = None
        self._ms = -1

    def start(self, ms: int) -> None:
        import time_machine

        self._travel = time_machine.travel(ms_to_datetime(ms), tick=False)
        # Travelling to an aware datetime would also switch the process's TZ to its zone
        # (UTC): only the instant is ours to move, the app's local zone stays its own.
        self._travel.destination_tzname = None
        self._traveller = self._travel.start()
        self._ms = ms

    def move_to(self, ms: int) -> None:
        if self._traveller is not None and ms != self._ms:
            # A shift by a timedelta is exact (integer ns) and leaves the time zone alone.
            self._traveller.shift(timedelta(milliseconds=ms - self._ms))
            self._ms = ms

    def stop(self) -> None:
        if self._travel is not None:
            travel, self._travel, self._traveller = self._travel, None, None
            travel.stop()


class FreezegunClock:
    name = "freezegun"

    def __init__(self) -> None:
        self._freezer: Any = None
        self._factory: Any = None
        self._ms = -1
        self._offset: timedelta | None = None

    def start(self, ms: int) -> None:
        import freezegun

        self._offset = _local_offset(ms)
        self._freezer = freezegun.freeze_time(
            ms_to_datetime(ms),
            # freezegun's naive now() is UTC plus this offset (UTC by default); the local
            # zone's offset keeps it what the app would read, as with time-machine.
            tz_offset=self._offset,
            tick=False,
            real_asyncio=True,
            # pytest times each test with _pytest.timing's perf_counter: the module scan
            # would freeze it and every duration pytest reports would be nonsense.
            ignore=["_pytest.timing"],
        )
        self._factory = self._freezer.start()
        self._ms = ms
        _restore_real_timers(self._freezer)
        _local_time_at_the_frozen_moment(self._freezer)

    def move_to(self, ms: int) -> None:
        if self._factory is not None and ms != self._ms:
            self._factory.move_to(ms_to_datetime(ms))
            self._ms = ms
            self._follow_local_offset(ms)

    def _follow_local_offset(self, ms: int) -> None:
        """Across a daylight-saving change, swap our entry in freezegun's offset stack
        (freezegun reads the newest entry; ours is found by identity)."""
        from freezegun import api

        offset = _local_offset(ms)
        if offset == self._offset:
            return
        for index, entry in enumerate(api.tz_offsets):
            if entry is self._offset:
                api.tz_offsets[index] = offset
                self._offset = offset
                return

    def stop(self) -> None:
        if self._freezer is not None:
            freezer, self._freezer, self._factory = self._freezer, None, None
            freezer.stop()


def _local_offset(ms: int) -> timedelta:
    """The process's local UTC offset at ``ms`` (the real function: freezegun patches
    ``time.localtime`` only when it is called without an argument)."""
    return timedelta(seconds=time.localtime(ms / 1000).tm_gmtoff)


_TIMERS = ("monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns")


def _restore_real_timers(freezer: Any) -> None:
    """Undo freezegun's freezing of the timers: in ``time`` itself, and in every module its
    scan rebound (freezegun's own ``stop()`` restores the same originals, so undoing early is
    harmless)."""
    from freezegun import api

    reals = {name: getattr(api, f"real_{name}") for name in _TIMERS if hasattr(api, f"real_{name}")}
    for name, real in reals.items():
        setattr(time, name, real)
    real_ids = {id(real) for real in reals.values()}
    for module, attribute, original in getattr(freezer, "undo_changes", ()):
        if id(original) in real_ids:
            setattr(module, attribute, original)


def _local_time_at_the_frozen_moment(freezer: Any) -> None:
    """freezegun's ``localtime()`` applies the zone's standard offset whatever the date and
    leaves ``tm_gmtoff`` None (pydantic's ``PastDatetime`` then fails with a TypeError);
    ours asks the real function about the frozen moment, as time-machine's clock answers.
    Put in ``time`` and wherever freezegun's scan put its own (its ``stop()`` restores the
    originals in both places)."""
    from freezegun import api

    real_localtime, real_strftime = api.real_localtime, api.real_strftime

    def localtime(seconds: float | None = None) -> time.struct_time:
        return real_localtime(time.time() if seconds is None else seconds)

    def strftime(format: str, moment: Any = None) -> str:
        return real_strftime(format, localtime() if moment is None else moment)

    ours = {id(api.fake_localtime): localtime, id(api.fake_strftime): strftime}
    time.localtime, time.strftime = localtime, strftime  # type: ignore[assignment]
    for module, attribute, _original in getattr(freezer, "undo_changes", ()):
        replacement = ours.get(id(getattr(module, attribute, None)))
        if replacement is not None:
            setattr(module, attribute, replacement)


def make_app_clock(library: str) -> AppClock:
    if library not in LIBRARIES:
        raise ValueError(
            f"unknown time library {library!r}: expected one of {', '.join(LIBRARIES)}"
        )
    if library == "none":
        return NoAppClock()
    if library == "auto":
        library = "time-machine" if _time_machine_usable() else "freezegun"
    return TimeMachineClock() if library == "time-machine" else FreezegunClock()


def _time_machine_usable() -> bool:
    if importlib.util.find_spec("time_machine") is None:
        return False
    # time-machine refuses to start while freezegun is active (e.g. a user's freezer fixture).
    return datetime.__name__ != "FakeDatetime"
