"""Queues through the real SDK: FIFO with parallelism, retries holding the slot, pause."""

from __future__ import annotations

import os

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError

from pytest_qstash import FakeQStash

BASE = "https://worker.test"


class Worker:
    """A FastAPI worker whose /flaky route fails its first two attempts."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []
        self.app = FastAPI()

        @self.app.post("/{name}")
        async def handle(name: str, request: Request) -> Response:
            retried = int(request.headers["upstash-retried"])
            self.seen.append((name, retried))
            if name == "flaky" and retried < 2:
                return Response("busy", status_code=503)
            return Response("done")


@pytest.fixture
def worker(qstash: FakeQStash) -> Worker:
    worker = Worker()
    qstash.mount(BASE, worker.app)
    return worker


def test_enqueue_creates_the_queue_and_delivers_in_order(
    qstash: FakeQStash, worker: Worker, client: QStash
) -> None:
    for name in ("first", "second", "third"):
        client.message.enqueue(queue="jobs", url=f"{BASE}/{name}", body=name)
    queue = client.queue.get("jobs")
    assert (queue.parallelism, queue.lag, queue.paused) == (1, 3, False)

    qstash.tick()

    assert worker.seen == [("first", 0), ("second", 0), ("third", 0)]
    assert client.queue.get("jobs").lag == 0
    assert [m.queue for m in qstash.messages] == ["jobs"] * 3


def test_a_retrying_message_holds_its_queue_until_it_is_done(
    qstash: FakeQStash, worker: Worker, client: QStash
) -> None:
    client.message.enqueue(queue="jobs", url=f"{BASE}/flaky")
    client.message.enqueue(queue="jobs", url=f"{BASE}/after")

    qstash.tick()
    assert worker.seen == [("flaky", 0)]  # "after" waits behind the retrying message

    qstash.advance("1h")
    assert worker.seen == [("flaky", 0), ("flaky", 1), ("flaky", 2), ("after", 0)]
    flaky, after = qstash.messages
    # "after" went out the moment "flaky" was delivered, not before.
    assert after.deliveries[0].at == flaky.deliveries[-1].at


def test_parallelism_lets_that_many_messages_through(
    qstash: FakeQStash, worker: Worker, client: QStash
) -> None:
    client.queue.upsert("wide", parallelism=2)
    client.message.enqueue(queue="wide", url=f"{BASE}/flaky")
    client.message.enqueue(queue="wide", url=f"{BASE}/b")
    client.message.enqueue(queue="wide", url=f"{BASE}/c")

    qstash.tick()

    # "flaky" keeps one slot while it waits for its retry; "b" and then "c" use the other.
    assert worker.seen == [("flaky", 0), ("b", 0), ("c", 0)]
    assert client.queue.get("wide").parallelism == 2


def test_a_paused_queue_keeps_accepting_and_delivers_after_resume(
    qstash: FakeQStash, worker: Worker, client: QStash
) -> None:
    client.queue.upsert("jobs", paused=True)
    client.message.enqueue_json(queue="jobs", url=f"{BASE}/one", body={"n": 1})
    client.message.enqueue_json(queue="jobs", url=f"{BASE}/two", body={"n": 2})

    assert qstash.advance("7d") == []
    assert client.queue.get("jobs").lag == 2
    assert client.queue.get("jobs").paused is True

    client.queue.resume("jobs")
    qstash.tick()
    assert worker.seen == [("one", 0), ("two", 0)]

    client.queue.pause("jobs")
    assert client.queue.get("jobs").paused is True


def test_list_and_delete_queues(qstash: FakeQStash, worker: Worker, client: QStash) -> None:
    client.queue.upsert("a")
    client.queue.upsert("b", parallelism=3)
    assert sorted((q.name, q.parallelism) for q in client.queue.list()) == [("a", 1), ("b", 3)]
    assert [q.name for q in qstash.queues] == ["a", "b"]

    client.message.enqueue(queue="a", url=f"{BASE}/never")
    client.queue.pause("a")
    client.queue.delete("a")

    assert [q.name for q in client.queue.list()] == ["b"]
    qstash.advance("1d")
    assert worker.seen == []  # a deleted queue's waiting messages go with it
    assert qstash.messages[0].state == "CANCELED"


def test_queue_errors_are_qstash_shaped(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match="404"):
        client.queue.get("missing")
    with pytest.raises(QStashError, match="400"):
        client.queue.upsert("bad name!")
    response = httpx.post(
        "https://qstash.upstash.io/v2/queues",
        headers={"Authorization": f"Bearer {qstash.token}"},
        json={"queueName": "q", "parallelism": 0},
    )
    assert response.status_code == 400
    assert "parallelism" in response.json()["error"]


@pytest.mark.asyncio
async def test_async_enqueue_is_delivered_in_order(qstash: FakeQStash, worker: Worker) -> None:
    client = AsyncQStash(os.environ["QSTASH_TOKEN"])
    await client.message.enqueue(queue="jobs", url=f"{BASE}/flaky")
    await client.message.enqueue(queue="jobs", url=f"{BASE}/next")

    await qstash.atick()
    assert worker.seen == [("flaky", 0)]
    await qstash.aadvance("1h")
    assert worker.seen[-1] == ("next", 0)
    assert (await client.queue.get("jobs")).lag == 0


def test_the_next_message_waits_for_the_callbacks_of_the_current_one(
    qstash: FakeQStash, worker: Worker, client: QStash
) -> None:
    # QStash frees a queue slot once the message is done *and* its callbacks are.
    client.message.enqueue(queue="jobs", url=f"{BASE}/first", callback=f"{BASE}/callback")
    client.message.enqueue(
        queue="jobs", url=f"{BASE}/flaky", failure_callback=f"{BASE}/fcb", retries=0
    )
    client.message.enqueue(queue="jobs", url=f"{BASE}/last")

    qstash.tick()

    assert [name for name, _ in worker.seen] == ["first", "callback", "flaky", "fcb", "last"]
