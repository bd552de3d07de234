"""Upstash Workflow runs end to end: real ``upstash_workflow`` apps (FastAPI and Flask)
driven by the fake on the virtual clock, each delivery verified by the SDK's own Receiver."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

import pytest
from qstash import AsyncQStash, QStash, Receiver
from qstash.errors import QStashError
from workflow_apps import (
    STOCK_URL,
    Journal,
    async_bare_workflow_handler,
    bare_workflow_handler,
    fastapi_workflow_app,
    flask_workflow_app,
    stock_app,
)

from pytest_qstash import Delivery, FakeQStash, UnroutedDeliveryError, WorkflowRun, WorkflowStep

APP = "https://shop.test"
ORDER_URL = f"{APP}/order"
START = "2026-01-01T00:00:00Z"

at_start = pytest.mark.qstash(start=START)
both_frameworks = pytest.mark.parametrize(
    "make_app", [fastapi_workflow_app, flask_workflow_app], ids=["fastapi", "flask"]
)


def run_of(qstash: FakeQStash, run_id: str) -> WorkflowRun:
    (run,) = [run for run in qstash.runs if run.run_id == run_id]
    return run


def to_route(deliveries: list[Delivery], url: str = ORDER_URL) -> list[Delivery]:
    return [d for d in deliveries if d.url == url]


def order_payload(qstash: FakeQStash) -> dict[str, Any]:
    return {"order": 7, "sku": "A-1", "qty": 2, "ship_at": int(qstash.now.timestamp()) + 3600}


def seconds_after_start(qstash: FakeQStash, seconds: float) -> Any:
    return qstash.runs[0].created_at + timedelta(seconds=seconds)


# -- a whole run --------------------------------------------------------------------------------
@at_start
@both_frameworks
def test_triggered_run_goes_through_every_step_kind(
    qstash: FakeQStash, make_app: Callable[[Journal], Any]
) -> None:
    journal = Journal()
    qstash.mount(APP, make_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal))
    payload = order_payload(qstash)

    run_id = qstash.trigger(ORDER_URL, payload, headers={"X-Tenant": "acme"})

    # The run exists at once and its first delivery is due now.
    run = run_of(qstash, run_id)
    assert run.state == "RUN_STARTED"
    assert run.url == ORDER_URL
    assert qstash.next_due() == qstash.now

    qstash.advance("2h")

    assert run.state == "RUN_SUCCESS"
    assert [(s.name, s.type) for s in run.steps] == [
        ("validate", "Run"),
        ("cool-down", "SleepFor"),
        ("reserve", "Call"),
        ("ship", "SleepUntil"),
        ("confirm", "Run"),
    ]
    validate, cool_down, reserve, ship, confirm = run.steps
    assert validate.out == {"order": 7, "valid": True}
    assert cool_down.out is None
    assert cool_down.sleep_for == 30
    assert reserve.out["status"] == 200
    assert json.loads(reserve.out["body"]) == {"reserved": 2, "sku": "A-1", "key": "stock-secret"}
    assert ship.sleep_until == payload["ship_at"]
    assert confirm.out == {"order": 7, "reserved": 2}
    assert run.step("confirm").out == confirm.out

    # Virtual time: the sleep held the run 30 s, sleep_until until ship_at.
    start = run.created_at
    assert cool_down.created_at == start
    assert cool_down.resumes_at == start + timedelta(seconds=30)
    assert reserve.created_at == start + timedelta(seconds=30)
    assert ship.resumes_at.timestamp() == payload["ship_at"]
    assert confirm.created_at.timestamp() == payload["ship_at"]
    assert run.completed_at is not None
    assert run.completed_at.timestamp() == payload["ship_at"]

    # Each step function ran once, under the run id trigger returned, with the payload and
    # the trigger's header; the SDK's replays ran nothing twice.
    assert journal.names(run_id) == ["validate", "confirm"]
    assert journal.payloads[run_id] == payload
    assert {k.lower(): v for k, v in journal.headers[run_id].items()}["x-tenant"] == "acme"
    assert journal.call_results[run_id] == (
        200,
        {"reserved": 2, "sku": "A-1", "key": "stock-secret"},
    )

    # The third party got the call as the app made it.
    ((method, path, headers, body),) = journal.stock_requests
    assert (method, path, headers["x-api-key"]) == ("POST", "/reserve", "stock-secret")
    assert json.loads(body) == {"sku": "A-1", "qty": 2}

    # Every delivery to the route was verified by the SDK's Receiver and accepted: a bad
    # signature answers 500 there.
    route_deliveries = to_route(qstash.deliveries)
    assert len(route_deliveries) == 7  # init + 5 step results + the call's callback
    assert all(d.status == 200 for d in route_deliveries), route_deliveries
    assert all(m.workflow_run_id == run_id for m in qstash.messages)
    assert run.messages == qstash.messages


@at_start
def test_step_deliveries_carry_the_runs_steps_so_far(qstash: FakeQStash) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal))
    run_id = qstash.trigger(ORDER_URL, order_payload(qstash))
    qstash.advance("2h")
    run = run_of(qstash, run_id)

    steps_deliveries = [d for d in to_route(qstash.deliveries) if d.body.startswith("[")]
    assert len(steps_deliveries) == 6  # init + one per step result
    for delivery in steps_deliveries:
        entries = delivery.json()
        # Ends at the message delivered, and lists the run's messages in publish order.
        assert entries[-1]["messageId"] == delivery.message_id
        ids = [m.message_id for m in run.messages]
        assert [e["messageId"] for e in entries] == ids[: ids.index(delivery.message_id) + 1]
        for entry, message in zip(entries, run.messages, strict=False):
            assert base64.b64decode(entry["body"], validate=True) == message.content
        assert delivery.headers["Upstash-Workflow-Sdk-Version"] == "1"
        assert delivery.headers["Upstash-Workflow-RunId"] == run_id
        assert delivery.headers.get_list("Upstash-Signature") == [
            delivery.headers["Upstash-Signature"]
        ]
    first = steps_deliveries[0].json()
    assert [e["callType"] for e in first] == ["step"]
    assert json.loads(base64.b64decode(first[0]["body"])) == run.json()
    last = steps_deliveries[-1].json()
    assert [e["callType"] for e in last] == [
        "step",
        "step",
        "step",
        "toCallback",
        "fromCallback",
        "step",
        "step",
        "step",
    ]

    # The call's callback reaches the route raw, without the protocol version header.
    (callback,) = [d for d in to_route(qstash.deliveries) if not d.body.startswith("[")]
    assert "Upstash-Workflow-Sdk-Version" not in callback.headers
    assert callback.headers["Upstash-Workflow-Callback"] == "true"
    assert callback.headers["Upstash-Workflow-RunId"] == run_id
    assert callback.json()["status"] == 200
    # The third party sees neither the run nor the app's forwarded request headers.
    (call,) = [d for d in qstash.deliveries if d.url.startswith(STOCK_URL)]
    assert "Upstash-Workflow-RunId" not in call.headers
    assert "Upstash-Workflow-Sdk-Version" not in call.headers


@at_start
def test_step_deliveries_keep_their_own_content_type(qstash: FakeQStash) -> None:
    qstash.mount(APP, fastapi_workflow_app(Journal()))
    # A JSON text sent as text/plain: the SDK still parses it, and forwards the delivery's
    # Content-Type with each step it publishes.
    run_id = qstash.trigger(f"{APP}/many", '{"steps": 2}', headers={"Content-Type": "text/plain"})
    qstash.tick()

    assert run_of(qstash, run_id).state == "RUN_SUCCESS"
    content_types = [d.headers["content-type"] for d in qstash.deliveries]
    assert content_types == ["text/plain", "application/json", "application/json"]


# -- three ways to start a run ------------------------------------------------------------------
@at_start
@both_frameworks
def test_publishing_to_the_route_starts_a_run_the_sdk_names(
    qstash: FakeQStash, client: QStash, make_app: Callable[[Journal], Any]
) -> None:
    journal = Journal()
    qstash.mount(APP, make_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal))
    payload = order_payload(qstash)

    published = client.message.publish_json(url=ORDER_URL, body=payload)
    (first,) = qstash.tick()[:1]

    # An ordinary message: the SDK took it as a first invocation, minted a run id and
    # published the run's init message, which the same tick delivered.
    assert first.message_id == published.message_id
    run_id = json.loads(first.response_body)["workflowRunId"]
    assert run_id.startswith("wfr_")
    run = run_of(qstash, run_id)
    assert run.json() == payload
    starter = next(m for m in qstash.messages if m.message_id == published.message_id)
    assert starter.workflow_run_id is None

    qstash.advance("2h")
    assert run.state == "RUN_SUCCESS"
    assert [s.name for s in run.steps] == ["validate", "cool-down", "reserve", "ship", "confirm"]
    assert journal.payloads[run_id] == payload
    assert journal.names(run_id) == ["validate", "confirm"]


@at_start
@pytest.mark.asyncio
async def test_async_run_on_the_test_loop(qstash: FakeQStash, aclient: AsyncQStash) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal))

    triggered = qstash.trigger(ORDER_URL, order_payload(qstash))
    await aclient.message.publish_json(url=ORDER_URL, body=order_payload(qstash))
    await qstash.atick()
    await qstash.aadvance("2h")

    assert len(qstash.runs) == 2
    assert qstash.runs[0].run_id == triggered
    for run in qstash.runs:
        assert run.state == "RUN_SUCCESS"
        assert [s.out for s in run.steps][-1] == {"order": 7, "reserved": 2}
        assert journal.names(run.run_id) == ["validate", "confirm"]
    assert all(d.status == 200 for d in to_route(qstash.deliveries))


@at_start
@pytest.mark.parametrize(
    "make_handler", [bare_workflow_handler, async_bare_workflow_handler], ids=["sync", "async"]
)
def test_bare_serve_handlers(qstash: FakeQStash, make_handler: Callable[[Journal], Any]) -> None:
    journal = Journal()
    qstash.mount(APP, make_handler(journal))

    run_id = qstash.trigger(f"{APP}/sum", {"a": 2, "b": 3})
    qstash.tick()
    run = run_of(qstash, run_id)
    assert [s.name for s in run.steps] == ["add", "nap"]
    assert qstash.next_due() == run.created_at + timedelta(minutes=1)

    qstash.advance("1m")

    assert run.state == "RUN_SUCCESS"
    assert [(s.name, s.out) for s in run.steps] == [("add", 5), ("nap", None), ("double", 10)]
    assert run.step("nap").sleep_for == "1m"
    assert run.completed_at == run.created_at + timedelta(minutes=1)
    assert journal.names(run_id) == ["add", "double"]
    assert all(d.status == 200 for d in qstash.deliveries)


@pytest.mark.asyncio
@at_start
async def test_async_bare_serve_on_the_test_loop(qstash: FakeQStash) -> None:
    journal = Journal()
    qstash.mount(APP, async_bare_workflow_handler(journal))

    run_id = qstash.trigger(f"{APP}/sum", {"a": 1, "b": 1})
    await qstash.aadvance("1h")

    run = run_of(qstash, run_id)
    assert run.state == "RUN_SUCCESS"
    assert [s.out for s in run.steps] == [2, None, 4]


@at_start
@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_plain_post_to_the_route_is_refused_when_signing_keys_are_set(
    qstash: FakeQStash,
) -> None:
    from fastapi.testclient import TestClient

    app = fastapi_workflow_app(Journal())
    with TestClient(app) as http:
        response = http.post("/order", json={"order": 1})

    assert response.status_code == 500
    assert "Failed to verify" in response.json()["message"]
    assert qstash.runs == []


@at_start
def test_deliveries_fail_in_an_app_verifying_other_keys(qstash: FakeQStash) -> None:
    other = Receiver("sig_someOtherAccountsCurrentKey00", "sig_someOtherAccountsNextKey00000")
    qstash.mount(APP, fastapi_workflow_app(Journal(), receiver=other))
    run_id = qstash.trigger(ORDER_URL, {"order": 1})

    (delivery,) = qstash.tick()

    assert delivery.status == 500
    assert "Failed to verify" in json.loads(delivery.response_body)["message"]
    assert run_of(qstash, run_id).steps == []


# -- failures -----------------------------------------------------------------------------------
@at_start
@both_frameworks
def test_a_step_that_keeps_failing_fails_the_run(
    qstash: FakeQStash, make_app: Callable[[Journal], Any]
) -> None:
    journal = Journal()
    qstash.mount(APP, make_app(journal))
    url = f"{APP}/fails"

    run_id = qstash.trigger(url, {"card": "4242"})
    qstash.advance("1d")

    run = run_of(qstash, run_id)
    assert run.state == "RUN_FAILED"
    assert run.completed_at is not None
    assert [s.name for s in run.steps] == ["prepare"]
    # retries=1 in serve(): the failing step ran twice, then its message was dead-lettered.
    assert journal.names(run_id) == ["prepare", "charge", "charge"]
    (entry,) = qstash.dlq
    assert entry.workflow_run_id == run_id
    assert entry.dlq_id == run.dlq_id
    assert entry.response_status == 500
    assert entry.retried == 1
    # QStash called the failure function with the run, the initial payload and the error.
    assert journal.failures == [(run_id, 500, "card declined", {"card": "4242"})]
    assert run.failure_function_state == "CALLBACK_SUCCESS"
    assert run.failure_call is not None
    failure_body = run.failure_call.json()
    assert failure_body["workflowRunId"] == run_id
    assert failure_body["dlqId"] == entry.dlq_id
    assert json.loads(base64.b64decode(failure_body["sourceBody"])) == {"card": "4242"}


@at_start
@pytest.mark.parametrize(
    "failure_url", [False, None, f"{APP}/fails"], ids=["none", "default", "failure_url"]
)
def test_a_triggered_run_failing_at_its_first_step(
    qstash: FakeQStash, failure_url: str | Literal[False] | None
) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))

    run_id = qstash.trigger(
        f"{APP}/fails",
        {"fail_first": True},
        headers={"X-Tenant": "acme"},
        retries=1,
        failure_url=failure_url,
    )
    qstash.advance("1d")

    run = run_of(qstash, run_id)
    assert run.state == "RUN_FAILED"
    assert run.steps == []
    assert journal.names(run_id) == ["prepare", "prepare"]  # trigger's retries=1
    (entry,) = qstash.dlq
    assert entry.message is run.messages[0]  # the init message
    # The first delivery's failure callback is the trigger's to give (by default the
    # workflow URL, as the workflow client sets it): the app's own failure URL reaches QStash
    # only with the steps it publishes.
    if failure_url is False:
        assert journal.failures == []
        assert run.failure_function_state is None
    else:
        assert journal.failures == [(run_id, 500, "no stock", {"fail_first": True})]
        assert run.failure_function_state == "CALLBACK_SUCCESS"
        # The trigger's headers reach the failure function too, as the workflow client sends.
        assert journal.failure_headers[run_id]["x-tenant"] == "acme"


@at_start
def test_a_failing_third_party_call_comes_back_as_a_result(qstash: FakeQStash) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal))

    run_id = qstash.trigger(f"{APP}/flaky")
    qstash.advance("1h")

    run = run_of(qstash, run_id)
    # The call was retried once (call retries=1); its last answer became the step's result.
    assert [r[1] for r in journal.stock_requests] == ["/down", "/down"]
    assert journal.call_results[run_id] == (503, {"error": "maintenance"})
    assert run.state == "RUN_SUCCESS"
    assert [(s.name, s.type) for s in run.steps] == [("lookup", "Call"), ("after", "Run")]
    assert run.step("after").out == 503
    # The call message ran out of retries, but a failed call is an ordinary result to the run
    # ("treated as successful"): nothing is dead-lettered for a run that succeeded.
    [call] = [m for m in qstash.messages if m.url == f"{STOCK_URL}/down"]
    assert call.state == "FAILED"
    assert qstash.dlq == []
    assert run.dlq_id is None


# -- runs through the REST API ------------------------------------------------------------------
@at_start
@pytest.mark.parametrize("query", ["?cancel=true", ""], ids=["cancel=true", "no query"])
def test_cancelling_a_run_drops_what_it_still_owes(
    qstash: FakeQStash, client: QStash, query: str
) -> None:
    # Upstash's "Cancel Workflow Run" is the DELETE without a query; only the SDK's own
    # "the route function returned" sends cancel=false.
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal))
    run_id = qstash.trigger(ORDER_URL, order_payload(qstash))
    qstash.tick()  # validate ran; the 30 s sleep is pending
    run = run_of(qstash, run_id)
    sleeping = run.step("cool-down").message
    assert sleeping.state == "CREATED"

    client.http.request(
        path=f"/v2/workflows/runs/{run_id}{query}", method="DELETE", parse_response=False
    )

    assert run.state == "RUN_CANCELED"
    assert run.completed_at == qstash.now
    assert sleeping.state == "CANCELED"
    assert qstash.advance("1d") == []
    # An ended run takes no more steps, and cannot be ended again.
    step = {"destination": ORDER_URL, "headers": {"Upstash-Workflow-RunId": run_id}, "body": "{}"}
    with pytest.raises(QStashError, match="status: 400"):
        client.http.request(path="/v2/batch", method="POST", body=json.dumps([step]))
    with pytest.raises(QStashError, match=r"status: 404.*not found with the given id"):
        client.http.request(
            path=f"/v2/workflows/runs/{run_id}?cancel=true", method="DELETE", parse_response=False
        )


def test_unknown_runs_are_not_found(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match="status: 404"):
        client.http.request(
            path="/v2/workflows/runs/wfr_nope?cancel=false", method="DELETE", parse_response=False
        )
    step = {
        "destination": ORDER_URL,
        "headers": {"Upstash-Workflow-RunId": "wfr_nope", "Upstash-Workflow-Init": "false"},
        "body": "{}",
    }
    with pytest.raises(QStashError, match="status: 404"):
        client.http.request(path="/v2/batch", method="POST", body=json.dumps([step]))
    assert qstash.messages == []


def test_an_init_for_an_existing_run_is_deduplicated(qstash: FakeQStash, client: QStash) -> None:
    run_id = qstash.trigger(ORDER_URL, {"order": 1})
    init = {
        "destination": ORDER_URL,
        "headers": {"Upstash-Workflow-RunId": run_id, "Upstash-Workflow-Init": "true"},
        "body": "{}",
    }

    (answer,) = client.http.request(path="/v2/batch", method="POST", body=json.dumps([init]))

    assert answer == {"messageId": qstash.runs[0].messages[0].message_id, "deduplicated": True}
    assert len(qstash.runs) == 1
    assert len(qstash.messages) == 1
    with pytest.raises(ValueError, match="already exists"):
        qstash.trigger(ORDER_URL, run_id=run_id)


@at_start
def test_bulk_cancel_by_url(qstash: FakeQStash, client: QStash) -> None:
    qstash.mount(APP, fastapi_workflow_app(Journal()))
    qstash.trigger(ORDER_URL, {"order": 1})
    qstash.trigger(ORDER_URL, {"order": 2})
    other = qstash.trigger(f"{APP}/many", {"steps": 1})

    answer = client.http.request(
        path="/v2/workflows/runs", method="DELETE", params={"workflowUrl": ORDER_URL}
    )

    assert answer == {"cancelled": 2}
    assert [r.state for r in qstash.runs] == ["RUN_CANCELED", "RUN_CANCELED", "RUN_STARTED"]
    qstash.tick()
    assert run_of(qstash, other).state == "RUN_SUCCESS"
    assert [d.url for d in qstash.deliveries] == [f"{APP}/many"] * 2


@at_start
def test_workflow_logs_list_runs_and_their_steps(qstash: FakeQStash, client: QStash) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal))
    done = qstash.trigger(ORDER_URL, order_payload(qstash))
    qstash.advance("2h")
    pending = qstash.trigger(f"{APP}/many", {"steps": 3})

    logs = client.http.request(path="/v2/workflows/logs", method="GET")
    assert [r["workflowRunId"] for r in logs["runs"]] == [pending, done]
    finished = logs["runs"][1]
    assert finished["workflowState"] == "RUN_SUCCESS"
    assert finished["workflowRunCompletedAt"] == int(qstash.now.timestamp() * 1000) - 3600_000
    names = [group["steps"][0]["stepName"] for group in finished["steps"]]
    assert names == ["init", "validate", "cool-down", "reserve", "ship", "confirm"]
    assert logs["runs"][0]["steps"][-1]["type"] == "next"

    only = client.http.request(
        path="/v2/workflows/logs", method="GET", params={"state": "RUN_STARTED"}
    )
    assert [r["workflowRunId"] for r in only["runs"]] == [pending]


# -- notify: no Python run waits (the TypeScript SDK waits: test_waiters.py) --------------------
def test_notify_reaches_no_one(qstash: FakeQStash, client: QStash) -> None:
    assert qstash.notify("order-paid", {"amount": 10}) == []
    assert qstash.notify("order-paid") == []
    assert client.http.request(path="/v2/notify/order-paid", method="POST", body="{}") == []
    assert client.http.request(path="/v2/waiters/order-paid", method="GET") == []

    run_id = qstash.trigger(ORDER_URL, {"order": 1})
    saved = client.http.request(path=f"/v2/notify/{run_id}/order-paid", method="POST", body="x")
    assert saved["workflowRunId"] == run_id
    with pytest.raises(QStashError, match="status: 400"):
        client.http.request(path="/v2/notify/wfr_nope/order-paid", method="POST", body="x")
    # A wait names its run in Upstash-Workflow-RunId: without one, there is nothing to resume.
    with pytest.raises(QStashError, match=r"status: 400.*Invalid workflow run ID"):
        client.http.request(path="/v2/wait/order-paid", method="POST", body="{}")


# -- scale --------------------------------------------------------------------------------------
@at_start
def test_a_fifty_step_run(qstash: FakeQStash) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))

    run_id = qstash.trigger(f"{APP}/many", {"steps": 50})
    qstash.tick()

    run = run_of(qstash, run_id)
    assert run.state == "RUN_SUCCESS"
    assert [s.out for s in run.steps] == [i * i for i in range(50)]
    assert all(isinstance(s, WorkflowStep) for s in run.steps)
    assert journal.names(run_id) == [f"step-{i}" for i in range(50)]
    deliveries = to_route(qstash.deliveries, f"{APP}/many")
    assert len(deliveries) == 51
    assert len(deliveries[-1].json()) == 51


@at_start
def test_an_unmocked_third_party_names_the_call_and_the_run(qstash: FakeQStash) -> None:
    # The commonest slip in a workflow test: the external API of a context.call is not mocked.
    qstash.mount(APP, fastapi_workflow_app(Journal()))
    run_id = qstash.trigger(ORDER_URL, order_payload(qstash))

    with pytest.raises(UnroutedDeliveryError) as info:
        qstash.advance("1h")

    assert f"the context.call 'reserve' of workflow run {run_id}" in str(info.value)
    assert f"{STOCK_URL}/reserve" in str(info.value)


def test_trigger_refuses_headers_that_are_not_a_mapping(qstash: FakeQStash) -> None:
    with pytest.raises(TypeError, match="expected a mapping"):
        qstash.trigger(ORDER_URL, headers="X-Tenant: acme")  # type: ignore[arg-type]
    assert qstash.runs == []


@at_start
def test_drain_runs_a_workflow_to_its_end(qstash: FakeQStash) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal))
    payload = order_payload(qstash)
    run_id = qstash.trigger(ORDER_URL, payload)

    qstash.drain()

    run = run_of(qstash, run_id)
    assert run.state == "RUN_SUCCESS"
    assert qstash.now == run.completed_at  # the clock stops where the run ended
    assert qstash.now.timestamp() == payload["ship_at"]


@at_start
def test_retrying_a_runs_dead_letter_resumes_the_run(qstash: FakeQStash, client: QStash) -> None:
    journal = Journal()
    qstash.mount(APP, fastapi_workflow_app(journal))
    run_id = qstash.trigger(f"{APP}/fails", {"card": "4242"}, failure_url=False)
    qstash.advance("1d")
    run = run_of(qstash, run_id)
    assert run.state == "RUN_FAILED"
    [entry] = qstash.dlq

    journal.card_declined = False  # the card works now: replay the failed step from the DLQ
    client.http.request(path=f"/v2/dlq/retry/{entry.dlq_id}", method="POST")
    qstash.advance("1h")

    assert run.state == "RUN_SUCCESS"
    assert [s.name for s in run.steps] == ["prepare", "charge"]
    assert journal.names(run_id) == ["prepare", "charge", "charge", "charge"]
    assert qstash.dlq == []
