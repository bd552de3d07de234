"""A field shown in two places is shown the same way: a redacted run's body and headers in the
workflow logs and the workflow DLQ as in ``/v2/logs``; a schedule's labels as a message's."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import httpx
import pytest
from node_support import NodeHarness
from qstash import QStash
from workflow_apps import STOCK_URL, Journal, fastapi_workflow_app, stock_app

from pytest_qstash import FakeQStash
from pytest_qstash.server import ServerProcess

SECRET = "Bearer secret-token"
SHOP = "https://shop.test"


def redacted(text: str) -> str:
    return "REDACTED:" + hashlib.sha256(text.encode()).hexdigest()


def mend(node: NodeHarness, broken: bool) -> None:
    node.http.post("/_checkout", json={"broken": broken}).raise_for_status()


def test_a_redacted_run_stays_redacted_in_workflow_logs_and_dlq(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    mend(node, broken=True)
    body = {"card": "4242 4242 4242 4242"}
    run_id = node.trigger(
        "plainCheckout",
        body,
        retries=0,
        headers={"Authorization": SECRET},
        redact={"body": True, "header": ["Authorization"]},
    )
    qstash_server.drain()
    assert node.records("checkout", "ran") == ["reserve", "charge"]  # the app got it all

    [run] = node.call("logs", {"filter": {"workflowRunId": run_id}})["runs"]
    [[initial], *later] = [group["steps"] for group in run["steps"]]
    [trigger] = [m for m in qstash_server.messages if m.workflow_run_id == run_id][:1]
    assert initial["out"] == redacted(trigger.body)
    assert initial["headers"]["Authorization"] == [redacted(SECRET)]
    steps = [step for group in later for step in group]
    assert [s["stepName"] for s in steps] == ["reserve"]
    assert steps[0]["out"] == redacted('"reserved"')
    # A later step's own headers hide what the trigger's redaction names, too.
    for step in steps:
        assert step["headers"].get("Authorization", [redacted(SECRET)]) == [redacted(SECRET)]

    # /v2/logs shows the trigger's body the same way.
    logged = node.call("logs", {"filter": {"messageId": initial["messageId"]}}, client="qstash")
    assert {event["body"] for event in logged["logs"]} == {initial["out"]}

    [entry] = node.call("dlq.list", {"filter": {"workflowRunId": run_id}})["messages"]
    # The dead letter is the failed step's message: the run's redaction holds for it.
    [failed] = [m for m in qstash_server.messages if m.message_id == entry["messageId"]]
    assert entry["body"] == redacted(failed.body)
    assert entry["header"].get("Authorization", [redacted(SECRET)]) == [redacted(SECRET)]
    [dead] = node.call("dlq.listMessages", client="qstash")["messages"]
    assert dead["body"] == entry["body"]  # as /v2/dlq shows it
    for shown in (entry, run):
        assert SECRET not in str(shown)
        assert "4242" not in str(shown)
    mend(node, broken=False)


def test_schedule_labels_through_qstash_js(node: NodeHarness) -> None:
    created = node.call(
        "schedules.create",
        {"destination": "http://127.0.0.1:9/x", "cron": "0 * * * *", "label": ["a", "b"]},
        client="qstash",
    )
    schedule = node.call("schedules.get", created["scheduleId"], client="qstash")
    assert (schedule["labels"], schedule["label"]) == (["a", "b"], "a")
    [listed] = node.call("schedules.list", client="qstash")
    assert (listed["labels"], listed["label"]) == (["a", "b"], "a")


def test_schedule_labels_as_a_messages(qstash: FakeQStash) -> None:
    client = QStash(os.environ["QSTASH_TOKEN"], retry=False)
    schedule_id = client.schedule.create(
        destination="https://app.test/x", cron="0 * * * *", label="a,b"
    )
    message_id = client.message.publish(url="https://app.test/x", body="m", label="a,b")
    assert client.schedule.get(schedule_id).label == "a"

    def shown(path: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {os.environ['QSTASH_TOKEN']}"}
        answer = httpx.get(f"https://qstash.upstash.io{path}", headers=headers).json()
        return {"label": answer["label"], "labels": answer["labels"]}

    assert shown(f"/v2/schedules/{schedule_id}") == {"label": "a", "labels": ["a", "b"]}
    assert shown(f"/v2/messages/{message_id.message_id}") == shown(  # type: ignore[union-attr]
        f"/v2/schedules/{schedule_id}"
    )


@pytest.mark.parametrize("label", ["solo", "a, b"])
def test_one_label_and_spaced_labels(qstash: FakeQStash, label: str) -> None:
    client = QStash(os.environ["QSTASH_TOKEN"], retry=False)
    schedule_id = client.schedule.create(
        destination="https://app.test/x", cron="0 * * * *", label=label
    )
    answer = httpx.get(
        f"https://qstash.upstash.io/v2/schedules/{schedule_id}",
        headers={"Authorization": f"Bearer {os.environ['QSTASH_TOKEN']}"},
    ).json()
    expected = [part.strip() for part in label.split(",")]
    assert (answer["labels"], answer["label"]) == (expected, expected[0])


def test_the_control_api_splits_labels_as_the_qstash_api(qstash_server: ServerProcess) -> None:
    qstash_server.reset()
    client = QStash(qstash_server.token, base_url=qstash_server.url, retry=False)
    published = client.message.publish(
        url="http://127.0.0.1:9/x", body="m", label="a,b", delay="1h"
    )
    answer = httpx.get(
        f"{qstash_server.url}/v2/messages/{published.message_id}",  # type: ignore[union-attr]
        headers={"Authorization": f"Bearer {qstash_server.token}"},
        trust_env=False,
    ).json()
    record = qstash_server.messages.one()
    assert record.labels == answer["labels"] == ["a", "b"]
    client.http._client.close()


def test_a_redacted_python_run_with_a_call(qstash: FakeQStash) -> None:
    journal = Journal()
    qstash.mount(SHOP, fastapi_workflow_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal))
    auth = {"Authorization": f"Bearer {os.environ['QSTASH_TOKEN']}"}
    payload = {"order": 7, "sku": "A-1", "qty": 2, "ship_at": int(qstash.now.timestamp()) + 60}
    started = httpx.post(
        f"https://qstash.upstash.io/v2/trigger/{SHOP}/order",
        json=payload,
        headers={**auth, "Upstash-Redact-Fields": "body"},
    ).json()
    qstash.drain()
    run_id = started["workflowRunId"]
    assert journal.call_results[run_id] == (
        200,
        {"reserved": 2, "sku": "A-1", "key": "stock-secret"},
    )

    [run] = httpx.get("https://qstash.upstash.io/v2/workflows/logs", headers=auth).json()["runs"]
    assert run["workflowState"] == "RUN_SUCCESS"
    steps = {s["stepName"]: s for group in run["steps"] for s in group["steps"]}
    assert all(s["out"].startswith("REDACTED:") for s in steps.values() if s["out"]), steps
    assert "A-1" not in str(run)
    # The request the call sent shows in /v2/logs as in the call step's callBody.
    [call] = [m for m in qstash.messages if m.url == f"{STOCK_URL}/reserve"]
    events = httpx.get(
        "https://qstash.upstash.io/v2/logs", params={"messageId": call.message_id}, headers=auth
    ).json()["events"]
    assert {e["body"] for e in events} == {steps["reserve"]["callBody"]}
    assert steps["reserve"]["callBody"] == redacted(call.body)
