"""``pytest-qstash export``: an account read through the QStash REST API into one JSON file.

A ``serve`` process plays the account: real resources made through the official SDK (two
schedules, one with ``CRON_TZ=``; a queue with parallelism; a URL group with endpoints; more
dead letters than one page holds, with whole bodies and headers; a failed workflow run;
workflow runs in progress, more than one page of them; flow-control keys). The command runs
as a user runs it, in a child process, and the file holds what the API answers, every page
joined once, never the token, mode 0600. Failures (a closed port, a refused token, a
destination folder that does not exist, an answer that is not JSON, a cursor that comes back)
are one line and exit status 2, with no file.
"""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import os
import re
import stat
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from ci_requirements import OPENAPI_DOCUMENTS, missing
from cli_runs import run_command
from openapi_documents import ABSENT, DOCUMENTS_DIR, load
from ports import closed_port
from qstash import QStash

from pytest_qstash.server import AppProcess, ServerProcess, cli
from pytest_qstash.server import export as exporting

HERE = Path(__file__).parent
DOCS = HERE.parent / "docs"
#: Dead letters made: more than one page of the DLQ listing (100 a page).
FAILED = 103
#: Workflow runs left in progress: more than one page of the logs (10 a page).
IN_PROGRESS = 11
BIG_BODY = "ü" + "x" * 20_000  # longer than any trimming would leave
BINARY_BODY = b"\xff\xfe\x00binary"
LONG_OUTPUT = "step-input-" + "y" * 6_000


@dataclass
class Account:
    server: ServerProcess
    app: AppProcess
    failed_ids: list[str]
    binary_id: str
    big_id: str
    run_ids: list[str]
    long_run_id: str
    failed_run_id: str
    berlin: str
    plain: str


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    # The session's credentials (QSTASH_TOKEN and the signing keys the plugin sets): the app
    # below verifies the server's signatures with them.
    with ServerProcess.start(clock="virtual", args=["--credentials-from-env"]) as started:
        yield started


@pytest.fixture(scope="module")
def account(server: ServerProcess) -> Iterator[Account]:
    with AppProcess.start("server_app:app", cwd=HERE) as app:
        sdk = QStash(server.token, base_url=server.url, retry=False)
        try:
            yield _populate(server, app, sdk)
        finally:
            sdk.http._client.close()  # the SDK has no close()


def _populate(server: ServerProcess, app: AppProcess, sdk: QStash) -> Account:
    sdk.queue.upsert("exports", parallelism=3)
    sdk.url_group.upsert_endpoints(
        url_group="fanout",
        endpoints=[
            {"url": f"{app.url}/jobs/a", "name": "first"},
            {"url": f"{app.url}/jobs/b"},
        ],
    )
    # Dead letters: the app answers 500 on /jobs/fail, and no retry is left.
    batch = sdk.message.batch_json(
        [
            {
                "url": f"{app.url}/jobs/fail",
                "body": {"n": n},
                "headers": {"X-Trace": f"trace-{n}"},
                "retries": 0,
            }
            for n in range(FAILED - 2)
        ]
    )
    failed_ids = [item.message_id for item in batch]  # type: ignore[union-attr]
    big = sdk.message.publish(
        url=f"{app.url}/jobs/fail", body=BIG_BODY, headers={"X-Big": "yes"}, retries=0
    )
    binary = sdk.message.publish(url=f"{app.url}/jobs/fail", body=BINARY_BODY, retries=0)
    failed_ids += [big.message_id, binary.message_id]  # type: ignore[union-attr]
    failed_run_id = server.trigger(
        f"{app.url}/jobs/fail", {"order": 1}, retries=0, failure_url=False
    )
    server.drain()
    # After the drain, so that nothing of these is delivered: schedules, flow-controlled
    # messages waiting, runs in progress (their first step never delivered).
    berlin = sdk.schedule.create(
        destination=f"{app.url}/jobs/report",
        cron="CRON_TZ=Europe/Berlin 0 9 * * 1-5",
        body='{"report": "daily"}',
        headers={"X-Kind": "report"},
        schedule_id="berlin-report",
    )
    plain = sdk.schedule.create(destination=f"{app.url}/jobs/tick", cron="*/5 * * * *")
    for n in range(3):
        sdk.message.publish_json(
            url=f"{app.url}/jobs/limited",
            body={"n": n},
            delay="1h",
            flow_control={"key": "export-limited", "parallelism": 2, "rate": 5, "period": "1m"},
        )
    sdk.message.publish_json(
        url=f"{app.url}/jobs/other",
        body={},
        delay="1h",
        flow_control={"key": "export-other", "parallelism": 1},
    )
    run_ids = [server.trigger(f"{app.url}/jobs/slow", {"run": n}) for n in range(IN_PROGRESS - 1)]
    long_run_id = server.trigger(f"{app.url}/jobs/slow", LONG_OUTPUT)
    return Account(
        server=server,
        app=app,
        failed_ids=failed_ids,
        binary_id=binary.message_id,  # type: ignore[union-attr]
        big_id=big.message_id,  # type: ignore[union-attr]
        run_ids=[*run_ids, long_run_id],
        long_run_id=long_run_id,
        failed_run_id=failed_run_id,
        berlin=berlin,
        plain=plain,
    )


def run_export(
    *args: str, token: str | None, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: ``token`` (and ``extra_env``) its only QSTASH_*."""
    env = {} if token is None else {"QSTASH_TOKEN": token}
    return run_command("export", *args, env={**env, **(extra_env or {})})


@pytest.fixture(scope="module")
def exported(account: Account, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("export") / "account.json"
    before = datetime.now(timezone.utc)
    server_time = account.server.now  # a virtual clock: it stands still while nobody moves it
    done = run_export("--to", str(path), "--url", account.server.url, token=account.server.token)
    assert done.returncode == 0, done.stderr
    text = path.read_text(encoding="utf-8")
    return {
        "path": path,
        "text": text,
        "document": json.loads(text),
        "stderr": done.stderr,
        "before": before,
        "after": datetime.now(timezone.utc),
        "server_time": server_time,
    }


@pytest.fixture(scope="module")
def api(account: Account) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=account.server.url,
        headers={"Authorization": f"Bearer {account.server.token}"},
        timeout=30,
    ) as client:
        yield client


# -- the file -------------------------------------------------------------------------------
def test_the_file_says_its_format_source_and_moment(
    account: Account, exported: dict[str, Any]
) -> None:
    document = exported["document"]
    assert document["version"] == 1
    assert document["source"] == account.server.url
    moment = datetime.fromisoformat(document["exported_at"].replace("Z", "+00:00"))
    assert moment.utcoffset() == timedelta(0)
    # QStash's time when it answered (its Date, to the second): here, the server's clock.
    assert moment == exported["server_time"].replace(microsecond=0)
    assert set(document) == {
        "version",
        "source",
        "exported_at",
        *(resource.name for resource in exporting.RESOURCES),
    }


def test_the_file_holds_no_token_and_only_its_owner_reads_it(
    account: Account, exported: dict[str, Any]
) -> None:
    assert account.server.token not in exported["text"]
    assert os.environ["QSTASH_CURRENT_SIGNING_KEY"] not in exported["text"]
    assert os.environ["QSTASH_NEXT_SIGNING_KEY"] not in exported["text"]
    assert stat.S_IMODE(exported["path"].stat().st_mode) == 0o600
    # Written through a temporary file beside it, which is gone.
    assert [p.name for p in exported["path"].parent.iterdir()] == ["account.json"]


def test_a_progress_line_per_resource_on_stderr(exported: dict[str, Any]) -> None:
    lines = exported["stderr"].splitlines()
    assert lines == [
        "schedules: 2",
        "queues: 1",
        "url_groups: 1",
        f"dlq: {FAILED + 1} (2 pages)",  # and the failed run's message
        f"workflow_runs: {IN_PROGRESS} (2 pages)",
        "failed_workflow_runs: 1 (1 page)",
        "workflow_dlq: 1 (1 page)",
        "flow_control: 2",
        f"pytest-qstash export: wrote {exported['path']}",
    ]


def test_each_list_is_the_api_s_answer(
    account: Account, exported: dict[str, Any], api: httpx.Client
) -> None:
    document = exported["document"]
    for name, path in [
        ("schedules", "/v2/schedules"),
        ("queues", "/v2/queues"),
        ("url_groups", "/v2/topics"),
        ("flow_control", "/v2/flowControl"),
    ]:
        assert document[name] == [api.get(path).json()], name
    [schedules] = document["schedules"]
    by_id = {s["scheduleId"]: s for s in schedules}
    assert set(by_id) == {account.berlin, account.plain}
    berlin = by_id["berlin-report"]
    assert berlin["cron"] == "CRON_TZ=Europe/Berlin 0 9 * * 1-5"
    assert berlin["destination"] == f"{account.app.url}/jobs/report"
    assert berlin["body"] == '{"report": "daily"}'
    assert berlin["header"]["X-Kind"] == ["report"]
    assert by_id[account.plain]["cron"] == "*/5 * * * *"
    [[queue]] = document["queues"]
    assert (queue["name"], queue["parallelism"], queue["paused"]) == ("exports", 3, False)
    [[group]] = document["url_groups"]
    assert group["name"] == "fanout"
    assert group["endpoints"] == [
        {"url": f"{account.app.url}/jobs/a", "name": "first"},
        {"url": f"{account.app.url}/jobs/b"},
    ]
    [keys] = document["flow_control"]
    limited = next(k for k in keys if k["flowControlKey"] == "export-limited")
    assert (limited["parallelismMax"], limited["rateMax"], limited["ratePeriod"]) == (2, 5, 60)
    assert {k["flowControlKey"] for k in keys} == {"export-limited", "export-other"}


def test_the_dlq_is_every_page_joined_with_whole_bodies_and_headers(
    account: Account, exported: dict[str, Any], api: httpx.Client
) -> None:
    pages = exported["document"]["dlq"]
    first = api.get("/v2/dlq").json()
    assert pages[0] == first
    assert pages[1] == api.get("/v2/dlq", params={"cursor": first["cursor"]}).json()
    assert len(pages) == 2
    assert "cursor" not in pages[1]
    messages = [m for page in pages for m in page["messages"]]
    ids = [m["messageId"] for m in messages]
    assert len(ids) == len(set(ids)) == len(account.server.dlq)  # nothing lost or repeated
    assert set(account.failed_ids) <= set(ids)
    by_id = {m["messageId"]: m for m in messages}
    big = by_id[account.big_id]
    assert big["body"] == BIG_BODY
    assert big["header"]["X-Big"] == ["yes"]
    assert big["responseStatus"] == 500
    assert big["responseBody"] == "failing on purpose"
    assert base64.b64decode(by_id[account.binary_id]["bodyBase64"]) == BINARY_BODY
    first_of_batch = by_id[account.failed_ids[0]]
    assert json.loads(first_of_batch["body"]) == {"n": 0}
    assert first_of_batch["header"]["X-Trace"] == ["trace-0"]


def test_the_runs_in_progress_with_their_steps_untrimmed(
    account: Account, exported: dict[str, Any], api: httpx.Client
) -> None:
    pages = exported["document"]["workflow_runs"]
    query = {"state": "RUN_STARTED"}
    first = api.get("/v2/workflows/logs", params=query).json()
    assert pages[0] == first
    following = api.get("/v2/workflows/logs", params={**query, "cursor": first["cursor"]})
    assert pages[1] == following.json()
    runs = [run for page in pages for run in page["runs"]]
    assert sorted(run["workflowRunId"] for run in runs) == sorted(account.run_ids)
    assert {run["workflowState"] for run in runs} == {"RUN_STARTED"}  # the failed run is not
    long_run = next(run for run in runs if run["workflowRunId"] == account.long_run_id)
    [initial] = long_run["steps"][0]["steps"]
    assert initial["stepType"] == "Initial"
    assert initial["out"] == LONG_OUTPUT


def test_the_workflow_dlq(account: Account, exported: dict[str, Any], api: httpx.Client) -> None:
    pages = exported["document"]["workflow_dlq"]
    assert pages == [api.get("/v2/workflows/dlq").json()]
    [entry] = pages[0]["messages"]
    assert entry["workflowRunId"] == account.failed_run_id
    assert entry["responseStatus"] == 500
    assert json.loads(entry["body"]) == {"order": 1}


def test_every_answer_is_one_the_openapi_documents_describe(exported: dict[str, Any]) -> None:
    if DOCUMENTS_DIR is None:
        missing(OPENAPI_DOCUMENTS, ABSENT)
    documents = {name: load(name) for name in ("qstash", "workflow")}
    document = exported["document"]
    for resource in exporting.RESOURCES:
        name, operation = _documented(resource, documents)
        for answer in document[resource.name]:
            problems = documents[name].problems(operation, httpx.Response(200, json=answer))
            assert not problems, (resource.name, problems)


def test_each_request_is_documented_with_its_parameters_and_cursor() -> None:
    # What the export sends, held to Upstash's documents: the path, every query parameter,
    # the cursor of a paged list and its answer's list of items.
    if DOCUMENTS_DIR is None:
        missing(OPENAPI_DOCUMENTS, ABSENT)
    documents = {name: load(name) for name in ("qstash", "workflow")}
    for resource in exporting.RESOURCES:
        name, operation = _documented(resource, documents)
        get = documents[name].raw["paths"][resource.path]["get"]
        parameters = {p["name"] for p in get.get("parameters", []) if p.get("in") == "query"}
        sent = {key for key, _ in resource.params} | ({"cursor"} if resource.items else set())
        assert sent <= parameters, (operation, sent - parameters)
        schema = get["responses"]["200"]["content"]["application/json"]["schema"]
        if resource.items is None:
            assert schema["type"] == "array", operation
        else:
            assert {"cursor", resource.items} <= set(schema["properties"]), operation
    runs = documents["workflow"].raw["paths"]["/v2/workflows/logs"]["get"]["parameters"]
    [state] = [p for p in runs if p["name"] == "state"]
    assert "RUN_STARTED" in state["description"]  # "in progress", as the document says


def _documented(resource: exporting.Resource, documents: dict[str, Any]) -> tuple[str, str]:
    operation = f"GET {resource.path}"
    for name, document in documents.items():
        if operation in document.operations():
            return name, operation
    raise AssertionError(f"{operation} is in neither OpenAPI document")


# -- failures: one line, exit 2, no file ------------------------------------------------------
def _failed_alone(done: subprocess.CompletedProcess[str], folder: Path) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("pytest-qstash export: ")
    assert list(folder.iterdir()) == []  # no file, and no temporary one left
    return lines[0]


def test_a_closed_port_is_one_line(tmp_path: Path) -> None:
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}"
        done = run_export("--to", str(tmp_path / "out.json"), "--url", url, token="any")
    line = _failed_alone(done, tmp_path)
    assert f"could not reach {url}" in line


def test_a_wrong_token_is_one_line(server: ServerProcess, tmp_path: Path) -> None:
    done = run_export("--to", str(tmp_path / "out.json"), "--url", server.url, token="wrong")
    line = _failed_alone(done, tmp_path)
    assert f"{server.url} refused the token" in line
    assert "401" in line


def test_a_missing_token_is_one_line(server: ServerProcess, tmp_path: Path) -> None:
    done = run_export("--to", str(tmp_path / "out.json"), "--url", server.url, token=None)
    assert "QSTASH_TOKEN" in _failed_alone(done, tmp_path)


def test_a_destination_in_a_missing_folder_is_one_line(
    server: ServerProcess, tmp_path: Path
) -> None:
    target = tmp_path / "nowhere" / "out.json"
    done = run_export("--to", str(target), "--url", server.url, token=server.token)
    line = _failed_alone(done, tmp_path)
    assert f"{tmp_path / 'nowhere'} does not exist" in line


class _Handler(http.server.BaseHTTPRequestHandler):
    #: path (without the query) -> (content type, body); anything else is an empty list.
    answers: ClassVar[dict[str, tuple[str, bytes]]] = {}

    def do_GET(self) -> None:
        kind, body = self.answers.get(self.path.partition("?")[0], ("application/json", b"[]"))
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def impostor() -> Iterator[type[_Handler]]:
    """A loopback HTTP server that is not QStash; the test says what it answers."""
    handler = type("Handler", (_Handler,), {"answers": {}})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{httpd.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def test_an_answer_that_is_not_json_is_one_line(impostor: type[_Handler], tmp_path: Path) -> None:
    impostor.answers["/v2/schedules"] = ("text/html", b"<html>a login page</html>")
    url = impostor.url  # type: ignore[attr-defined]
    done = run_export("--to", str(tmp_path / "out.json"), "--url", url, token="any")
    line = _failed_alone(done, tmp_path)
    assert f"{url} answered GET /v2/schedules with something that is not JSON" in line


def test_a_cursor_that_comes_back_stops_the_export(
    impostor: type[_Handler], tmp_path: Path
) -> None:
    impostor.answers["/v2/dlq"] = ("application/json", b'{"messages": [], "cursor": "again"}')
    url = impostor.url  # type: ignore[attr-defined]
    done = run_export("--to", str(tmp_path / "out.json"), "--url", url, token="any")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    # The lists read before it were reported; the DLQ's cursor stopped it, and nothing was
    # written.
    *progress, line = done.stderr.strip().splitlines()
    assert progress == ["schedules: 0", "queues: 0", "url_groups: 0"]
    assert re.fullmatch(
        rf"pytest-qstash export: {re.escape(url)} answered GET /v2/dlq with the cursor "
        r"'again' a second time \(after 2 pages\): stopped .*",
        line,
    ), line
    assert list(tmp_path.iterdir()) == []


# -- in process: the token in an answer, the last page's empty cursor --------------------------
def test_a_token_inside_an_answer_is_replaced() -> None:
    token = "tok_" + "s3cret" * 5

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {token}"
        if request.url.path == "/v2/dlq":
            message = {"messageId": "m1", "header": {"Authorization": [f"Bearer {token}"]}}
            return httpx.Response(200, json={"messages": [message]})
        if request.url.path == "/v2/workflows/logs":
            return httpx.Response(200, json={"runs": [], "cursor": ""})  # "" ends, too
        if request.url.path == "/v2/workflows/dlq":
            return httpx.Response(200, json={"messages": []})
        return httpx.Response(200, json=[])

    lines: list[str] = []
    document = exporting.export(
        "http://qstash.test", token, progress=lines.append, transport=httpx.MockTransport(answer)
    )
    assert token not in json.dumps(document)
    [[message]] = [page["messages"] for page in document["dlq"]]
    assert message["header"]["Authorization"] == [f"Bearer {exporting.TOKEN_REPLACEMENT}"]
    assert lines[-1].startswith("pytest-qstash export: 1 value(s) of the answers contained")
    assert "workflow_runs: 0 (1 page)" in lines


# -- the docs -------------------------------------------------------------------------------
def test_the_how_to_lists_every_flag_and_shows_every_key() -> None:
    text = (DOCS / "how-to" / "export.md").read_text(encoding="utf-8")
    root = cli.parser()
    [commands] = [a for a in root._actions if isinstance(a, argparse._SubParsersAction)]
    flags = [
        option
        for action in commands.choices["export"]._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    ]
    assert flags == ["--to", "--url", "--token"]
    assert all(f"| `{flag}" in text for flag in flags)
    example = json.loads(re.search(r"```json\n(.*?)^```", text, re.DOTALL | re.MULTILINE)[1])
    assert list(example) == [
        "version",
        "source",
        "exported_at",
        *(resource.name for resource in exporting.RESOURCES),
    ]
    for resource in exporting.RESOURCES:
        assert f"`{resource.request}" in text, resource.request


def test_without_a_dated_answer_the_moment_is_this_machines() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        paged = {"/v2/dlq": "messages", "/v2/workflows/dlq": "messages"}
        if request.url.path == "/v2/workflows/logs":
            return httpx.Response(200, json={"runs": []})
        if request.url.path in paged:
            return httpx.Response(200, json={paged[request.url.path]: []})
        return httpx.Response(200, json=[])

    before = datetime.now(timezone.utc)
    document = exporting.export(
        "https://qstash.example.test", "t" * 20, transport=httpx.MockTransport(answer)
    )
    moment = datetime.fromisoformat(document["exported_at"].replace("Z", "+00:00"))
    assert before - timedelta(milliseconds=1) <= moment <= datetime.now(timezone.utc)
