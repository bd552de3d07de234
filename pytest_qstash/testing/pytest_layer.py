"""The pytest layer: environment before collection, fixtures, the marker, failure reports.
Its hooks and fixtures are those of ``pytest_qstash.plugin``, the module pytest loads.

Loaded in every pytest run of a project that installs pytest-qstash, also the many runs that
never use QStash. So this module imports only what registering the hooks, ini options, marker
and fixtures needs, and what setting the environment before collection needs (``hosts``,
``appclock``, ``state.account``: the standard library). The engine, respx, httpx and the
report load on first use, inside the hooks and fixtures below: the first ``qstash`` fixture
(which the marker implies), a failing test's report. The session-wide routers start when
httpx is imported (``session_routers``), so they are in place before anything could make a
request with it.
"""

from __future__ import annotations

import os
import types
import warnings
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from ..engine.account import DEFAULT_ENV
from ..intercept import import_hook
from ..intercept.session_routers import SessionRouters
from ..wire import hosts
from . import simulated_tests
from .appclock import LIBRARIES, clock_name

if TYPE_CHECKING:
    from .fake import FakeQStash
    from .step_failures import StepFailureLog

_FAKE_KEY: pytest.StashKey[FakeQStash] = pytest.StashKey()
_STEPS_KEY: pytest.StashKey[StepFailureLog] = pytest.StashKey()
_REPORTED_KEY = pytest.StashKey[bool]()
_CALL_FAILED_KEY = pytest.StashKey[bool]()
_ROUTERS_KEY = pytest.StashKey[SessionRouters]()
_INI_SETTINGS_KEY = pytest.StashKey[dict[str, Any]]()
_APPS_OVERRIDDEN_KEY = pytest.StashKey[bool]()
_STEPS_HELD_KEY = pytest.StashKey[bool]()

#: Marker keywords: each is the FakeQStash keyword argument of the same name (but
#: strict_teardown, which the fixture itself checks).
MARKER_OPTIONS = (
    "start",
    "freeze_time",
    "time_library",
    "raise_app_exceptions",
    "strict",
    "seed",
    "default_retries",
    "dedup_window",
    "max_deliveries_per_instant",
    "max_deliveries_per_call",
    "delivery_timeout",
    "base_urls",
    "plan",
    "retention",
    "region",
    "strict_teardown",
    *simulated_tests.MARKER_KEYWORDS,
)
#: What an ini option does, where its FakeQStash keyword's name does not say it.
_INI_WHAT = {
    "strict_teardown": (
        "fail a test that leaves due messages undelivered or DLQ entries nobody read"
    ),
    "retention": (
        "forget logs, finished messages and deliveries after the plan's log retention, "
        "DLQ entries after its DLQ retention"
    ),
}
_BOOL_INI = {
    "qstash_freeze_time": ("freeze_time", True),
    "qstash_raise_app_exceptions": ("raise_app_exceptions", True),
    "qstash_strict": ("strict", True),
    "qstash_strict_teardown": ("strict_teardown", False),
    "qstash_retention": ("retention", False),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    # pytest lists ini options in one block, without plugin headings: the common qstash_
    # prefix keeps ours together there (and `-o qstash_...=...` sets one for a run).
    for name, (option, default) in _BOOL_INI.items():
        usual = f"default for the qstash fixture's {option} (default {str(default).lower()})"
        what = _INI_WHAT.get(option)
        parser.addini(name, f"{what}: {usual}" if what else usual, type="bool", default=default)
    parser.addini(
        "qstash_time_library",
        f"which library moves the app's clock: {', '.join(LIBRARIES)} (default auto)",
        default="auto",
    )
    parser.addini("qstash_start", "the virtual clock's start (ISO 8601); default: real now")
    parser.addini(
        "qstash_delivery_timeout",
        "how long one delivery may take in real time before the test fails (seconds or a "
        "duration such as 500ms; default 30)",
    )
    parser.addini(
        "qstash_plan",
        "the QStash plan whose limits apply: free, pay_as_you_go, fixed_1m or fixed_10m "
        "(default fixed_10m, the most permissive)",
    )
    parser.addini(
        "qstash_network_guard",
        "answer QStash calls made while no fake is active with a 503 and a warning, instead "
        "of letting them reach the real QStash (default true)",
        type="bool",
        default=True,
    )
    simulated_tests.add_options(parser)


def _set_default_env() -> None:
    # Apps read these at import time, before any fixture runs: set them once, if unset. An
    # empty value counts as unset (CI secrets on forks, `QSTASH_TOKEN=` in a .env file): the
    # fake would otherwise use its default while the app sends the empty one.
    for name, value in DEFAULT_ENV.items():
        if not os.environ.get(name):
            os.environ[name] = value


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Before the first conftest.py is imported: one may import the app at module level.
    _set_default_env()


def pytest_configure(config: pytest.Config) -> None:
    _set_default_env()  # for `-p pytest_qstash.plugin` and pytester runs
    try:
        hosts.check_env()  # a QSTASH_URL no fake could intercept nor the guard stop
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-qstash: {exc}") from None
    config.addinivalue_line(
        "markers",
        "qstash(**options): settings for the qstash fixture, which a marked test gets even "
        "without asking, e.g. start='2026-01-01T00:00:00Z', freeze_time=False, "
        "raise_app_exceptions=False, strict=False, default_retries=0, strict_teardown=True",
    )
    # The session's routers (the httpx patch kept between tests, the network guard) start
    # the moment httpx is imported, or now if a conftest or plugin already imported it.
    simulated_tests.configure(config)
    if not config.pluginmanager.is_registered(simulated_tests):
        config.pluginmanager.register(simulated_tests, "qstash_simulation")
    guard = _bool_ini(config, "qstash_network_guard", at_configure=True)
    routers = config.stash[_ROUTERS_KEY] = SessionRouters(guard=guard)
    routers.watch()


def pytest_report_header(config: pytest.Config) -> str:
    """One line saying how the fakes are set up, for whoever reads a CI log."""
    return "qstash: " + ", ".join(_header_parts(config))


def _header_parts(config: pytest.Config) -> list[str]:
    try:
        freeze = bool(config.getini("qstash_freeze_time"))
        library = config.getini("qstash_time_library") or "auto"
        clock = clock_name(library) if freeze else "none"
    except (ValueError, pytest.UsageError):
        clock = "?"  # a bad setting: said by the first test that uses the fixture
    parts = [f"{clock} clock" if clock != "none" else "app clock not moved"]
    routers = config.stash.get(_ROUTERS_KEY, None)
    parts.append(f"network guard {'on' if routers is not None and routers.guard_on else 'off'}")
    try:
        if config.getini("qstash_strict_teardown"):
            parts.append("strict teardown")
    except (ValueError, pytest.UsageError):
        pass
    try:
        if config.getini("qstash_retention"):
            parts.append("plan retention")
    except (ValueError, pytest.UsageError):
        pass
    return parts


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    users = [
        item
        for item in items
        if isinstance(item, pytest.Function)
        and (
            simulated_tests.FAKE_FIXTURES & set(item.fixturenames)
            or item.get_closest_marker("qstash") is not None
        )
    ]
    if not users:  # a run that never uses the fake: nothing to look for
        config.stash[_APPS_OVERRIDDEN_KEY] = False
        return
    owners = _fixture_owners(config, users)
    config.stash[_APPS_OVERRIDDEN_KEY] = any(_defines(o, "qstash_apps") for o in owners)
    # A test asking for ``qstash`` has the fake already, where that name is ours.
    ours = () if any(_defines(o, "qstash") for o in owners) else ("qstash",)
    # As time-machine's marker does: a marked test gets the fake, and the fake starts before
    # the test's other function fixtures (an app fixture calling QStash is answered).
    for item in users:
        if (
            item.get_closest_marker("qstash") is not None
            and "qstash_fake" not in item.fixturenames
            and not any(name in item.fixturenames for name in ours)
        ):
            item.fixturenames.insert(0, "qstash_fake")


def _fixture_owners(config: pytest.Config, items: Sequence[pytest.Item]) -> list[object]:
    """Where this run's fixtures may be defined, besides this plugin: the other plugins and
    conftests, and the collected tests' modules and classes."""
    owners: list[object] = [
        p for p in config.pluginmanager.get_plugins() if getattr(p, "__name__", None) != _PLUGIN
    ]
    seen: set[int] = set()
    for item in items:
        for owner in (getattr(item, "module", None), getattr(item, "cls", None)):
            if owner is not None and id(owner) not in seen:
                seen.add(id(owner))
                owners.append(owner)
    return owners


def _defines(owner: object, fixture: str) -> bool:
    """Whether ``owner`` (a module, class or plugin object) defines a fixture of that name,
    or may: erring on yes costs a fixture lookup per test, never a wrong answer."""
    scopes = type.mro(owner) if isinstance(owner, type) else [owner]
    for scope in scopes:
        try:
            names = vars(scope)
        except TypeError:
            continue
        if fixture in names:
            return True
        if any(_fixture_name(value) == fixture for value in list(names.values())):
            return True
    return False


def _fixture_name(value: object) -> object:
    """The name a fixture definition registers (``@pytest.fixture(name=...)`` on a function
    named otherwise): pytest 8.4+ keeps it on its definition object, earlier versions on the
    marker attached to the function. Only those two kinds are asked: a module's other values
    may be lazy proxies (Django's settings, Flask's ``request``) that raise when read."""
    if isinstance(value, types.FunctionType):
        value = value.__dict__.get("_pytestfixturefunction")
    elif type(value).__name__ != "FixtureFunctionDefinition":
        return None
    return getattr(value, "name", None) if value is not None else None


def _apps(request: pytest.FixtureRequest) -> Any:
    """The ``qstash_apps`` fixture's value. Asked of pytest only where some module or plugin
    of the run may define its own (before collection ends, always): else it is the default,
    an empty dict, and each test has a fixture less to set up."""
    if request.config.stash.get(_APPS_OVERRIDDEN_KEY, True):
        return request.getfixturevalue("qstash_apps")
    return {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before the test's fixtures: httpx imported by way of another import hook than ours
    # (which would have started the session's routers already) is caught here at the latest.
    import_hook.catch_up()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    # Said as a warning of the test that made the calls (or of the first test after, for a
    # call made at import): visible in pytest's summary, an error under -W error.
    routers = item.config.stash.get(_ROUTERS_KEY, None)
    guard = routers.guard if routers is not None else None
    if guard is not None and guard.refused:
        from ..intercept.router import QStashOutsideFakeWarning

        refused, guard.refused = guard.refused, []
        more = f" (and {len(refused) - 1} more such call(s))" if len(refused) > 1 else ""
        warnings.warn(QStashOutsideFakeWarning(refused[0] + more), stacklevel=1)


def pytest_unconfigure(config: pytest.Config) -> None:
    routers = config.stash.get(_ROUTERS_KEY, None)
    if routers is not None:
        routers.stop()
    if config.stash.get(_STEPS_HELD_KEY, False):
        from . import step_failures

        step_failures.unhold()


def _bool_ini(config: pytest.Config, name: str, *, at_configure: bool = False) -> bool:
    try:
        return bool(config.getini(name))
    except (ValueError, pytest.UsageError) as exc:  # pytest's own says nothing of which option
        message = f"bad qstash setting: {name}: {exc} (expected true or false)"
    # Failed outside the except block: inside it, pytest would print the exception handled too.
    if at_configure:
        raise pytest.UsageError(message)
    pytest.fail(message, pytrace=False)


def _ini_settings(config: pytest.Config) -> dict[str, Any]:
    """The fake's settings from the ini options: read once per session (they cannot change
    during it), at the first test using the fake; a bad value fails each such test."""
    cached = config.stash.get(_INI_SETTINGS_KEY, None)
    if cached is not None:
        return cached
    settings: dict[str, Any] = {
        option: _bool_ini(config, name) for name, (option, _) in _BOOL_INI.items()
    }
    settings["time_library"] = config.getini("qstash_time_library") or "auto"
    if config.getini("qstash_start"):
        settings["start"] = config.getini("qstash_start")
    if config.getini("qstash_delivery_timeout"):
        settings["delivery_timeout"] = config.getini("qstash_delivery_timeout")
    if config.getini("qstash_plan"):
        settings["plan"] = config.getini("qstash_plan")
    config.stash[_INI_SETTINGS_KEY] = settings
    return settings


def _settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    settings = dict(_ini_settings(request.config))
    # Ids are seeded by the test's id: the same on every run of a test, yet different from
    # one test to the next, as real message ids are (an app that remembers the message ids
    # it processed, to be idempotent, must not see test 2's first id as test 1's).
    settings["seed"] = request.node.nodeid
    # Nearest marker wins: test over class over module.
    for marker in reversed(list(request.node.iter_markers("qstash"))):
        if marker.args:
            pytest.fail(
                "@pytest.mark.qstash takes keyword arguments only, e.g. "
                "@pytest.mark.qstash(start='2026-01-01T00:00:00Z')",
                pytrace=False,
            )
        unknown = set(marker.kwargs) - set(MARKER_OPTIONS)
        if unknown:
            pytest.fail(
                f"unknown @pytest.mark.qstash option(s) {sorted(unknown)}: "
                f"expected some of {', '.join(MARKER_OPTIONS)}",
                pytrace=False,
            )
        settings.update(marker.kwargs)
    return settings


_T = TypeVar("_T")


def _first_ten(items: Sequence[_T], line: Callable[[_T], str]) -> list[str]:
    """A line for each of the first ten ``items``, and how many more there are."""
    more = [f"  ... and {len(items) - 10} more"] if len(items) > 10 else []
    return [line(item) for item in items[:10]] + more


def _strict_teardown_problem(fake: FakeQStash) -> str | None:
    """What a test left behind that ``strict_teardown`` fails it for, or None."""
    due, unread = fake.left_behind()
    if not due and not unread:
        return None
    lines = [
        f"qstash strict_teardown: the test left work behind (virtual time {fake.now.isoformat()})"
    ]
    if due:
        lines.append(f"{len(due)} message(s) due but never delivered:")
        lines += _first_ten(
            due,
            lambda m: (
                f"  {m.message_id} {m.method} {m.url} {m.state} due since "
                f"{m.not_before.isoformat()}"
            ),
        )
        lines.append("  deliver them with qstash.tick(), advance(...) or drain()")
    if unread:
        lines.append(f"{len(unread)} DLQ entr{'y' if len(unread) == 1 else 'ies'} nobody read:")
        lines += _first_ten(
            unread,
            lambda e: f"  {e.dlq_id} {e.message_id} {e.url} response_status={e.response_status}",
        )
        lines.append("  read qstash.dlq (or list the DLQ through the API) in the test")
    lines.append(
        "(on for this test by @pytest.mark.qstash(strict_teardown=True) or the ini option "
        "qstash_strict_teardown; strict_teardown=False turns it off)"
    )
    return "\n".join(lines)


@pytest.fixture
def qstash_apps() -> dict[str, Any]:
    """Override to return ``{base_url: app}``; each app is mounted when the fake starts."""
    return {}


def _the_fake(request: pytest.FixtureRequest) -> Iterator[FakeQStash]:
    """The test's fake, for both fixture names: the first of them to set up builds and
    starts it, and stops it at its teardown; the other hands out the same object. Each name
    is a fixture of its own (not one an alias of the other) so that a test pays for one
    fixture, and a suite that owns one of the names still gets the fake from the other."""
    existing = request.node.stash.get(_FAKE_KEY, None)
    if existing is not None:
        yield existing
        return
    # The engine loads here, with the first test that uses it.
    from . import step_failures
    from .fake import FakeQStash

    apps: Any = _apps(request) or {}
    if not isinstance(apps, Mapping):
        pytest.fail(
            f"the qstash_apps fixture must return a dict {{base_url: app}}, not {apps!r}",
            pytrace=False,
        )
    settings = _settings(request)
    strict_teardown = settings.pop("strict_teardown", False)
    for keyword in simulated_tests.MARKER_KEYWORDS:  # read by the simulation's own hooks
        settings.pop(keyword, None)
    problem: str | None = None
    if not isinstance(strict_teardown, bool):
        problem = f"invalid strict_teardown={strict_teardown!r}: expected True or False"
    try:
        if problem is None:
            fake = FakeQStash(**settings)
    except (TypeError, ValueError) as exc:
        problem = str(exc)
    if problem is None:
        schedule = simulated_tests.schedule_for(request)
        if schedule is not None:
            simulated_tests.start(schedule, fake)
        for base_url, app in apps.items():
            fake.mount(base_url, app)
        try:
            fake.start()  # which checks a test's own QSTASH_URL, set since pytest started
        except hosts.QStashUrlError as exc:
            problem = str(exc)
    if problem is not None:
        # A bad marker, ini value or QSTASH_URL: one line saying which, without a traceback.
        pytest.fail(f"bad qstash setting: {problem}", pytrace=False)
    stash = request.node.stash
    stash[_FAKE_KEY] = fake  # until the test's teardown report (``pytest_runtest_makereport``)
    stash[_REPORTED_KEY] = False  # a rerun of the test reports afresh
    stash[_CALL_FAILED_KEY] = False
    steps = stash[_STEPS_KEY] = step_failures.StepFailureLog()
    if not request.config.stash.get(_STEPS_HELD_KEY, False):
        step_failures.hold()  # the SDK log handler stays for the session (unconfigure)
        request.config.stash[_STEPS_HELD_KEY] = True
    steps.listen()
    try:
        yield fake
    finally:
        steps.stop()
        fake.stop()
    # A test that failed already has its report: leftovers would only add noise.
    if strict_teardown and not stash.get(_CALL_FAILED_KEY, False):
        problem = _strict_teardown_problem(fake)
        if problem is not None:
            pytest.fail(problem, pytrace=False)


@pytest.fixture
def qstash(request: pytest.FixtureRequest) -> Iterator[FakeQStash]:
    """A fresh in-process QStash for this test: see ``pytest_qstash.FakeQStash``."""
    yield from _the_fake(request)


@pytest.fixture
def qstash_fake(request: pytest.FixtureRequest) -> Iterator[FakeQStash]:
    """The fake QStash (the same object as ``qstash``, for suites that own that name)."""
    yield from _the_fake(request)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    fake = item.stash.get(_FAKE_KEY, None)
    steps = item.stash.get(_STEPS_KEY, None)
    if call.when in ("setup", "call") and report.failed:
        item.stash[_CALL_FAILED_KEY] = True
    # Items live for the whole session: holding each test's fake (its apps, messages and any
    # exception's traceback) past its test would keep them all in memory.
    if call.when == "teardown" and _FAKE_KEY in item.stash:
        del item.stash[_FAKE_KEY]
        del item.stash[_STEPS_KEY]
    # A failure in setup (a fixture after the fake's), the call or teardown: the section once
    # per test, from the first failed phase.
    if fake is None or not report.failed or item.stash.get(_REPORTED_KEY, False):
        return
    from .report import section

    # None when the fake saw nothing: an empty timeline is noise in a failure report.
    text = section(fake.store, len(fake.deliveries), steps.by_run if steps else None)
    if text is not None:
        item.stash[_REPORTED_KEY] = True
        report.sections.append(("qstash", text))


#: The module pytest registers (the entry point): this one's hooks and fixtures are its own.
_PLUGIN = "pytest_qstash.plugin"
