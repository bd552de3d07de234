"""The workflow DLQ, run-wide trigger settings, the trigger endpoints and the run logs' shape,
through real ``upstash_workflow`` apps (FastAPI: async SDK, Flask: sync SDK), the ``qstash``
SDK's HTTP client, and raw httpx where no SDK has the call."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from upstash_workflow import AsyncWorkflowContext
from upstash_workflow.fastapi import Serve as FastAPIServe
from workflow_apps import Journal, fastapi_workflow_app, flask_workflow_app

from pytest_qstash import FakeQStash, WorkflowRun
from pytest_qstash.testing.report import section

APP = "https://shop.test"
FAILS = f"{APP}/fails"
ALERTS = "https://alerts.test"
START = "2026-01-01T00:00:00Z"
API = "https://qstash.upstash.io"

at_start = pytest.mark.qstash(start=START)
both_frameworks = pytest.mark.parametrize(
    "make_app", [fastapi_workflow_app, flask_workflow_app], ids=["fastapi", "flask"]
)


def run_of(qstash: FakeQStash, run_id: str) -> WorkflowRun:
    (run,) = [run for run in qstash.runs if run.run_id == run_id]
    return run


def api(qstash: FakeQStash, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {qstash.token}", **kwargs.pop("headers", {})}
    return httpx.request(method, f"{API}{path}", headers=headers, **kwargs)


def failed_run(qstash: FakeQStash, journal: Journal, **trigger: Any) -> str:
    """A run of /fails whose charge step fails for good (serve's retries=1)."""
    run_id = qstash.trigger(FAILS, {"card": "4242"}, **trigger)
    qstash.advance("1d")
    assert run_of(qstash, run_id).state == "RUN_FAILED"
    return run_id


def alerts_app(answers: list[int], received: list[dict[str, Any]]) -> Starlette:
    """A failure URL that answers the statuses in ``answers`` in turn (200 once spent)."""

    async def alert(request: Request) -> JSONResponse:
        received.append(json.loads(await request.body()))
        return JSONResponse({}, status_code=answers.pop(0) if answers else 200)

    return Starlette(routes=[Route("/alert", alert, methods=["POST"])])


def brittle_app(journal: Journal) -> FastAPI:
    """/brittle: run "one" -> run "two" (raises while journal.card_declined); no serve()
    retries or failure function: what the trigger sets governs the run."""
    app = FastAPI()
    serve = FastAPIServe(app)

    @serve.post("/brittle")
    async def brittle(context: AsyncWorkflowContext[Any]) -> None:
        run_id = context.workflow_run_id

        async def one() -> str:
            journal.executed.append(("one", run_id))
            return "done"

        async def two() -> str:
            journal.executed.append(("two", run_id))
            if journal.card_declined:
                raise RuntimeError("two is broken")
            return "fixed"

        await context.run("one", one)
        await context.sleep("pause", 10)
        await context.run("two", two)

    return app


# -- the workflow DLQ ---------------------------------------------------------------------------
@at_start
def test_a_failed_run_is_listed_in_the_workflow_dlq(qstash: FakeQStash, client: QStash) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    run_id = failed_run(qstash, journal)

    (item,) = qstash.workflow_dlq
    assert item.run_id == run_id
    assert item.workflow_url == FAILS
    assert item.response_status == 500
    assert item.failure_function_state == "CALLBACK_SUCCESS"
    assert item.dlq_id == run_of(qstash, run_id).dlq_id
    # What the TypeScript client lists (GET /v2/dlq?source=workflow) and the document's path.
    listed = client.http.request(path="/v2/dlq", method="GET", params={"source": "workflow"})
    assert listed == client.http.request(path="/v2/workflows/dlq", method="GET")
    (entry,) = listed["messages"]
    assert entry["dlqId"] == item.dlq_id
    assert entry["workflowRunId"] == run_id
    assert entry["workflowUrl"] == FAILS
    assert entry["workflowCreatedAt"] == run_of(qstash, run_id).created_at.timestamp() * 1000
    assert entry["failureFunctionState"] == "CALLBACK_SUCCESS"
    assert entry["failureCallback"] == FAILS
    assert entry["responseStatus"] == 500
    assert entry["maxRetries"] == 1
    one = client.http.request(path=f"/v2/workflows/dlq/{item.dlq_id}", method="GET")
    assert one == entry
    # The document's filters: each one that does not match leaves the entry out.
    for params, found in [
        ({"workflowRunId": run_id}, 1),
        ({"workflowRunId": "wfr_other"}, 0),
        ({"failureFunctionState": "CALLBACK_FAIL,CALLBACK_SUCCESS"}, 1),
        ({"failureFunctionState": "CALLBACK_FAIL"}, 0),
        ({"workflowUrl": FAILS}, 1),
        ({"label": "vip"}, 0),
        ({"callerIp": "127.0.0.1"}, 1),
        ({"fromDate": str(entry["createdAt"] + 1)}, 0),
    ]:
        got = client.http.request(path="/v2/workflows/dlq", method="GET", params=params)
        assert len(got["messages"]) == found, params
    assert api(qstash, "GET", "/v2/workflows/dlq/nope").status_code == 404


@at_start
@both_frameworks
def test_resume_goes_on_from_the_failed_step_under_a_new_run_id(
    qstash: FakeQStash, make_app: Callable[[Journal], Any]
) -> None:
    journal = Journal()
    qstash.mount(APP, make_app(journal))
    run_id = failed_run(qstash, journal)
    (item,) = qstash.workflow_dlq

    journal.card_declined = False
    resumed = qstash.resume_run(item.dlq_id)
    qstash.tick()

    assert resumed.run_id != run_id
    assert resumed.state == "RUN_SUCCESS"
    # The step that had succeeded is kept, not run again; the failed one runs once more.
    assert journal.names(resumed.run_id) == ["charge"]
    assert [s.name for s in resumed.steps] == ["prepare", "charge"]
    assert resumed.json() == {"card": "4242"}
    assert resumed.resumed_from == item.dlq_id
    assert run_of(qstash, run_id).state == "RUN_FAILED"  # the failed run stays as it ended


@at_start
def test_restart_runs_every_step_again(qstash: FakeQStash, client: QStash) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    failed_run(qstash, journal)
    (item,) = qstash.workflow_dlq
    journal.card_declined = False

    answer = client.http.request(path=f"/v2/workflows/dlq/restart/{item.dlq_id}", method="POST")
    qstash.tick()

    restarted = run_of(qstash, answer["workflowRunId"])
    assert answer["workflowCreatedAt"] == restarted.created_at.timestamp() * 1000
    assert restarted.state == "RUN_SUCCESS"
    assert journal.names(restarted.run_id) == ["prepare", "charge"]
    assert restarted.json() == {"card": "4242"}


@at_start
def test_bulk_resume_acts_once_per_entry_and_bulk_delete_empties_the_dlq(
    qstash: FakeQStash, client: QStash
) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    first, second = failed_run(qstash, journal), failed_run(qstash, journal)
    journal.card_declined = False

    # The TypeScript client's resume({all: true}) sends count=100 alone.
    answer = client.http.request(
        path="/v2/workflows/dlq/resume", method="POST", params={"count": "100"}
    )
    again = client.http.request(path="/v2/workflows/dlq/resume", method="POST")
    qstash.tick()

    resumed = [run_of(qstash, r["workflowRunId"]) for r in answer["workflowRuns"]]
    assert [run.state for run in resumed] == ["RUN_SUCCESS", "RUN_SUCCESS"]
    assert again == {"workflowRuns": []}  # each entry is resumed once
    ids = ",".join(item.dlq_id for item in qstash.workflow_dlq)
    unknown = api(qstash, "POST", "/v2/workflows/dlq/restart", params={"dlqIds": "nope"})
    assert unknown.status_code == 404
    deleted = client.http.request(path="/v2/workflows/dlq", method="DELETE", params={"dlqIds": ids})
    assert deleted == {"deleted": 2}
    assert qstash.workflow_dlq == []
    assert qstash.dlq == []
    assert {first, second} == {run.run_id for run in qstash.runs if run.state == "RUN_FAILED"}


@at_start
def test_a_failed_failure_function_can_be_retried(qstash: FakeQStash, client: QStash) -> None:
    journal, received = Journal(), []  # type: list[dict[str, Any]]
    qstash.mount(APP, brittle_app(journal))
    qstash.mount(ALERTS, alerts_app([500], received))
    run_id = qstash.trigger(f"{APP}/brittle", {}, failure_url=f"{ALERTS}/alert", retries=0)
    qstash.advance("1h")
    (item,) = qstash.workflow_dlq
    assert item.failure_function_state == "CALLBACK_FAIL"
    assert len(received) == 1

    answer = client.http.request(path=f"/v2/workflows/dlq/callback/{item.dlq_id}", method="POST")
    qstash.tick()

    assert answer["workflowRunId"] == run_id
    assert qstash.workflow_dlq[0].failure_function_state == "CALLBACK_SUCCESS"
    assert len(received) == 2
    assert received[1]["workflowRunId"] == run_id
    # Only a failed call is retried: 400 now, saying why.
    refused = api(qstash, "POST", f"/v2/workflows/dlq/callback/{item.dlq_id}")
    assert refused.status_code == 400
    assert "CALLBACK_SUCCESS" in refused.json()["error"]
    with pytest.raises(ValueError, match="CALLBACK_FAIL"):
        qstash.retry_failure_function(item.dlq_id)
    cancel = api(qstash, "DELETE", f"/v2/workflows/dlq/callback/{item.dlq_id}")
    assert cancel.status_code == 400  # nothing in progress to cancel


def test_resume_overrides_and_bad_ids_are_clear(qstash: FakeQStash) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    failed_run(qstash, journal)
    (item,) = qstash.workflow_dlq

    with pytest.raises(ValueError, match="no failed workflow run has the DLQ id 'nope'"):
        qstash.resume_run("nope")
    with pytest.raises(ValueError, match="retries"):
        qstash.restart_run(item.dlq_id, retries=-1)
    bad = api(
        qstash,
        "POST",
        f"/v2/workflows/dlq/resume/{item.dlq_id}",
        headers={"Upstash-Retries": "many"},
    )
    assert bad.status_code == 400
    assert "Upstash-Retries" in bad.json()["error"]
    run = qstash.restart_run(item.dlq_id, headers={"Upstash-Label": "again,vip"})
    assert run.labels == ("again", "vip")


# -- run-wide settings ----------------------------------------------------------------------------
@at_start
def test_the_triggers_retries_and_failure_url_govern_every_step(qstash: FakeQStash) -> None:
    journal, received = Journal(), []  # type: list[dict[str, Any]]
    qstash.mount(APP, brittle_app(journal))
    qstash.mount(ALERTS, alerts_app([], received))

    run_id = qstash.trigger(f"{APP}/brittle", {}, retries=0, failure_url=f"{ALERTS}/alert")
    qstash.advance("1h")

    run = run_of(qstash, run_id)
    assert run.state == "RUN_FAILED"
    assert journal.names(run_id) == ["one", "two"]  # retries=0: the later step ran once
    assert [r["workflowRunId"] for r in received] == [run_id]  # failure URL called at step 2
    assert run.failure_function_state == "CALLBACK_SUCCESS"


@at_start
def test_trigger_endpoint_labels_filter_logs_dlq_and_cancel(
    qstash: FakeQStash, client: QStash
) -> None:
    journal, received = Journal(), []  # type: list[dict[str, Any]]
    qstash.mount(APP, brittle_app(journal))
    qstash.mount(ALERTS, alerts_app([], received))
    url = f"{APP}/brittle"

    answer = api(
        qstash,
        "POST",
        f"/v2/trigger/{url}",
        headers={
            "Upstash-Label": "shop,vip",
            "Upstash-Retries": "0",
            "Upstash-Failure-Callback": f"{ALERTS}/alert",
        },
        content=b'{"n": 1}',
    ).json()
    batch = api(
        qstash,
        "POST",
        "/v2/batch/trigger",
        json=[
            {
                "destination": url,
                "headers": {"Upstash-Label": "batch", "Upstash-Failure-Callback": ALERTS},
            },
            {"destination": url, "headers": {"Upstash-Workflow-RunId": answer["workflowRunId"]}},
        ],
    )
    qstash.advance("1h")

    assert batch.status_code == 201
    assert [b["deduplicated"] for b in batch.json()] == [False, True]
    labelled = run_of(qstash, answer["workflowRunId"])
    assert labelled.labels == ("shop", "vip")
    assert labelled.json() == {"n": 1}
    assert journal.names(labelled.run_id) == ["one", "two"]  # Upstash-Retries: 0 for all
    logs = client.http.request(path="/v2/workflows/logs", method="GET", params={"label": "vip"})
    assert [r["workflowRunId"] for r in logs["runs"]] == [labelled.run_id]
    assert logs["runs"][0]["label"] == "shop"
    assert logs["runs"][0]["labels"] == ["shop", "vip"]
    dlq = client.http.request(path="/v2/workflows/dlq", method="GET", params={"label": "vip"})
    assert [e["workflowRunId"] for e in dlq["messages"]] == [labelled.run_id]
    assert dlq["messages"][0]["labels"] == ["shop", "vip"]
    assert [r["workflowRunId"] for r in received] == [labelled.run_id]
    # A step message carries the run's labels too, shown as Upstash shows them.
    assert labelled.step("one").message.labels == ("shop", "vip")
    [failed] = [e for e in client.dlq.list().messages if e.dlq_id == labelled.dlq_id]
    shown = client.http.request(path=f"/v2/dlq/{failed.dlq_id}", method="GET")
    assert (shown["label"], shown["labels"]) == ("shop", ["shop", "vip"])


@at_start
def test_bulk_cancel_takes_the_documents_filters(qstash: FakeQStash, client: QStash) -> None:
    ids = [qstash.trigger(f"{APP}/a/{i}") for i in range(3)] + [qstash.trigger(f"{APP}/b")]

    def cancel(**params: str) -> Any:
        return client.http.request(path="/v2/workflows/runs", method="DELETE", params=params)

    # What the TypeScript client sends for cancel({urlStartingWith}) and cancel({all: true}).
    assert cancel(workflowUrl=f"{APP}/a/", count="2") == {"cancelled": 2}
    assert cancel(label="nope", count="100") == {"cancelled": 0}
    assert cancel(callerIp="10.0.0.1") == {"cancelled": 0}
    assert cancel(flowControlKey="k") == {"cancelled": 0}
    assert cancel(count="100") == {"cancelled": 2}
    assert [run_of(qstash, i).state for i in ids] == ["RUN_CANCELED"] * 4
    assert api(qstash, "DELETE", "/v2/workflows/runs", params={"count": "0"}).status_code == 400


# -- the logs' shape ------------------------------------------------------------------------------
@at_start
def test_logs_show_sleeps_as_text_step_headers_and_runs_by_pair(
    qstash: FakeQStash, client: QStash
) -> None:
    journal = Journal()
    journal.card_declined = False
    qstash.mount(APP, brittle_app(journal))
    run_id = qstash.trigger(f"{APP}/brittle", {}, headers={"X-Tenant": "acme"})
    other = qstash.trigger(f"{APP}/brittle", {})
    qstash.advance("1h")
    run = run_of(qstash, run_id)

    created = int(run.created_at.timestamp() * 1000)
    logs = client.http.request(
        path="/v2/workflows/logs",
        method="GET",
        params={"workflowRuns": f"{run_id}@{created},wfr_none@1", "state": "RUN_FAILED"},
    )
    (shown,) = logs["runs"]  # the pairs alone decide, the other filters are ignored
    assert shown["workflowRunId"] == run_id
    assert shown["workflowRunCreatedAt"] == created
    steps = {g["steps"][0]["stepName"]: g["steps"][0] for g in shown["steps"]}
    # A sleep has no result: a string all the same, as documented (the Python SDK sends
    # "null"; the TypeScript SDK sends none, shown "").
    assert steps["pause"]["out"] == "null"
    assert steps["pause"]["sleepFor"] == 10
    assert json.loads(steps["one"]["out"]) == "done"
    assert steps["one"]["headers"]["X-Tenant"] == ["acme"]
    assert steps["one"]["retries"] == 3
    assert steps["init"]["headers"]["X-Tenant"] == ["acme"]
    # No Upstash-Retry-Delay: QStash's default backoff, as an expression.
    assert steps["init"]["retryDelay"] == "min(86400000, exp(2.5 * (retried + 1)) * 1000)"
    assert other != run_id
    bad = api(qstash, "GET", "/v2/workflows/logs", params={"workflowRuns": "no-pair"})
    assert bad.status_code == 400


def test_logs_group_parallel_steps_as_upstash_does(qstash: FakeQStash) -> None:
    # The TypeScript SDK's parallel protocol on the wire: two plan steps (targetStep), then
    # the two results, published for the run as its serve() does.
    qstash.mount("https://ts.test", lambda request: httpx.Response(200))
    run_id = qstash.trigger("https://ts.test/wf", {})
    qstash.tick()

    def publish(step: dict[str, Any]) -> None:
        response = api(
            qstash,
            "POST",
            "/v2/publish/https://ts.test/wf",
            headers={
                "Upstash-Workflow-RunId": run_id,
                "Upstash-Workflow-Init": "false",
                "Upstash-Workflow-Url": "https://ts.test/wf",
                "Upstash-Forward-Upstash-Workflow-Sdk-Version": "1",
            },
            content=json.dumps(step).encode(),
        )
        assert response.status_code == 200, response.text

    for target in (1, 2):
        publish(
            {
                "stepId": 0,
                "stepName": f"p{target}",
                "stepType": "Run",
                "concurrent": 2,
                "targetStep": target,
            }
        )
    publish({"stepId": 2, "stepName": "p2", "stepType": "Run", "concurrent": 2, "out": '"b"'})
    run = run_of(qstash, run_id)

    (group,) = run.step_groups
    assert group.type == "parallel"
    assert [(s.name, s.is_plan) for s in group.steps] == [("p1", True), ("p2", False)]
    publish({"stepId": 1, "stepName": "p1", "stepType": "Run", "concurrent": 2, "out": '"a"'})
    logs = api(qstash, "GET", "/v2/workflows/logs", params={"workflowRunId": run_id}).json()
    (parallel,) = [g for g in logs["runs"][0]["steps"] if g["type"] == "parallel"]
    assert [(s["stepId"], s["out"], s["state"]) for s in parallel["steps"]] == [
        (1, '"a"', "STEP_SUCCESS"),
        (2, '"b"', "STEP_SUCCESS"),
    ]
    assert [s.name for s in run.steps] == ["p2", "p1"]  # plan steps are not steps


# -- smaller answers ------------------------------------------------------------------------------
def test_an_ended_run_reported_ended_again_gets_no_error(qstash: FakeQStash) -> None:
    run_id = qstash.trigger(f"{APP}/done")
    first = api(qstash, "DELETE", f"/v2/workflows/runs/{run_id}?cancel=false", content=b"ok")
    second = api(qstash, "DELETE", f"/v2/workflows/runs/{run_id}?cancel=false", content=b"x")

    assert (first.status_code, second.status_code) == (200, 200)
    assert run_of(qstash, run_id).state == "RUN_SUCCESS"
    assert run_of(qstash, run_id).response == "ok"
    assert api(qstash, "DELETE", f"/v2/workflows/runs/{run_id}").status_code == 404
    assert api(qstash, "DELETE", "/v2/workflows/runs/wfr_none?cancel=false").status_code == 404


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/v2/workflows/logs"),
        ("POST", "/v2/workflows/runs"),
        ("POST", "/v2/waiters/paid"),
        ("PUT", "/v2/workflows/dlq/resume/1-1"),
        ("GET", "/v2/trigger/https://shop.test/x"),
    ],
)
def test_a_wrong_method_is_405(qstash: FakeQStash, method: str, path: str) -> None:
    response = api(qstash, method, path)
    assert response.status_code == 405
    assert "method not allowed" in response.json()["error"]


def test_comma_labels_are_several_labels(qstash: FakeQStash, client: QStash) -> None:
    qstash.mount(APP, lambda request: httpx.Response(500))
    client.message.publish_json(url=f"{APP}/x", body={}, label="a,b", retries=0)
    qstash.tick()

    (message,) = qstash.messages
    assert message.labels == ("a", "b")
    (entry,) = client.dlq.list().messages
    shown = client.http.request(path=f"/v2/dlq/{entry.dlq_id}", method="GET")
    assert (entry.label, shown["labels"]) == ("a", ["a", "b"])
    assert [m.message_id for m in client.dlq.list(filter={"label": "b"}).messages] == [
        message.message_id
    ]
    with pytest.raises(QStashError):
        client.http.request(path="/v2/workflows/dlq/nope", method="DELETE")


@at_start
def test_a_refused_step_publish_ends_the_run_and_is_reported(qstash: FakeQStash) -> None:
    app = FastAPI()
    serve = FastAPIServe(app)

    @serve.post("/far")
    async def far(context: AsyncWorkflowContext[Any]) -> None:
        await context.run("first", lambda: "ok")
        # A sleep past the year 9999: QStash refuses the step's publish with 400.
        await context.sleep_until("never", 253_402_300_800 + 86_400)

    qstash.mount(APP, app)
    run_id = qstash.trigger(f"{APP}/far", {})
    qstash.advance("1h")

    run = run_of(qstash, run_id)
    assert run.state == "RUN_FAILED"  # not left RUN_STARTED with nothing pending
    (refusal,) = run.refused
    assert refusal.startswith("POST /v2/batch answered 400")  # the SDK publishes steps so
    assert "Upstash-Not-Before" in refusal
    assert not [m for m in run.messages if not m.done]
    report = section(qstash.store, len(qstash.deliveries))
    assert report is not None
    assert "a step publish of this run was refused: POST /v2/batch" in report


@at_start
def test_a_resume_keeps_the_runs_labels_and_its_retries_override_the_triggers(
    qstash: FakeQStash,
) -> None:
    journal, received = Journal(), []  # type: list[dict[str, Any]]
    qstash.mount(APP, brittle_app(journal))
    qstash.mount(ALERTS, alerts_app([], received))
    run_id = qstash.trigger(
        f"{APP}/brittle", {}, retries=0, label="shop,vip", failure_url=f"{ALERTS}/alert"
    )
    qstash.advance("1h")
    (item,) = qstash.workflow_dlq
    assert item.labels == ("shop", "vip")

    resumed = qstash.resume_run(item.dlq_id, retries=1)  # still broken: two tries this time
    qstash.advance("1h")

    assert journal.names(run_id) == ["one", "two"]
    assert journal.names(resumed.run_id) == ["two", "two"]
    assert resumed.state == "RUN_FAILED"
    assert resumed.labels == ("shop", "vip")
    # The resumed run's failure is its own: its failure call names it, not the first run.
    assert [r["workflowRunId"] for r in received] == [run_id, resumed.run_id]
    assert resumed.failure_function_state == "CALLBACK_SUCCESS"
    assert run_of(qstash, run_id).failure_call is not resumed.failure_call
    assert [i.run_id for i in qstash.workflow_dlq] == [run_id, resumed.run_id]
    with pytest.raises(ValueError, match="invalid label"):
        qstash.trigger(f"{APP}/brittle", label="")


@at_start
def test_a_triggers_retry_delay_flow_control_and_timeout_hold_for_later_steps(
    qstash: FakeQStash, client: QStash
) -> None:
    journal = Journal()
    qstash.mount(APP, brittle_app(journal))
    url = f"{APP}/brittle"

    answer = api(
        qstash,
        "POST",
        f"/v2/trigger/{url}",
        headers={
            "Upstash-Retries": "2",
            "Upstash-Retry-Delay": "5000",
            "Upstash-Flow-Control-Key": "tenant-1",
            "Upstash-Flow-Control-Value": "parallelism=1",
            "Upstash-Timeout": "30s",
            "Upstash-Failure-Callback": f"{ALERTS}/alert",
        },
    ).json()
    qstash.mount(ALERTS, alerts_app([], []))
    qstash.advance("1h")

    run = run_of(qstash, answer["workflowRunId"])
    failing = run.messages[-2]  # the step "two" runs in (the failure call is last)
    assert [d.retried for d in failing.deliveries] == [0, 1, 2]
    gaps = [(b.at - a.at).total_seconds() for a, b in itertools.pairwise(failing.deliveries)]
    assert gaps == [5.0, 5.0]  # Upstash-Retry-Delay: 5000 (ms), for this later step too
    assert failing.flow_control is not None
    assert failing.flow_control.key == "tenant-1"
    assert failing.timeout_ms == 30_000
    assert run.flow_control_key == "tenant-1"
    logs = client.http.request(
        path="/v2/workflows/logs", method="GET", params={"flowControlKey": "tenant-1"}
    )
    assert [r["workflowRunId"] for r in logs["runs"]] == [run.run_id]
    assert logs["runs"][0]["flowControlKey"] == "tenant-1"
    [entry] = client.http.request(path="/v2/workflows/dlq", method="GET")["messages"]
    assert entry["flowControlKey"] == "tenant-1"
    steps = [s for g in logs["runs"][0]["steps"] for s in g["steps"]]
    assert {s.get("retryDelay") for s in steps if s["stepName"] == "one"} == {"5000"}


@pytest.mark.anyio
async def test_the_workflow_dlq_through_the_async_client(
    qstash: FakeQStash, aclient: AsyncQStash
) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    run_id = qstash.trigger(FAILS, {"card": "4242"})
    await qstash.aadvance("1d")

    listed = await aclient.http.request(path="/v2/workflows/dlq", method="GET")
    [entry] = listed["messages"]
    journal.card_declined = False
    answer = await aclient.http.request(
        path="/v2/workflows/dlq/resume", method="POST", params={"dlqIds": entry["dlqId"]}
    )
    await qstash.atick()

    [resumed] = answer["workflowRuns"]
    assert entry["workflowRunId"] == run_id
    assert run_of(qstash, resumed["workflowRunId"]).state == "RUN_SUCCESS"
    deleted = await aclient.http.request(
        path="/v2/workflows/dlq", method="DELETE", params={"workflowRunId": run_id}
    )
    assert deleted == {"deleted": 1}


@at_start
def test_a_failure_function_call_in_progress_can_be_cancelled(qstash: FakeQStash) -> None:
    journal, received = Journal(), []  # type: list[dict[str, Any]]
    qstash.mount(APP, brittle_app(journal))
    qstash.mount(ALERTS, alerts_app([500, 500], received))
    qstash.trigger(f"{APP}/brittle", {}, retries=1, failure_url=f"{ALERTS}/alert")
    qstash.advance("25s")  # "two" failed twice (at 10 s and 22 s); its failure call once
    (item,) = qstash.workflow_dlq
    assert item.failure_function_state == "CALLBACK_INPROGRESS"

    cancel = api(qstash, "DELETE", f"/v2/workflows/dlq/callback/{item.dlq_id}")
    qstash.advance("1h")

    assert cancel.status_code == 302
    assert item.failure_function_state == "CALLBACK_CANCELED"
    assert len(received) == 1  # the retry it had planned never came
    again = api(qstash, "DELETE", f"/v2/workflows/dlq/callback/{item.dlq_id}")
    assert again.status_code == 400
    assert "CALLBACK_CANCELED" in again.json()["error"]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "says"),
    [
        ("POST", "/v2/trigger/not-a-url", {}, "invalid workflow url"),
        ("POST", f"/v2/trigger/{APP}/x", {"headers": {"Upstash-Retries": "-1"}}, "Retries"),
        ("POST", "/v2/batch/trigger", {"content": b"{"}, "invalid JSON"),
        ("POST", "/v2/batch/trigger", {"json": [{"body": "x"}]}, "destination at [0]"),
        (
            "POST",
            "/v2/batch/trigger",
            {
                "json": [
                    {"destination": APP},
                    {"destination": APP, "headers": {"Upstash-Delay": "x"}},
                ]
            },
            "headers at [1]",
        ),
        ("GET", "/v2/workflows/dlq?count=many", {}, "count"),
        ("GET", "/v2/workflows/dlq?cursor=abc", {}, "cursor"),
        ("GET", "/v2/workflows/dlq?source=qstash", {}, "source"),
        ("GET", "/v2/workflows/dlq?nope=1", {}, "unknown workflow DLQ filter 'nope'"),
        ("GET", "/v2/workflows/logs?workflowRuns=x@y", {}, "workflowRuns"),
        ("DELETE", "/v2/workflows/runs?count=-2", {}, "count"),
        ("POST", "/v2/workflows/dlq/resume?dlqIds=1-1", {}, "DLQ message 1-1 not found"),
    ],
)
def test_bad_requests_get_a_clear_4xx_and_start_nothing(
    qstash: FakeQStash, method: str, path: str, kwargs: dict[str, Any], says: str
) -> None:
    response = api(qstash, method, path, **kwargs)

    assert 400 <= response.status_code < 500, response.text
    assert says in response.json()["error"]
    assert list(qstash.runs) == []


def test_a_resume_merges_its_overrides_as_a_dlq_retry_does() -> None:
    # One merge: what a request names replaces the stored value; a flow-control key alone
    # keeps the limits; a delay is the published message's, not the run's settings.
    from pytest_qstash.engine.run_settings import RESUME_OVERRIDES, RunSettings
    from pytest_qstash.wire.publish_headers import parse_options, read_overrides

    stored = parse_options(
        {
            "Upstash-Retries": "5",
            "Upstash-Label": "a",
            "Upstash-Flow-Control-Key": "k",
            "Upstash-Flow-Control-Value": "rate=3, period=60",
            "Upstash-Workflow-Feature-Set": "WF_TriggerOnConfig",
        }
    )
    given = read_overrides(
        {"Upstash-Retries": "0", "Upstash-Flow-Control-Key": "other", "Upstash-Delay": "10s"}, 0
    )
    assert given is not None
    settings = RunSettings.of(stored).overridden(given, run_wide=True)
    message = stored.overridden(given, only=RESUME_OVERRIDES)
    for merged in (settings.options, message):
        assert merged.retries == 0
        assert merged.label == "a"
        fc = merged.flow_control
        assert fc is not None
        assert (fc.key, fc.rate, fc.period) == ("other", 3, 60)
    assert message.delay_ms == 10_000
    assert settings.options.delay_ms is None
