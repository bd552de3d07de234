"""Deduplication (by id and by content, within a configurable window) and cancellation (one,
many, all): through the SDK, sync and async, with time moving on afterwards."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from apps import WebApp
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError
from qstash.message import PublishResponse
from reliability_apps import BASE, apublish, make_app, publish

from pytest_qstash import FakeQStash


def publish_response(client: QStash, url: str, body: str, **options: object) -> PublishResponse:
    response = client.message.publish(url=url, body=body, **options)  # type: ignore[arg-type]
    assert isinstance(response, PublishResponse)
    return response


# -- deduplication ---------------------------------------------------------------------------
def test_same_deduplication_id_gives_the_original_message(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    first = publish_response(client, f"{BASE}/ok", "a", deduplication_id="order-1")
    again = publish_response(client, f"{BASE}/ok", "a different body", deduplication_id="order-1")
    other = publish_response(client, f"{BASE}/ok", "a", deduplication_id="order-2")

    qstash.tick()

    assert (first.deduplicated, again.deduplicated, other.deduplicated) == (False, True, False)
    assert again.message_id == first.message_id
    assert other.message_id != first.message_id
    assert [hit.body for hit in shop.hits] == ["a", "a"]
    assert len(qstash.messages) == 2


def test_deduplicated_publish_answers_202(qstash: FakeQStash) -> None:
    def send() -> httpx.Response:
        return httpx.post(
            f"https://qstash.upstash.io/v2/publish/{BASE}/ok",
            content=b"x",
            headers={
                "Authorization": f"Bearer {qstash.token}",
                "Upstash-Deduplication-Id": "once",
            },
        )

    first, second = send(), send()

    assert first.status_code == 200
    assert second.status_code == 202
    assert second.json() == {"messageId": first.json()["messageId"], "deduplicated": True}


def test_content_based_deduplication(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    original = publish_response(client, f"{BASE}/ok", "same", content_based_deduplication=True)
    duplicate = publish_response(client, f"{BASE}/ok", "same", content_based_deduplication=True)
    other_body = publish_response(client, f"{BASE}/ok", "diff", content_based_deduplication=True)
    other_url = publish_response(client, f"{BASE}/ok?v=2", "same", content_based_deduplication=True)
    other_header = publish_response(
        client,
        f"{BASE}/ok",
        "same",
        headers={"X-Tenant": "globex"},
        content_based_deduplication=True,
    )
    not_asked = publish_response(client, f"{BASE}/ok", "same")

    assert duplicate.deduplicated
    assert duplicate.message_id == original.message_id
    created = [other_body, other_url, other_header, not_asked]
    assert not any(r.deduplicated for r in created)
    assert len({r.message_id for r in [original, *created]}) == 5
    assert len(qstash.tick()) == 5


def test_dedup_window_is_ten_minutes_by_default(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    first = publish(client, f"{BASE}/ok", deduplication_id="k")
    qstash.advance(timedelta(minutes=10) - timedelta(milliseconds=1))
    inside = publish_response(client, f"{BASE}/ok", "x", deduplication_id="k")
    qstash.advance(timedelta(milliseconds=1))
    after = publish_response(client, f"{BASE}/ok", "x", deduplication_id="k")

    assert (inside.deduplicated, inside.message_id) == (True, first)
    assert not after.deduplicated
    assert after.message_id != first
    # A fresh window starts with the new message.
    again = publish_response(client, f"{BASE}/ok", "x", deduplication_id="k")
    assert (again.deduplicated, again.message_id) == (True, after.message_id)


@pytest.mark.qstash(dedup_window="1m")
def test_dedup_window_is_configurable_with_the_marker(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    first = publish(client, f"{BASE}/ok", deduplication_id="k")
    qstash.advance("59s")
    assert publish(client, f"{BASE}/ok", deduplication_id="k") == first
    qstash.advance("1s")
    assert publish(client, f"{BASE}/ok", deduplication_id="k") != first


def test_dedup_window_is_configurable_on_the_fake(client: QStash) -> None:
    with FakeQStash(dedup_window=timedelta(hours=2)) as fake:
        fake.mount(BASE, make_app().app)
        first = publish(client, f"{BASE}/ok", content_based_deduplication=True)
        fake.advance("1h59m")
        assert publish(client, f"{BASE}/ok", content_based_deduplication=True) == first
        fake.advance("1m")
        assert publish(client, f"{BASE}/ok", content_based_deduplication=True) != first


def test_dedup_applies_per_endpoint_of_a_url_group_and_per_batch_item(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    client.url_group.upsert_endpoints(
        url_group="fanout", endpoints=[{"url": f"{BASE}/ok?a"}, {"url": f"{BASE}/ok?b"}]
    )
    first = client.message.publish(url_group="fanout", body="x", deduplication_id="g")
    second = client.message.publish(url_group="fanout", body="x", deduplication_id="g")
    batch = client.message.batch(
        [
            {"url": f"{BASE}/ok", "body": "1", "deduplication_id": "b"},
            {"url": f"{BASE}/ok", "body": "2", "deduplication_id": "b"},
        ]
    )

    assert isinstance(first, list)
    assert isinstance(second, list)
    assert [r.deduplicated for r in first] == [False, False]
    assert [r.deduplicated for r in second] == [True, True]
    assert [r.message_id for r in second] == [r.message_id for r in first]
    assert [r.deduplicated for r in batch] == [False, True]  # type: ignore[union-attr]
    assert len(qstash.tick()) == 3


@pytest.mark.asyncio
async def test_async_deduplication(qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp) -> None:
    first = await aclient.message.publish(url=f"{BASE}/ok", body="a", deduplication_id="x")
    second = await aclient.message.publish(url=f"{BASE}/ok", body="a", deduplication_id="x")

    assert isinstance(first, PublishResponse)
    assert isinstance(second, PublishResponse)
    assert second.deduplicated
    assert second.message_id == first.message_id
    assert len(await qstash.atick()) == 1
    await qstash.aadvance("11m")
    third = await aclient.message.publish(url=f"{BASE}/ok", body="a", deduplication_id="x")
    assert isinstance(third, PublishResponse)
    assert not third.deduplicated


# -- cancel ----------------------------------------------------------------------------------
def test_cancel_one_is_never_delivered_even_a_year_later(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    cancelled = publish(client, f"{BASE}/ok", "cancelled", delay="1h")
    kept = publish(client, f"{BASE}/ok", "kept", delay="1h")
    assert client.message.get(cancelled).message_id == cancelled

    client.message.cancel(cancelled)

    with pytest.raises(QStashError, match="status: 404"):
        client.message.get(cancelled)
    qstash.advance("365d")
    assert [hit.body for hit in shop.hits] == ["kept"]
    states = {m.message_id: m.state for m in qstash.messages}
    assert states == {cancelled: "CANCELED", kept: "DELIVERED"}
    assert qstash.dlq == []
    assert qstash.next_due() is None


def test_cancel_unknown_or_finished_message_answers_404(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    delivered = publish(client, f"{BASE}/ok")
    qstash.tick()

    with pytest.raises(QStashError, match="status: 404"):
        client.message.cancel(delivered)
    with pytest.raises(QStashError, match="status: 404"):
        client.message.cancel("msg_doesnotexist")
    cancelled = publish(client, f"{BASE}/ok", delay="1m")
    client.message.cancel(cancelled)
    with pytest.raises(QStashError, match="status: 404"):
        client.message.cancel(cancelled)


def test_cancel_stops_a_message_between_retries(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/http-500", retries=3)
    qstash.tick()
    assert qstash.messages[0].state == "RETRY"

    client.message.cancel(message_id)
    qstash.advance("30d")

    assert len(qstash.deliveries) == 1
    assert qstash.messages[0].state == "CANCELED"
    assert qstash.dlq == []


def test_cancel_many_by_id(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    ids = [publish(client, f"{BASE}/ok", str(n), delay="1m") for n in range(4)]

    assert client.message.cancel_many([ids[0], ids[2], "msg_unknown"]) == 2
    qstash.advance("1h")

    assert sorted(hit.body for hit in shop.hits) == ["1", "3"]
    assert [m.state for m in qstash.messages] == ["CANCELED", "DELIVERED", "CANCELED", "DELIVERED"]


def test_cancel_all_cancels_only_what_is_pending(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    publish(client, f"{BASE}/ok", "already delivered")
    qstash.tick()
    publish(client, f"{BASE}/ok", "later", delay="1d")
    publish(client, f"{BASE}/http-500", "retrying")
    qstash.tick()

    assert client.message.cancel_all() == 2
    qstash.advance("365d")

    assert [hit.body for hit in shop.hits] == ["already delivered", "retrying"]
    assert [m.state for m in qstash.messages] == ["DELIVERED", "CANCELED", "CANCELED"]
    assert client.message.cancel_all() == 0


def test_cancel_many_with_an_empty_list_cancels_everything(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    # The SDK sends {"messageIds": []}, which QStash reads as "no filter": everything.
    for n in range(3):
        publish(client, f"{BASE}/ok", str(n), delay="1m")

    assert client.message.cancel_many([]) == 3
    qstash.advance("1h")

    assert shop.hits == []


@pytest.mark.asyncio
async def test_async_cancel_one_many_all(
    qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp
) -> None:
    ids = [await apublish(aclient, f"{BASE}/ok", str(n), delay="10m") for n in range(5)]

    await aclient.message.cancel(ids[0])
    assert await aclient.message.cancel_many([ids[1], ids[2]]) == 2
    with pytest.raises(QStashError, match="status: 404"):
        await aclient.message.get(ids[1])
    assert await aclient.message.cancel_all() == 2
    await qstash.aadvance("365d")

    assert shop.hits == []
    assert {m.state for m in qstash.messages} == {"CANCELED"}
    cancel_events = [e.state for e in qstash.events if e.state.startswith("CANCEL")]
    assert cancel_events == ["CANCEL_REQUESTED", "CANCELED"] * 5
