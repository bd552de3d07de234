"""Fault injection on the publisher's side: ``qstash.fail_next(...)`` makes QStash API calls
fail the way QStash fails (429 burst / daily limits, 5xx, network errors), as the real SDK
sees them, and nothing is stored for a failed call."""

from __future__ import annotations

import os

import httpx
import pytest
from apps import WebApp
from fastapi import FastAPI, Request, Response
from qstash import AsyncQStash, QStash
from qstash.errors import DailyMessageLimitExceededError, QStashError, RateLimitExceededError
from reliability_apps import BASE, apublish, backoff_ms, gaps_ms, publish

from pytest_qstash import FakeQStash, Fault


# -- what the SDK sees -----------------------------------------------------------------------
def test_burst_rate_limit(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    fault = qstash.fail_next("publish", status=429)

    with pytest.raises(RateLimitExceededError) as caught:
        publish(client, f"{BASE}/ok")

    assert caught.value.limit == "100"
    assert caught.value.remaining == "0"
    assert caught.value.reset == str(int(qstash.now.timestamp()) + 1)
    assert qstash.messages == []
    assert qstash.events == []
    assert isinstance(fault, Fault)
    assert (fault.kind, fault.status, fault.remaining) == ("burst", 429, 0)
    assert [r.url.path for r in fault.failed] == [f"/v2/publish/{BASE}/ok"]
    # Only the next call failed.
    publish(client, f"{BASE}/ok")
    assert len(qstash.tick()) == 1


@pytest.mark.qstash(start="2026-01-01T15:30:00Z")
def test_daily_message_limit_resets_at_midnight_utc(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    qstash.fail_next("publish", kind="daily")

    with pytest.raises(DailyMessageLimitExceededError) as caught:
        client.message.publish_json(url=f"{BASE}/ok", body={"n": 1})

    assert (caught.value.limit, caught.value.remaining) == ("1000", "0")
    assert caught.value.reset == "1767312000"  # 2026-01-02T00:00:00Z
    assert qstash.messages == []


@pytest.mark.parametrize("status", [500, 503, 400])
def test_error_status(qstash: FakeQStash, client: QStash, shop: WebApp, status: int) -> None:
    qstash.fail_next("publish", status=status)

    with pytest.raises(QStashError, match=f"status: {status}") as caught:
        publish(client, f"{BASE}/ok")

    assert "injected failure" in str(caught.value)
    assert qstash.messages == []


def test_default_fault_is_a_500_on_publish(qstash: FakeQStash, client: QStash) -> None:
    fault = qstash.fail_next()

    with pytest.raises(QStashError, match="status: 500"):
        publish(client, f"{BASE}/ok")
    assert (fault.endpoint, fault.kind, fault.status, fault.times) == ("publish", "error", 500, 1)


def test_network_error_without_sdk_retries(qstash: FakeQStash, client: QStash) -> None:
    fault = qstash.fail_next("publish", kind="network")

    with pytest.raises(httpx.ConnectError, match="injected network error"):
        publish(client, f"{BASE}/ok")

    assert qstash.messages == []
    assert len(fault.failed) == 1


def test_sdk_retries_through_transient_network_errors(qstash: FakeQStash, shop: WebApp) -> None:
    # The SDK retries network errors itself; a zero backoff keeps the test from sleeping.
    patient = QStash(os.environ["QSTASH_TOKEN"], retry={"retries": 2, "backoff": lambda _: 0})
    fault = qstash.fail_next("publish", kind="network", times=2)

    message_id = publish(patient, f"{BASE}/ok", "made it")

    assert fault.remaining == 0
    assert len(fault.failed) == 2
    assert [m.message_id for m in qstash.messages] == [message_id]
    qstash.tick()
    assert [hit.body for hit in shop.hits] == ["made it"]


def test_times_and_order(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    errors = qstash.fail_next("publish", status=503, times=2)
    daily = qstash.fail_next("publish", kind="daily")

    outcomes: list[str] = []
    for _ in range(4):
        try:
            publish(client, f"{BASE}/ok")
            outcomes.append("ok")
        except DailyMessageLimitExceededError:
            outcomes.append("daily")
        except QStashError as exc:
            outcomes.append(str(exc).split(",")[0])

    assert outcomes == [
        "Request failed with status: 503",
        "Request failed with status: 503",
        "daily",
        "ok",
    ]
    assert (errors.remaining, daily.remaining) == (0, 0)
    assert len(qstash.messages) == 1


def test_clear_faults(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    fault = qstash.fail_next("any", times=5)

    qstash.clear_faults()

    publish(client, f"{BASE}/ok")
    assert fault.failed == []
    assert len(qstash.messages) == 1


# -- which calls fail ------------------------------------------------------------------------
def test_endpoint_names_match_only_their_endpoint(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    qstash.fail_next("enqueue", status=500)
    qstash.fail_next("batch", status=502)

    publish(client, f"{BASE}/ok", "published")  # neither fault is for publish
    with pytest.raises(QStashError, match="status: 502"):
        client.message.batch([{"url": f"{BASE}/ok", "body": "batched"}])
    with pytest.raises(QStashError, match="status: 500"):
        client.message.enqueue(queue="q", url=f"{BASE}/ok", body="enqueued")
    client.message.enqueue(queue="q", url=f"{BASE}/ok", body="enqueued again")

    assert sorted(m.body for m in qstash.messages) == ["enqueued again", "published"]


def test_path_prefix_and_method(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    message_id = publish(client, f"{BASE}/ok", delay="1h")
    qstash.fail_next("DELETE /v2/messages", status=500)
    qstash.fail_next("/v2/dlq", status=503)

    assert client.message.get(message_id).message_id == message_id  # GET is not matched
    with pytest.raises(QStashError, match="status: 500"):
        client.message.cancel(message_id)
    with pytest.raises(QStashError, match="status: 503"):
        client.dlq.list()
    # The failed cancel changed nothing.
    assert qstash.messages[0].state == "CREATED"
    client.message.cancel(message_id)
    assert qstash.messages[0].state == "CANCELED"


def test_any_matches_every_api_call(qstash: FakeQStash, client: QStash) -> None:
    fault = qstash.fail_next("any", status=500, times=3)

    for call in (client.log.list, client.dlq.list, client.queue.list):
        with pytest.raises(QStashError, match="status: 500"):
            call()

    assert [r.url.path for r in fault.failed] == ["/v2/events", "/v2/dlq", "/v2/queues"]


def test_a_failed_batch_stores_nothing(qstash: FakeQStash, client: QStash) -> None:
    qstash.fail_next("batch", kind="daily")

    with pytest.raises(DailyMessageLimitExceededError):
        client.message.batch([{"url": f"{BASE}/ok", "body": str(n)} for n in range(10)])

    assert qstash.messages == []


# -- bad arguments ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"endpoint": "publsh"}, '"publish", "enqueue", "batch", "any"'),
        ({"endpoint": "v2/publish"}, "a path prefix such as"),
        ({"kind": "timeout"}, '"error"'),
        ({"kind": "timeout"}, '"network"'),
        ({"status": 200}, "error status from 400 to 599"),
        ({"status": 500, "kind": "network"}, "answers no status"),
        ({"status": 500, "kind": "daily"}, "always answers 429"),
        ({"times": 0}, "positive integer"),
    ],
)
def test_bad_arguments_say_what_is_accepted(
    qstash: FakeQStash, kwargs: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ValueError) as caught:
        qstash.fail_next(**kwargs)  # type: ignore[arg-type]

    assert fragment in str(caught.value)


# -- async -----------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_async_rate_limits_and_network_errors(
    qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp
) -> None:
    qstash.fail_next("publish", kind="burst")
    qstash.fail_next("publish", kind="daily")
    qstash.fail_next("publish", kind="network")

    with pytest.raises(RateLimitExceededError):
        await apublish(aclient, f"{BASE}/ok")
    with pytest.raises(DailyMessageLimitExceededError):
        await apublish(aclient, f"{BASE}/ok")
    with pytest.raises(httpx.ConnectError):
        await apublish(aclient, f"{BASE}/ok")
    await apublish(aclient, f"{BASE}/ok", "finally")

    assert [m.body for m in qstash.messages] == ["finally"]
    await qstash.atick()
    assert [hit.body for hit in shop.hits] == ["finally"]


# -- an app's own error handling -------------------------------------------------------------
def make_relay() -> FastAPI:
    """A handler that publishes onwards, and fails (so QStash retries it) when it cannot."""
    relay = FastAPI()
    onward = AsyncQStash(os.environ["QSTASH_TOKEN"], retry=False)

    @relay.post("/relay")
    async def relay_message(request: Request) -> Response:
        try:
            await onward.message.publish(url=f"{BASE}/ok", body=await request.body())
        except QStashError as exc:
            return Response(f"try later: {type(exc).__name__}", status_code=503)
        return Response("relayed")

    return relay


@pytest.mark.parametrize("kind", ["daily", "burst", "error"])
def test_app_that_publishes_is_retried_when_qstash_refuses(
    qstash: FakeQStash, client: QStash, shop: WebApp, kind: str
) -> None:
    qstash.mount(f"{BASE}/relay", make_relay())
    publish(client, f"{BASE}/relay", "pass it on")
    qstash.fail_next("publish", kind=kind)  # the relay's own publish, not the one above

    qstash.advance("1m")

    relay_attempts = [d for d in qstash.deliveries if d.url == f"{BASE}/relay"]
    assert [d.status for d in relay_attempts] == [503, 200]
    assert relay_attempts[0].response_body.startswith("try later")
    assert gaps_ms([d.at for d in relay_attempts]) == [backoff_ms(1)]
    assert [hit.body for hit in shop.hits] == ["pass it on"]
