"""The app-visible clock: keeps ``time.time()`` and ``datetime.now()`` on ``qstash.now``.

time-machine is the default (a runtime dependency on CPython): it swaps the C-level clock
functions, so starting it costs microseconds, the ``datetime`` classes stay the real ones, and
every reading (aware ``now(tz)``, naive ``now()``, ``localtime()``) follows the process's own
zone and its daylight-saving changes. freezegun is used when the test's own freezegun freezer is
already active (time-machine cannot start under its ``FakeDatetime``), when asked for, or where
time-machine cannot be imported (said once, as a warning).

freezegun replaces the ``datetime`` classes and rebinds names across loaded modules. While the
fake's freezer is the newest one, the fake corrects what freezegun gets wrong, since an app's
signature check and its models depend on it: aware ``now(tz)`` is the frozen instant (freezegun
adds its ``tz_offset`` to it too, so PyJWT read every token as hours off in a non-UTC zone);
naive ``now()``, ``fromtimestamp()``, ``timestamp()``, ``astimezone()`` and ``localtime()`` use
the local zone at the moment concerned, across daylight-saving changes; ``datetime.date`` stays
the real class (``FakeDate``'s metaclass breaks ``class X(date, metaclass=...)``, which
pydantic.v1 runs when FastAPI imports it lazily); and pydantic builds its ``datetime``/``date``
schema for freezegun's classes, which a model or route defined during the test annotates with.

Only wall-clock time moves with the fake: the timers (``time.monotonic``, ``perf_counter`` and
their ``_ns`` forms) keep real time, so deadline loops, timeouts and event loops work.
time-machine never touches them; freezegun freezes them, so they are put back right after it
starts (and event loops are kept on real time with ``real_asyncio=True``).
"""

from __future__ import annotations

import calendar
import importlib.util
import sys
import time
import warnings
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

LIBRARIES = ("auto", "time-machine", "freezegun", "none")


class AppClockWarning(UserWarning):
    """The app clock runs on a backend that is not the one expected (said once a process)."""


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

        if _freezegun_active():
            raise RuntimeError(
                "time_library='time-machine' cannot start while a freezegun freezer is active "
                "(time-machine refuses to run under freezegun): use time_library='auto', "
                "which moves the clock with freezegun then"
            )
        if ms % 1000 == 0:
            # Whole seconds (where the fake starts by default): exact as an integer, and
            # several times cheaper for time-machine to read than a datetime.
            self._travel = time_machine.travel(ms // 1000, tick=False)
        else:
            self._travel = time_machine.travel(_datetime_at(ms), tick=False)
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
        # (object, attribute, value before us): undone on stop, before freezegun's own undo.
        self._patches: list[tuple[Any, str, Any]] = []

    def start(self, ms: int) -> None:
        import freezegun
        from freezegun import api

        _correct_freezegun(api)
        outermost = not api.freeze_factories
        self._offset = _local_offset(ms)
        self._freezer = freezegun.freeze_time(
            _datetime_at(ms),
            # freezegun's naive now() is UTC plus this offset (UTC by default); what it still
            # reads it for (FakeDate.today) then gives the local date, as time-machine does.
            tz_offset=self._offset,
            tick=False,
            real_asyncio=True,
            # pytest times each test with _pytest.timing's perf_counter: the module scan
            # would freeze it and every duration pytest reports would be nonsense.
            ignore=["_pytest.timing"],
        )
        self._factory = self._freezer.start()
        _OUR_FACTORIES.append(self._factory)
        self._ms = ms
        # Only the outermost freezer scans modules; a nested one (over a test's own freezer)
        # has nothing of its own to put back there.
        changes = self._freezer.undo_changes if outermost else []
        self._restore_real_timers(api, changes)
        self._local_time_at_the_frozen_moment(api, changes)
        self._keep_the_real_date_class(api, changes)

    def move_to(self, ms: int) -> None:
        if self._factory is not None and ms != self._ms:
            self._factory.move_to(_datetime_at(ms))
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
            freezer, factory, self._freezer, self._factory = (
                self._freezer,
                self._factory,
                None,
                None,
            )
            patches, self._patches = self._patches, []
            for target, attribute, before in reversed(patches):
                setattr(target, attribute, before)
            _OUR_FACTORIES[:] = [f for f in _OUR_FACTORIES if f is not factory]
            freezer.stop()

    # -- corrections made at start ----------------------------------------------------------
    def _patch(self, target: Any, attribute: str, value: Any) -> None:
        self._patches.append((target, attribute, getattr(target, attribute)))
        setattr(target, attribute, value)

    def _restore_real_timers(self, api: Any, changes: list[tuple[Any, str, Any]]) -> None:
        """Undo freezegun's freezing of the timers: in ``time`` itself, and in every module
        its scan rebound."""
        reals = [getattr(api, f"real_{name}", None) for name in _TIMERS]
        for name, real in zip(_TIMERS, reals, strict=True):
            if real is not None:
                self._patch(time, name, real)
        real_ids = {id(real) for real in reals if real is not None}
        for module, attribute, original in changes:
            if id(original) in real_ids:
                self._patch(module, attribute, original)

    def _local_time_at_the_frozen_moment(
        self, api: Any, changes: list[tuple[Any, str, Any]]
    ) -> None:
        """freezegun's ``localtime()`` applies the zone's standard offset whatever the date and
        leaves ``tm_gmtoff`` None (pydantic's ``PastDatetime`` then fails with a TypeError);
        ours asks the real function about the frozen moment, as time-machine's clock answers.
        Put in ``time`` and wherever freezegun's scan put its own."""
        real_localtime: Callable[[float], time.struct_time] = api.real_localtime
        real_strftime: Callable[[str, Any], str] = api.real_strftime

        def localtime(seconds: float | None = None) -> time.struct_time:
            return real_localtime(time.time() if seconds is None else seconds)

        def strftime(format: str, moment: Any = None) -> str:
            return real_strftime(format, localtime() if moment is None else moment)

        ours = {id(api.fake_localtime): localtime, id(api.fake_strftime): strftime}
        self._patch(time, "localtime", localtime)
        self._patch(time, "strftime", strftime)
        for module, attribute, _original in changes:
            replacement = ours.get(id(getattr(module, attribute, None)))
            if replacement is not None:
                self._patch(module, attribute, replacement)

    def _keep_the_real_date_class(self, api: Any, changes: list[tuple[Any, str, Any]]) -> None:
        """``datetime.date`` stays the real class: nothing is lost (``date.today()`` reads
        ``time.time()``, which freezegun moves), and a class deriving from ``date`` with a
        metaclass of its own (pydantic.v1's ``ConstrainedDate``, imported lazily by FastAPI)
        no longer meets ``FakeDate``'s metaclass."""
        import datetime as datetime_module

        self._patch(datetime_module, "date", api.real_date)
        for module, attribute, original in changes:
            if original is api.real_date:
                self._patch(module, attribute, original)


def _local_offset(ms: int) -> timedelta:
    """The process's local UTC offset at ``ms`` (the real function: freezegun patches
    ``time.localtime`` only when it is called without an argument)."""
    return timedelta(seconds=time.localtime(ms / 1000).tm_gmtoff)


_TIMERS = ("monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns")

#: The fake's own freezegun factories, started and not stopped: freezegun's classes are
#: corrected only while the newest factory is one of these (a test's own freezer on top keeps
#: freezegun's behaviour, which it chose).
_OUR_FACTORIES: list[Any] = []
_corrected = False


def _correct_freezegun(api: Any) -> None:
    """Install, once a process, the corrections described in the module docstring on
    freezegun's ``FakeDatetime``/``FakeDate``. Each defers to freezegun's own method unless
    the newest freezer is the fake's."""
    global _corrected
    if _corrected:
        return
    _corrected = True
    fake_datetime, real_datetime = api.FakeDatetime, api.real_datetime
    freezegun_now = fake_datetime.__dict__["now"].__func__
    freezegun_fromtimestamp = fake_datetime.__dict__["fromtimestamp"].__func__
    freezegun_timestamp = fake_datetime.__dict__["timestamp"]
    freezegun_astimezone = fake_datetime.__dict__["astimezone"]
    factories = api.freeze_factories

    def ours_on_top() -> bool:
        return bool(factories) and any(f is factories[-1] for f in _OUR_FACTORIES)

    def as_fake(cls: Any, moment: datetime) -> Any:
        return cls(
            moment.year,
            moment.month,
            moment.day,
            moment.hour,
            moment.minute,
            moment.second,
            moment.microsecond,
            moment.tzinfo,
            fold=moment.fold,
        )

    def now(cls: Any, tz: Any = None) -> Any:
        if not ours_on_top():
            return freezegun_now(cls, tz)
        frozen = api.get_current_time()  # naive UTC
        if tz is not None:
            return as_fake(cls, tz.fromutc(as_fake(real_datetime, frozen).replace(tzinfo=tz)))
        # The real fromtimestamp: the local zone at that moment, with the fold of a repeated
        # hour set (so timestamp() and astimezone() find the way back); exact in whole seconds.
        local = real_datetime.fromtimestamp(calendar.timegm(frozen.utctimetuple()))
        return as_fake(cls, local.replace(microsecond=frozen.microsecond))

    def fromtimestamp(cls: Any, seconds: float, tz: Any = None) -> Any:
        if not ours_on_top():
            return freezegun_fromtimestamp(cls, seconds, tz)
        return as_fake(cls, real_datetime.fromtimestamp(seconds, tz))

    def timestamp(self: Any) -> float:
        if self.tzinfo is None and ours_on_top():
            return float(real_datetime.timestamp(self))  # local time, at its own offset
        return freezegun_timestamp(self)  # type: ignore[no-any-return]

    def astimezone(self: Any, tz: Any = None) -> Any:
        if not ours_on_top():
            return freezegun_astimezone(self, tz)
        return as_fake(type(self), real_datetime.astimezone(self, tz))

    def pydantic_schema(cls: Any, source: Any, handler: Any) -> Any:
        # A model or route defined while freezegun is active annotates with its classes.
        real = real_datetime if issubclass(cls, real_datetime) else api.real_date
        return handler.generate_schema(real)

    fake_datetime.now = classmethod(now)
    fake_datetime.fromtimestamp = classmethod(fromtimestamp)
    fake_datetime.timestamp = timestamp
    fake_datetime.astimezone = astimezone
    api.FakeDate.__get_pydantic_core_schema__ = classmethod(pydantic_schema)


def _freezegun_active() -> bool:
    """Whether a freezegun freezer is active (asked of the module: a name imported here may
    be rebound by freezegun's scan)."""
    import datetime as datetime_module

    return datetime_module.datetime.__name__ == "FakeDatetime"


class AutoClock:
    """``"auto"``: time-machine, unless a freezegun freezer is already active when the fake
    starts (a test's own: time-machine cannot run under it) or time-machine cannot be imported;
    freezegun then. Chosen at each start."""

    name = "auto"

    def __init__(self) -> None:
        self._clock: AppClock | None = None

    def start(self, ms: int) -> None:
        clock: AppClock
        if auto_choice() == "time-machine":
            clock = TimeMachineClock()
        else:
            if not _freezegun_active():
                _warn_once(
                    f"time-machine cannot be imported ({_time_machine_problem()}): the app "
                    "clock falls back to freezegun, which replaces the datetime classes and "
                    "costs milliseconds per test. Install time-machine (pip install "
                    "time-machine), or choose freezegun with time_library='freezegun' (ini: "
                    "qstash_time_library = freezegun)"
                )
            clock = FreezegunClock()
        clock.start(ms)
        self._clock = clock

    @property
    def backend(self) -> str:
        """The library moving the clock now (``"auto"`` before start)."""
        return self._clock.name if self._clock is not None else self.name

    def move_to(self, ms: int) -> None:
        if self._clock is not None:
            self._clock.move_to(ms)

    def stop(self) -> None:
        if self._clock is not None:
            clock, self._clock = self._clock, None
            clock.stop()


def make_app_clock(library: str) -> AppClock:
    if library not in LIBRARIES:
        raise ValueError(
            f"unknown time library {library!r}: expected one of {', '.join(LIBRARIES)}"
        )
    if library == "none":
        return NoAppClock()
    if library == "auto":
        return AutoClock()
    if library == "time-machine":
        problem = _time_machine_problem()
        if problem is not None:
            raise ValueError(
                f"time_library='time-machine' but time-machine cannot be imported ({problem}): "
                "install it (pip install time-machine), or use time_library='auto'"
            )
        return TimeMachineClock()
    return FreezegunClock()


def clock_name(library: str) -> str:
    """The name of the clock a fake would start for ``library`` now (``"auto"`` said as it
    would choose), without importing a clock library: the report header, in every run. A
    library that cannot start is ``"?"``; the fixture says why."""
    if library not in LIBRARIES:
        return "?"
    if library == "auto":
        return auto_choice(importing=False)
    if library == "time-machine" and _time_machine_problem(importing=False) is not None:
        return "?"
    return library


def auto_choice(*, importing: bool = True) -> str:
    """The library ``"auto"`` starts now: freezegun under a running freezegun freezer
    (time-machine cannot run under it) or when time-machine cannot be imported, else
    time-machine. ``importing=False`` asks only whether time-machine is installed (the report
    header: said at start-up, where importing it would cost every run)."""
    if _freezegun_active() or _time_machine_problem(importing=importing) is not None:
        return "freezegun"
    return "time-machine"


def _datetime_at(ms: int) -> datetime:
    from ..engine.models import ms_to_datetime  # with the engine, which the clock serves

    return ms_to_datetime(ms)


def _time_machine_problem(*, importing: bool = True) -> str | None:
    """Why time-machine cannot be imported, or None (an import once made is a dict lookup)."""
    if not importing and "time_machine" not in sys.modules:
        found = importlib.util.find_spec("time_machine") is not None
        return None if found else "No module named 'time_machine'"
    try:
        import time_machine  # noqa: F401
    except ImportError as exc:
        return str(exc) or type(exc).__name__
    return None


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(AppClockWarning(message), stacklevel=3)
