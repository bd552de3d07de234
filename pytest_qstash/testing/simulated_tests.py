"""Tests run under seeded fault schedules (``@pytest.mark.qstash(simulate=N)``,
``--qstash-simulate=N``): the pytest side of ``engine.simulation``.

A simulated test is parametrized with its seeds (``test_x[qstash-seed-7]``), so each schedule
is an item of its own: fresh function-scoped fixtures, xdist and random order as for any
test, and the seed in its id. When one fails under faults, it is run again (fresh fixtures,
fewer faults) to find the smallest set of those faults that still fails; its report then
says the seed, the faults in order, that smallest set and the command that replays it.

Loaded by the plugin in every run; the engine loads only when a simulated test runs.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ..engine.simulation import InjectedFault, Simulation

#: The fake's two fixture names (the plugin's): a test using either can be simulated.
FAKE_FIXTURES = frozenset({"qstash", "qstash_fake"})
#: The parameter a simulated test is parametrized with: its seed.
PARAM = "_qstash_simulation"
#: The marker's simulation keywords (the plugin's fixture leaves them to this module).
MARKER_KEYWORDS = ("simulate", "simulate_seed", "faults")
#: Re-runs a shrink may make (two per fault for ten faults, the most a schedule injects
#: in most tests).
MAX_SHRINK_RUNS = 20

#: What the run asks for (``--qstash-simulate``/ini, ``--qstash-simulate-seed``,
#: ``--qstash-faults``), checked at configure.
_ASKED_KEY = pytest.StashKey["Asked"]()
#: A simulated item's schedule: what its fixture applies, and what it injected.
_SCHEDULE_KEY = pytest.StashKey["Schedule"]()


class Asked:
    """What the run asks for, checked at configure."""

    __slots__ = ("count", "faults", "seed")

    def __init__(
        self, count: int = 0, seed: int | None = None, faults: tuple[str, ...] | None = None
    ) -> None:
        self.count = count
        self.seed = seed
        self.faults = faults


class Schedule:
    """One simulated item's schedule, kept on the item across its re-runs. (Plain classes
    here, not dataclasses: this module loads in every pytest run.)"""

    def __init__(self, seed: int, faults: tuple[str, ...] | None) -> None:
        self.seed = seed
        self.faults = faults
        #: Decision keys allowed (a re-run while shrinking); None: the whole schedule.
        self.only: frozenset[str] | None = None
        #: The simulation of the item's latest run (set by the fixture).
        self.latest: Simulation | None = None
        #: What the first run injected (the schedule as the seed has it).
        self.first: list[InjectedFault] | None = None
        #: The smallest set of those that still fails, once shrunk.
        self.shrunk: list[InjectedFault] | None = None
        self.notes: list[str] = []


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("qstash", "pytest-qstash")
    group.addoption(
        "--qstash-simulate",
        metavar="N",
        default=None,
        help="run every test that uses the qstash fixture under N seeded fault schedules "
        "(duplicates, lost acknowledgements, reordering, steps run again, lost publish answers)",
    )
    group.addoption(
        "--qstash-simulate-seed",
        metavar="S",
        default=None,
        help="run each simulated test under exactly the schedule of seed S (a replay)",
    )
    group.addoption(
        "--qstash-faults",
        metavar="KIND[,KIND]",
        default=None,
        help="the fault kinds simulated tests get (default: all)",
    )
    parser.addini(
        "qstash_simulate",
        "default for --qstash-simulate: seeded fault schedules per test using qstash (0: off)",
        default="0",
    )


def configure(config: pytest.Config) -> None:
    """Check the run's simulation options: one line naming a bad one, no traceback."""
    try:
        config.stash[_ASKED_KEY] = _asked(config)
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-qstash: {exc}") from None


def _asked(config: pytest.Config) -> Asked:
    raw_count = config.getoption("qstash_simulate")
    what = "--qstash-simulate"
    if raw_count is None:
        raw_count, what = config.getini("qstash_simulate") or "0", "qstash_simulate"
    asked = Asked(count=_count(raw_count, what))
    seed = config.getoption("qstash_simulate_seed")
    faults = config.getoption("qstash_faults")
    if seed is None and faults is None:
        return asked  # the engine loads with the first test using the fake, not here
    from ..engine.simulation import check_seed, fault_kinds

    return Asked(
        asked.count,
        check_seed(seed, "--qstash-simulate-seed") if seed is not None else None,
        _faults(fault_kinds, faults, "--qstash-faults") if faults is not None else None,
    )


def _count(value: object, what: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"invalid {what}={value!r}: expected a number of schedules, 0 or more")


def _faults(check: Any, value: object, what: str) -> tuple[str, ...]:
    try:
        kinds: tuple[str, ...] = check(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid {what}={value!r}: {exc}") from None
    return kinds


def _marker_options(item_or_definition: Any) -> dict[str, Any]:
    """The simulation keywords of the nearest ``qstash`` markers (test over class over
    module)."""
    found: dict[str, Any] = {}
    for marker in reversed(list(item_or_definition.iter_markers("qstash"))):
        found.update({k: v for k, v in marker.kwargs.items() if k in MARKER_KEYWORDS})
    return found


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize a test that uses the fake with its seeds, when it is simulated."""
    asked: Asked = metafunc.config.stash.get(_ASKED_KEY, Asked())
    uses_fake = FAKE_FIXTURES & set(metafunc.fixturenames)
    marked = metafunc.definition.get_closest_marker("qstash") is not None
    if not uses_fake and not marked:
        return
    options = _marker_options(metafunc.definition)
    seeds = _seeds(asked, options)
    if not seeds:
        return
    metafunc.fixturenames.append(PARAM)
    metafunc.parametrize(PARAM, seeds, ids=[f"qstash-seed-{s}" for s in seeds], indirect=True)


def _seeds(asked: Asked, options: Mapping[str, Any]) -> list[int]:
    try:
        if "faults" in options or options.get("simulate_seed") is not None:
            from ..engine.simulation import check_seed, fault_kinds

            if "faults" in options:
                _faults(fault_kinds, options["faults"], "faults")
            if asked.seed is None and options.get("simulate_seed") is not None:
                return [check_seed(options["simulate_seed"])]
        if asked.seed is not None:
            return [asked.seed]
        count = _count(options["simulate"], "simulate") if "simulate" in options else None
    except ValueError as exc:
        pytest.fail(f"bad qstash setting: {exc}", pytrace=False)
    return list(range(asked.count if count is None else count))


@pytest.fixture
def _qstash_simulation(request: pytest.FixtureRequest) -> int:
    """The seed of the schedule this item runs under (its parameter)."""
    seed: int = request.param
    return seed


def schedule_for(request: pytest.FixtureRequest) -> Schedule | None:
    """The schedule the test's fake runs under, or None when the test is not simulated."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or PARAM not in callspec.params:
        return None
    item: pytest.Item = request.node
    schedule: Schedule | None = item.stash.get(_SCHEDULE_KEY, None)
    if schedule is None:
        asked: Asked = request.config.stash.get(_ASKED_KEY, Asked())
        options = _marker_options(item)
        faults = options.get("faults", asked.faults)
        schedule = item.stash[_SCHEDULE_KEY] = Schedule(callspec.params[PARAM], faults)
    return schedule


def start(schedule: Schedule, fake: Any) -> None:
    """Put the test's fake under its schedule (the fixture calls this before the fake
    starts): the whole of it, or only the decisions a shrinking re-run keeps."""
    from ..engine.simulation import Simulation

    schedule.latest = Simulation(schedule.seed, schedule.faults, only=schedule.only)
    fake.store.simulate(schedule.latest)


# -- running a simulated item: once, and again while shrinking ------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or PARAM not in callspec.params:
        return None
    from _pytest.runner import runtestprotocol

    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    schedule = item.stash.get(_SCHEDULE_KEY, None)
    if schedule is not None and any(r.failed for r in reports):
        latest = schedule.latest
        schedule.first = list(latest.injected) if latest is not None else []
        _shrink(item, nextitem, schedule, runtestprotocol)
        text = failure_section(item, schedule)
        for report in reports:
            if report.failed:
                report.sections.append(("qstash simulation", text))
                break
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    if _SCHEDULE_KEY in item.stash:  # items live for the session: their fakes need not
        del item.stash[_SCHEDULE_KEY]
    return True


def _shrink(item: pytest.Item, nextitem: pytest.Item | None, schedule: Schedule, run: Any) -> None:
    """The smallest set of the injected faults that still fails the test: each alone first,
    then, if none fails alone, leaving out one at a time what the test fails without."""
    injected = list(schedule.first or ())
    if not injected:
        return
    init = getattr(item, "_initrequest", None)
    if init is None:  # a pytest without it: the failure is reported unshrunk
        schedule.notes.append("not shrunk: this pytest cannot run a test again in place")
        return
    budget = min(MAX_SHRINK_RUNS, 2 * len(injected))

    def fails_with(kept: list[InjectedFault]) -> bool:
        schedule.only = frozenset(f.key for f in kept)
        init()
        reports = run(item, nextitem=nextitem, log=False)
        return any(r.failed for r in reports)

    runs = 0
    smallest = injected
    if len(injected) > 1:
        for fault in injected:
            if runs >= budget:
                break
            runs += 1
            if fails_with([fault]):
                smallest = [fault]
                break
        else:
            kept = list(injected)
            for fault in injected:
                if runs >= budget or len(kept) == 1:
                    break
                runs += 1
                trial = [f for f in kept if f is not fault]
                if fails_with(trial):
                    kept = trial
            smallest = kept
    schedule.shrunk = smallest
    if runs:
        schedule.notes.append(f"shrunk in {runs} re-run(s) with fresh fixtures")
    schedule.only = None


def failure_section(item: pytest.Item, schedule: Schedule) -> str:
    """What a failing simulated test's report says: the seed, the faults in order, the
    smallest failing set, the replay command."""
    injected = list(schedule.first or ())
    lines = [
        f"seed {schedule.seed}, faults {', '.join(schedule.faults or ('all',))}: "
        f"{len(injected)} fault(s) injected"
    ]
    lines += [f"  {i}. {fault}" for i, fault in enumerate(injected, 1)]
    if schedule.shrunk is not None:
        lines.append(f"smallest set that still fails ({len(schedule.shrunk)}):")
        lines += [f"  {fault}" for fault in schedule.shrunk]
    elif not injected:
        lines.append("no fault was injected: the test fails on QStash's happy path too")
    lines += schedule.notes
    lines.append(f"replay: {replay_command(item, schedule.seed)}")
    return "\n".join(lines)


def replay_command(item: pytest.Item, seed: int) -> str:
    """The command that runs this test under exactly this schedule."""
    nodeid = item.nodeid
    callspec = getattr(item, "callspec", None)
    if callspec is not None and list(callspec.params) == [PARAM]:
        nodeid = nodeid.partition("[")[0]
    return f"pytest {shlex.quote(nodeid)} --qstash-simulate-seed={seed}"
