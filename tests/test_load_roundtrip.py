"""From a server to a test: a FastAPI app on ``upstash-workflow`` runs against ``pytest-qstash
serve`` (uvicorn, the real SDKs), its account is exported with the ``pytest-qstash export``
command, and the file is loaded into a fresh fake with the same app mounted in-process. Every
resource comes back with its ids, a dead letter is retried byte-exact, and the runs left at
different steps finish with the outputs they reach when left alone on the server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_runs import run_command
from qstash import QStash
from roundtrip_app import make_app
from starlette.testclient import TestClient

from pytest_qstash import FakeQStash
from pytest_qstash.server import AppProcess, ServerProcess

HERE = Path(__file__).parent
BINARY = bytes(range(256))


@pytest.fixture
def app(qstash_server: ServerProcess) -> Iterator[AppProcess]:
    qstash_server.reset()
    with AppProcess.start("roundtrip_app:app", cwd=HERE, env=qstash_server.env) as started:
        yield started


def _steps(runs: Any) -> dict[str, dict[str, Any]]:
    """Each run's step outputs; a call's without its answer's headers (uvicorn's answer
    has Date and Server, the in-process app's has not)."""
    return {
        run.run_id: {
            s.name: {k: v for k, v in s.out.items() if k != "header"} if s.type == "Call" else s.out
            for s in run.steps
        }
        for run in runs
    }


def test_an_exported_server_account_loads_into_a_test_and_goes_on(
    qstash_server: ServerProcess, app: AppProcess, tmp_path: Path
) -> None:
    sdk = QStash(qstash_server.token, base_url=qstash_server.url, retry=False)
    sdk.queue.upsert("emails", parallelism=2)
    sdk.url_group.upsert_endpoints("fan", [{"url": f"{app.url}/hooks/a", "name": "a"}])
    schedule_id = sdk.schedule.create(
        destination=f"{app.url}/hooks/nightly", cron="CRON_TZ=Asia/Tokyo 0 3 * * *", body="go"
    )
    sdk.message.publish(
        url=f"{app.url}/hooks/charge",
        body=BINARY,
        headers={"Content-Type": "application/octet-stream", "X-Order": "7"},
        retries=0,
    )
    start_s = int(qstash_server.now.timestamp())
    payload = {"order": 1, "qty": 3, "ship_at": start_s + 2 * 86400}
    asleep = qstash_server.trigger(f"{app.url}/order", payload, run_id="wfr_asleep")
    qstash_server.tick()  # validate ran; asleep in cool-down
    shipping = qstash_server.trigger(f"{app.url}/order", {**payload, "order": 2}, run_id="wfr_ship")
    qstash_server.advance("2m")  # through the call for both: asleep until ship_at
    fresh = qstash_server.trigger(f"{app.url}/order", {**payload, "order": 3}, run_id="wfr_fresh")
    qstash_server.tick()
    in_progress = {asleep, shipping, fresh}
    assert {r.run_id for r in qstash_server.runs if r.state == "RUN_STARTED"} == in_progress

    target = tmp_path / "account.json"
    done = run_command(
        "export", "--url", qstash_server.url, "--to", str(target),
        env={"QSTASH_TOKEN": qstash_server.token},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads(target.read_text())
    before = {r.run_id: [s.name for s in r.steps] for r in qstash_server.runs}
    executed_before = httpx.get(f"{app.url}/journal").json()["executed"]

    # Left alone on the server: what the runs come to.
    qstash_server.advance("3d")
    finished = _steps(r for r in qstash_server.runs if r.run_id in in_progress)
    assert all(r.state == "RUN_SUCCESS" for r in qstash_server.runs if r.run_id in in_progress)
    executed_alone = httpx.get(f"{app.url}/journal").json()["executed"][len(executed_before) :]

    # Loaded into a fresh fake, the same app mounted in-process at the same URL.
    local_app = make_app(app.url)
    with FakeQStash() as fake:
        fake.mount(app.url, local_app)
        fake.load(target)
        assert fake.now.timestamp() * 1000 == pytest.approx(json_ms(document["exported_at"]), abs=1)
        assert [s.schedule_id for s in fake.schedules] == [schedule_id]
        assert [(q.name, q.parallelism) for q in fake.queues] == [("emails", 2)]
        assert [g.name for g in fake.url_groups] == ["fan"]
        (entry,) = fake.dlq
        assert entry.message.content == BINARY
        for run in fake.runs:
            assert [s.name for s in run.steps] == before[run.run_id]
        answer = httpx.post(
            f"https://qstash.upstash.io/v2/dlq/retry/{entry.dlq_id}",
            headers={"Authorization": f"Bearer {fake.token}"},
        )
        assert answer.status_code == 201, answer.text
        fake.advance("3d")
        assert all(r.state == "RUN_SUCCESS" for r in fake.runs)
        assert _steps(fake.runs) == finished
    seen = TestClient(local_app).get("/journal").json()
    assert sorted(map(tuple, seen["executed"])) == sorted(map(tuple, executed_alone))
    charged = [h for h in seen["hooks"] if h["name"] == "charge"]
    assert [bytes.fromhex(h["body"]) for h in charged] == [BINARY]


def json_ms(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000
