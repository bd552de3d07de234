"""The order service end to end: a Node app on the TypeScript Workflow SDK, its own process,
real HTTP and signatures, and QStash's time moved by the test, so a week-long wait for a
payment is tested in milliseconds."""

from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path

import requests

from pytest_qstash.server import NodeApp, ServerProcess

APP_DIR = Path(__file__).resolve().parent.parent


def place_order(app: NodeApp, order_id: str, amount: int) -> str:
    answer = requests.post(
        f"{app.url}/orders", json={"orderId": order_id, "amount": amount}, timeout=10
    )
    answer.raise_for_status()
    return str(answer.json()["workflowRunId"])


def order(app: NodeApp, order_id: str) -> dict[str, object]:
    answer = requests.get(f"{app.url}/orders/{order_id}", timeout=10)
    answer.raise_for_status()
    return dict(answer.json())


def test_a_paid_order_ships(qstash_server: ServerProcess, orders: NodeApp) -> None:
    run_id = place_order(orders, "o-1", 42)
    qstash_server.drain()  # runs the workflow up to its wait

    assert order(orders, "o-1")["status"] == "awaiting payment"
    [waiter] = qstash_server.waiters
    assert (waiter.event_id, waiter.run_id) == ("payment-o-1", run_id)

    # The payment provider's event, sent by the test.
    [notified] = qstash_server.notify("payment-o-1", {"amount": 42})
    assert notified["workflowRunId"] == run_id
    qstash_server.drain()

    assert order(orders, "o-1") == {
        "orderId": "o-1",
        "amount": 42,
        "status": "shipped",
        "paid": 42,
    }
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"


def test_an_unpaid_order_is_cancelled_after_seven_days(
    qstash_server: ServerProcess, orders: NodeApp
) -> None:
    run_id = place_order(orders, "o-2", 10)
    qstash_server.drain()

    assert qstash_server.advance("6d23h") == []  # still within the week: still waiting
    assert order(orders, "o-2")["status"] == "awaiting payment"

    qstash_server.advance("1h")

    assert order(orders, "o-2")["status"] == "cancelled: not paid within 7 days"
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"
    assert list(qstash_server.waiters) == []


def test_the_payment_endpoint_notifies_the_waiting_order(
    qstash_server: ServerProcess, orders: NodeApp
) -> None:
    place_order(orders, "o-3", 5)
    qstash_server.drain()

    answer = requests.post(
        f"{orders.url}/payments", json={"orderId": "o-3", "amount": 5}, timeout=10
    )
    assert answer.json() == {"notified": 1}
    qstash_server.drain()

    assert order(orders, "o-3")["status"] == "shipped"


def test_unsigned_calls_to_the_workflow_are_refused(orders: NodeApp) -> None:
    forged = requests.post(
        f"{orders.url}/workflows/order", json={"orderId": "o-4", "amount": 1}, timeout=10
    )
    assert forged.status_code >= 400
    assert requests.get(f"{orders.url}/orders/o-4", timeout=10).status_code == 404


def test_the_node_test_suite_passes(orders: NodeApp) -> None:
    """``npm test``: the same service tested from Node (node:test, test/orders.test.mjs), which
    starts its own ``pytest-qstash serve`` and drives it through the control API."""
    scripts = sysconfig.get_path("scripts")
    command = Path(scripts, "pytest-qstash.exe" if os.name == "nt" else "pytest-qstash")
    env = {
        **os.environ,
        "PYTEST_QSTASH": str(command),
        "PATH": f"{scripts}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["node", "--test", "test/"],
        cwd=APP_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# pass 2" in done.stdout
    assert "# fail 0" in done.stdout
