"""The workflow DLQ, the trigger's run-wide options, bulk cancel and label filters through the
TypeScript SDK (``@upstash/workflow``'s ``Client``) against the server."""

from __future__ import annotations

import httpx
from node_support import NodeHarness

from pytest_qstash.server import ServerProcess


def mend(node: NodeHarness, broken: bool = False) -> None:
    node.http.post("/_checkout", json={"broken": broken}).raise_for_status()


def test_a_failed_run_is_resumed_restarted_and_deleted_from_the_dlq(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    mend(node, broken=True)
    run_id = node.trigger("checkout", {"order": 1}, retries=0, label="vip")
    qstash_server.drain()

    # retries: 0 at trigger holds for the later step too: charge ran once.
    assert node.records("checkout", "ran") == ["reserve", "charge"]
    assert len(node.records("checkout", "failure")) == 1
    logged = node.call("logs", {"filter": {"label": "vip"}})["runs"]
    assert [r["workflowRunId"] for r in logged] == [run_id]
    assert node.call("logs", {"filter": {"label": "other"}})["runs"] == []
    [entry] = node.call("dlq.list", {"filter": {"label": "vip"}})["messages"]
    assert entry["workflowRunId"] == run_id
    assert entry["label"] == "vip"
    [failed] = qstash_server.workflow_dlq
    assert (failed.dlq_id, failed.labels) == (entry["dlqId"], ("vip",))

    mend(node)
    node.clear()
    resumed = node.call("dlq.resume", entry["dlqId"])
    restarted = node.call("dlq.restart", entry["dlqId"])
    qstash_server.drain()

    [resumed_run], [restarted_run] = resumed["workflowRuns"], restarted["workflowRuns"]
    assert resumed_run["workflowRunId"] not in (run_id, restarted_run["workflowRunId"])
    for started in (resumed_run, restarted_run):
        assert qstash_server.runs.one(run_id=started["workflowRunId"]).state == "RUN_SUCCESS"
    # The resumed run kept "reserve"; the restarted one ran it again.
    assert sorted(node.records("checkout", "ran")) == ["charge", "charge", "reserve"]
    assert node.call("dlq.delete", entry["dlqId"]) == {"deleted": 1}
    assert node.call("dlq.list")["messages"] == []


def test_the_failure_url_is_called_at_a_later_step_and_can_be_retried(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    mend(node, broken=True)  # charge fails, and so does the alert route
    run_id = node.trigger("plainCheckout", {}, retries=0, failureUrl=f"{node.url}/_alert")
    qstash_server.drain()

    [alert] = node.records("alert", "received")
    assert alert["workflowRunId"] == run_id
    [entry] = node.call("dlq.list")["messages"]
    assert entry["failureFunctionState"] == "CALLBACK_FAIL"

    mend(node)
    answer = node.call("dlq.retryFailureFunction", {"dlqId": entry["dlqId"]})
    qstash_server.drain()

    assert answer["workflowRunId"] == run_id
    assert len(node.records("alert", "received")) == 2
    [entry] = node.call("dlq.list")["messages"]
    assert entry["failureFunctionState"] == "CALLBACK_SUCCESS"


def test_bulk_cancel_by_url_prefix_and_all(node: NodeHarness, qstash_server: ServerProcess) -> None:
    waiting = [node.trigger("wait", {"eventId": f"e{i}"}) for i in range(2)]
    qstash_server.drain(within="1m")
    assert node.call("cancel", {"urlStartingWith": node.workflow_url("wait")}) == {"cancelled": 2}
    node.trigger("wait", {"eventId": "e3"})
    qstash_server.drain(within="1m")
    assert node.call("cancel", {"all": True}) == {"cancelled": 1}
    assert {qstash_server.runs.one(run_id=r).state for r in waiting} == {"RUN_CANCELED"}


def test_parallel_steps_are_one_parallel_group_in_the_logs(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    run_id = node.trigger("parallel", {})
    qstash_server.drain()

    [run] = node.call("logs", {"filter": {"workflowRunId": run_id}})["runs"]
    assert run["workflowState"] == "RUN_SUCCESS"
    groups = [(g["type"], [s["stepName"] for s in g["steps"]]) for g in run["steps"]]
    assert groups == [
        ("sequential", ["init"]),
        ("parallel", ["left", "right"]),
        ("sequential", ["rest"]),
    ]
    parallel = run["steps"][1]["steps"]
    assert [(s["out"], s["state"]) for s in parallel] == [
        ('"L"', "STEP_SUCCESS"),
        ('"R"', "STEP_SUCCESS"),
    ]
    assert run["steps"][2]["steps"][0]["out"] == ""  # a sleep's result: an empty string
    assert [s.name for s in qstash_server.runs.one(run_id=run_id).steps] == [
        "left",
        "right",
        "rest",
    ]


def test_the_servers_trigger_keeps_labels_for_the_logs(qstash_server: ServerProcess) -> None:
    qstash_server.reset()
    run_id = qstash_server.trigger("https://shop.test/wf", {"n": 1}, label="a,b")

    assert qstash_server.runs.one(run_id=run_id).labels == ("a", "b")
    logs = httpx.get(
        f"{qstash_server.url}/v2/workflows/logs",
        params={"label": "b"},
        headers={"Authorization": f"Bearer {qstash_server.token}"},
    ).json()
    assert [r["workflowRunId"] for r in logs["runs"]] == [run_id]
