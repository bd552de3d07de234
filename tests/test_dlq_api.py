"""The dead-letter queue: what lands there, ``qstash.dlq``, and the DLQ API through the SDK
(list/get/delete/delete_many, sync and async) and on the wire (retry, bulk retry, query forms)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from apps import WebApp
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError
from reliability_apps import BASE, apublish, gaps_ms, publish

from pytest_qstash import DlqEntry, FakeQStash

API = "https://qstash.upstash.io"


def raw(qstash: FakeQStash, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {qstash.token}", **kwargs.pop("headers", {})}
    return httpx.request(method, f"{API}{path}", headers=headers, **kwargs)


def dead_letters(qstash: FakeQStash, client: QStash, *urls: str, **options: Any) -> list[str]:
    """Publish to each URL with no retries and let them fail; their DLQ ids, oldest first."""
    for url in urls:
        publish(client, url, f"body for {url}", retries=0, **options)
    qstash.tick()
    return [entry.dlq_id for entry in qstash.dlq]


# -- what lands in the DLQ -------------------------------------------------------------------
def test_dlq_entry_keeps_the_message_and_the_last_response(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(
        client,
        f"{BASE}/http-500?id=7",
        '{"order": 7}',
        content_type="application/json",
        headers={"X-Tenant": "acme"},
        retries=1,
        retry_delay="2000",
        label="orders",
    )
    qstash.advance("1m")

    [entry] = qstash.dlq
    assert isinstance(entry, DlqEntry)
    assert entry.message_id == message_id
    assert entry.url == f"{BASE}/http-500?id=7"
    assert entry.body == '{"order": 7}'
    assert entry.json() == {"order": 7}
    assert entry.response_status == 500
    assert entry.response_body == '{"detail":"database unavailable"}'
    assert entry.retried == 1
    assert entry.workflow_run_id is None
    assert entry.created_at == qstash.messages[0].deliveries[-1].at

    listed = client.dlq.get(entry.dlq_id)
    assert listed.dlq_id == entry.dlq_id
    assert listed.message_id == message_id
    assert listed.url == entry.url
    assert listed.body == '{"order": 7}'
    assert listed.method == "POST"
    assert listed.headers == {"Content-Type": ["application/json"], "X-Tenant": ["acme"]}
    assert listed.max_retries == 1
    assert listed.retry_delay_expression == "2000"
    assert listed.label == "orders"
    assert listed.response_status == 500
    assert listed.response_body == '{"detail":"database unavailable"}'
    assert listed.response_headers is not None
    assert listed.response_headers["Content-Type"] == ["application/json"]


def test_delivered_and_cancelled_messages_never_reach_the_dlq(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    publish(client, f"{BASE}/ok")
    publish(client, f"{BASE}/flaky?fail=1")
    doomed = publish(client, f"{BASE}/http-500", delay="1h")
    client.message.cancel(doomed)

    qstash.advance("2d")

    assert qstash.dlq == []
    assert client.dlq.list().messages == []


def test_dlq_ids_look_like_qstash_ones(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    [dlq_id] = dead_letters(qstash, client, f"{BASE}/http-500")

    ms, _, seq = dlq_id.partition("-")
    assert ms.isdigit()
    assert seq.isdigit()
    assert int(ms) == int(qstash.now.timestamp() * 1000)


# -- list ------------------------------------------------------------------------------------
def test_list_is_newest_first_and_filters_like_the_sdk_sends(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    publish(client, f"{BASE}/http-500", "a", retries=0, label="red")
    qstash.advance("1s")
    first_ms = int(qstash.now.timestamp() * 1000)
    publish(client, f"{BASE}/reject", "b", retries=0)
    qstash.advance("1s")
    publish(client, f"{BASE}/http-500?x=1", "c", retries=0)
    qstash.advance("1s")
    bodies = [e.body for e in qstash.dlq]
    assert bodies == ["a", "b", "c"]

    def listed(**flt: Any) -> list[str | None]:
        return [m.body for m in client.dlq.list(filter=flt).messages]  # type: ignore[arg-type]

    assert listed() == ["c", "b", "a"]
    assert listed(url=f"{BASE}/http-500") == ["a"]
    assert listed(response_status=489) == ["b"]
    assert listed(label="red") == ["a"]
    assert listed(message_id=qstash.dlq[1].message_id) == ["b"]
    assert listed(from_time=first_ms) == ["c", "b"]
    assert listed(to_time=first_ms) == ["b", "a"]
    assert listed(from_time=first_ms, to_time=first_ms) == ["b"]
    assert listed(caller_ip="127.0.0.1") == ["c", "b", "a"]
    assert listed(caller_ip="10.0.0.1") == []


def test_list_filters_by_url_group_and_queue(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    client.url_group.upsert_endpoints(
        url_group="fanout", endpoints=[{"url": f"{BASE}/http-500?a"}, {"url": f"{BASE}/reject"}]
    )
    client.message.publish(url_group="fanout", body="group", retries=0)
    client.message.enqueue(queue="serial", url=f"{BASE}/http-500", body="queued", retries=0)
    qstash.advance("1m")

    group = client.dlq.list(filter={"url_group": "fanout"}).messages
    assert sorted(m.url for m in group) == [f"{BASE}/http-500?a", f"{BASE}/reject"]
    assert {m.url_group for m in group} == {"fanout"}
    [queued] = client.dlq.list(filter={"queue": "serial"}).messages
    assert (queued.body, queued.queue) == ("queued", "serial")

    # Retried, it goes back into its queue (and fails again: /http-500 never recovers).
    retried = raw(qstash, "POST", f"/v2/dlq/retry/{queued.dlq_id}").json()["messageId"]
    assert client.message.get(retried).queue == "serial"
    qstash.tick()
    [again] = client.dlq.list(filter={"queue": "serial"}).messages
    assert again.message_id == retried


def test_list_pages_by_100_and_omits_the_cursor_on_the_last_page(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    client.message.batch(
        [{"url": f"{BASE}/http-500", "body": str(n), "retries": 0} for n in range(105)]
    )
    qstash.tick()
    assert len(qstash.dlq) == 105

    first = client.dlq.list()
    capped = client.dlq.list(count=500)
    second = client.dlq.list(cursor=first.cursor)
    small = client.dlq.list(count=7)

    assert len(first.messages) == len(capped.messages) == 100
    assert first.cursor is not None
    assert len(second.messages) == 5
    assert second.cursor is None
    everything = [m.dlq_id for m in first.messages + second.messages]
    assert sorted(everything) == sorted(e.dlq_id for e in qstash.dlq)
    assert len(small.messages) == 7


def test_list_earliest_first_on_request(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    ids = dead_letters(qstash, client, f"{BASE}/http-500?1", f"{BASE}/http-500?2")

    newest = raw(qstash, "GET", "/v2/dlq").json()["messages"]
    oldest = raw(qstash, "GET", "/v2/dlq", params={"order": "earliestFirst"}).json()["messages"]

    assert [m["dlqId"] for m in newest] == ids[::-1]
    assert [m["dlqId"] for m in oldest] == ids


@pytest.mark.asyncio
async def test_async_list_get_delete(
    qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp
) -> None:
    await apublish(aclient, f"{BASE}/http-500", "one", retries=0)
    await apublish(aclient, f"{BASE}/http-500", "two", retries=0)
    await qstash.atick()

    listed = await aclient.dlq.list()
    assert [m.body for m in listed.messages] == ["two", "one"]
    assert listed.cursor is None
    got = await aclient.dlq.get(listed.messages[0].dlq_id)
    assert got.response_status == 500

    await aclient.dlq.delete(got.dlq_id)
    assert [e.body for e in qstash.dlq] == ["one"]
    assert await aclient.dlq.delete_many([qstash.dlq[0].dlq_id, "0-0"]) == 1
    assert qstash.dlq == []


# -- get / delete ----------------------------------------------------------------------------
def test_get_and_delete_unknown_ids_answer_404(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match="status: 404"):
        client.dlq.get("1700000000000-0")
    with pytest.raises(QStashError, match="status: 404"):
        client.dlq.delete("1700000000000-0")


def test_delete_removes_the_entry_once(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    [dlq_id] = dead_letters(qstash, client, f"{BASE}/http-500")

    client.dlq.delete(dlq_id)

    assert qstash.dlq == []
    with pytest.raises(QStashError, match="status: 404"):
        client.dlq.get(dlq_id)
    with pytest.raises(QStashError, match="status: 404"):
        client.dlq.delete(dlq_id)
    # The message itself stays FAILED: the DLQ entry was what was removed.
    assert qstash.messages[0].state == "FAILED"


def test_delete_many_counts_what_it_deleted(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    ids = dead_letters(qstash, client, *(f"{BASE}/http-500?{n}" for n in range(4)))

    assert client.dlq.delete_many([ids[0], ids[2], "0-0"]) == 2
    assert [e.dlq_id for e in qstash.dlq] == [ids[1], ids[3]]
    # An empty list deletes nothing.
    assert client.dlq.delete_many([]) == 0
    assert len(qstash.dlq) == 2


def test_delete_many_with_query_parameters(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    ids = dead_letters(qstash, client, *(f"{BASE}/http-500?{n}" for n in range(4)))

    by_ids = raw(qstash, "DELETE", "/v2/dlq", params={"dlqIds": [ids[0], ids[1]]})
    assert by_ids.json() == {"deleted": 2}
    comma = raw(qstash, "DELETE", "/v2/dlq", params={"dlqIds": f"{ids[2]},nope"})
    assert comma.json() == {"deleted": 1}
    by_filter = raw(qstash, "DELETE", "/v2/dlq", params={"url": f"{BASE}/http-500?3"})
    assert by_filter.json() == {"deleted": 1}
    assert qstash.dlq == []


# -- retry -----------------------------------------------------------------------------------
def test_retry_republishes_with_a_new_id_and_removes_the_entry(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    failed_id = publish(
        client, f"{BASE}/flaky?fail=1", "try again", retries=0, headers={"X-Tenant": "acme"}
    )
    qstash.tick()
    [entry] = qstash.dlq

    response = raw(qstash, "POST", f"/v2/dlq/retry/{entry.dlq_id}")

    assert response.status_code == 201
    new_id = response.json()["messageId"]
    assert new_id != failed_id
    assert qstash.dlq == []
    [delivery] = qstash.tick()
    assert delivery.message_id == new_id
    assert delivery.status == 200  # the endpoint has recovered since
    retried = shop.hits[-1]
    assert (retried.body, retried.headers["x-tenant"], retried.retried) == ("try again", "acme", 0)
    assert shop.inbox.signature_errors == []
    new = next(m for m in qstash.messages if m.message_id == new_id)
    assert (new.state, new.max_retries) == ("DELIVERED", 0)


def test_retry_headers_override_the_stored_options(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    publish(client, f"{BASE}/http-500", "x", retries=0, headers={"X-Tenant": "acme"})
    qstash.tick()

    response = raw(
        qstash,
        "POST",
        f"/v2/dlq/retry/{qstash.dlq[0].dlq_id}",
        headers={
            "Upstash-Retries": "2",
            "Upstash-Retry-Delay": "1000",
            "Upstash-Forward-X-Tenant": "globex",
        },
    )
    qstash.advance("1m")

    new_id = response.json()["messageId"]
    attempts = [d for d in qstash.deliveries if d.message_id == new_id]
    assert len(attempts) == 3
    assert gaps_ms([a.at for a in attempts]) == [1000, 1000]
    assert {hit.headers["x-tenant"] for hit in shop.hits[1:]} == {"globex"}
    [entry] = qstash.dlq
    assert (entry.message_id, entry.retried) == (new_id, 2)


def test_retry_with_a_bad_override_keeps_the_entry(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    [dlq_id] = dead_letters(qstash, client, f"{BASE}/http-500")

    response = raw(qstash, "POST", f"/v2/dlq/retry/{dlq_id}", headers={"Upstash-Retries": "many"})

    assert response.status_code == 400
    assert "Upstash-Retries" in response.json()["error"]
    assert [e.dlq_id for e in qstash.dlq] == [dlq_id]


def test_retry_unknown_id_answers_404(qstash: FakeQStash) -> None:
    response = raw(qstash, "POST", "/v2/dlq/retry/1700000000000-0")

    assert response.status_code == 404
    assert "1700000000000-0" in response.json()["error"]


def test_bulk_retry_by_ids_and_by_filter(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    ids = dead_letters(qstash, client, *(f"{BASE}/flaky?fail=1&n={n}" for n in range(3)))
    publish(client, f"{BASE}/reject", "stays", retries=0)
    qstash.tick()

    by_ids = raw(qstash, "POST", "/v2/dlq/retry", params={"dlqIds": [ids[0], ids[1]]})
    assert by_ids.status_code == 201
    assert len(by_ids.json()["responses"]) == 2
    assert "cursor" not in by_ids.json()
    by_filter = raw(qstash, "POST", "/v2/dlq/retry", params={"url": f"{BASE}/flaky?fail=1&n=2"})
    [only] = by_filter.json()["responses"]

    assert [e.body for e in qstash.dlq] == ["stays"]
    delivered = qstash.tick()
    assert sorted(d.message_id for d in delivered) == sorted(
        [*(r["messageId"] for r in by_ids.json()["responses"]), only["messageId"]]
    )
    assert {d.status for d in delivered} == {200}


@pytest.mark.asyncio
async def test_async_retry_then_fail_again_makes_a_new_entry(
    qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp
) -> None:
    await apublish(aclient, f"{BASE}/reject", "refused twice", retries=3)
    await qstash.atick()
    [first] = qstash.dlq

    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{API}/v2/dlq/retry/{first.dlq_id}",
            headers={"Authorization": f"Bearer {qstash.token}"},
        )
    await qstash.atick()

    [second] = (await aclient.dlq.list()).messages
    assert second.dlq_id != first.dlq_id
    assert second.message_id == response.json()["messageId"]
    assert second.max_retries == 3  # the stored option came along
    assert second.body == "refused twice"


def test_binary_response_body_is_kept_as_base64(qstash: FakeQStash, client: QStash) -> None:
    def binary_error(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, content=b"\xff\xfe\x00oops")

    qstash.mount("https://bin.example.com", binary_error)
    publish(client, "https://bin.example.com/in", retries=0)
    qstash.tick()

    [entry] = client.dlq.list().messages
    assert entry.response_body is None
    assert entry.response_body_base64 == "//4Ab29wcw=="
    assert qstash.dlq[0].response_content == b"\xff\xfe\x00oops"


def test_the_workflow_dlq_listing_lists_failed_runs_not_messages(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    # What the TypeScript workflow client sends: the workflow DLQ, where a plain message's
    # dead letter is not (tests/test_workflow_dlq.py covers failed runs).
    dead_letters(qstash, client, f"{BASE}/http-500")

    response = raw(qstash, "GET", "/v2/dlq?source=workflow")

    assert response.status_code == 200
    assert response.json() == {"messages": []}


def test_a_retry_delay_after_the_year_9999_is_refused(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    [dlq_id] = dead_letters(qstash, client, f"{BASE}/http-500")

    response = raw(
        qstash, "POST", f"/v2/dlq/retry/{dlq_id}", headers={"Upstash-Delay": "3000000000d"}
    )

    assert response.status_code == 400
    assert "Upstash-Delay" in response.json()["error"]
    assert [entry.dlq_id for entry in qstash.dlq] == [dlq_id]  # nothing retried, nothing lost
    assert qstash.next_due() is None
