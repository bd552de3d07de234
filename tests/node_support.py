"""The official TypeScript SDKs in the suite: tests/node/'s workflow app against the server.

``node_app`` (module scope: one Node process per test module) installs tests/node/'s packages
from its lockfile on first use (``npm ci``, once for all xdist workers), starts ``app.mjs``
against the session's ``qstash_server`` and forgets what the workflows recorded before each
test. Where Node or npm is missing or the registry is unreachable it skips with the reason
(in CI it fails: ``ci_requirements.NODE``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ci_requirements import NODE, missing

from pytest_qstash.server import ServerProcess
from pytest_qstash.server.processes.node import NodeApp, NodeUnavailable, install_node_packages

NODE_DIR = Path(__file__).resolve().parent / "node"


class NodeCallFailed(AssertionError):
    """A client call made in Node threw: the SDK's error message (and HTTP status)."""

    def __init__(self, method: str, error: str, status: int | None) -> None:
        super().__init__(f"{method}: {error}" + (f" (status {status})" if status else ""))
        self.error = error
        self.status = status


class NodeHarness:
    """The running app.mjs: its workflows' URLs, what they recorded, the SDK clients."""

    def __init__(self, app: NodeApp) -> None:
        self.app = app
        self.http = httpx.Client(base_url=app.url, timeout=30, trust_env=False)

    @property
    def url(self) -> str:
        return self.app.url

    def workflow_url(self, name: str) -> str:
        return f"{self.app.url}/workflows/{name}"

    def records(self, workflow: str | None = None, what: str | None = None) -> list[Any]:
        """The values the workflows recorded (``record(...)`` in app.mjs), in order."""
        rows = self.http.get("/_records").json()
        return [
            row["value"]
            for row in rows
            if (workflow is None or row["workflow"] == workflow)
            and (what is None or row["what"] == what)
        ]

    def clear(self) -> None:
        self.http.delete("/_records").raise_for_status()

    def call(self, method: str, *args: Any, client: str = "workflow") -> Any:
        """``client.<method>(*args)`` on the SDK's ``Client`` (``"workflow"``: @upstash/workflow,
        ``"qstash"``: @upstash/qstash), in the app's process; ``NodeCallFailed`` if it throws."""
        answer = self.http.post(
            "/_client", json={"client": client, "method": method, "args": list(args)}
        ).json()
        if not answer["ok"]:
            raise NodeCallFailed(method, answer["error"], answer.get("status"))
        return answer["value"]

    def trigger(self, workflow: str, body: Any = None, **options: Any) -> str:
        """``client.trigger({url, body, ...})``: the new run's id."""
        answer = self.call("trigger", {"url": self.workflow_url(workflow), "body": body, **options})
        return str(answer["workflowRunId"])

    def close(self) -> None:
        self.http.close()
        self.app.stop()


def run_client_script(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls through ``node client.mjs``, a process of its own (as a script or a CLI of
    an app would call QStash): ``[{"ok", "value" | "error"}]`` in order."""
    done = subprocess.run(
        ["node", str(NODE_DIR / "client.mjs"), json.dumps(calls)],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def node_packages() -> Path:
    """tests/node/ with its packages installed; else the test skips (fails in CI), saying why."""
    try:
        return install_node_packages(NODE_DIR)
    except NodeUnavailable as exc:
        missing(NODE, f"the TypeScript SDK tests cannot run: {exc}")


@pytest.fixture(scope="module")
def node_app(qstash_server: ServerProcess) -> Iterator[NodeHarness]:
    """tests/node/app.mjs against ``qstash_server``, for the module's tests."""
    node_packages()
    app = NodeApp.start_script(NODE_DIR / "app.mjs", cwd=NODE_DIR, env=qstash_server.env)
    harness = NodeHarness(app)
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture
def node(node_app: NodeHarness, qstash_server: ServerProcess) -> NodeHarness:
    """``node_app`` with a fresh server and nothing recorded: what each test starts from."""
    qstash_server.reset()
    node_app.clear()
    return node_app


def publish_and_run_workflow(
    app_url: str, server: ServerProcess, body: Any, name: str
) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """Through tests/node/env_app.mjs: publish ``body`` to its hook and trigger its workflow
    with ``name``, then wait until both were received (or refused) and the run ended. Returns
    the publish's and the trigger's answers and what the app received."""
    with httpx.Client(base_url=app_url, timeout=30, trust_env=False) as http:
        published = http.post("/publish", json={"body": body}).json()
        run = http.post("/trigger", json={"body": {"name": name}}).json()

        def done(server: Any) -> bool:
            kinds = {next(iter(r)) for r in http.get("/received").json()}
            if "refused" in kinds:
                return True
            ended = [r.state for r in server.runs if r.run_id == run["workflowRunId"]]
            return {"hook", "workflow"} <= kinds and ended == ["RUN_SUCCESS"]

        server.wait_until(done, timeout=60, interval=0.2)
        received = http.get("/received").json()
    return published, run, received
