"""The pytest layer, run as a user's suite would run it (pytester)."""

from __future__ import annotations

import pytest
from inner_pytest import run_inner

from pytest_qstash import FakeQStash

ENV_NAMES = ("QSTASH_TOKEN", "QSTASH_CURRENT_SIGNING_KEY", "QSTASH_NEXT_SIGNING_KEY")

# A tiny app for the inner suites: answers 500 on /fail, 200 elsewhere.
APP_CONFTEST = """
import httpx
import pytest


def endpoint(request):
    return httpx.Response(500 if request.url.path == "/fail" else 200, text="from the app")
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return run_inner(pytester, *args)


# -- environment before collection -------------------------------------------------------------
@pytest.mark.parametrize("before", ["unset", "empty"])
def test_env_is_set_before_collection(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, before: str
) -> None:
    # Empty counts as unset: CI secrets on forks and `QSTASH_TOKEN=` lines in .env files.
    for name in ENV_NAMES:
        if before == "empty":
            monkeypatch.setenv(name, "")
        else:
            monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(
        """
        import os

        from qstash import QStash

        # Read at import, as apps do (module-level client, settings).
        TOKEN = os.environ["QSTASH_TOKEN"]
        CURRENT = os.environ["QSTASH_CURRENT_SIGNING_KEY"]
        NEXT = os.environ["QSTASH_NEXT_SIGNING_KEY"]
        CLIENT = QStash(TOKEN, retry=False)


        def test_values(qstash):
            assert (qstash.token, qstash.current_signing_key, qstash.next_signing_key) == (
                TOKEN, CURRENT, NEXT
            )
            for key in (CURRENT, NEXT):
                assert key.startswith("sig_") and len(key) >= 32
            assert CURRENT != NEXT
            CLIENT.message.publish(url="https://app.test/x", body="module-level client")
            assert [m.body for m in qstash.messages] == ["module-level client"]
        """
    )

    run(pytester).assert_outcomes(passed=1)


def test_users_own_keys_are_kept_and_signed_with(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QSTASH_CURRENT_SIGNING_KEY", "sig_myOwnCurrentKeyForThisSuite000")
    monkeypatch.setenv("QSTASH_NEXT_SIGNING_KEY", "sig_myOwnNextKeyForThisSuite000000")
    pytester.makepyfile(
        """
        import os

        import httpx
        from qstash import QStash, Receiver

        CURRENT = os.environ["QSTASH_CURRENT_SIGNING_KEY"]


        def test_signed_with_my_key(qstash):
            assert CURRENT == "sig_myOwnCurrentKeyForThisSuite000"
            receiver = Receiver(CURRENT, "sig_notTheNextKeyAtAll00000000000")

            def endpoint(request):
                receiver.verify(
                    signature=request.headers["upstash-signature"],
                    body=request.content.decode(),
                    url=str(request.url),
                )

            qstash.mount("https://app.test", endpoint)
            QStash(os.environ["QSTASH_TOKEN"], retry=False).message.publish(
                url="https://app.test/x", body="b"
            )
            assert [d.status for d in qstash.tick()] == [200]
        """
    )

    run(pytester).assert_outcomes(passed=1)


# -- ini options and the marker ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "outcome"),
    [
        ("qstash_start = 1767225600", "passed"),  # unix seconds, as the marker takes them
        ("qstash_strict = maybe", "*bad qstash setting: qstash_strict: *expected true or false*"),
        ("qstash_start = soon", "*bad qstash setting: invalid moment 'soon'*"),
        ("qstash_plan = gold", "*bad qstash setting: unknown plan 'gold': expected one of free*"),
    ],
)
def test_ini_values_are_read_or_refused_by_name(
    pytester: pytest.Pytester, line: str, outcome: str
) -> None:
    pytester.makeini(f"[pytest]\n{line}\n")
    pytester.makepyfile(
        """
        def test_x(qstash):
            assert qstash.now.isoformat() == "2026-01-01T00:00:00+00:00"
        """
    )
    result = run(pytester)
    if outcome == "passed":
        result.assert_outcomes(passed=1)
    else:
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines([outcome])
        result.stdout.no_fnmatch_line("*During handling of the above exception*")


def test_ini_options(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        qstash_strict = false
        qstash_raise_app_exceptions = false
        qstash_start = 2026-03-01T12:00:00Z
        qstash_time_library = freezegun
        """
    )
    pytester.makepyfile(
        """
        import os
        from datetime import datetime, timezone

        import pytest
        from qstash import QStash


        def test_defaults_from_ini(qstash):
            assert qstash.now == datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
            assert datetime.__name__ == "FakeDatetime"  # freezegun rebinds module names
            assert datetime.now(timezone.utc) == qstash.now

            def crash(request):
                raise RuntimeError("kept quiet")

            qstash.mount("https://app.test", crash)
            client = QStash(os.environ["QSTASH_TOKEN"], retry=False)
            client.message.publish(url="https://app.test/x", body="1")
            client.message.publish(url="https://unmounted.test/x", body="2")

            crashed, unrouted = qstash.tick()  # neither raises
            assert crashed.status == 500
            assert unrouted.status is None and "unrouted" in unrouted.error


        @pytest.mark.qstash(strict=True)
        def test_marker_beats_ini(qstash):
            from pytest_qstash import UnroutedDeliveryError

            QStash(os.environ["QSTASH_TOKEN"], retry=False).message.publish(
                url="https://unmounted.test/x", body="3"
            )
            with pytest.raises(UnroutedDeliveryError):
                qstash.tick()
        """
    )

    run(pytester).assert_outcomes(passed=2)


def test_nearest_marker_wins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        pytestmark = pytest.mark.qstash(start="2026-01-01T00:00:00Z", strict=False)


        def year(qstash):
            return qstash.now.year


        def test_module_level(qstash):
            assert year(qstash) == 2026
            assert qstash.strict is False


        @pytest.mark.qstash(start="2027-01-01T00:00:00Z")
        class TestClassLevel:
            def test_class_level(self, qstash):
                assert year(qstash) == 2027
                assert qstash.strict is False  # still from the module

            @pytest.mark.qstash(start="2028-01-01T00:00:00Z", strict=True)
            def test_test_level(self, qstash):
                assert year(qstash) == 2028
                assert qstash.strict is True
        """
    )

    run(pytester).assert_outcomes(passed=3)


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        (
            "@pytest.mark.qstash(frezze_time=False)",
            # fnmatch reads [...] as a set: [[] matches a literal "["
            "*unknown @pytest.mark.qstash option(s) [[]'frezze_time']: expected some of start,*",
        ),
        ("@pytest.mark.qstash(True)", "*@pytest.mark.qstash takes keyword arguments only*"),
        (
            "@pytest.mark.qstash(default_retries=-1)",
            "*bad qstash setting: invalid default_retries=-1: expected an integer >= 0*",
        ),
        (
            '@pytest.mark.qstash(strict="no")',
            "*bad qstash setting: invalid strict='no': expected True or False*",
        ),
        (
            "@pytest.mark.qstash(max_deliveries_per_instant=0)",
            "*bad qstash setting: invalid max_deliveries_per_instant=0: expected an integer >= 1*",
        ),
        (
            "@pytest.mark.qstash(start='next tuesday')",
            "*bad qstash setting: invalid moment 'next tuesday'*",
        ),
    ],
)
def test_bad_marker_is_a_clear_usage_error(
    pytester: pytest.Pytester, marker: str, expected: str
) -> None:
    pytester.makepyfile(
        f"""
        import pytest


        {marker}
        def test_x(qstash):
            pass


        def test_unmarked(qstash):
            pass
        """
    )

    result = run(pytester)

    result.stdout.fnmatch_lines([expected])
    result.stdout.no_fnmatch_line("*During handling of the above exception*")
    result.assert_outcomes(passed=1, errors=1)  # only the marked test is refused


def test_pytest_durations_stay_real_under_freezegun(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest


        @pytest.mark.qstash(time_library="freezegun", start="2020-01-01T00:00:00Z")
        def test_frozen(qstash):
            qstash.advance("30d")
        """
    )

    result = run(pytester, "--durations=0", "--durations-min=0")

    result.assert_outcomes(passed=1)
    timings = [line for line in result.outlines if "test_frozen" in line and "s " in line]
    assert timings
    # Each is "<seconds>s <phase> <test id>": real, not years of frozen clock.
    assert all(float(line.split("s ", 1)[0]) < 60 for line in timings), timings


# -- fixtures ----------------------------------------------------------------------------------
def test_qstash_apps_override_mounts_apps(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        APP_CONFTEST
        + """

@pytest.fixture
def qstash_apps():
    return {"https://app.test": endpoint}
"""
    )
    pytester.makepyfile(
        """
        import os

        from qstash import QStash


        def test_mounted_from_conftest(qstash):
            QStash(os.environ["QSTASH_TOKEN"], retry=False).message.publish(
                url="https://app.test/hello", body="b"
            )
            [delivery] = qstash.tick()
            assert (delivery.status, delivery.response_body) == (200, "from the app")
        """
    )

    run(pytester).assert_outcomes(passed=1)


def test_qstash_fake_alias_for_suites_owning_qstash(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest


        @pytest.fixture
        def qstash():
            return "the suite's own qstash fixture"
        """
    )
    pytester.makepyfile(
        """
        from pytest_qstash import FakeQStash


        def test_alias(qstash, qstash_fake):
            assert qstash == "the suite's own qstash fixture"
            assert isinstance(qstash_fake, FakeQStash)
            assert qstash_fake.active
        """
    )

    run(pytester).assert_outcomes(passed=1)


def test_qstash_and_qstash_fake_are_one_object(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_same(qstash, qstash_fake):
            assert qstash is qstash_fake


        def test_fresh_each_test_1(qstash):
            qstash.mount("https://a.test", lambda request: None)
            assert qstash.mounts.base_urls == ["https://a.test"]


        def test_fresh_each_test_2(qstash):
            assert qstash.mounts.base_urls == []
            assert qstash.messages == []
        """
    )

    run(pytester).assert_outcomes(passed=3)


def test_qstash_apps_overridden_in_a_module_a_class_or_under_another_name(
    pytester: pytest.Pytester,
) -> None:
    # The fake asks pytest for qstash_apps only where some module, class or plugin of the run
    # defines one: each place a suite can, and pytest's name= spelling, must be seen.
    pytester.makeconftest(APP_CONFTEST)
    pytester.makepyfile(
        test_module_level="""
        import pytest
        from conftest import endpoint


        @pytest.fixture(name="qstash_apps")
        def apps_of_this_module():
            return {"https://module.test": endpoint}


        def test_module_override(qstash):
            assert qstash.mounts.base_urls == ["https://module.test"]
        """,
        test_class_level="""
        import pytest
        from conftest import endpoint


        class Base:
            @pytest.fixture
            def qstash_apps(self):
                return {"https://class.test": endpoint}


        class TestInherited(Base):
            def test_class_override(self, qstash_fake):
                assert qstash_fake.mounts.base_urls == ["https://class.test"]


        def test_outside_the_class(qstash):
            assert qstash.mounts.base_urls == []
        """,
    )

    run(pytester).assert_outcomes(passed=3)


def test_a_marked_test_of_a_suite_owning_qstash_still_gets_the_fake_first(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        """
        import pytest
        from pytest_qstash import FakeQStash

        STARTED = []


        @pytest.fixture
        def qstash():
            return "the suite's own"


        @pytest.fixture
        def app():
            STARTED.append(FakeQStash is not None)
            return "app"
        """
    )
    pytester.makepyfile(
        """
        import pytest


        @pytest.mark.qstash(start="2026-01-01T00:00:00Z")
        def test_marked(app, qstash, request):
            assert qstash == "the suite's own"
            assert request.fixturenames[0] == "qstash_fake"
            fake = request.getfixturevalue("qstash_fake")
            assert fake.active and fake.now.year == 2026
        """
    )

    run(pytester).assert_outcomes(passed=1)


def test_a_fake_nobody_calls_builds_no_engine_and_still_answers_every_question(
    qstash: FakeQStash,
) -> None:
    # Built on first use: a test that never reaches QStash pays for none of it, and one that
    # only reads sees an empty, working fake.
    assert qstash.active
    assert "store" not in vars(qstash)
    assert qstash.messages == []
    assert qstash.deliveries == []
    assert qstash.dlq == []
    assert qstash.tick() == []
    assert qstash.token
    assert qstash.retention is False
    assert qstash.delivery_timeout == 30


# -- the failure report ------------------------------------------------------------------------
def test_failing_test_shows_the_qstash_section(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(APP_CONFTEST)
    pytester.makepyfile(
        """
        import os

        import pytest
        from conftest import endpoint
        from qstash import QStash


        @pytest.mark.qstash(start="2026-01-01T00:00:00Z")
        def test_fails(qstash):
            qstash.mount("https://app.test", endpoint)
            client = QStash(os.environ["QSTASH_TOKEN"], retry=False)
            client.message.publish(url="https://app.test/ok", body="fine")
            client.message.publish(url="https://app.test/fail", body="broken", retries=0)
            qstash.tick()
            assert False, "the test's own failure"


        def test_passes(qstash):
            pass
        """
    )

    result = run(pytester)

    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: the test's own failure*",
            "*- qstash -*",
            "virtual time now: 2026-01-01T00:00:00+00:00",
            "2 message(s), 2 delivery attempt(s), 1 in the DLQ",
            "  msg_* POST https://app.test/ok DELIVERED retried=0/3 body='fine'",
            "    2026-01-01T00:00:00+00:00 attempt retried=0 -> 200",
            "  msg_* POST https://app.test/fail FAILED retried=0/0 dlq_id=* body='broken'",
            "    2026-01-01T00:00:00+00:00 attempt retried=0 -> 500 'from the app'",
        ]
    )
    # Only the failing test gets the section.
    assert result.stdout.str().count("virtual time now") == 1


def test_a_tests_fake_is_freed_after_the_test(pytester: pytest.Pytester) -> None:
    # Items live for the whole session: a fake kept on one would hold its apps and messages.
    pytester.makepyfile(
        """
        import gc
        import weakref

        seen = []


        def test_uses_the_fake(qstash):
            seen.append(weakref.ref(qstash))


        def test_it_is_gone():
            gc.collect()
            assert seen[0]() is None
        """
    )
    run(pytester).assert_outcomes(passed=2)


# -- the network guard ---------------------------------------------------------------------------
def test_a_qstash_call_outside_the_fake_is_stopped_before_the_network(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import os

        import pytest
        from qstash import QStash
        from qstash.errors import QStashError

        CLIENT = QStash(os.environ["QSTASH_TOKEN"], retry=False)


        @pytest.fixture
        def started_app():
            # An app that publishes at startup, started before (without) the qstash fixture.
            CLIENT.schedule.create(destination="https://app.test/digest", cron="0 9 * * *")


        def test_fixture_order(started_app, qstash):
            pass


        def test_outside(qstash_apps):
            # The app sees QStash unavailable; the test gets a warning (an error under -W error).
            with pytest.raises(QStashError, match="503"):
                CLIENT.message.publish(url="https://app.test/x", body="x")


        def test_the_fake_still_answers(qstash):
            CLIENT.message.publish(url="https://app.test/x", body="x")
            assert len(qstash.messages) == 1
        """
    )
    result = run(pytester, "-W", "error::pytest_qstash.QStashOutsideFakeWarning", "-rA")
    # The fixture (its setup, and its teardown for the warning), test_outside's teardown.
    result.assert_outcomes(passed=2, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_fixture_order*",
            "*ERROR at teardown of test_outside*",
            "*QStashOutsideFakeWarning: pytest-qstash: POST /v2/publish/https://app.test/x "
            "reached QStash while no fake was active*depend on `qstash`*",
        ]
    )


def test_the_network_guard_can_be_turned_off(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nqstash_network_guard = false\n")
    pytester.makepyfile(
        """
        from pytest_qstash.intercept.router import NetworkGuard


        def test_no_guard():
            assert NetworkGuard.running() is None
        """
    )
    # In a process of its own: this session's guard would be seen by an in-process run.
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_the_guard_steps_aside_only_for_what_answers_the_call(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os
        import socket

        import httpx
        import pytest
        import respx
        from qstash import QStash
        from qstash.errors import QStashError


        def publish(**kwargs):
            QStash(os.environ["QSTASH_TOKEN"], retry=False, **kwargs).message.publish(
                url="https://app.test/x", body="x"
            )


        def test_a_respx_mock_for_another_host_does_not_let_it_through():
            with respx.mock(assert_all_called=False) as router:
                router.get("https://partner.test/").respond(200)
                with pytest.raises(QStashError, match="reached QStash while no fake"):
                    publish()


        def test_a_respx_route_for_qstash_answers_it():
            with respx.mock() as router:
                route = router.post(host="qstash.upstash.io").respond(
                    200, json={"messageId": "msg_mine"}
                )
                publish()
            assert route.called


        def test_a_local_qstash_server_is_no_network():
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            with pytest.raises(Exception) as info:  # nothing listens: refused, not guarded
                publish(base_url=f"http://127.0.0.1:{port}")
            assert "reached QStash" not in str(info.value)
        """
    )
    run(pytester).assert_outcomes(passed=3)


def test_the_plan_comes_from_the_ini_and_the_marker_overrides_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nqstash_plan = free\n")
    pytester.makepyfile(
        """
        import pytest

        def test_from_ini(qstash):
            assert qstash.store.plan.name == "free"

        @pytest.mark.qstash(plan="pay as you go")
        def test_from_marker(qstash):
            assert qstash.store.plan.name == "pay_as_you_go"
        """
    )
    run(pytester).assert_outcomes(passed=2)
