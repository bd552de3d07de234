"""The ``qstash_server`` fixture: one server per test session (per pytest-xdist worker).

Registered as a pytest plugin of its own (entry point ``qstash_server``) so that the
in-process plugin does not grow with it; it imports nothing of the server until used.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # loaded by the fixture: this module is imported in every pytest run
    from .processes.server import ServerProcess

_SERVER_KEY: pytest.StashKey[ServerProcess] = pytest.StashKey()
_SAVED_ENV_KEY = pytest.StashKey[dict[str, "str | None"]]()
#: Where the server's histories stood when the test began (None: the server started in it).
_MARK_KEY = pytest.StashKey["dict[str, int] | None"]()
_REPORTED_KEY = pytest.StashKey[bool]()


@pytest.fixture(scope="session")
def qstash_server_options() -> dict[str, Any]:
    """Override (session scope) to start the server otherwise: ``clock`` ("virtual"),
    ``start`` (an ISO 8601 moment), ``seed``, ``attempt_timeout`` (the real-time bound on one
    delivery attempt: seconds or a duration, default 30 s), ``retention`` (True: forget
    records past the plan's retention, as ``serve`` does by default; the fixture's default is
    False, so that a test's records stay whole as in-process), ``dev`` (True: dev mode, for apps
    configured by ``QSTASH_DEV=true`` alone; the tests get ``QSTASH_DEV`` and
    ``QSTASH_DEV_PORT``), ``region`` (``"us-east-1"`` or ``"eu-central-1"``: deliveries
    carry ``Upstash-Region``; the tests get ``QSTASH_REGION`` and the region's variables),
    ``simulate`` (a seed: the server injects the faults QStash's at-least-once contract allows
    on its schedule; ``faults`` picks kinds), ``args`` (more ``serve`` options)."""
    return {}


@pytest.fixture(scope="session")
def qstash_server(
    request: pytest.FixtureRequest, qstash_server_options: dict[str, Any]
) -> Iterator[ServerProcess]:
    """A ``pytest-qstash serve`` on a free loopback port, on a virtual clock, for the whole
    session. It takes the session's ``QSTASH_TOKEN`` and signing keys (an app module imported
    earlier keeps working). ``QSTASH_URL`` points at it in ``os.environ`` while a test that
    uses it runs (its fixtures included), so the app processes a test starts talk to it; the
    tests that do not use it see the environment as it was. It has the fixture's verbs
    and lists (``tick``, ``advance``, ``drain``, ``messages``, ``deliveries``, ...),
    ``reset()`` to forget what earlier tests left, and ``mount(prefix, to)`` to send the
    server's outbound requests under a URL prefix to a local fake (kept by resets: unmount, or
    mount in a ``with`` block, for one test). ``load(FILE)`` takes in an export; the server
    then holds back deliveries to URLs neither on loopback nor mounted (``held()``,
    ``retry_held()``) until a ``reset()`` that keeps nothing."""
    from .processes.server import ServerProcess

    options = {"clock": "virtual", "retention": False, **qstash_server_options}
    # Dev mode has credentials of its own: the session's are for the other modes.
    given = [] if options.get("dev") else ["--credentials-from-env"]
    options["args"] = [*given, "--stop-with-parent", *options.get("args", ())]
    server = ServerProcess.start(**options)
    request.config.stash[_SERVER_KEY] = server
    os.environ.update(server.env)  # for the rest of this test; restored at its teardown
    try:
        yield server
    finally:
        del request.config.stash[_SERVER_KEY]
        server.stop()


# The server lives for the session, but its QSTASH_URL must not: a test that does not use it
# (in random order, under xdist) would otherwise send its QStash calls to a loopback port.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if "qstash_server" in getattr(item, "fixturenames", ()):
        from .processes.server import ALL_ENV_NAMES

        item.stash[_SAVED_ENV_KEY] = {name: os.environ.get(name) for name in ALL_ENV_NAMES}
        server = item.config.stash.get(_SERVER_KEY, None)
        item.stash[_MARK_KEY] = None
        item.stash[_REPORTED_KEY] = False
        if server is not None:
            from .control.client import ServerError

            os.environ.update(server.env)
            # A server that stopped answering: the test's own calls will say so.
            with contextlib.suppress(OSError, ServerError):
                item.stash[_MARK_KEY] = server.mark()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed or _MARK_KEY not in item.stash or item.stash.get(_REPORTED_KEY, True):
        return
    server = item.config.stash.get(_SERVER_KEY, None)
    if server is None:
        return
    from .control.client import ServerError

    # What the server saw since the test began, as the in-process fixture reports it: once
    # per test, from the first phase that failed.
    try:
        text = server.report(since=item.stash[_MARK_KEY])
    except (OSError, ServerError) as exc:
        text = f"qstash report failed: the server did not answer ({exc})"
    if text is not None:
        item.stash[_REPORTED_KEY] = True
        report.sections.append(("qstash", text))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield
    saved = item.stash.get(_SAVED_ENV_KEY, None)
    if saved is None:
        return
    del item.stash[_SAVED_ENV_KEY]
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
