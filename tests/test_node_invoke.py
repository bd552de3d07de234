"""``context.invoke`` through the TypeScript SDK against the server: the invoked run starts
with the invoker's body and headers, knows its invoker, and the invoking step resumes with the
invoked run's result: its return value, its failure or its cancellation."""

from __future__ import annotations

from node_support import NodeHarness

from pytest_qstash.server import ServerProcess


def test_the_invoking_step_resumes_with_the_invoked_runs_result(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    invoker = node.trigger("invoker", {"order": 7})
    qstash_server.drain()

    [result] = node.records("invoker", "result")
    assert result == {
        "body": {"echoed": {"order": 7}, "header": "from the invoker"},
        "isFailed": False,
        "isCanceled": False,
    }
    [invoked] = [run for run in qstash_server.runs if run.run_id != invoker]
    assert invoked.url == node.workflow_url("invoked")
    assert invoked.json() == {"order": 7}  # the body, not the invoke envelope
    assert invoked.state == "RUN_SUCCESS"
    assert qstash_server.runs.one(run_id=invoker).state == "RUN_SUCCESS"

    [logged] = node.call("logs", {"workflowRunId": invoked.run_id})["runs"]
    assert logged["invoker"] == {
        "workflowRunId": invoker,
        "workflowUrl": node.workflow_url("invoker"),
        "workflowRunCreatedAt": logged["invoker"]["workflowRunCreatedAt"],
    }


def test_a_failed_invoked_run_is_reported_as_failed(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    invoker = node.trigger("invoker", {"fail": True})
    qstash_server.drain()

    [result] = node.records("invoker", "result")
    assert (result["isFailed"], result["isCanceled"]) == (True, False)
    # The body is what the failing step answered: the SDK's error JSON.
    assert result["body"]["message"] == "invoked run failed on purpose"
    assert qstash_server.runs.one(run_id=invoker).state == "RUN_SUCCESS"


def test_a_cancelled_invoked_run_is_reported_as_cancelled(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    invoker = node.trigger("invoker", {"sleep": "1h"})
    qstash_server.drain(within="10m")  # the invoked run sleeps for an hour
    [invoked] = [run.run_id for run in qstash_server.runs if run.run_id != invoker]

    assert node.call("cancel", {"ids": invoked}) == {"cancelled": 1}
    qstash_server.drain()

    [result] = node.records("invoker", "result")
    assert (result["isFailed"], result["isCanceled"]) == (False, True)
    assert qstash_server.runs.one(run_id=invoker).state == "RUN_SUCCESS"
