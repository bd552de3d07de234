"""The message log: state sequences with their times, ``GET /v2/events`` / ``GET /v2/logs``
through the SDK (sync and async) and on the wire, and ``qstash.events``."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import httpx
import pytest
from apps import WebApp
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError
from qstash.log import LogState
from reliability_apps import (
    BASE,
    HOOKS,
    apublish,
    backoff_ms,
    make_hooks_app,
    publish,
)

from pytest_qstash import Event, FakeQStash

API = "https://qstash.upstash.io"


def raw_get(qstash: FakeQStash, path: str, **params: Any) -> httpx.Response:
    """A plain HTTP call, to see the JSON exactly as QStash would send it."""
    return httpx.get(
        f"{API}{path}", params=params, headers={"Authorization": f"Bearer {qstash.token}"}
    )


def states_of(qstash: FakeQStash, message_id: str) -> list[str]:
    return [e.state for e in qstash.events if e.message_id == message_id]


def all_logs(client: QStash, **kwargs: Any) -> list[Any]:
    logs: list[Any] = []
    cursor = None
    while True:
        page = client.log.list(cursor=cursor, **kwargs)
        logs.extend(page.logs)
        cursor = page.cursor
        if cursor is None:
            return logs


# -- the sequences ---------------------------------------------------------------------------
def test_delivered_message_logs_created_active_delivered_with_times(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    published_at = qstash.now
    message_id = publish(client, f"{BASE}/ok", delay="30s")

    qstash.advance("1m")

    events = [e for e in qstash.events if e.message_id == message_id]
    assert [e.state for e in events] == ["CREATED", "ACTIVE", "DELIVERED"]
    assert [e.time for e in events] == [
        published_at,
        published_at + timedelta(seconds=30),
        published_at + timedelta(seconds=30),
    ]
    # A delayed message's CREATED entry says when it is due.
    assert events[0].next_delivery_time == published_at + timedelta(seconds=30)
    assert events[2].response_status == 200

    logs = client.log.list(filter={"message_id": message_id}).logs
    # The API lists newest first.
    assert [log.state for log in logs] == [LogState.DELIVERED, LogState.ACTIVE, LogState.CREATED]
    assert [log.time for log in logs] == [int(e.time.timestamp() * 1000) for e in events[::-1]]
    assert logs[2].next_delivery_time == int(events[0].time.timestamp() * 1000) + 30_000


def test_failed_message_logs_error_retry_then_failed(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    start = qstash.now
    message_id = publish(client, f"{BASE}/http-500", retries=2)

    qstash.advance("1h")

    events = [e for e in qstash.events if e.message_id == message_id]
    assert [e.state for e in events] == [
        "CREATED",
        *("ACTIVE", "ERROR", "RETRY"),
        *("ACTIVE", "ERROR", "RETRY"),
        *("ACTIVE", "ERROR", "FAILED"),
    ]
    second = start + timedelta(milliseconds=backoff_ms(1))
    third = second + timedelta(milliseconds=backoff_ms(2))
    assert [e.time for e in events] == [start] * 4 + [second] * 3 + [third] * 3
    # Each RETRY entry announces exactly when the next ACTIVE happens.
    retries = [e for e in events if e.state == "RETRY"]
    assert [r.next_delivery_time for r in retries] == [second, third]
    errors = [e for e in events if e.state == "ERROR"]
    assert {e.response_status for e in errors} == {500}
    assert {e.error for e in errors} == {"the endpoint answered 500"}
    assert events[-1].response_body == '{"detail":"database unavailable"}'


def test_cancelled_message_logs_cancel_requested_then_canceled(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/ok", delay="1h")
    qstash.advance("10m")
    cancelled_at = qstash.now

    client.message.cancel(message_id)
    qstash.advance("2h")

    events = [e for e in qstash.events if e.message_id == message_id]
    assert [e.state for e in events] == ["CREATED", "CANCEL_REQUESTED", "CANCELED"]
    assert [e.time for e in events[1:]] == [cancelled_at, cancelled_at]
    logs = client.log.list(filter={"message_id": message_id}).logs
    assert [log.state for log in logs] == [
        LogState.CANCELED,
        LogState.CANCEL_REQUESTED,
        LogState.CREATED,
    ]


@pytest.mark.asyncio
async def test_async_log_list_reads_every_state_the_fake_emits(
    qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp
) -> None:
    await apublish(aclient, f"{BASE}/ok")
    await apublish(aclient, f"{BASE}/reject")
    await apublish(aclient, f"{BASE}/flaky?fail=1")
    doomed = await apublish(aclient, f"{BASE}/ok", delay="1d")
    await aclient.message.cancel(doomed)

    await qstash.aadvance("1h")

    # The SDK turns each state into its LogState enum, and raises on any other value.
    logs = (await aclient.log.list()).logs
    assert {log.state for log in logs} == set(LogState) - {LogState.IN_PROGRESS}
    assert len(logs) == len(qstash.events)


# -- filters ---------------------------------------------------------------------------------
def test_filters_by_message_ids_state_and_url(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    ok_id = publish(client, f"{BASE}/ok")
    failing_id = publish(client, f"{BASE}/http-500", retries=1)
    other_id = publish(client, f"{BASE}/ok?copy=2")
    qstash.advance("1m")

    by_ids = client.log.list(filter={"message_ids": [ok_id, other_id]}).logs
    assert {log.message_id for log in by_ids} == {ok_id, other_id}
    assert len(by_ids) == 6

    delivered = client.log.list(filter={"state": LogState.DELIVERED}).logs
    assert sorted(log.message_id for log in delivered) == sorted([ok_id, other_id])

    in_progress = client.log.list(filter={"state": LogState.IN_PROGRESS}).logs
    assert {log.state for log in in_progress} == {
        LogState.ACTIVE,
        LogState.ERROR,
        LogState.RETRY,
    }
    assert len(in_progress) == 2 + 2 + 1 + 2  # ACTIVE x4, ERROR x2, RETRY x1

    by_url = client.log.list(filter={"url": f"{BASE}/http-500"}).logs
    assert {log.message_id for log in by_url} == {failing_id}
    assert by_url[0].state == LogState.FAILED


def test_from_and_to_are_inclusive_milliseconds(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    first = publish(client, f"{BASE}/ok")
    qstash.advance("1s")
    second = publish(client, f"{BASE}/ok")
    second_ms = int(qstash.now.timestamp() * 1000)
    qstash.advance("1s")
    publish(client, f"{BASE}/ok")

    exactly = client.log.list(filter={"from_time": second_ms, "to_time": second_ms}).logs
    assert {log.message_id for log in exactly} == {second}
    after = client.log.list(filter={"from_time": second_ms + 1}).logs
    assert first not in {log.message_id for log in after}
    assert second not in {log.message_id for log in after}
    before = client.log.list(filter={"to_time": second_ms - 1}).logs
    assert {log.message_id for log in before} == {first}


# Pinned mid-minute: advancing 61 s from a real start could cross two minute boundaries.
@pytest.mark.qstash(start="2026-03-01T10:00:30Z")
def test_filters_by_label_url_group_queue_and_schedule(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    labelled = publish(client, f"{BASE}/ok", label="invoices")
    client.url_group.upsert_endpoints(
        url_group="fanout",
        endpoints=[{"url": f"{BASE}/ok?a=1"}, {"url": f"{BASE}/ok?b=1"}],
    )
    fanned = client.message.publish(url_group="fanout", body="to all")
    queued = client.message.enqueue(queue="serial", url=f"{BASE}/ok", body="one at a time")
    schedule_id = client.schedule.create(destination=f"{BASE}/ok", cron="* * * * *")
    qstash.advance("61s")

    def ids(**flt: Any) -> set[str]:
        return {log.message_id for log in client.log.list(filter=flt).logs}  # type: ignore[arg-type]

    assert ids(label="invoices") == {labelled}
    assert ids(url_group="fanout") == {m.message_id for m in fanned}  # type: ignore[union-attr]
    assert ids(queue="serial") == {queued.message_id}  # type: ignore[union-attr]
    [scheduled] = [m for m in qstash.messages if m.schedule_id == schedule_id]
    assert ids(schedule_id=schedule_id) == {scheduled.message_id}
    assert ids(label="nope") == set()


def test_bad_filters_answer_400(qstash: FakeQStash) -> None:
    for params, fragment in [
        ({"state": "SLEEPING"}, "invalid state"),
        ({"cursor": "not-a-cursor"}, "invalid cursor"),
        ({"count": "lots"}, "invalid count"),
        ({"count": "0"}, "invalid count"),
        ({"colour": "blue"}, "unknown log filter"),
    ]:
        response = raw_get(qstash, "/v2/events", **params)
        assert response.status_code == 400, params
        assert fragment in response.json()["error"]


def test_cancelled_spelling_of_the_docs_is_accepted(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/ok", delay="1h")
    client.message.cancel(message_id)

    response = raw_get(qstash, "/v2/logs", state="CANCELLED")

    assert [e["state"] for e in response.json()["logs"]] == ["CANCELED"]


# -- paging ----------------------------------------------------------------------------------
def test_cursor_pages_through_everything_newest_first(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    for n in range(5):
        publish(client, f"{BASE}/ok", f"m{n}")
        qstash.advance("1s")

    page = client.log.list(count=4)
    assert len(page.logs) == 4
    assert page.cursor is not None
    logs = all_logs(client, count=4)

    assert len(logs) == len(qstash.events) == 15
    times = [log.time for log in logs]
    assert times == sorted(times, reverse=True)
    expected = [(e.message_id, e.state) for e in reversed(qstash.events)]
    assert [(log.message_id, log.state.value) for log in logs] == expected


def test_last_page_has_no_cursor(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    publish(client, f"{BASE}/ok")
    qstash.tick()

    response = raw_get(qstash, "/v2/events", count="3")

    assert len(response.json()["events"]) == 3
    assert "cursor" not in response.json()


def test_count_defaults_to_and_is_capped_at_1000(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    client.message.batch([{"url": f"{BASE}/ok", "body": str(n)} for n in range(1001)])

    by_default = client.log.list()
    capped = client.log.list(count=5000)
    rest = client.log.list(cursor=capped.cursor)

    assert len(by_default.logs) == len(capped.logs) == 1000
    assert capped.cursor is not None
    assert len(rest.logs) == 1
    assert rest.cursor is None


@pytest.mark.asyncio
async def test_async_paging(qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp) -> None:
    for n in range(3):
        await apublish(aclient, f"{BASE}/ok", f"m{n}")
    await qstash.atick()

    seen: list[str] = []
    cursor = None
    while True:
        page = await aclient.log.list(cursor=cursor, count=2)
        seen.extend(f"{log.message_id}:{log.state.value}" for log in page.logs)
        if page.cursor is None:
            break
        cursor = page.cursor

    assert len(seen) == len(set(seen)) == 9


# -- entry JSON ------------------------------------------------------------------------------
def test_log_entry_json_carries_message_and_response_fields(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    qstash.mount(HOOKS, make_hooks_app().app)
    message_id = publish(
        client,
        f"{BASE}/http-500",
        '{"sku": 1}',
        content_type="application/json",
        headers={"X-Tenant": "acme"},
        retries=1,
        retry_delay="1000",
        callback=f"{HOOKS}/callback",
        failure_callback=f"{HOOKS}/failure",
        label="orders",
        timeout=20,
    )
    qstash.advance("1m")

    response = raw_get(qstash, "/v2/logs", messageId=message_id, state="ERROR")
    body = response.json()
    assert body["events"] == body["logs"]
    newest = body["events"][0]

    assert newest["messageId"] == message_id
    assert newest["state"] == "ERROR"
    assert newest["url"] == f"{BASE}/http-500"
    assert newest["method"] == "POST"
    assert newest["maxRetries"] == 1
    assert base64.b64decode(newest["body"]) == b'{"sku": 1}'
    assert newest["header"]["X-Tenant"] == ["acme"]
    assert newest["header"]["Content-Type"] == ["application/json"]
    assert newest["responseStatus"] == 500
    assert newest["responseHeader"] == newest["responseHeaders"]
    assert newest["responseHeader"]["Content-Type"] == ["application/json"]
    assert base64.b64decode(newest["responseBody"]) == b'{"detail":"database unavailable"}'
    assert newest["error"] == "the endpoint answered 500"
    assert newest["retryDelayExpr"] == newest["retryDelayExpression"] == "1000"
    assert newest["callback"] == f"{HOOKS}/callback"
    assert newest["failureCallback"] == f"{HOOKS}/failure"
    assert newest["label"] == "orders"
    assert newest["timeout"] == 20_000
    assert newest["time"] == int(qstash.messages[0].deliveries[-1].at.timestamp() * 1000)

    # The same entry through the SDK.
    [log] = client.log.list(filter={"message_id": message_id, "state": LogState.FAILED}).logs
    assert log.response_status == 500
    assert log.retry_delay_expression == "1000"
    assert log.label == "orders"
    assert log.response_headers is not None
    assert base64.b64decode(log.body_base64 or "") == b'{"sku": 1}'


def test_sync_log_list_prints_the_raw_response(
    qstash: FakeQStash, client: QStash, shop: WebApp, capsys: pytest.CaptureFixture[str]
) -> None:
    # The SDK's own quirk (a stray print) must not break anything.
    publish(client, f"{BASE}/ok")

    client.log.list()

    assert "'events':" in capsys.readouterr().out


def test_wrong_token_is_refused(qstash: FakeQStash) -> None:
    with pytest.raises(QStashError, match="status: 401"):
        QStash("not-the-token", retry=False).log.list()


# -- qstash.events ---------------------------------------------------------------------------
def test_event_objects_expose_what_the_log_lists(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/throttled?fail=1&retry_after=5")
    qstash.advance("1m")

    events = qstash.events
    assert all(isinstance(e, Event) for e in events)
    error = next(e for e in events if e.state == "ERROR")
    retry = next(e for e in events if e.state == "RETRY")
    assert (error.message_id, error.url) == (message_id, f"{BASE}/throttled?fail=1&retry_after=5")
    assert error.response_status == 429
    assert error.response_body == "slow down"
    assert retry.next_delivery_time == error.time + timedelta(seconds=5)
    assert events[-1].state == "DELIVERED"
    assert repr(events[-1]).startswith("<Event ")
