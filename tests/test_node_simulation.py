"""Simulation over the server for an app on the official TypeScript SDK: @upstash/qstash
publishes, the server duplicates an acknowledged delivery on the seed's schedule, and the SDK's
Receiver verifies both (each signed afresh)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from node_support import NODE_DIR, node_packages

from pytest_qstash.server import AppProcess, ServerProcess
from pytest_qstash.server.processes.node import NodeApp


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess.start(clock="virtual", seed=4) as started:
        yield started


@pytest.fixture(scope="module")
def env_app(server: ServerProcess) -> Iterator[AppProcess]:
    node_packages()
    with NodeApp.start_script(NODE_DIR / "env_app.mjs", cwd=NODE_DIR, env=server.env) as app:
        yield app


def _hooks(http: httpx.Client) -> list[dict[str, Any]]:
    return [r for r in http.get("/received").json() if "hook" in r or "refused" in r]


def test_a_typescript_app_sees_a_duplicate_and_verifies_it(
    server: ServerProcess, env_app: AppProcess
) -> None:
    with httpx.Client(base_url=env_app.url, timeout=30, trust_env=False) as http:
        for seed in range(30):
            server.reset()
            server.simulate(seed, ["duplicate"])
            before = len(_hooks(http))
            for n in range(4):
                answer = http.post("/publish", json={"body": {"seed": seed, "n": n}})
                assert answer.status_code == 200, answer.text
            server.drain()
            hooks = _hooks(http)[before:]
            simulation = server.simulation
            assert simulation is not None
            duplicated = {f["message_id"] for f in simulation["injected"]}
            assert all("refused" not in h for h in hooks), hooks  # every signature verified
            assert all(h["verified"] is True for h in hooks)
            counts = Counter(h["hook"]["n"] for h in hooks)
            assert sum(counts.values()) == 4 + len(duplicated), (counts, simulation)
            if duplicated:
                by_id = {m.message_id: m for m in server.messages}
                twice = {by_id[i].json()["n"] for i in duplicated}
                assert {n for n, c in counts.items() if c == 2} == twice
                return
    raise AssertionError("no seed of 30 duplicated a delivery")
