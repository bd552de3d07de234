"""Loading an export into a test (``qstash.load``): an account's state built through the real
``qstash`` SDK and ``upstash-workflow`` apps (FastAPI), exported with ``pytest-qstash
export``'s reader, then loaded into a fresh fake: every resource there with its ids, dead
letters retried byte-exact into the app, runs continuing from their recorded step to the same
outputs as when left alone. Bad files are refused in one sentence with nothing loaded."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import openapi_documents
import pytest
from ci_requirements import OPENAPI_DOCUMENTS, missing
from fastapi import FastAPI, Request, Response
from qstash import QStash
from workflow_apps import STOCK_URL, Journal, fastapi_workflow_app, stock_app

from pytest_qstash import FakeQStash
from pytest_qstash.server.export import export
from pytest_qstash.wire.load import LoadError

API = "https://qstash.upstash.io"
APP = "https://shop.test"
HOOKS = "https://hooks.test"
START = "2026-03-02T08:00:00Z"
START_S = 1772438400
#: Every byte, so nothing on the way may treat the body as text.
BINARY = bytes(range(256))


def hooks_app(received: list[tuple[str, bytes, dict[str, str]]], fail: list[bool]) -> FastAPI:
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def hook(path: str, request: Request) -> Response:
        received.append((path, await request.body(), dict(request.headers)))
        return Response(status_code=500 if fail[0] else 200)

    return app


def build_account(qstash: FakeQStash, journal: Journal) -> dict[str, str]:
    """An account with a bit of everything, through the SDK and the apps; returns ids."""
    client = QStash(qstash.token, base_url=API)
    client.queue.upsert("emails", parallelism=3)
    client.queue.upsert("slow", parallelism=1)
    client.queue.pause("slow")
    client.url_group.upsert_endpoints(
        "fanout", [{"url": f"{HOOKS}/a", "name": "a"}, {"url": f"{HOOKS}/b"}]
    )
    nightly = client.schedule.create(
        destination=f"{HOOKS}/report",
        cron="CRON_TZ=Europe/Berlin 0 9 * * 1-5",
        body='{"report": "daily"}',
        headers={"X-Tenant": "acme", "Content-Type": "application/json"},
        retries=2,
        label="reports",
    )
    paused = client.schedule.create(destination="fanout", cron="*/10 * * * *", body="ping")
    client.schedule.pause(paused)
    # Two dead letters: a binary body with its headers, and a text one.
    client.message.publish(
        url=f"{HOOKS}/charge",
        body=BINARY,
        headers={"Content-Type": "application/octet-stream", "X-Order": "7"},
        retries=0,
    )
    client.message.publish_json(url=f"{HOOKS}/mail", body={"to": "a@b.test"}, retries=1)
    qstash.advance("1h")
    ship_at = START_S + 2 * 86400
    payload = {"order": 1, "sku": "sku-1", "qty": 2, "ship_at": ship_at}
    shipping = qstash.trigger(f"{APP}/order", {**payload, "order": 2}, run_id="wfr_shipping")
    failing = qstash.trigger(f"{APP}/fails", {"card": "4242"}, run_id="wfr_failed")
    qstash.advance("1h")  # shipping: through the call, asleep until ship_at; failed: in the DLQ
    qstash.handler_takes(f"{STOCK_URL}/reserve", "10m", times=1)
    midcall = qstash.trigger(f"{APP}/order", {**payload, "order": 3}, run_id="wfr_midcall")
    qstash.advance("31s")  # its cool-down over, its call in flight for 10 minutes
    asleep = qstash.trigger(f"{APP}/order", payload, run_id="wfr_asleep")
    qstash.tick()  # validate ran; asleep in cool-down (30 s)
    return {
        "nightly": nightly,
        "paused": paused,
        "asleep": asleep,
        "shipping": shipping,
        "midcall": midcall,
        "failed": failing,
    }


@pytest.fixture
def account() -> dict[str, Any]:
    """An exported account, and the same account left alone to finish (the control)."""
    journal = Journal()
    received: list[tuple[str, bytes, dict[str, str]]] = []
    with FakeQStash(start=START) as source:
        source.mount(APP, fastapi_workflow_app(journal))
        source.mount(STOCK_URL, stock_app(journal))
        source.mount(HOOKS, hooks_app(received, [True]))
        ids = build_account(source, journal)
        document = export(API, source.token)
        runs_then = {run.run_id: [s.name for s in run.steps] for run in source.runs}
        executed_then = len(journal.executed)
        source.advance("3d")
        finished = {
            run.run_id: {s.name: s.out for s in run.steps} for run in source.runs if run.run_id
        }
    return {
        "document": document,
        "ids": ids,
        "runs_then": runs_then,
        "finished": finished,
        "executed_after": journal.executed[executed_then:],
    }


def fresh_fake(journal: Journal, received: list[Any], fail: list[bool]) -> FakeQStash:
    fake = FakeQStash()  # its clock starts where the export was taken
    fake.start()
    fake.mount(APP, fastapi_workflow_app(journal))
    fake.mount(STOCK_URL, stock_app(journal))
    fake.mount(HOOKS, hooks_app(received, fail))
    return fake


@pytest.fixture
def loaded(account: dict[str, Any]) -> Any:
    journal, received, fail = Journal(), [], [False]
    fake = fresh_fake(journal, received, fail)
    try:
        summary = fake.load(account["document"])
        yield fake, summary, journal, received, fail
    finally:
        fake.stop()


def test_every_resource_is_there_with_its_ids(account: dict[str, Any], loaded: Any) -> None:
    fake, summary, *_ = loaded
    document, ids = account["document"], account["ids"]
    assert {s.schedule_id for s in fake.schedules} == {ids["nightly"], ids["paused"]}
    nightly = next(s for s in fake.schedules if s.schedule_id == ids["nightly"])
    assert nightly.cron == "CRON_TZ=Europe/Berlin 0 9 * * 1-5"
    assert nightly.content == b'{"report": "daily"}'
    assert nightly.options.retries == 2
    assert nightly.options.headers["X-Tenant"] == "acme"
    assert nightly.options.label == "reports"
    assert next(s for s in fake.schedules if s.schedule_id == ids["paused"]).paused
    queues = {q.name: (q.parallelism, q.paused) for q in fake.queues}
    assert queues == {"emails": (3, False), "slow": (1, True)}
    (group,) = fake.url_groups
    assert [(e.url, e.name) for e in group.endpoints] == [(f"{HOOKS}/a", "a"), (f"{HOOKS}/b", None)]
    exported_dlq = {m["dlqId"] for page in document["dlq"] for m in page["messages"]}
    assert {e.dlq_id for e in fake.dlq} == exported_dlq
    in_progress = {r.run_id for r in fake.runs if r.state == "RUN_STARTED"}
    assert in_progress == {ids["asleep"], ids["shipping"], ids["midcall"]}
    # Three positions: asleep in the first sleep, its call in flight, asleep until shipping.
    then = account["runs_then"]
    assert then[ids["asleep"]] == then[ids["midcall"]] == ["validate", "cool-down"]
    assert then[ids["shipping"]] == ["validate", "cool-down", "reserve", "ship"]
    [midcall] = [
        r for r in document["workflow_runs"][0]["runs"] if r["workflowRunId"] == ids["midcall"]
    ]
    [in_flight] = midcall["steps"][-1]["steps"]  # what is next: the call, not a step
    assert midcall["steps"][-1]["type"] == "next"
    assert in_flight["messageId"] not in {s.message_id for s in fake.messages}
    for run in fake.runs:
        if run.state == "RUN_STARTED":
            assert [s.name for s in run.steps] == then[run.run_id]
    assert (summary.schedules, summary.queues, summary.url_groups) == (2, 2, 1)
    assert (summary.workflow_runs, summary.workflow_dlq) == (3, 1)


def test_the_clock_starts_at_the_export_time(account: dict[str, Any], loaded: Any) -> None:
    fake, summary, *_ = loaded
    assert summary.exported_at is not None
    assert fake.now == summary.exported_at
    # The app's wall clock went there too (back in time: the fake held nothing yet).
    assert abs(datetime.now(timezone.utc) - summary.exported_at) < timedelta(seconds=1)
    assert summary.as_dict()["exported_at"].endswith("Z")


def test_runs_finish_with_the_outputs_they_had_when_left_alone(
    account: dict[str, Any], loaded: Any
) -> None:
    fake, _, journal, *_ = loaded
    fake.advance("3d")
    for run_id in (account["ids"]["asleep"], account["ids"]["shipping"], account["ids"]["midcall"]):
        (run,) = [r for r in fake.runs if r.run_id == run_id]
        assert run.state == "RUN_SUCCESS", run
        assert {s.name: s.out for s in run.steps} == account["finished"][run_id]
    # The steps that had run before the export were not run again; the rest ran once.
    assert sorted(journal.executed) == sorted(account["executed_after"])


def test_a_dead_letter_retried_reaches_the_app_byte_exact(
    account: dict[str, Any], loaded: Any
) -> None:
    fake, _, _, received, _ = loaded
    (charge,) = [e for e in fake.dlq if e.message.url == f"{HOOKS}/charge"]
    assert charge.message.content == BINARY
    assert charge.response_status == 500
    client = QStash(fake.token, base_url=API)
    client.dlq.delete(next(e.dlq_id for e in fake.dlq if e.message.url == f"{HOOKS}/mail"))
    answer = httpx.post(
        f"{API}/v2/dlq/retry/{charge.dlq_id}", headers={"Authorization": f"Bearer {fake.token}"}
    )
    assert answer.status_code == 201, answer.text
    fake.tick()
    (delivered,) = [r for r in received if r[0] == "charge"]
    assert delivered[1] == BINARY
    assert delivered[2]["x-order"] == "7"
    assert delivered[2]["content-type"] == "application/octet-stream"
    assert "upstash-signature" in delivered[2]
    # Retried and deleted: only the failed workflow run's entry is left.
    assert [e.message.workflow_run_id for e in fake.dlq] == [account["ids"]["failed"]]


def test_the_workflow_dlq_resumes_a_loaded_failed_run(account: dict[str, Any], loaded: Any) -> None:
    fake, _, journal, *_ = loaded
    (entry,) = fake.workflow_dlq
    assert entry.run.run_id == account["ids"]["failed"]
    assert [s.name for s in entry.run.steps] == ["prepare"]
    journal.card_declined = False
    answer = httpx.post(
        f"{API}/v2/workflows/dlq/resume/{entry.entry.dlq_id}",
        headers={"Authorization": f"Bearer {fake.token}"},
    )
    assert answer.status_code == 200, answer.text
    fake.advance("1m")
    resumed = [r for r in fake.runs if r.run_id == answer.json()["workflowRunId"]]
    assert resumed
    assert resumed[0].state == "RUN_SUCCESS"
    assert journal.names(resumed[0].run_id) == ["charge"]  # prepare is not run again


def test_a_loaded_schedule_fires_on_the_virtual_clock(account: dict[str, Any], loaded: Any) -> None:
    fake, _, _, received, _ = loaded
    fake.advance("1d")
    reports = [r for r in received if r[0] == "report"]
    assert len(reports) == 1  # 09:00 Berlin on the next weekday, once a day
    assert reports[0][1] == b'{"report": "daily"}'
    assert reports[0][2]["x-tenant"] == "acme"


def test_start_moves_the_clock(account: dict[str, Any]) -> None:
    with FakeQStash() as fake:
        fake.load(account["document"], start="2026-06-01T00:00:00Z")
        assert fake.now.isoformat() == "2026-06-01T00:00:00+00:00"


def test_a_start_the_test_chose_is_kept(account: dict[str, Any]) -> None:
    with FakeQStash(start="2026-03-02T09:00:00Z") as fake:
        fake.load(account["document"])
        assert fake.now.isoformat() == "2026-03-02T09:00:00+00:00"


def test_the_clock_never_goes_back_once_something_is_planned(account: dict[str, Any]) -> None:
    with FakeQStash() as fake:
        QStash(fake.token, base_url=API).message.publish(url=f"{HOOKS}/x", body="x", delay="1h")
        now = fake.now
        fake.load(account["document"])  # the export is from the past: the clock stays
        assert fake.now == now
        with pytest.raises(LoadError, match="time never goes backwards"):
            fake.load({"version": 1}, start=START)


def test_a_file_loads_as_its_dict_does(account: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "account.json"
    path.write_text(json.dumps(account["document"]))
    with FakeQStash(start=START) as fake:
        summary = fake.load(path)
        assert summary.schedules == 2
        assert summary.workflow_runs == 3


def test_loading_twice_is_refused_and_adds_nothing(account: dict[str, Any], loaded: Any) -> None:
    fake, *_ = loaded
    before = len(fake.messages)
    with pytest.raises(LoadError, match=r"loaded already|exists already"):
        fake.load(account["document"])
    assert len(fake.messages) == before


def _broken(document: dict[str, Any], how: str) -> dict[str, Any]:
    broken = copy.deepcopy(document)
    if how == "newer version":
        broken["version"] = 2
    elif how == "steps not a list":
        broken["workflow_runs"][0]["runs"][0]["steps"] = {"type": "sequential"}
    elif how == "schedule field type":
        broken["schedules"][0][0]["retries"] = "three"
    elif how == "unknown key":
        broken["webhooks"] = []
    return broken


@pytest.mark.parametrize(
    ("how", "sentence"),
    [
        ("newer version", r"^the export's format version is 2; this release reads version 1"),
        ("steps not a list", r"^workflow_runs\[0\]\.runs\[0\]\.steps: expected a list of step"),
        ("schedule field type", r"^schedules\[0\]\[0\]\.retries: expected a whole number"),
        ("unknown key", r"the export has the key 'webhooks'"),
    ],
)
def test_a_bad_document_is_one_sentence_and_loads_nothing(
    account: dict[str, Any], how: str, sentence: str
) -> None:
    with FakeQStash(start=START) as fake:
        with pytest.raises(LoadError, match=sentence) as caught:
            fake.load(_broken(account["document"], how))
        assert "\n" not in str(caught.value)
        assert not (list(fake.schedules))
        assert not (list(fake.runs))
        assert not (list(fake.dlq))
        assert not list(fake.queues)
        assert not list(fake.url_groups)


def test_a_truncated_file_is_one_sentence(account: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    text = json.dumps(account["document"])
    path.write_text(text[: len(text) // 2])
    with FakeQStash(start=START) as fake:
        with pytest.raises(LoadError, match=r"cut\.json is not JSON \(.* at line 1, column"):
            fake.load(path)
        assert not list(fake.schedules)


def test_a_missing_file_and_a_wrong_type_are_one_sentence(tmp_path: Path) -> None:
    with FakeQStash(start=START) as fake:
        with pytest.raises(LoadError, match=r"cannot read .*nope\.json: No such file"):
            fake.load(tmp_path / "nope.json")
        with pytest.raises(LoadError, match="expected the path of an export file"):
            fake.load(42)  # type: ignore[arg-type]


# -- an export assembled by hand from the shapes of Upstash's OpenAPI documents ------------
WORKFLOW_URL = f"{APP}/order"


def _hand_made() -> dict[str, Any]:
    """Each answer with the fields Upstash's documents name, checked against them below."""
    created = 1772400000000
    step_headers = {"Upstash-Workflow-Sdk-Version": ["1"], "Content-Type": ["application/json"]}
    payload = {"order": 9, "sku": "sku-9", "qty": 1, "ship_at": START_S + 86400}
    return {
        "version": 1,
        "source": "https://qstash.upstash.io",
        "exported_at": START,
        "schedules": [
            [
                {
                    "scheduleId": "scd_hand",
                    "cron": "0 * * * *",
                    "destination": f"{HOOKS}/hourly",
                    "createdAt": created,
                    "method": "PUT",
                    "header": {"X-Hand": ["made"]},
                    "body": "tick",
                    "retries": 1,
                    "isPaused": False,
                    "labels": ["hand"],
                }
            ]
        ],
        "queues": [[{"name": "hand", "parallelism": 2, "paused": False, "lag": 0}]],
        "url_groups": [[{"name": "handgroup", "endpoints": [{"name": "x", "url": f"{HOOKS}/x"}]}]],
        "flow_control": [
            [
                {
                    "flowControlKey": "hand-key",
                    "parallelismMax": 2,
                    "isPinnedParallelism": True,
                    "isPinnedRate": False,
                    "isPaused": True,
                    "waitListSize": 0,
                }
            ]
        ],
        "dlq": [
            {
                "cursor": "",
                "messages": [
                    {
                        "messageId": "msg_hand",
                        "url": f"{HOOKS}/charge",
                        "method": "POST",
                        "header": {"Content-Type": ["application/octet-stream"]},
                        "bodyBase64": "AAEC/w==",
                        "maxRetries": 3,
                        "createdAt": created,
                        "responseStatus": 502,
                        "responseBody": "bad gateway",
                        "dlqId": "1772400000000-1",
                    }
                ],
            }
        ],
        "workflow_runs": [
            {
                "runs": [
                    {
                        "workflowRunId": "wfr_hand",
                        "workflowUrl": WORKFLOW_URL,
                        "workflowState": "RUN_STARTED",
                        "workflowRunCreatedAt": created,
                        "steps": [
                            {
                                "type": "sequential",
                                "steps": [
                                    {
                                        "stepId": 0,
                                        "stepName": "init",
                                        "stepType": "Initial",
                                        "callType": "step",
                                        "messageId": "msg_hand_init",
                                        "out": json.dumps(payload),
                                        "concurrent": 1,
                                        "state": "STEP_SUCCESS",
                                        "createdAt": created,
                                        "headers": step_headers,
                                    }
                                ],
                            },
                            {
                                "type": "sequential",
                                "steps": [
                                    {
                                        "stepId": 1,
                                        "stepName": "validate",
                                        "stepType": "Run",
                                        "callType": "step",
                                        "messageId": "msg_hand_validate",
                                        "out": json.dumps({"order": 9, "valid": True}),
                                        "concurrent": 1,
                                        "state": "STEP_SUCCESS",
                                        "createdAt": created,
                                        "headers": step_headers,
                                    }
                                ],
                            },
                            {
                                "type": "next",
                                "steps": [
                                    {"messageId": "msg_hand_validate", "state": "STEP_RETRY"}
                                ],
                            },
                        ],
                    }
                ]
            }
        ],
        "workflow_dlq": [{"messages": []}],
    }


def test_an_export_assembled_from_the_openapi_shapes_loads() -> None:
    if openapi_documents.DOCUMENTS_DIR is None:
        missing(OPENAPI_DOCUMENTS, openapi_documents.ABSENT)

    document = _hand_made()
    qstash_doc = openapi_documents.load("qstash")
    workflow_doc = openapi_documents.load("workflow")
    for key, doc, operation in (
        ("schedules", qstash_doc, "GET /v2/schedules"),
        ("queues", qstash_doc, "GET /v2/queues"),
        ("url_groups", qstash_doc, "GET /v2/topics"),
        ("flow_control", qstash_doc, "GET /v2/flowControl"),
        ("dlq", qstash_doc, "GET /v2/dlq"),
        ("workflow_runs", workflow_doc, "GET /v2/workflows/logs"),
        ("workflow_dlq", workflow_doc, "GET /v2/workflows/dlq"),
    ):
        for answer in document[key]:
            assert doc.problems(operation, httpx.Response(200, json=answer)) == [], key
    journal, received = Journal(), []
    fake = fresh_fake(journal, received, [False])
    try:
        fake.load(document)
        assert [s.schedule_id for s in fake.schedules] == ["scd_hand"]
        assert [(q.name, q.parallelism) for q in fake.queues] == [("hand", 2)]
        (key,) = fake.flow_keys
        assert (key.key, key.parallelism, key.paused) == ("hand-key", 2, True)
        (entry,) = fake.dlq
        assert entry.message.content == b"\x00\x01\x02\xff"
        fake.advance("2d")
        (run,) = fake.runs
        assert run.state == "RUN_SUCCESS", run
        assert [s.name for s in run.steps] == [
            "validate",
            "cool-down",
            "reserve",
            "ship",
            "confirm",
        ]
        assert journal.names("wfr_hand") == ["confirm"]  # validate was recorded, not run again
        hourly = [r for r in received if r[0] == "hourly"]
        assert len(hourly) == 48
        assert hourly[0][1] == b"tick"
        assert hourly[0][2]["x-hand"] == "made"
    finally:
        fake.stop()


def _cool_down(validate: dict[str, Any]) -> dict[str, Any]:
    """/order's second step, its sleep, as the logs show it (after ``validate``'s)."""
    return {
        **validate,
        "stepId": 2,
        "stepName": "cool-down",
        "stepType": "SleepFor",
        "sleepFor": 30,
        "out": "",
        "messageId": "msg_hand_cool",
    }


def test_a_step_shown_only_as_what_is_next_resumes_the_run() -> None:
    """A step result published and not yet delivered may be shown only in the ``next`` group,
    whole: it is the message that resumes the run, not a step to run again."""
    document = _hand_made()
    [run] = document["workflow_runs"][0]["runs"]
    validate = run["steps"][1]["steps"][0]
    run["steps"][2]["steps"] = [
        {
            **_cool_down(validate),
            "state": "STEP_PROGRESS",
            "nextDeliveryTime": 1772438430000,  # START + 30 s
        }
    ]
    journal, received = Journal(), []
    fake = fresh_fake(journal, received, [False])
    try:
        fake.load(document)
        assert fake.advance("29s") == []  # the sleep holds until its recorded end
        fake.advance("2d")
        (loaded_run,) = fake.runs
        assert loaded_run.state == "RUN_SUCCESS"
        names = [s.name for s in loaded_run.steps]
        assert names == ["validate", "cool-down", "reserve", "ship", "confirm"]
        assert journal.names("wfr_hand") == ["confirm"]
    finally:
        fake.stop()


def test_what_the_account_held_loads_whatever_the_fakes_plan() -> None:
    """An export is what the account had: the plan's limits apply to what comes next."""
    from pytest_qstash.engine.plans import PLANS

    limit = PLANS["free"].url_groups
    groups = [{"name": f"g{i}", "endpoints": [{"url": f"{HOOKS}/{i}"}]} for i in range(limit + 1)]
    with FakeQStash(plan="free") as fake:
        assert fake.load({"version": 1, "url_groups": [groups]}).url_groups == limit + 1
        assert len(fake.url_groups) == limit + 1
        answer = httpx.post(
            f"{API}/v2/topics/one-more/endpoints",
            json={"endpoints": [{"url": f"{HOOKS}/x"}]},
            headers={"Authorization": f"Bearer {fake.token}"},
        )
        assert answer.status_code >= 400  # the plan's limit holds for a new group


def test_a_call_step_shown_under_its_callback_call_type_is_replayed_as_a_step() -> None:
    """The logs may show a finished ``context.call`` under ``fromCallback``: it is the step
    result the app published, replayed as such (the call is not made again)."""
    document = _hand_made()
    [run] = document["workflow_runs"][0]["runs"]
    validate = run["steps"][1]["steps"][0]
    cool_down = _cool_down(validate)
    reply = {"status": 200, "body": json.dumps({"reserved": 1}), "header": {}}
    reserve = {
        **validate,
        "stepId": 3,
        "stepName": "reserve",
        "stepType": "Call",
        "callType": "fromCallback",
        "out": json.dumps(reply),
        "messageId": "msg_hand_reserve",
    }
    run["steps"][2:] = [
        {"type": "sequential", "steps": [cool_down]},
        {"type": "sequential", "steps": [reserve]},
        {"type": "next", "steps": [{"messageId": "msg_hand_reserve", "state": "STEP_RETRY"}]},
    ]
    journal, received = Journal(), []
    fake = fresh_fake(journal, received, [False])
    try:
        fake.load(document)
        fake.advance("2d")
        (loaded_run,) = fake.runs
        assert loaded_run.state == "RUN_SUCCESS"
        assert loaded_run.step("confirm").out == {"order": 9, "reserved": 1}
        assert journal.stock_requests == []  # the call's answer was recorded: not made again
        assert journal.names("wfr_hand") == ["confirm"]
    finally:
        fake.stop()


@pytest.mark.parametrize(
    ("document", "sentence"),
    [
        (
            {"queues": [[{"name": "q", "parallelism": 10**20}]]},
            r"^queues\[0\]\[0\]\.parallelism: expected a whole number from 1 to "
            r"9223372036854775807",
        ),
        (
            {
                "dlq": [
                    {"messages": [{"dlqId": "1-1", "url": "https://a.test", "createdAt": 2**62}]}
                ]
            },
            r"^dlq\[0\]\.messages\[0\]\.createdAt: expected a whole number from 0 to "
            r"253402300799999",
        ),
        (
            {"dlq": [{"messages": [{"dlqId": "1-1", "url": "https://"}]}]},
            r"^dlq\[0\]\.messages\[0\]\.url: invalid url 'https://'",
        ),
        (
            {"schedules": [[{"scheduleId": "s", "cron": "* * * * *", "destination": "ftp://x"}]]},
            r"^schedules\[0\]\[0\]\.destination: invalid destination 'ftp://x'",
        ),
        (
            {"url_groups": [[{"name": "g", "endpoints": [{"url": "mailto:a@b.test"}]}]]},
            r"^url_groups\[0\]\[0\]\.endpoints\[0\]\.url: ",
        ),
    ],
    ids=["parallelism past 64 bits", "a time past 9999", "a URL without host", "ftp", "mailto"],
)
def test_numbers_and_urls_qstash_would_not_hold_are_refused(
    document: dict[str, Any], sentence: str
) -> None:
    with FakeQStash(start=START) as fake:
        fake.load({"version": 1, "queues": [[{"name": "before"}]]})  # something there already
        with pytest.raises(LoadError, match=sentence):
            fake.load({"version": 1, "schedules": [[]], **document})
        assert [q.name for q in fake.queues] == ["before"]  # nothing of it was loaded
        assert list(fake.dlq) == []
        assert list(fake.schedules) == []
        assert list(fake.url_groups) == []
