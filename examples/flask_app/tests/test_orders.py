"""The order service under test: orders are placed through Flask's test client, the jobs they
publish go through the real QStash SDK into pytest-qstash, and back into the app on
``qstash.tick()`` / ``qstash.advance(...)``, retries and backoff included, in virtual time."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import orders_app
import pytest

if TYPE_CHECKING:
    from flask.testing import FlaskClient

pytestmark = pytest.mark.qstash(start="2026-03-02T09:00:00Z")

WORKER = "https://orders.example.com/workers/reserve-stock"
FAILURE_CALLBACK = "https://orders.example.com/workers/order-failed"


def place_order(client: FlaskClient, sku: str = "BOOK-1", quantity: int = 2) -> dict[str, Any]:
    response = client.post("/orders", json={"sku": sku, "quantity": quantity})
    assert response.status_code == 202, response.text
    order: dict[str, Any] = response.get_json()
    return order


def order_status(client: FlaskClient, order_id: int) -> str:
    status: str = client.get(f"/orders/{order_id}").get_json()["status"]
    return status


def test_order_is_confirmed_by_the_worker(qstash, client):
    order = place_order(client)
    assert order["status"] == "pending"
    [job] = qstash.messages
    assert (job.message_id, job.url, job.json()) == (order["job_id"], WORKER, {"order_id": 1})

    [delivery] = qstash.tick()

    assert delivery.status == 200
    assert delivery.headers["Upstash-Message-Id"] == order["job_id"]
    assert order_status(client, 1) == "confirmed"
    assert orders_app.warehouse.stock["BOOK-1"] == 8
    # The worker read the time from the app's clock, which follows the fake's.
    assert orders_app.orders[1]["confirmed_at"] == qstash.now.isoformat()


def test_warehouse_outage_is_retried_with_backoff(qstash, client):
    orders_app.warehouse.failures_left = 1
    place_order(client)

    [first] = qstash.tick()

    assert first.status == 500
    assert order_status(client, 1) == "pending"
    assert qstash.messages[0].state == "RETRY"

    # QStash's first retry comes about 12 s later (e^2.5 s); virtual time, so no waiting.
    [retry] = qstash.advance("15s")

    assert retry.status == 200
    assert retry.headers["Upstash-Retried"] == "1"
    assert timedelta(seconds=12) < retry.at - first.at < timedelta(seconds=13)
    assert order_status(client, 1) == "confirmed"


def test_order_fails_once_retries_run_out(qstash, client):
    orders_app.warehouse.failures_left = 100  # down for the rest of the day
    order = place_order(client)

    deliveries = qstash.advance("1h")

    # 1 attempt + 3 retries (12 s, 2 min 28 s, 30 min 8 s apart), then the failure callback.
    assert [(d.url, d.status) for d in deliveries] == [
        (WORKER, 500),
        (WORKER, 500),
        (WORKER, 500),
        (WORKER, 500),
        (FAILURE_CALLBACK, 204),
    ]
    job = qstash.messages[0]
    assert (job.state, job.retried) == ("FAILED", 3)
    assert [entry.message_id for entry in qstash.dlq] == [order["job_id"]]
    assert qstash.dlq[0].response_status == 500
    assert order_status(client, 1) == "failed"


def test_out_of_stock_is_not_retried(qstash, client):
    order = place_order(client, sku="MUG-2", quantity=1)

    deliveries = qstash.tick()

    # 489 + Upstash-NonRetryable-Error: straight to the DLQ, and the failure callback runs now.
    assert [(d.url, d.status) for d in deliveries] == [(WORKER, 489), (FAILURE_CALLBACK, 204)]
    assert [entry.message_id for entry in qstash.dlq] == [order["job_id"]]
    assert order_status(client, 1) == "failed"
    assert qstash.advance("1d") == []  # nothing left to retry


def test_worker_refuses_unsigned_requests(qstash, client):
    place_order(client)

    forged = client.post("/workers/reserve-stock", json={"order_id": 1})

    assert forged.status_code == 401
    assert order_status(client, 1) == "pending"
    [delivery] = qstash.tick()  # the signed delivery from QStash gets through
    assert delivery.status == 200
