"""Simulation over the server: ``serve --simulate SEED``, ``POST /_qstash/simulate`` and
``GET /_qstash/simulation`` give apps in other processes the same seeded faults."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from qstash import QStash

from pytest_qstash.server import AppProcess, ServerError, ServerProcess

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def app(qstash_server: ServerProcess) -> Iterator[AppProcess]:
    with AppProcess.start("server_app:app", cwd=HERE) as started:
        yield started


@pytest.fixture(autouse=True)
def _fresh(qstash_server: ServerProcess) -> Iterator[None]:
    qstash_server.reset()
    yield
    qstash_server.reset()  # a reset ends a simulation POST /_qstash/simulate started


def _received(app: AppProcess, message_id: str) -> list[dict[str, Any]]:
    answer = requests.get(f"{app.url}/received", timeout=10).json()
    return [r for r in answer if r["message_id"] == message_id]


def _publish_and_drain(server: ServerProcess, app: AppProcess, name: str) -> str:
    sdk = QStash(server.token, base_url=server.url, retry=False)
    message_id = sdk.message.publish(url=f"{app.url}/jobs/{name}", body=name).message_id
    sdk.http._client.close()
    server.drain()
    return message_id


def test_a_seed_duplicates_a_delivery_to_an_app_in_another_process(
    qstash_server: ServerProcess, app: AppProcess
) -> None:
    for seed in range(40):
        qstash_server.reset()
        answer = qstash_server.simulate(seed, ["duplicate"])
        assert (answer["seed"], answer["faults"], answer["injected"]) == (seed, ["duplicate"], [])
        message_id = _publish_and_drain(qstash_server, app, f"dup-{seed}")
        simulation = qstash_server.simulation
        assert simulation is not None
        if simulation["injected"]:
            [fault] = simulation["injected"]
            assert (fault["kind"], fault["message_id"]) == ("duplicate", message_id)
            # The app verified both signatures (it answers 401 otherwise) and saw one id twice.
            seen = _received(app, message_id)
            assert [r["retried"] for r in seen] == ["0", "0"]
            assert [d.status for d in qstash_server.deliveries] == [200, 200]
            return
        assert len(_received(app, message_id)) == 1
    raise AssertionError("no seed of 40 duplicated the delivery")


def test_the_same_seed_gives_the_same_faults_for_the_same_requests(app: AppProcess) -> None:
    runs = []
    for _ in range(2):  # two servers started alike (a reset draws ids of its own)
        with ServerProcess.start(
            seed=9, start="2026-01-01T00:00:00Z", simulate=3, args=["--credentials-from-env"]
        ) as server:
            for n in range(5):
                _publish_and_drain(server, app, f"same-{n}")
            simulation = server.simulation
            assert simulation is not None
            runs.append([(f["kind"], f["key"], f["at"]) for f in simulation["injected"]])
    assert runs[0] == runs[1]
    assert runs[0]  # seed 3 injects something in five publishes


def test_no_simulation_after_a_reset_and_bad_arguments_are_400s(
    qstash_server: ServerProcess,
) -> None:
    qstash_server.simulate(1)
    qstash_server.reset()
    assert qstash_server.simulation is None
    for seed, faults, said in [
        ("x", None, "invalid seed='x': expected an integer"),
        (1, ["late"], "unknown fault kind(s) 'late'"),
        (1, 5, "expected a list of fault kinds"),
        (1, ["publish_lost_answer"], "in-process only"),
    ]:
        with pytest.raises(ServerError) as refused:
            qstash_server.simulate(seed, faults)  # type: ignore[arg-type]
        assert refused.value.status == 400
        assert said in refused.value.message
    assert qstash_server.simulation is None


def test_serve_simulate_keeps_its_schedule_across_resets() -> None:
    with ServerProcess.start(simulate=5, faults=["lost_ack", "reorder"]) as server:
        simulation = server.simulation
        assert simulation is not None
        assert (simulation["seed"], simulation["faults"]) == (5, ["lost_ack", "reorder"])
        server.reset()
        again = server.simulation
        assert again is not None
        assert again["seed"] == 5


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--simulate", "abc"], "invalid --simulate='abc': expected an integer"),
        (["--simulate", "1", "--faults", "dup"], "unknown fault kind(s) 'dup'"),
        (["--faults", "reorder"], "give --simulate SEED too"),
        (["--simulate", "1", "--faults", "publish_lost_answer"], "in-process only"),
    ],
)
def test_serve_refuses_bad_simulation_options_in_one_line(args: list[str], said: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_qstash", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert said in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
