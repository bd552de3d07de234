"""What an opened run links to on the dashboard: the events it waits for and its messages.

In-process: the run's route is a plain app, and its wait is sent as the TypeScript SDK's
``waitForEvent`` sends it (``POST /v2/wait/{eventId}``), through httpx to the fake."""

from __future__ import annotations

import json
from typing import Any

import httpx

from pytest_qstash import FakeQStash
from pytest_qstash.server.dashboard import links as dashboard_links

FLOW = "https://shop.test/workflows/order"


def _route(request: httpx.Request) -> httpx.Response:
    json.loads(request.content)
    return httpx.Response(200, headers={"Upstash-Workflow-Sdk-Version": "1"})


def test_a_waiting_run_links_its_wait_and_its_messages(qstash: FakeQStash) -> None:
    qstash.mount("https://shop.test", _route)
    run_id = qstash.trigger(FLOW, {"order": 7})
    qstash.tick()
    wait: dict[str, Any] = {
        "url": FLOW,
        "timeoutUrl": FLOW,
        "timeoutHeaders": {"Upstash-Workflow-Runid": [run_id]},
        "step": {"stepId": 1, "stepType": "Wait", "stepName": "wait for payment", "concurrent": 1},
    }
    answer = httpx.post(
        "https://qstash.upstash.io/v2/wait/order-7-paid",
        json=wait,
        headers={
            "Authorization": f"Bearer {qstash.token}",
            "Upstash-Workflow-RunId": run_id,
            "Upstash-Workflow-Url": FLOW,
            "Upstash-Workflow-Init": "false",
            "Upstash-Workflow-CallType": "step",
        },
    )
    assert answer.status_code == 200, answer.text

    [run] = qstash.runs
    links = dashboard_links.links(qstash, "runs", run)
    [waiting] = links["waiters"]
    assert (waiting["event_id"], waiting["step_name"]) == ("order-7-paid", "wait for payment")
    assert links["messages"] == [m.message_id for m in qstash.messages]
    assert links["invoked"] == []
    assert links["invoker"] is None
    # And the other way: the run's message links to the run.
    first = dashboard_links.links(qstash, "messages", qstash.messages[0])
    assert first["run"] == run_id
    assert first["log"][0]["state"] == "CREATED"


def test_a_publish_that_began_a_run_and_the_run_link_each_other(qstash: FakeQStash) -> None:
    from qstash import QStash
    from workflow_apps import Journal, flask_workflow_app

    qstash.mount("https://flask.test", flask_workflow_app(Journal()))
    published = QStash(qstash.token).message.publish_json(
        url="https://flask.test/order", body={"order": 7, "sku": "A-1", "qty": 1, "ship_at": 0}
    )
    qstash.tick()

    [run] = qstash.runs
    publish = qstash.messages.one(message_id=published.message_id)
    assert dashboard_links.links(qstash, "messages", publish)["started_run"] == run.run_id
    assert dashboard_links.links(qstash, "runs", run)["started_by"] == publish.message_id
    assert publish.message_id not in dashboard_links.links(qstash, "runs", run)["messages"]


def test_a_message_a_simulation_touched_lists_its_faults(qstash: FakeQStash) -> None:
    from qstash import QStash

    qstash.mount("https://shop.test", lambda request: httpx.Response(200))
    client = QStash(qstash.token, retry=False)
    for seed in range(40):
        simulation = qstash.simulate(seed, ["duplicate"])
        message_id = client.message.publish(url="https://shop.test/charge", body=str(seed))
        qstash.drain()
        links = dashboard_links.links(qstash, "messages", qstash.messages[-1])
        if simulation.injected:
            [fault] = links["faults"]
            assert fault["kind"] == "duplicate"
            assert fault["message"] == message_id.message_id
            assert "delivered once more" in fault["description"]
            return
        assert links["faults"] == []
    raise AssertionError("no seed of 40 duplicated the delivery")


def test_outside_simulation_nothing_is_listed_as_a_fault(qstash: FakeQStash) -> None:
    qstash.mount("https://shop.test", _route)
    qstash.trigger(FLOW, {"order": 7})
    qstash.tick()
    [run] = qstash.runs
    assert dashboard_links.links(qstash, "runs", run)["faults"] == []
    assert dashboard_links.links(qstash, "messages", qstash.messages[0])["faults"] == []
