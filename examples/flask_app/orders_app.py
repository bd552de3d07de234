"""An order service built on Flask that lets QStash drive its background work.

``POST /orders`` records the order and publishes a "reserve stock" job with the real ``qstash``
SDK. QStash calls ``/workers/reserve-stock`` back (verified with the real ``qstash.Receiver``);
while the warehouse API is down the worker answers 500 and QStash retries with backoff. When
the retries run out, QStash calls the failure callback ``/workers/order-failed``. An item that
is out of stock is refused for good (489 + ``Upstash-NonRetryable-Error``): no retries.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from flask import Flask, abort, jsonify, request
from flask.typing import ResponseReturnValue
from qstash import QStash, Receiver
from qstash.errors import SignatureError

#: Where this app is reachable from the internet: QStash calls the worker routes under it.
BASE_URL = os.environ.get("ORDERS_BASE_URL", "https://orders.example.com")

qstash_client = QStash(os.environ["QSTASH_TOKEN"])
receiver = Receiver(
    current_signing_key=os.environ["QSTASH_CURRENT_SIGNING_KEY"],
    next_signing_key=os.environ["QSTASH_NEXT_SIGNING_KEY"],
)


# -- the outside world: a warehouse API -----------------------------------------------------
class WarehouseUnavailable(Exception):
    pass


class OutOfStock(Exception):
    pass


@dataclass
class Warehouse:
    """Stands in for the warehouse's stock API."""

    stock: dict[str, int] = field(default_factory=dict)
    #: How many of the next calls fail, as during an outage.
    failures_left: int = 0

    def reserve(self, sku: str, quantity: int) -> None:
        if self.failures_left > 0:
            self.failures_left -= 1
            raise WarehouseUnavailable("warehouse API timed out")
        if self.stock.get(sku, 0) < quantity:
            raise OutOfStock(sku)
        self.stock[sku] -= quantity


warehouse = Warehouse()


# -- the app -------------------------------------------------------------------------------
orders: dict[int, dict[str, Any]] = {}

app = Flask(__name__)


@app.post("/orders")
def create_order() -> ResponseReturnValue:
    data = request.get_json()
    order_id = len(orders) + 1
    order = {"id": order_id, "sku": data["sku"], "quantity": data["quantity"], "status": "pending"}
    orders[order_id] = order
    job = qstash_client.message.publish_json(
        url=f"{BASE_URL}/workers/reserve-stock",
        body={"order_id": order_id},
        retries=3,
        failure_callback=f"{BASE_URL}/workers/order-failed",
    )
    order["job_id"] = job.message_id  # type: ignore[union-attr]
    return jsonify(order), 202


@app.get("/orders/<int:order_id>")
def get_order(order_id: int) -> ResponseReturnValue:
    return jsonify(orders[order_id])


def verified_json() -> Any:
    """The request's JSON, once QStash's signature over it checks out (else 401)."""
    body = request.get_data(as_text=True)
    signature = request.headers.get("Upstash-Signature")
    if signature is None:
        abort(401, "missing Upstash-Signature")
    try:
        # Behind a proxy request.url may differ from the public URL QStash signed: rebuild that
        # one, query string included (the signature covers the exact URL).
        url = f"{BASE_URL}{request.full_path.rstrip('?')}"
        receiver.verify(signature=signature, body=body, url=url)
    except SignatureError as exc:
        abort(401, f"invalid signature: {exc}")
    return json.loads(body)


@app.post("/workers/reserve-stock")
def reserve_stock() -> ResponseReturnValue:
    order = orders[verified_json()["order_id"]]
    try:
        warehouse.reserve(order["sku"], order["quantity"])
    except WarehouseUnavailable as exc:
        return {"error": str(exc)}, 500  # any non-2xx: QStash tries again later
    except OutOfStock:
        # Retrying cannot help: tell QStash to stop now.
        return {"error": "out of stock"}, 489, {"Upstash-NonRetryable-Error": "true"}
    order["status"] = "confirmed"
    order["confirmed_at"] = datetime.now(timezone.utc).isoformat()
    return {"status": "confirmed"}


@app.post("/workers/order-failed")
def order_failed() -> ResponseReturnValue:
    # QStash's failure callback: a report on the job that failed for good, with its body.
    report = verified_json()
    job = json.loads(base64.b64decode(report["sourceBody"]))
    orders[job["order_id"]]["status"] = "failed"
    orders[job["order_id"]]["failure"] = f"worker answered {report['status']}"
    return "", 204


def reset() -> None:
    """Forget all orders and restock the warehouse (tests call this between tests)."""
    orders.clear()
    warehouse.stock = {"BOOK-1": 10, "MUG-2": 0}
    warehouse.failures_left = 0
