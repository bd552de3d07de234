"""What a user sees when they trip over the plugin: the texts are pinned as they read them."""

from __future__ import annotations

import os
from unittest import mock

import pytest
from inner_pytest import run_inner
from qstash import QStash

from pytest_qstash import FakeQStash


@pytest.fixture(autouse=True)
def _quiet_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


# -- the qstash fixture hiding the qstash module ---------------------------------------------
def test_the_fixture_hiding_the_sdk_module_says_so_and_how_to_fix_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import os

        import qstash


        def test_publish(qstash):
            client = qstash.QStash(os.environ["QSTASH_TOKEN"])
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E       AttributeError: 'FakeQStash' object has no attribute 'QStash': `qstash` "
            "here is pytest-qstash's fixture (a FakeQStash), not the qstash SDK module, which "
            "the test's `qstash` argument hides. Either import the name (`from qstash import "
            "QStash`), or request the fixture as `qstash_fake` (def test_x(qstash_fake): ...) "
            "so that `qstash` stays the module.",
        ]
    )


def test_other_unknown_attributes_are_plain_attribute_errors() -> None:
    fake = FakeQStash()
    with pytest.raises(AttributeError) as typo:
        fake.advnce("1s")  # type: ignore[attr-defined]
    assert (
        str(typo.value) == "'FakeQStash' object has no attribute 'advnce'. Did you mean: 'advance'?"
    )
    with pytest.raises(AttributeError) as unknown:
        fake.xyzzy  # type: ignore[attr-defined]  # noqa: B018
    assert str(unknown.value) == "'FakeQStash' object has no attribute 'xyzzy'"
    with pytest.raises(AttributeError) as receiver:
        fake.Receiver  # type: ignore[attr-defined]  # noqa: B018
    assert "(`from qstash import Receiver`)" in str(receiver.value)


def test_probing_for_attributes_still_works() -> None:
    # hasattr, getattr with a default, mock's autospec and pytest's own probes see "absent".
    fake = FakeQStash()
    assert not hasattr(fake, "QStash")
    assert not hasattr(fake, "__wrapped__")
    assert getattr(fake, "_pytestfixturefunction", None) is None
    spec = mock.create_autospec(fake, instance=True)
    spec.advance("1s")
    spec.advance.assert_called_once_with("1s")
    with pytest.raises(AttributeError):
        spec.QStash  # noqa: B018


# -- callbacks are deliveries too -----------------------------------------------------------
def test_callbacks_are_deliveries_of_their_own_kind(qstash: FakeQStash) -> None:
    qstash.mount("https://app.test", lambda request: __import__("httpx").Response(200))
    QStash(os.environ["QSTASH_TOKEN"]).message.publish(
        url="https://app.test/hook", body="hi", callback="https://app.test/callback"
    )
    made = qstash.tick()
    assert [(d.kind, d.url) for d in made] == [
        ("message", "https://app.test/hook"),
        ("callback", "https://app.test/callback"),
    ]
    [delivery] = made.filter(kind="message")
    assert delivery.body == "hi"
    assert repr(made[1]).startswith(f"<Delivery {made[1].message_id} (callback) POST ")
    assert [m.kind for m in qstash.messages] == ["message", "callback"]


def test_a_failure_callback_is_of_kind_failure_callback(qstash: FakeQStash) -> None:
    import httpx

    qstash.mount("https://app.test", lambda request: httpx.Response(500))
    QStash(os.environ["QSTASH_TOKEN"]).message.publish(
        url="https://app.test/hook", retries=0, failure_callback="https://app.test/failed"
    )
    assert [d.kind for d in qstash.tick()] == ["message", "failure_callback"]


# -- the marker implies the fixture ----------------------------------------------------------
def test_the_marker_alone_gives_the_test_a_fake(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os
        from datetime import datetime, timezone

        import pytest
        from qstash import QStash


        @pytest.fixture
        def client():
            # An app fixture calling QStash: the marker's fake is already answering.
            client = QStash(os.environ["QSTASH_TOKEN"], retry=False)
            client.message.publish(url="https://app.test/x", body="from a fixture")
            return client


        @pytest.mark.qstash(start="2026-01-01T00:00:00Z")
        def test_marked_without_the_fixture(client, request):
            assert datetime.now(timezone.utc) == datetime(2026, 1, 1, tzinfo=timezone.utc)
            fake = request.getfixturevalue("qstash_fake")
            assert [m.body for m in fake.messages] == ["from a fixture"]


        def test_unmarked_gets_nothing(request):
            assert "qstash_fake" not in request.fixturenames
        """
    )
    result = run_inner(pytester, "-W", "error::pytest_qstash.QStashOutsideFakeWarning")
    result.assert_outcomes(passed=2)
    run_inner(pytester, "--markers").stdout.fnmatch_lines(
        [
            "@pytest.mark.qstash(**options): settings for the qstash fixture, which a marked "
            "test gets even without asking, e.g. *strict_teardown=True",
        ]
    )


# -- the header line and --help --------------------------------------------------------------
def test_the_report_header_says_how_the_fakes_are_set_up(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run_inner(pytester)
    result.stdout.fnmatch_lines(["qstash: time-machine clock, network guard on"])


def test_the_report_header_follows_the_ini_options(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        asyncio_default_fixture_loop_scope = function
        qstash_time_library = freezegun
        qstash_strict_teardown = true
        """
    )
    pytester.makepyfile("def test_nothing():\n    pass\n")
    run_inner(pytester).stdout.fnmatch_lines(
        ["qstash: freezegun clock, network guard on, strict teardown"]
    )
    pytester.makeini(
        """
        [pytest]
        asyncio_default_fixture_loop_scope = function
        qstash_freeze_time = false
        qstash_network_guard = false
        """
    )
    run_inner(pytester).stdout.fnmatch_lines(["qstash: app clock not moved, network guard off"])


def test_help_lists_the_ini_options_together(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, "--help")
    # One block under pytest's ini options, in this order (pytest has no ini headings).
    names = [line.split()[0] for line in result.stdout.lines if line.startswith("  qstash_")]
    assert names == [
        "qstash_freeze_time",
        "qstash_raise_app_exceptions",
        "qstash_strict",
        "qstash_strict_teardown",
        "qstash_retention",
        "qstash_time_library",
        "qstash_start",
        "qstash_delivery_timeout",
        "qstash_plan",
        "qstash_network_guard",
        "qstash_simulate",
    ]
    text = " ".join(result.stdout.str().split())
    assert (
        "qstash_strict_teardown (bool): fail a test that leaves due messages undelivered or "
        "DLQ entries nobody read: default for the qstash fixture's strict_teardown "
        "(default false)"
    ) in text


# -- strictness at teardown ------------------------------------------------------------------
STRICT_TESTS = """
import os

import httpx
import pytest
from qstash import QStash


def publish(**options):
    QStash(os.environ["QSTASH_TOKEN"], retry=False).message.publish(
        url="https://app.test/hook", body="x", **options
    )


@pytest.fixture(autouse=True)
def app(qstash):
    qstash.mount("https://app.test", lambda request: httpx.Response(500))


@pytest.mark.qstash(strict_teardown=True)
def test_due_left_behind(qstash):
    publish()


@pytest.mark.qstash(strict_teardown=True)
def test_dlq_nobody_read(qstash):
    publish(retries=0)
    qstash.tick()


@pytest.mark.qstash(strict_teardown=True)
def test_dlq_read_through_the_fake(qstash):
    publish(retries=0)
    qstash.tick()
    assert len(qstash.dlq) == 1


@pytest.mark.qstash(strict_teardown=True)
def test_dlq_read_through_the_api(qstash):
    publish(retries=0)
    qstash.tick()
    assert len(QStash(os.environ["QSTASH_TOKEN"]).dlq.list().messages) == 1


@pytest.mark.qstash(strict_teardown=True)
def test_later_messages_are_no_leftovers(qstash):
    publish(delay="1h")


@pytest.mark.qstash(strict_teardown=True)
def test_a_failed_test_is_not_failed_twice(qstash):
    publish()
    assert False


def test_off_by_default(qstash):
    publish()
"""


def test_strict_teardown_fails_tests_that_leave_work_behind(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(STRICT_TESTS)
    result = run_inner(pytester)
    # The two teardown errors come after calls that passed.
    result.assert_outcomes(passed=6, failed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*_ ERROR at teardown of test_due_left_behind _*",
            "qstash strict_teardown: the test left work behind (virtual time *)",
            "1 message(s) due but never delivered:",
            "  msg_* POST https://app.test/hook CREATED due since *",
            "  deliver them with qstash.tick(), advance(...) or drain()",
            "(on for this test by @pytest.mark.qstash(strict_teardown=True) or the ini option "
            "qstash_strict_teardown; strict_teardown=False turns it off)",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*_ ERROR at teardown of test_dlq_nobody_read _*",
            "qstash strict_teardown: the test left work behind (virtual time *)",
            "1 DLQ entry nobody read:",
            "  * msg_* https://app.test/hook response_status=500",
            "  read qstash.dlq (or list the DLQ through the API) in the test",
        ]
    )
    result.stdout.no_fnmatch_line("*ERROR at teardown of test_a_failed_test_is_not_failed_twice*")


def test_strict_teardown_from_the_ini_and_off_by_marker(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        asyncio_default_fixture_loop_scope = function
        qstash_strict_teardown = true
        """
    )
    pytester.makepyfile(
        """
        import os

        import pytest
        from qstash import QStash


        def publish():
            QStash(os.environ["QSTASH_TOKEN"]).message.publish(url="https://app.test/x")


        def test_strict(qstash):
            publish()


        @pytest.mark.qstash(strict_teardown=False)
        def test_relaxed(qstash):
            publish()


        @pytest.mark.qstash(strict_teardown="yes")
        def test_bad_value(qstash):
            pass
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*bad qstash setting: invalid strict_teardown='yes': expected True or False*",
        ]
    )


# -- the API calls the app made --------------------------------------------------------------
def test_api_calls_lists_each_call_and_its_answer(qstash: FakeQStash) -> None:
    client = QStash(os.environ["QSTASH_TOKEN"], retry=False)
    client.message.publish_json(url="https://app.test/x", body={"id": 7}, delay="1m")
    with pytest.raises(Exception, match="not found"):
        client.message.get("msg_nope")
    qstash.fail_next("publish", kind="network")
    with pytest.raises(Exception, match="injected network error"):
        client.message.publish(url="https://app.test/x")

    publish, lookup, cut = qstash.api_calls
    assert (publish.method, publish.path, publish.status, publish.ok) == (
        "POST",
        "/v2/publish/https://app.test/x",
        200,
        True,
    )
    assert publish.json() == {"id": 7}
    assert publish.headers["upstash-delay"] == "1m"
    assert publish.response_json() == {"messageId": qstash.messages[0].message_id}
    assert publish.at == qstash.now
    assert (lookup.method, lookup.path, lookup.status, lookup.ok) == (
        "GET",
        "/v2/messages/msg_nope",
        404,
        False,
    )
    assert "error" in lookup.response_json()
    assert cut.status is None
    assert cut.error is not None
    assert cut.error.startswith("ConnectError: injected network error")
    assert qstash.api_calls.filter(method="GET") == [lookup]
    assert qstash.api_calls.one(status=404) is lookup
    at = qstash.now.isoformat()
    assert repr(lookup) == f"<ApiCall GET /v2/messages/msg_nope status=404 at={at}>"
    with pytest.raises(AssertionError) as none:
        qstash.api_calls.one(method="DELETE")
    assert str(none.value).splitlines()[:2] == [
        "expected one API call with method='DELETE', found none among 3",
        f"  <ApiCall POST /v2/publish/https://app.test/x status=200 at={at}>: "
        "method='POST', not 'DELETE'",
    ]


def test_api_calls_keeps_the_newest(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_qstash.testing.gateway

    monkeypatch.setattr(pytest_qstash.testing.gateway, "API_CALLS_KEPT", 2)
    with FakeQStash() as fake:
        client = QStash(fake.token, retry=False)
        for n in range(3):
            client.message.publish(url=f"https://app.test/{n}")
        assert [call.path for call in fake.api_calls] == [
            "/v2/publish/https://app.test/1",
            "/v2/publish/https://app.test/2",
        ]
