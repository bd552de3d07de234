"""Loading an export into a server: ``serve --load FILE`` (and ``--start``), ``POST
/_qstash/load`` through ``Client.load``, and what a server holding a loaded export does with
the production URLs it holds: it holds their deliveries back, lists them, and sends them to a
mount once asked to retry. A data dir keeps all of it through a ``kill -9``.

The export is built in-process from an account made through the real ``qstash`` SDK and an
``upstash-workflow`` app (every URL on ``https://app.example.com``, production's stand-in),
read with ``pytest-qstash export``'s reader. The servers are real processes on loopback; the
app a URL gets mounted to runs under uvicorn.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from qstash import QStash
from workflow_apps import STOCK_URL, Journal, fastapi_workflow_app, stock_app

from pytest_qstash import FakeQStash
from pytest_qstash.server import AppProcess, ServerError, ServerProcess
from pytest_qstash.server.dashboard.routes import DASHBOARD_PATH, dashboard_link
from pytest_qstash.server.export import export
from pytest_qstash.wire.load import LoadError

HERE = Path(__file__).parent
API = "https://qstash.upstash.io"
PROD = "https://app.example.com"
EXPORTED_AT = "2026-03-02T08:00:00Z"
#: 09:00 on March 2nd: an hour after the export on a virtual clock, and never during a test
#: on the real one (but on that one day a year, when the test waits for no firing anyway).
CRON = "0 9 2 3 *"


def production(request: httpx.Request) -> httpx.Response:
    """Production while the account was made: the charge endpoint fails."""
    return httpx.Response(500 if request.url.path == "/jobs/charge" else 200, text="declined")


@pytest.fixture(scope="module")
def account(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An export of an account whose URLs are production's: a schedule, a dead letter and a
    workflow run asleep in its cool-down; the file and its ids."""
    journal = Journal()
    with FakeQStash(start=EXPORTED_AT) as source:
        source.mount(PROD, production)
        source.mount(f"{PROD}/order", fastapi_workflow_app(journal))
        source.mount(STOCK_URL, stock_app(journal))
        sdk = QStash(source.token, base_url=API)
        schedule_id = sdk.schedule.create(
            destination=f"{PROD}/jobs/report", cron=CRON, body='{"report": "daily"}'
        )
        sdk.message.publish_json(url=f"{PROD}/jobs/charge", body={"order": 7}, retries=0)
        source.tick()
        payload = {"order": 1, "sku": "sku-1", "qty": 2, "ship_at": 1772438400 + 86400}
        run_id = source.trigger(f"{PROD}/order", payload, run_id="wfr_asleep")
        source.tick()  # "validate" ran; asleep in its 30 s cool-down
        document = export(API, source.token)
    [dead] = [m for page in document["dlq"] for m in page["messages"]]
    path = tmp_path_factory.mktemp("export") / "account.json"
    path.write_text(json.dumps(document))
    return {
        "path": path,
        "document": document,
        "schedule_id": schedule_id,
        "dlq_id": dead["dlqId"],
        "run_id": run_id,
    }


@pytest.fixture(scope="module")
def target() -> Iterator[AppProcess]:
    """The local app production's URL gets mounted to: it keeps what reaches it."""
    with AppProcess.start("mount_target_app:app", cwd=HERE, ready_path="/_seen") as started:
        yield started


def seen(target: AppProcess) -> list[dict[str, Any]]:
    """What reached the mounted app since the last call (each call forgets it)."""
    answer: list[dict[str, Any]] = httpx.delete(f"{target.url}/_seen", trust_env=False).json()
    return answer


def said(server: ServerProcess, text: str) -> bool:
    """Whether the server's log says ``text`` (its status lines come on stderr once it
    listens, after the lines ``start`` reads: waited for, up to a bound)."""
    deadline = time.monotonic() + 10
    while text not in server.output and time.monotonic() < deadline:
        time.sleep(0.01)
    return text in server.output


def sdk_of(server: ServerProcess) -> QStash:
    return QStash(server.token, base_url=server.url, retry=False)


def api(server: ServerProcess) -> httpx.Client:
    """QStash's REST API on the server, for what the Python SDK has no method for."""
    auth = {"Authorization": f"Bearer {server.token}"}
    return httpx.Client(base_url=server.url, headers=auth, timeout=10, trust_env=False)


# -- serve --load on the real clock: nothing leaves the machine --------------------------------
def test_a_loaded_export_s_production_urls_are_held_back_then_sent_to_their_mount(
    account: dict[str, Any], target: AppProcess
) -> None:
    seen(target)
    with ServerProcess.start(clock="real", args=["--load", str(account["path"])]) as server:
        assert said(server, "it holds a loaded export")
        assert server.schedules.one().schedule_id == account["schedule_id"]
        # A dead letter retried and a new publish, both to production: held back with the
        # run's step that fell due, none of them attempted.
        with api(server) as http:
            retried = http.post(f"/v2/dlq/retry/{account['dlq_id']}")
        assert retried.status_code == 201, retried.text
        published = sdk_of(server).message.publish_json(url=f"{PROD}/hooks/new", body={"n": 1})
        server.wait_until(lambda c: len(c.held()) == 3)

        held = server.held()
        assert {(h.url, h.kind) for h in held} == {
            (f"{PROD}/jobs/charge", "message"),
            (f"{PROD}/hooks/new", "message"),
            (f"{PROD}/order", "workflow"),
        }
        assert all("neither on this machine nor under an outbound mount" in h.reason for h in held)
        assert published.message_id in {h.message_id for h in held}  # type: ignore[union-attr]
        # Not attempted: no delivery, nothing failed or dead-lettered, nothing logged as such.
        assert list(server.deliveries) == []
        assert {
            m.state for m in server.messages if m.message_id in {h.message_id for h in held}
        } == {"CREATED"}
        assert list(server.dlq) == []  # the retried entry left it, and nothing came back
        assert not [e for e in server.events if e.state in ("ERROR", "RETRY", "FAILED")]
        assert seen(target) == []
        with api(server) as http:
            state = http.get("/_qstash/state").json()
        assert (state["holding_back"], state["held"]) == (True, 3)
        # The dashboard lists them (a badge in its header, each with its URL and why).
        page = requests.Session()
        assert page.get(dashboard_link(server.url, server.token), timeout=10).status_code == 200
        poll = page.get(f"{server.url}{DASHBOARD_PATH}/data", timeout=10).json()
        assert {h["url"] for h in poll["held"]} == {h.url for h in held}
        assert poll["state"]["held"] == 3

        # Mounted and retried: each goes to the mount, once; the list empties.
        server.mount(PROD, target.url)
        assert sorted(server.retry_held()) == sorted(h.message_id for h in held)
        server.wait_until(lambda c: len(c.deliveries) >= 3)
        assert sorted(r["path"] for r in seen(target)) == [
            "/hooks/new",
            "/jobs/charge",
            "/order",
        ]
        assert server.held() == []
        charge = server.deliveries.one(url=f"{PROD}/jobs/charge")
        assert (charge.status, json.loads(charge.content)) == (200, {"order": 7})


def test_a_loopback_url_is_never_held_back_and_allow_outbound_holds_nothing(
    account: dict[str, Any], target: AppProcess
) -> None:
    seen(target)
    with ServerProcess.start(clock="virtual", args=["--load", str(account["path"])]) as server:
        sdk_of(server).message.publish_json(url=f"{target.url}/local", body={"n": 1})
        [delivery] = server.tick()
        assert delivery.status == 200
        assert server.held() == []
        assert [r["path"] for r in seen(target)] == ["/local"]
    args = ["--load", str(account["path"]), "--allow-outbound"]
    with ServerProcess.start(clock="virtual", args=args) as server:
        # Sent as it is (the attempt fails: no production here), never held back.
        sdk_of(server).message.publish_json(url="http://127.0.0.1:9/nothing", body={}, retries=0)
        server.tick()
        assert server.held() == []
        with api(server) as http:
            assert http.get("/_qstash/state").json()["holding_back"] is False


# -- serve --load on a virtual clock: --start, schedules, runs ---------------------------------
def test_on_a_virtual_clock_the_load_starts_at_the_export_s_time_and_holds_its_firings(
    account: dict[str, Any],
) -> None:
    with ServerProcess.start(clock="virtual", args=["--load", str(account["path"])]) as server:
        assert server.now.isoformat() == "2026-03-02T08:00:00+00:00"
        assert server.runs.one().run_id == account["run_id"]
        server.advance("1h")  # the run's cool-down ends, the schedule fires at 09:00
        held = server.held()
        assert {(h.url, h.kind) for h in held} == {
            (f"{PROD}/jobs/report", "message"),
            (f"{PROD}/order", "workflow"),
        }
        assert list(server.deliveries) == []
        # What is due next is the schedule's next firing: the held ones wait for a retry.
        due = server.next_due()
        assert due is not None
        assert due.isoformat() == "2027-03-02T09:00:00+00:00"
    with ServerProcess.start(
        clock="virtual", start="2026-05-01T00:00:00Z", args=["--load", str(account["path"])]
    ) as server:
        assert server.now.isoformat() == "2026-05-01T00:00:00+00:00"


def test_a_bad_file_is_one_sentence_and_exit_2_and_nothing_is_served(
    account: dict[str, Any], tmp_path: Path
) -> None:
    broken = dict(account["document"])
    broken["schedules"] = [[{**account["document"]["schedules"][0][0], "cron": "every day"}]]
    newer = {**account["document"], "version": 2}
    steps = json.loads(json.dumps(account["document"]))
    steps["workflow_runs"][0]["runs"][0]["steps"] = "init"
    whole = json.dumps(account["document"])
    cases = {
        "missing.json": "cannot read",
        "text.json": "is not JSON",
        "truncated.json": "is not JSON",
        "broken.json": "schedules[0][0].cron",
        "newer.json": "format version is 2",
        "steps.json": "workflow_runs[0].runs[0].steps: expected a list",
    }
    (tmp_path / "text.json").write_text("schedules: 1")
    (tmp_path / "truncated.json").write_text(whole[: len(whole) // 2])
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    for name, said in cases.items():
        ran = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest_qstash",
                "serve",
                "--port=0",
                "--load",
                str(tmp_path / name),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.returncode == 2, ran.stderr
        assert ran.stdout == ""  # no QSTASH_URL: nothing served
        [line] = ran.stderr.strip().splitlines()
        assert line.startswith("pytest-qstash serve: --load")
        assert said in line
        assert "Traceback" not in ran.stderr


# -- POST /_qstash/load -----------------------------------------------------------------------
def test_client_load_answers_the_counts_and_a_bad_document_loads_nothing(
    account: dict[str, Any],
) -> None:
    with ServerProcess.start(clock="virtual") as server:  # its start not chosen: now
        broken = json.loads(json.dumps(account["document"]))
        broken["dlq"][0]["messages"][0]["url"] = 7
        with pytest.raises(ServerError) as refused:
            server.load(broken)
        assert refused.value.status == 400
        assert "dlq[0].messages[0].url" in refused.value.message
        assert list(server.schedules) == []
        assert list(server.dlq) == []
        with api(server) as http:
            plain = http.post("/_qstash/load", content=b'{"version": 1, "schedules": 3}')
            assert plain.status_code == 400
            assert set(plain.json()) == {"error"}
            assert http.get("/_qstash/state").json()["holding_back"] is False
            # The body is the export document itself, as curl -d @account.json sends it.
            answered = http.post("/_qstash/load", content=account["path"].read_bytes())
        assert answered.status_code == 200, answered.text
        assert answered.json() == {
            "source": API,
            "exported_at": "2026-03-02T08:00:00.000Z",
            "schedules": 1,
            "queues": 0,
            "url_groups": 0,
            "flow_control": 0,
            "dlq": 1,
            "workflow_runs": 1,
            "workflow_dlq": 0,
        }
        # A server that held nothing, on a clock whose start was not chosen: the export's.
        assert server.now.isoformat() == "2026-03-02T08:00:00+00:00"
        assert [s.schedule_id for s in sdk_of(server).schedule.list()] == [account["schedule_id"]]
        with pytest.raises(ServerError, match="loaded already: load it once"):
            server.load(account["path"])  # a path, read by the client
        with pytest.raises(LoadError, match="cannot read"):
            server.load(account["path"].with_name("nowhere.json"))
        with api(server) as http:
            assert http.get("/_qstash/state").json()["holding_back"] is True
            server.reset(keep=["schedules"])  # the export's schedule is kept: so is the rule
            assert http.get("/_qstash/state").json()["holding_back"] is True
            server.reset()  # nothing of the export is left: nothing is held back any more
            assert http.get("/_qstash/state").json()["holding_back"] is False
    start = "2026-05-01T00:00:00Z"
    with ServerProcess.start(clock="virtual", start=start) as server:
        server.load(account["path"])
        assert server.now.isoformat() == "2026-05-01T00:00:00+00:00"  # the chosen start stays


def test_a_load_on_a_real_clock_leaves_the_clock_alone(account: dict[str, Any]) -> None:
    with ServerProcess.start(clock="real") as server:
        with pytest.raises(ServerError, match="leave start out"):
            server.load(account["document"], start="2026-03-02T08:00:00Z")
        before = server.now
        loaded = server.load(account["document"])
        assert loaded["dlq"] == 1
        assert server.now >= before  # the wall clock's, not the export's
        server.wait_until(lambda c: [h.kind for h in c.held()] == ["workflow"])


# -- a data dir keeps the loaded state, and that it holds production's URLs ----------------------
def kill(server: ServerProcess) -> None:
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=10)
    server.stop()


def test_a_load_survives_kill_9_and_the_restart_still_holds_back(
    account: dict[str, Any], target: AppProcess, tmp_path: Path
) -> None:
    seen(target)
    data_dir = tmp_path / "state"
    server = ServerProcess.start(clock="virtual", args=["--data-dir", str(data_dir)])
    try:
        server.load(account["document"])  # journaled before it was answered
        server.advance("1h")
        assert len(server.held()) == 2
        kill(server)

        server = ServerProcess.start(clock="virtual", args=["--data-dir", str(data_dir)])
        assert [s.schedule_id for s in server.schedules] == [account["schedule_id"]]
        assert [e.dlq_id for e in server.dlq] == [account["dlq_id"]]
        assert server.runs.one().run_id == account["run_id"]
        assert server.now.isoformat() == "2026-03-02T09:00:00+00:00"
        server.tick()  # the replay moved the clock; what fell due is due, and held back
        assert {h.url for h in server.held()} == {f"{PROD}/jobs/report", f"{PROD}/order"}
        assert list(server.deliveries) == []
        held_at = {h.url: h.held_at for h in server.held()}
        server.stop()  # a clean stop: the snapshot holds them set aside

        server = ServerProcess.start(clock="virtual", args=["--data-dir", str(data_dir)])
        assert said(server, "it holds a loaded export")
        assert {h.url: h.held_at for h in server.held()} == held_at  # when first held back
        server.mount(f"{PROD}/jobs", f"{target.url}/jobs")
        assert len(server.retry_held()) == 2
        [delivery] = server.tick()  # the report goes to the mount; the run's step is held again
        assert delivery.url == f"{PROD}/jobs/report"
        assert [r["path"] for r in seen(target)] == ["/jobs/report"]
        assert [h.url for h in server.held()] == [f"{PROD}/order"]
    finally:
        server.stop()


def test_serve_load_into_a_data_dir_loads_once(account: dict[str, Any], tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    args = ["--load", str(account["path"]), "--data-dir", str(data_dir)]
    server = ServerProcess.start(clock="virtual", args=args)
    try:
        assert said(server, "pytest-qstash: loaded ")
        sdk_of(server).schedule.delete(account["schedule_id"])
        kill(server)
        # The same command line again: the data dir's state, not the file once more.
        server = ServerProcess.start(clock="virtual", args=args)
        assert list(server.schedules) == []
        assert [e.dlq_id for e in server.dlq] == [account["dlq_id"]]
        with api(server) as http:
            assert http.get("/_qstash/state").json()["holding_back"] is True
    finally:
        server.stop()


def test_a_held_message_can_be_cancelled_or_run_now_through_the_api(
    account: dict[str, Any], target: AppProcess
) -> None:
    seen(target)
    with ServerProcess.start(clock="virtual", args=["--load", str(account["path"])]) as server:
        sdk = sdk_of(server)
        kept = sdk.message.publish_json(url=f"{PROD}/kept", body={"n": 1})
        dropped = sdk.message.publish_json(url=f"{PROD}/dropped", body={"n": 2})
        assert server.tick() == []
        assert {h.url for h in server.held()} == {f"{PROD}/kept", f"{PROD}/dropped"}

        sdk.message.cancel(dropped.message_id)  # type: ignore[union-attr]
        assert [h.url for h in server.held()] == [f"{PROD}/kept"]
        assert server.messages.one(message_id=dropped.message_id).state == "CANCELED"  # type: ignore[union-attr]
        with pytest.raises(ServerError) as refused:
            server.retry_held(dropped.message_id)  # type: ignore[union-attr]
        assert refused.value.status == 400
        assert "is not held back" in refused.value.message

        # QStash's "run now" plans it again like a retry: held back again, unmounted.
        with api(server) as http:
            ran = http.post(f"/v2/messages/{kept.message_id}/retry")  # type: ignore[union-attr]
        assert ran.status_code < 300, ran.text
        assert server.held() == []
        assert server.tick() == []
        assert [h.url for h in server.held()] == [f"{PROD}/kept"]
        server.mount(PROD, target.url)
        assert server.retry_held(kept.message_id) == [kept.message_id]  # type: ignore[union-attr]
        [delivery] = server.tick()
        assert (delivery.url, delivery.status) == (f"{PROD}/kept", 200)
        assert [r["path"] for r in seen(target)] == ["/kept"]
