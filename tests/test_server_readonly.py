"""``serve --read-only``: a loaded export (or a data dir's state) served to be read. The
QStash API's reads, the control API's reads and the dashboard answer; every write (a publish,
a DLQ retry, a clock move, a load, a dashboard button) is refused with 403 and one sentence,
and nothing is delivered, not even what falls due on the real clock. Real server processes,
the real ``qstash`` SDK and ``Client``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from qstash import QStash
from qstash.errors import QStashError
from workflow_apps import STOCK_URL, Journal, fastapi_workflow_app, stock_app

from pytest_qstash import FakeQStash
from pytest_qstash.server import ServerError, ServerProcess
from pytest_qstash.server.dashboard.routes import DASHBOARD_PATH, dashboard_link
from pytest_qstash.server.export import export

API = "https://qstash.upstash.io"
PROD = "https://app.example.com"
SAID = "the server is read-only (--read-only), so it refuses"


def production(request: httpx.Request) -> httpx.Response:
    return httpx.Response(500 if request.url.path == "/charge" else 200)


@pytest.fixture(scope="module")
def export_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export with a schedule, a dead letter and a workflow run asleep, whose next step
    was due a few seconds after the export: long ago by the wall clock."""
    journal = Journal()
    with FakeQStash(start="2026-03-02T08:00:00Z") as source:
        source.mount(PROD, production)
        source.mount(f"{PROD}/order", fastapi_workflow_app(journal))
        source.mount(STOCK_URL, stock_app(journal))
        sdk = QStash(source.token, base_url=API)
        sdk.schedule.create(destination=f"{PROD}/report", cron="0 9 2 3 *", body="r")
        sdk.message.publish_json(url=f"{PROD}/charge", body={"order": 7}, retries=0)
        source.tick()
        payload = {"order": 1, "sku": "sku-1", "qty": 2, "ship_at": 1772438400 + 86400}
        source.trigger(f"{PROD}/order", payload, run_id="wfr_asleep")
        source.tick()  # asleep in its 30 s cool-down
        document = export(API, source.token)
    path = tmp_path_factory.mktemp("export") / "account.json"
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def server(export_file: Path) -> Iterator[ServerProcess]:
    args = ["--load", str(export_file), "--read-only"]
    with ServerProcess.start(clock="real", args=args) as started:
        yield started


def refusal(response: httpx.Response) -> str:
    assert response.status_code == 403, response.text
    error: str = response.json()["error"]
    assert error.startswith(SAID)
    assert error.count(". ") == 0  # one sentence
    return error


def test_writes_are_refused_with_one_sentence(server: ServerProcess) -> None:
    sdk = QStash(server.token, base_url=server.url, retry=False)
    messages = [m.message_id for m in server.messages]
    with pytest.raises(QStashError, match=r"status: 403.*read-only \(--read-only\)"):
        sdk.message.publish_json(url=f"{PROD}/new", body={"n": 1})
    with pytest.raises(QStashError, match="403"):
        sdk.schedule.create(destination=f"{PROD}/x", cron="* * * * *")
    [dead] = sdk.dlq.list().messages
    auth = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=auth, trust_env=False) as http:
        said = refusal(http.post(f"/v2/dlq/retry/{dead.dlq_id}"))
        assert f"POST /v2/dlq/retry/{dead.dlq_id}" in said
        refusal(http.delete(f"/v2/dlq/{dead.dlq_id}"))
        refusal(http.post("/_qstash/advance", json={"by": "1h"}))
    for move in (server.tick, lambda: server.advance("1h"), server.reset):
        with pytest.raises(ServerError) as refused:
            move()
        assert refused.value.status == 403
        assert refused.value.message.startswith(SAID)
    with pytest.raises(ServerError, match="read-only"):
        server.load({"version": 1})
    with pytest.raises(ServerError, match="read-only"):
        server.mount(PROD, "http://127.0.0.1:9")
    # Nothing changed: the dead letter is still there, nothing was published.
    assert [e.dlq_id for e in sdk.dlq.list().messages] == [dead.dlq_id]
    assert [m.message_id for m in server.messages] == messages
    assert server.mounts == {}


def test_reads_are_served(server: ServerProcess) -> None:
    sdk = QStash(server.token, base_url=server.url, retry=False)
    [schedule] = sdk.schedule.list()
    assert (schedule.destination, schedule.cron) == (f"{PROD}/report", "0 9 2 3 *")
    [dead] = sdk.dlq.list().messages
    assert (dead.url, dead.response_status) == (f"{PROD}/charge", 500)
    auth = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=auth, trust_env=False) as http:
        [run] = http.get("/v2/workflows/logs").json()["runs"]
        assert (run["workflowRunId"], run["workflowState"]) == ("wfr_asleep", "RUN_STARTED")
        assert http.get(f"/v2/dlq/{dead.dlq_id}").status_code == 200
        state = http.get("/_qstash/state").json()
        assert (state["read_only"], state["clock"]) == (True, "real")
        # A POST the control API only reads with.
        assert http.post("/_qstash/report", json={}).status_code == 200
    assert [s.schedule_id for s in server.schedules] == [schedule.schedule_id]
    assert [e.dlq_id for e in server.dlq] == [dead.dlq_id]
    assert server.runs.one().run_id == "wfr_asleep"


def test_the_dashboard_shows_it_and_its_buttons_are_refused(server: ServerProcess) -> None:
    session = requests.Session()
    page = session.get(dashboard_link(server.url, server.token), timeout=10)
    assert page.status_code == 200
    assert "read-only" in page.text
    data = session.get(f"{server.url}{DASHBOARD_PATH}/data", params={"list": "dlq"}, timeout=10)
    poll: dict[str, Any] = data.json()
    assert poll["state"]["read_only"] is True
    assert poll["counts"]["dlq"] == 1
    assert poll["counts"]["schedules"] == 1
    pressed = session.post(
        f"{server.url}{DASHBOARD_PATH}/act/tick", data="{}", headers={"X-QStash-Dashboard": "1"}
    )
    assert pressed.status_code == 403
    assert pressed.json()["error"].startswith(SAID)


def test_nothing_is_delivered_though_it_falls_due(server: ServerProcess) -> None:
    # The run's next step is due (by the export's clock, long ago): on the real clock a
    # server delivers it at once, or holds it back at once (test_server_load); this one
    # starts no delivery at all, and its clock stands where the load left it.
    due = server.next_due()
    assert due is not None
    assert due <= server.now
    assert server.held() == []
    assert list(server.deliveries) == []
    step = server.messages.one(url=f"{PROD}/order", state="CREATED")
    assert step.not_before <= server.now
    assert step.deliveries == []


def test_a_data_dir_is_read_and_never_written(export_file: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    start = "2026-03-02T08:00:00Z"
    with ServerProcess.start(start=start, args=["--data-dir", str(data_dir)]) as writer:
        writer.load(export_file)
        sdk = QStash(writer.token, base_url=writer.url, retry=False)
        local = sdk.message.publish_json(url="http://127.0.0.1:9/local", body={"n": 1})
    files = {p.name: p.stat().st_mtime_ns for p in data_dir.iterdir()}

    args = ["--data-dir", str(data_dir), "--read-only"]
    with ServerProcess.start(args=args) as reader:
        deadline = time.monotonic() + 10  # the status lines follow the lines start reads
        while "read-only (--read-only)" not in reader.output and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "read-only (--read-only)" in reader.output
        assert len(reader.schedules) == 1
        assert len(reader.dlq) == 1
        assert reader.next_due() == reader.now  # the publish is due, and stays undelivered
        sdk = QStash(reader.token, base_url=reader.url, retry=False)
        with pytest.raises(QStashError, match="403"):
            sdk.message.publish_json(url=f"{PROD}/new", body={})
        for move in (reader.tick, reader.drain):
            with pytest.raises(ServerError, match="read-only"):
                move()
        assert list(reader.deliveries) == []
        assert reader.held() == []
        assert reader.messages.one(message_id=local.message_id).state == "CREATED"  # type: ignore[union-attr]
    # Not a byte written: no journal, no snapshot.
    assert {p.name: p.stat().st_mtime_ns for p in data_dir.iterdir()} == files
