"""The workflow deploy check against the TypeScript SDK (@upstash/workflow on Node): runs of
tests/node/deploy_app.mjs (a sleep, a parallel group, a wait for an event) exported from a
``serve`` process, then ``pytest-qstash check-deploy`` against the app with steps renamed. The
SDK's own replay decides, in its sequential and its parallel wording."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runs import run_command
from node_support import NODE_DIR, node_packages

from pytest_qstash.server import ServerProcess
from pytest_qstash.server.processes.node import NodeApp

SCRIPT = NODE_DIR / "deploy_app.mjs"


@dataclass
class Runs:
    server: ServerProcess
    path: Path
    #: Run ids by route: "flow", "par", "wait".
    ids: dict[str, str]


def start_app(server: ServerProcess, rename: str = "", change: str = "") -> NodeApp:
    env = {**server.env, "DEPLOY_RENAME": rename, "DEPLOY_CHANGE": change}
    return NodeApp.start_script(SCRIPT, cwd=NODE_DIR, env=env)


def command(*args: str, server: ServerProcess) -> subprocess.CompletedProcess[str]:
    env = {
        "QSTASH_TOKEN": server.token,
        "QSTASH_CURRENT_SIGNING_KEY": server.env["QSTASH_CURRENT_SIGNING_KEY"],
    }
    return run_command(*args, env=env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    node_packages()
    path = tmp_path_factory.mktemp("node-deploy") / "runs.json"
    with ServerProcess.start(clock="virtual", args=["--credentials-from-env"]) as server:
        with start_app(server) as app:
            ids = {
                "flow": server.trigger(f"{app.url}/flow", {}),
                "par": server.trigger(f"{app.url}/par", {}),
                "wait": server.trigger(f"{app.url}/wait", {"eventId": "paid"}),
            }
            server.advance("1m")
        # By step id: a parallel group's branches publish their results in either order.
        steps = {
            route: [
                s.name
                for s in sorted(server.runs.one(run_id=run_id).steps, key=lambda s: s.step_id)
            ]
            for route, run_id in ids.items()
        }
        assert steps == {"flow": ["a", "b"], "par": ["left", "right", "rest"], "wait": ["a"]}
        done = command("export", "--to", str(path), "--url", server.url, server=server)
        assert done.returncode == 0, done.stderr
        yield Runs(server, path, ids)


def check(runs: Runs, rename: str = "", change: str = "") -> tuple[int, dict[str, list[str]]]:
    """check-deploy against the app with ``rename``: the exit status and each route's row."""
    with start_app(runs.server, rename, change) as app:
        done = command(
            "check-deploy", str(runs.path), "--app", app.url, "--url", runs.server.url,
            server=runs.server,
        )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    header, *lines = done.stdout.strip().splitlines()
    assert header.split()[:3] == ["run", "id", "verdict"]
    rows = {line.split()[0]: line.split(maxsplit=5) for line in lines}
    assert list(rows) == sorted(rows)  # by run id
    return done.returncode, {route: rows[run_id][1:] for route, run_id in runs.ids.items()}


def test_the_unchanged_app_accepts_every_run(runs: Runs) -> None:
    status, rows = check(runs)

    assert status == 0
    assert rows["flow"] == ["compatible", "-", "-", "-", "published its next step 'c'"]
    assert rows["wait"][:4] == rows["par"][:4] == ["compatible", "-", "-", "-"]


def test_a_renamed_first_step(runs: Runs) -> None:
    status, rows = check(runs, "a=a-v2")

    assert status == 1
    refusal = "500 Incompatible step name. Expected 'a-v2', got 'a' from the request"
    assert rows["flow"] == ["incompatible", "1", "a-v2", "a", refusal]
    assert rows["wait"] == ["incompatible", "1", "a-v2", "a", refusal]
    assert rows["par"][0] == "compatible"


def test_a_renamed_sleep(runs: Runs) -> None:
    status, rows = check(runs, "b=nap")

    assert status == 1
    assert rows["flow"][:4] == ["incompatible", "2", "nap", "b"]
    assert rows["wait"][0] == rows["par"][0] == "compatible"


def test_steps_no_run_has_recorded_yet_may_change(runs: Runs) -> None:
    # "c" and "done" come after every run's recorded steps. The step a run waits at is
    # recorded when the run resumes, not before: its rename is not seen either.
    status, rows = check(runs, "c=c-v2,done=done-v2,wait for event=wait for payment")

    assert status == 0
    assert rows["flow"] == ["compatible", "-", "-", "-", "published its next step 'c-v2'"]
    assert rows["wait"][0] == rows["par"][0] == "compatible"


def test_a_renamed_step_of_a_parallel_group(runs: Runs) -> None:
    status, rows = check(runs, "right=right-v2")

    assert status == 1
    assert rows["par"][:4] == ["incompatible", "2", "right-v2", "right"]


@pytest.mark.parametrize(
    ("change", "next_step"), [("append", "c"), ("body", "c")], ids=["appended", "body changed"]
)
def test_compatible_changes(runs: Runs, change: str, next_step: str) -> None:
    status, rows = check(runs, change=change)

    assert status == 0
    assert rows["flow"] == ["compatible", "-", "-", "-", f"published its next step '{next_step}'"]


@pytest.mark.parametrize(
    ("change", "expected", "found"),
    [("swap", "b", "a"), ("remove", "b", "a")],
    ids=["two steps swapped", "a step removed"],
)
def test_incompatible_changes(runs: Runs, change: str, expected: str, found: str) -> None:
    status, rows = check(runs, change=change)

    assert status == 1
    refusal = f"500 Incompatible step name. Expected '{expected}', got '{found}' from the request"
    assert rows["flow"] == ["incompatible", "1", expected, found, refusal]
    assert rows["wait"][0] == rows["par"][0] == "compatible"
