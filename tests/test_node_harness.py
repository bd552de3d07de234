"""The TypeScript SDK harness itself: tests/node/'s app served by @upstash/workflow's
``serveMany`` against the server, and the clients reached from Python (in the app's process
and as a script of their own)."""

from __future__ import annotations

from pathlib import Path

import pytest
from node_support import NODE_DIR, NodeHarness, node_packages, run_client_script
from ports import closed_port

from pytest_qstash.server import NodeUnavailable, ServerProcess, install_node_packages


def test_a_typescript_workflow_runs_to_its_end(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    run_id = node.trigger("invoked", {"n": 1}, headers={"x-invoke-header": "hi"})

    deliveries = qstash_server.drain()

    assert [d.status for d in deliveries] == [200] * len(deliveries)
    run = qstash_server.runs.one(run_id=run_id)
    assert run.state == "RUN_SUCCESS"
    assert [step.name for step in run.steps] == ["read payload"]
    assert run.steps[0].out == {"payload": {"n": 1}, "header": "hi"}


def test_the_client_script_reads_the_logs_in_its_own_process(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    run_id = node.trigger("invoked", {"n": 2})
    qstash_server.drain()

    [logs, missing] = run_client_script(
        [
            {"method": "logs", "args": [{"workflowRunId": run_id}]},
            {"method": "nosuch"},
        ]
    )

    assert logs["ok"], logs
    [run] = logs["value"]["runs"]
    assert (run["workflowRunId"], run["workflowState"]) == (run_id, "RUN_SUCCESS")
    assert missing == {"ok": False, "error": "no method workflow.nosuch"}


def test_without_node_the_reason_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "package-lock.json").write_text("{}")
    monkeypatch.setenv("PATH", str(tmp_path))  # no node, no npm

    with pytest.raises(NodeUnavailable, match=r"^node is not installed \(not found on PATH\)$"):
        install_node_packages(tmp_path)


def test_an_unreachable_registry_is_said_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node_packages()  # needs node and npm themselves
    for name in ("package.json", "package-lock.json"):
        (tmp_path / name).write_bytes((NODE_DIR / name).read_bytes())
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("npm_config_fetch_retries", "0")

    with closed_port() as down:
        monkeypatch.setenv("npm_config_registry", f"http://127.0.0.1:{down}/")
        with pytest.raises(NodeUnavailable, match=r"^npm ci cannot reach the registry: "):
            install_node_packages(tmp_path)
