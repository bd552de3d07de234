"""Edges users hit: bad mounts and destinations, nested fakes, QSTASH_URL set late."""

from __future__ import annotations

import os

import pytest
from qstash import QStash
from qstash.errors import QStashError

from pytest_qstash import FakeQStash, UnroutedDeliveryError


@pytest.mark.parametrize(
    ("base_url", "fragment"),
    [
        ("https://", "with a host"),
        ("app.example.com", "absolute http:// or https://"),
        ("https://app.example.com?x=1", "without a query or fragment"),
        ("https://app.example.com#top", "without a query or fragment"),
    ],
)
def test_bad_mount_urls_are_refused(qstash: FakeQStash, base_url: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        qstash.mount(base_url, lambda request: None)


def test_an_app_taking_no_argument_is_refused_at_mount(qstash: FakeQStash) -> None:
    with pytest.raises(TypeError, match="takes no argument"):
        qstash.mount("https://app.example.com", lambda: 200)


def test_a_destination_without_a_host_is_refused(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match="400") as info:
        client.message.publish(url="https://", body="x")
    assert "no host" in str(info.value)
    assert qstash.messages == []


def test_a_fake_started_inside_another_answers_until_it_stops(
    qstash: FakeQStash, client: QStash
) -> None:
    with FakeQStash() as inner:
        client.message.publish(url="https://inner.example.com/x")
        assert [m.url for m in inner.messages] == ["https://inner.example.com/x"]
    client.message.publish(url="https://outer.example.com/x")
    assert [m.url for m in qstash.messages] == ["https://outer.example.com/x"]


def test_qstash_url_set_after_the_fake_started_is_intercepted(
    qstash: FakeQStash, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QSTASH_URL", "https://qstash.internal.example.com")
    client = QStash(os.environ["QSTASH_TOKEN"], retry=False)  # reads QSTASH_URL now
    client.message.publish(url="https://app.example.com/x")
    assert len(qstash.messages) == 1


def test_an_unrouted_callback_says_it_is_a_callback(qstash: FakeQStash, client: QStash) -> None:
    qstash.mount("https://app.example.com", lambda request: None)
    source = client.message.publish(
        url="https://app.example.com/x", callback="https://hooks.example.com/done"
    ).message_id  # type: ignore[union-attr]

    with pytest.raises(UnroutedDeliveryError, match=f"callback reporting on {source}"):
        qstash.tick()


def test_qstash_apps_must_be_a_mapping(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.fixture
        def qstash_apps():
            return ["https://app.example.com"]

        def test_x(qstash):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*qstash_apps fixture must return a dict*"])
