"""An export of runs of a TypeScript app (@upstash/workflow on Node), loaded back into the
server: runs asleep after a step, asleep after a parallel group and waiting for an event are
exported by the ``pytest-qstash export`` command, the server is emptied, the file is loaded
(``qstash_server.load``), and each run goes on in the app to the outputs it reaches when left
alone."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from cli_runs import run_command
from node_support import NODE_DIR, node_packages

from pytest_qstash.server import ServerProcess
from pytest_qstash.server.processes.node import NodeApp

SCRIPT = NODE_DIR / "deploy_app.mjs"


def _outputs(server: ServerProcess, ids: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for route, run_id in ids.items():
        run = server.runs.one(run_id=run_id)
        # By step id: a parallel group's branches publish their results in either order.
        steps = sorted(run.steps, key=lambda s: s.step_id)
        out[route] = (run.state, [(s.step_id, s.name, s.out) for s in steps])
    return out


def _export(server: ServerProcess, path: Path) -> None:
    done = run_command(
        "export", "--url", server.url, "--to", str(path), env={"QSTASH_TOKEN": server.token}
    )
    assert done.returncode == 0, done.stderr


def _finish(server: ServerProcess, ids: dict[str, str]) -> dict[str, Any]:
    [notified] = server.notify("paid", {"amount": 12}, run_id=ids["wait"])
    assert notified["workflowRunId"] == ids["wait"]
    server.advance("2h")
    return _outputs(server, ids)


def test_typescript_runs_exported_and_loaded_go_on_to_the_same_outputs(tmp_path: Path) -> None:
    node_packages()
    path = tmp_path / "runs.json"
    with (
        ServerProcess.start(clock="virtual", args=["--credentials-from-env"]) as server,
        NodeApp.start_script(SCRIPT, cwd=NODE_DIR, env=server.env) as app,
    ):
        ids = {
            "flow": server.trigger(f"{app.url}/flow", {}),
            "par": server.trigger(f"{app.url}/par", {}),
            "wait": server.trigger(f"{app.url}/wait", {"eventId": "paid"}),
        }
        server.advance("1m")
        at_export = _outputs(server, ids)
        assert {route: state for route, (state, _) in at_export.items()} == {
            "flow": "RUN_STARTED",
            "par": "RUN_STARTED",
            "wait": "RUN_STARTED",
        }
        _export(server, path)
        exported_at = json.loads(path.read_text())["exported_at"]
        # The server's (virtual) time when it answered, from its answers' Date, to the second.
        assert exported_at == server.now.replace(microsecond=0).isoformat().replace(
            "+00:00", ".000Z"
        )
        left_alone = _finish(server, ids)
        assert all(state == "RUN_SUCCESS" for state, _ in left_alone.values()), left_alone

        server.reset()
        loaded = server.load(path)
        assert loaded["workflow_runs"] == 3
        # An empty server starts at the export's time (when the export read the account).
        assert server.now == datetime.fromisoformat(exported_at.replace("Z", "+00:00"))
        assert _outputs(server, ids) == at_export  # each run at its recorded step
        assert _finish(server, ids) == left_alone


def test_a_loaded_wait_times_out_when_it_would_have(tmp_path: Path) -> None:
    """A run waiting for an event nobody sends is exported a day into its seven-day wait:
    loaded, it asks for the wait again, which keeps the deadline the export recorded, so it
    times out six days later, as it would have on QStash (not seven days after the load)."""
    node_packages()
    path = tmp_path / "runs.json"
    with (
        ServerProcess.start(clock="virtual", args=["--credentials-from-env"]) as server,
        NodeApp.start_script(SCRIPT, cwd=NODE_DIR, env=server.env) as app,
    ):
        run_id = server.trigger(f"{app.url}/wait", {"eventId": "never"})
        server.advance("1d")
        _export(server, path)
        [recorded] = [
            step
            for page in json.loads(path.read_text())["workflow_runs"]  # QStash's answers
            for run in page["runs"]
            for group in run["steps"]
            if group["type"] == "next"
            for step in group["steps"]
            if step.get("waitEventId") == "never"
        ]
        server.reset()
        server.load(path)
        server.tick()  # the run resumes from its last step and waits again
        logs = httpx.get(
            f"{server.url}/v2/workflows/logs",
            params={"workflowRunId": run_id},
            headers={"Authorization": f"Bearer {server.token}"},
        ).json()
        [waiting] = [
            step
            for group in logs["runs"][0]["steps"]
            if group["type"] == "next"
            for step in group["steps"]
            if step.get("waitEventId") == "never"
        ]
        assert waiting["waitTimeoutDeadline"] == recorded["waitTimeoutDeadline"]
        server.advance("6d")
        run = server.runs.one(run_id=run_id)
        assert run.state == "RUN_SUCCESS", run
        assert [s.name for s in run.steps][-1] == "after"
