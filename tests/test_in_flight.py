"""Handlers that take virtual time: attempts in flight between their start and their end,
timeouts that cut them, cancels while in flight, and the parallelism they count against; all
through the real SDKs (sync and async) and upstash-workflow."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from qstash import AsyncQStash, QStash
from upstash_workflow import AsyncWorkflowContext
from upstash_workflow.fastapi import Serve as FastAPIServe
from workflow_apps import STOCK_URL, Journal, stock_app

from pytest_qstash import FakeQStash

START = datetime(2026, 5, 1, tzinfo=timezone.utc)
at_start = pytest.mark.qstash(start=START)
API = "https://api.test"


class Recorder:
    """A callable app answering 200, noting when it was called and what."""

    def __init__(self, qstash: FakeQStash, status: int = 200) -> None:
        self.qstash = qstash
        self.status = status
        self.calls: list[tuple[datetime, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append((self.qstash.now, request.url.path))
        return httpx.Response(self.status, text="done")


def seconds(n: float) -> datetime:
    return START + timedelta(seconds=n)


# -- a handler that takes time ------------------------------------------------------------------
@at_start
def test_an_attempt_is_in_flight_between_its_start_and_its_end(
    qstash: FakeQStash, client: QStash
) -> None:
    app = qstash.mount(API, Recorder(qstash), duration="30s")
    message_id = client.message.publish(url=f"{API}/slow", body="x").message_id

    assert qstash.tick() == []  # called now, answering in 30 s
    assert app.calls == [(START, "/slow")]
    assert client.message.get(message_id) is not None
    assert qstash.messages.one(message_id=message_id).state == "ACTIVE"

    assert qstash.advance("10s") == []  # the clock stops inside the interval
    assert qstash.now == seconds(10)
    assert qstash.messages.one(message_id=message_id).state == "ACTIVE"
    assert [e.state for e in qstash.events.filter(message_id=message_id)] == ["CREATED", "ACTIVE"]

    [delivery] = qstash.advance("20s")
    assert (delivery.at, delivery.ended_at, delivery.duration) == (
        START,
        seconds(30),
        timedelta(seconds=30),
    )
    assert delivery.status == 200
    delivered = qstash.events.filter(message_id=message_id)[-1]
    assert (delivered.state, delivered.time) == ("DELIVERED", seconds(30))
    assert len(app.calls) == 1


@at_start
def test_drain_waits_for_attempts_in_flight(qstash: FakeQStash, client: QStash) -> None:
    qstash.mount(API, Recorder(qstash), duration=lambda request: "2m")
    client.message.publish(url=f"{API}/a", body="x")
    [delivery] = qstash.drain()
    assert delivery.ended_at == seconds(120)
    assert qstash.now == seconds(120)
    assert qstash.next_due() is None


@at_start
def test_handler_takes_applies_to_the_next_attempts_and_wins_over_the_mount(
    qstash: FakeQStash, client: QStash
) -> None:
    qstash.mount(API, Recorder(qstash), duration="5s")
    qstash.handler_takes(re.compile(r"/report$"), "1h", times=1)
    for path in ("report", "report", "other"):
        client.message.publish(url=f"{API}/{path}", body=path)
    done = qstash.advance("2h")
    took = sorted((d.url.rsplit("/", 1)[1], d.duration.total_seconds()) for d in done)
    assert took == [("other", 5), ("report", 5), ("report", 3600)]


@at_start
def test_what_the_handler_publishes_exists_at_its_start_and_its_crash_counts_at_its_end(
    qstash: FakeQStash, client: QStash
) -> None:
    def app(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/first":
            client.message.publish(url=f"{API}/follow-up", body="next")
            raise RuntimeError("boom")
        return httpx.Response(200)

    qstash.mount(API, app)
    qstash.handler_takes(f"{API}/first", "1m")
    client.message.publish(url=f"{API}/first", body="x", retries=0)

    qstash.tick()  # the follow-up is published (and delivered) now; the crash is not out yet
    assert [(m.url, m.state) for m in qstash.messages] == [
        (f"{API}/first", "ACTIVE"),
        (f"{API}/follow-up", "DELIVERED"),
    ]
    with pytest.raises(RuntimeError, match="boom"):
        qstash.advance("1m")
    [crashed] = qstash.messages.one(url=f"{API}/first").deliveries
    assert (crashed.status, crashed.ended_at) == (500, seconds(60))


def test_remounting_without_a_duration_forgets_it(qstash: FakeQStash, client: QStash) -> None:
    qstash.mount(API, Recorder(qstash), duration="1h")
    qstash.mount(API, Recorder(qstash))
    client.message.publish(url=f"{API}/x", body="x")
    [delivery] = qstash.tick()
    assert delivery.duration == timedelta(0)


def test_bad_durations_are_refused_and_mount_nothing(qstash: FakeQStash) -> None:
    with pytest.raises(ValueError, match="invalid duration 'soon'"):
        qstash.mount(API, Recorder(qstash), duration="soon")
    assert qstash.mounts.base_urls == []
    with pytest.raises(ValueError, match="expected an http\\(s\\) URL prefix"):
        qstash.handler_takes("api.test", "1s")
    with pytest.raises(ValueError, match="at least 1"):
        qstash.handler_takes(API, "1s", times=0)


# -- timeouts -----------------------------------------------------------------------------------
@at_start
def test_an_attempt_over_its_timeout_is_cut_and_retried(qstash: FakeQStash, client: QStash) -> None:
    app = qstash.mount(API, Recorder(qstash))
    qstash.handler_takes(API, "30s", times=1)  # slow once, then quick
    message_id = client.message.publish(
        url=f"{API}/job", body="x", timeout="10s", retries=2
    ).message_id

    assert qstash.advance("9s") == []
    [cut] = qstash.advance("1s")
    assert (cut.at, cut.ended_at, cut.status) == (START, seconds(10), None)
    assert "context deadline exceeded" in (cut.error or "")
    assert qstash.messages.one(message_id=message_id).state == "RETRY"
    error = qstash.events.filter(message_id=message_id, state="ERROR")[0]
    assert error.time == seconds(10)
    assert "context deadline exceeded" in (error.error or "")

    qstash.drain()
    assert qstash.messages.one(message_id=message_id).state == "DELIVERED"
    assert len(app.calls) == 2  # the late answer of the first call was discarded


@at_start
def test_the_plan_maximum_cuts_an_attempt_without_a_timeout() -> None:
    with FakeQStash(start=START, plan="free") as qstash:
        qstash.mount(API, Recorder(qstash), duration="20m")
        client = QStash(qstash.token, retry=False)
        client.message.publish(url=f"{API}/job", body="x", retries=0)
        [cut] = qstash.advance("1h")
        assert cut.duration == timedelta(minutes=15)
        assert len(qstash.dlq) == 1


# -- cancel in flight ---------------------------------------------------------------------------
@at_start
def test_cancelling_a_message_in_flight_cuts_the_attempt_with_no_retry(
    qstash: FakeQStash, client: QStash
) -> None:
    qstash.mount(API, Recorder(qstash, status=500), duration="30s")
    message_id = client.message.publish(
        url=f"{API}/job", body="x", callback=f"{API}/callback"
    ).message_id
    qstash.advance("1s")

    client.message.cancel(message_id)  # answers 200 while the attempt is in flight

    message = qstash.messages.one(message_id=message_id)
    assert message.state == "CANCELED"
    [cut] = message.deliveries
    assert (cut.ended_at, cut.status) == (seconds(1), None)
    assert "cancelled while this attempt was in flight" in (cut.error or "")
    assert qstash.drain() == []  # no retry, no callback
    assert [m.url for m in qstash.messages] == [f"{API}/job"]


@pytest.mark.asyncio
@at_start
async def test_async_cancel_in_flight_and_flow_control_counts(
    qstash: FakeQStash, aclient: AsyncQStash
) -> None:
    qstash.mount(API, Recorder(qstash), duration="30s")
    ids = [
        (
            await aclient.message.publish(
                url=f"{API}/{i}", body="x", flow_control={"key": "k", "parallelism": 1}
            )
        ).message_id
        for i in range(2)
    ]
    await qstash.atick()
    info = await aclient.flow_control.get("k")
    assert (info.parallelism_count, info.wait_list_size) == (1, 1)
    await aclient.message.cancel(ids[0])
    await qstash.atick()  # the slot the cut attempt held goes to the next message
    assert qstash.messages.one(message_id=ids[1]).state == "ACTIVE"
    [done] = await qstash.aadvance("30s")
    assert (done.message_id, done.ended_at) == (ids[1], seconds(30))


# -- parallelism --------------------------------------------------------------------------------
@at_start
def test_flow_control_parallelism_holds_attempts_until_one_ends(
    qstash: FakeQStash, client: QStash
) -> None:
    app = qstash.mount(API, Recorder(qstash), duration="30s")
    for i in range(3):
        client.message.publish(
            url=f"{API}/{i}", body="x", flow_control={"key": "partner", "parallelism": 1}
        )
    qstash.advance("10s")
    info = client.flow_control.get("partner")
    assert (info.parallelism_max, info.parallelism_count, info.wait_list_size) == (1, 1, 2)
    assert client.flow_control.get_global_parallelism().parallelism_count == 1

    qstash.drain()
    assert [when for when, _ in app.calls] == [START, seconds(30), seconds(60)]
    info = client.flow_control.get("partner")
    assert (info.parallelism_count, info.wait_list_size) == (0, 0)


@at_start
def test_queue_parallelism_counts_attempts_in_flight(qstash: FakeQStash, client: QStash) -> None:
    app = qstash.mount(API, Recorder(qstash), duration="1m")
    client.queue.upsert("jobs", parallelism=2)
    for i in range(3):
        client.message.enqueue(queue="jobs", url=f"{API}/{i}", body="x")
    qstash.drain()
    assert [when for when, _ in app.calls] == [START, START, seconds(60)]


@at_start
def test_global_parallelism_holds_the_rest_back(client: QStash) -> None:
    with FakeQStash(start=START, plan="free") as qstash:  # 10 attempts in flight at most
        app = qstash.mount(API, Recorder(qstash), duration="1m")
        for i in range(12):
            client.message.publish(url=f"{API}/{i}", body="x")
        qstash.tick()
        assert len(app.calls) == 10
        assert client.flow_control.get_global_parallelism().parallelism_count == 10
        qstash.drain()
        assert [when for when, _ in app.calls][10:] == [seconds(60)] * 2


@at_start
def test_mixed_settings_on_a_key_apply_the_highest_outstanding(
    qstash: FakeQStash, client: QStash
) -> None:
    qstash.mount(API, Recorder(qstash), duration="1m")
    client.message.publish(url=f"{API}/a", body="x", flow_control={"key": "k", "parallelism": 1})
    assert client.flow_control.get("k").parallelism_max == 1
    for path in ("b", "c"):
        client.message.publish(
            url=f"{API}/{path}", body="x", flow_control={"key": "k", "parallelism": 3}
        )
    assert client.flow_control.get("k").parallelism_max == 3
    qstash.tick()
    assert client.flow_control.get("k").parallelism_count == 3
    qstash.drain()
    # The messages with parallelism 3 are done: the key keeps the limits it last applied.
    assert client.flow_control.get("k").parallelism_max == 3


# -- Upstash's own qstash-py flow-control tests, against the fake -------------------------------
KEY = "test-flow-control-key"


@at_start
def test_qstash_py_flow_control_lifecycle(qstash: FakeQStash, client: QStash) -> None:
    qstash.mount("https://httpstat.us", Recorder(qstash), duration="30s")
    result = client.message.publish_json(
        body={"test": "value"},
        url="https://httpstat.us/200?sleep=30000",
        flow_control={"key": KEY, "parallelism": 5, "rate": 10, "period": "1m"},
    )
    qstash.advance("1s")  # their time.sleep(1)

    # qstash-py 3.4.0 has no flow_control.list(): the same GET, as the newer SDK sends it.
    listed = httpx.get(
        "https://qstash.upstash.io/v2/flowControl",
        headers={"Authorization": f"Bearer {qstash.token}"},
    ).json()
    found = [fc for fc in listed if fc["flowControlKey"] == KEY]
    assert [(fc["parallelismMax"], fc["rateMax"], fc["ratePeriod"]) for fc in found] == [
        (5, 10, 60)
    ]
    single = client.flow_control.get(KEY)
    assert (single.parallelism_count, single.rate_count) == (1, 1)  # still in flight
    assert qstash.messages.one(message_id=result.message_id).state == "ACTIVE"

    client.message.cancel(result.message_id)

    client.flow_control.reset_rate(KEY)
    fc = client.flow_control.get(KEY)
    assert (fc.key, fc.parallelism_count, fc.rate_count) == (KEY, 0, 0)


@pytest.mark.asyncio
@at_start
async def test_qstash_py_flow_control_lifecycle_async(
    qstash: FakeQStash, aclient: AsyncQStash
) -> None:
    qstash.mount("https://httpstat.us", Recorder(qstash), duration="30s")
    result = await aclient.message.publish_json(
        body={"test": "value"},
        url="https://httpstat.us/200?sleep=30000",
        flow_control={"key": KEY, "parallelism": 5, "rate": 10, "period": "1m"},
    )
    await qstash.aadvance("1s")
    single = await aclient.flow_control.get(KEY)
    assert (single.key, single.parallelism_max, single.parallelism_count) == (KEY, 5, 1)
    await aclient.message.cancel(result.message_id)
    await aclient.flow_control.reset_rate(KEY)
    fc = await aclient.flow_control.get(KEY)
    assert (fc.parallelism_count, fc.rate_count) == (0, 0)


def test_flow_control_key_answers_right_after_the_publish(
    qstash: FakeQStash, client: QStash
) -> None:
    client.message.publish(
        url=f"{API}/x", body="x", delay="1h", flow_control={"key": "fresh", "rate": 5}
    )
    assert client.flow_control.get("fresh").rate_max == 5
    client.flow_control.reset_rate("fresh")
    client.flow_control.unpin("fresh", {"parallelism": True, "rate": True})


# -- workflows ----------------------------------------------------------------------------------
def slow_call_app(journal: Journal) -> FastAPI:
    app = FastAPI()
    serve = FastAPIServe(app)

    @serve.post("/lookup")
    async def lookup(context: AsyncWorkflowContext[Any]) -> None:
        reply = await context.call(
            "reserve",
            url=f"{STOCK_URL}/reserve",
            method="POST",
            body={"sku": "A-1", "qty": 1},
            headers={"X-Api-Key": "k"},
            timeout=1,
        )
        journal.call_results[context.workflow_run_id] = (reply.status, reply.body)

    return app


@at_start
def test_a_context_call_outlasting_its_timeout_comes_back_failed(qstash: FakeQStash) -> None:
    journal = Journal()
    qstash.mount("https://shop.test", slow_call_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal), duration="2s")

    run_id = qstash.trigger("https://shop.test/lookup")
    qstash.drain()

    [call] = [m for m in qstash.messages if m.url == f"{STOCK_URL}/reserve"]
    [cut] = call.deliveries
    assert (cut.duration, cut.status) == (timedelta(seconds=1), None)
    assert call.state == "FAILED"
    status, _ = journal.call_results[run_id]
    assert status != 200  # the partner's late 200 was discarded


# -- at-least-once ------------------------------------------------------------------------------
class IdempotentApp:
    """Charges once per Upstash-Message-Id, as an idempotent handler should."""

    def __init__(self) -> None:
        self.charged: list[str] = []
        self.seen: set[str] = set()
        self.signatures: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.signatures.append(request.headers["upstash-signature"])
        message_id = request.headers["upstash-message-id"]
        if message_id not in self.seen:
            self.seen.add(message_id)
            self.charged.append(request.content.decode())
        return httpx.Response(200)


@at_start
def test_redeliver_sends_the_same_message_again_with_a_fresh_signature(
    qstash: FakeQStash, client: QStash
) -> None:
    app = qstash.mount(API, IdempotentApp())
    message_id = client.message.publish(url=f"{API}/charge", body="order-1").message_id
    qstash.tick()

    qstash.redeliver(message_id)
    [again] = qstash.tick()

    assert again.message_id == message_id
    assert app.charged == ["order-1"]  # the handler's idempotency held
    assert len(set(app.signatures)) == 2
    message = qstash.messages.one(message_id=message_id)
    assert message.state == "DELIVERED"
    assert [d.headers["upstash-retried"] for d in message.deliveries] == ["0", "0"]
    states = [e.state for e in qstash.events.filter(message_id=message_id)]
    assert states == ["CREATED", "ACTIVE", "DELIVERED", "ACTIVE", "DELIVERED"]


@at_start
def test_redeliver_refuses_what_was_not_delivered(qstash: FakeQStash, client: QStash) -> None:
    message_id = client.message.publish(url=f"{API}/x", body="x", delay="1h").message_id
    with pytest.raises(ValueError, match="it is CREATED; only a DELIVERED message"):
        qstash.redeliver(message_id)
    with pytest.raises(ValueError, match="no message has this id"):
        qstash.redeliver("msg_nope")
