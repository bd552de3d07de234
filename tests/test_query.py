"""Looking items up in what the test reads: ``filter`` and ``one`` on ``qstash.messages`` & co."""

from __future__ import annotations

import pytest
from apps import WebApp
from qstash import QStash
from reliability_apps import BASE

from pytest_qstash import FakeQStash, Found


@pytest.fixture
def published(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    client.message.publish_json(url=f"{BASE}/ok", body={"order": 7}, label="orders")
    client.message.publish_json(url=f"{BASE}/ok", body={"order": 8}, label="orders")
    client.message.publish_json(url=f"{BASE}/http-500", body={"order": 7}, retries=0)
    client.message.publish(url=f"{BASE}/ok", body="not json")
    qstash.tick()


@pytest.mark.usefixtures("published")
def test_the_lists_stay_plain_lists(qstash: FakeQStash) -> None:
    messages = qstash.messages
    assert isinstance(messages, list)
    assert isinstance(messages, Found)
    assert len(messages) == 4
    assert messages[0].json() == {"order": 7}
    assert qstash.dlq != []


@pytest.mark.usefixtures("published")
def test_filter_by_fields_methods_and_tests(qstash: FakeQStash) -> None:
    assert [m.json() for m in qstash.messages.filter(label="orders")] == [
        {"order": 7},
        {"order": 8},
    ]
    # json is a method: it is called; a body that is not JSON simply does not match.
    assert [m.url for m in qstash.messages.filter(json={"order": 7})] == [
        f"{BASE}/ok",
        f"{BASE}/http-500",
    ]
    assert len(qstash.deliveries.filter(status=lambda s: s is not None and s >= 500)) == 1
    # A test of a field that cannot be read (json() of "not json") is not run: no match.
    assert len(qstash.messages.filter(json=lambda j: j["order"] == 7)) == 2
    assert qstash.messages.filter(lambda m: "http-500" in m.url, state="FAILED") != []
    assert qstash.messages.filter(state="RETRY") == []


@pytest.mark.usefixtures("published")
def test_one_returns_the_match(qstash: FakeQStash) -> None:
    failed = qstash.messages.one(state="FAILED")
    assert failed.url == f"{BASE}/http-500"
    assert qstash.dlq.one(message_id=failed.message_id).response_status == 500
    assert qstash.deliveries.one(message_id=failed.message_id).status == 500


@pytest.mark.usefixtures("published")
def test_one_with_no_match_shows_each_candidate_and_what_differs(qstash: FakeQStash) -> None:
    with pytest.raises(AssertionError) as info:
        qstash.messages.one(url=f"{BASE}/ok", json={"order": 9})

    text = str(info.value)
    assert text.startswith(
        f"expected one message with url='{BASE}/ok', json={{'order': 9}}, found none among 4"
    )
    assert "json={'order': 8}, not {'order': 9}" in text
    assert f"url='{BASE}/http-500', not '{BASE}/ok'" in text
    assert "json=<json() raised JSONDecodeError>" in text


@pytest.mark.usefixtures("published")
def test_one_with_several_matches_lists_them(qstash: FakeQStash) -> None:
    with pytest.raises(AssertionError, match="expected one message with label='orders', found 2"):
        qstash.messages.one(label="orders")


@pytest.mark.usefixtures("published")
def test_an_unknown_field_names_the_fields_there_are(qstash: FakeQStash) -> None:
    with pytest.raises(TypeError, match=r"Message has no field 'destination'; it has: .*url"):
        qstash.messages.filter(destination=f"{BASE}/ok")
