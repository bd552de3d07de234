"""Workflow waits in-process: the engine's side of ``context.waitForEvent`` and webhooks.

Only the TypeScript SDK waits (test_node_waits.py runs it on Node against the server); here
its wait request is sent as it sends it, and the run's route is a plain app that keeps what
each delivery carries, so the wire the SDK decodes is asserted field by field: the resumed
step's base64 ``out`` and ``waitTimeout``. Notifies go through ``qstash.notify`` and the
Python ``qstash`` SDK's HTTP client."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError

from pytest_qstash import FakeQStash
from pytest_qstash.engine.account import DEFAULT_TOKEN, DEFAULT_USER_ID, make_token, user_id_of
from pytest_qstash.server.cli import _new_token as new_token
from pytest_qstash.testing.report import section

API = "https://qstash.upstash.io"
FLOW = "https://shop.test/workflows/order"


class Route:
    """The workflow route: answers as a TypeScript SDK route does, keeps the steps arrays."""

    def __init__(self) -> None:
        self.deliveries: list[list[dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        raw = json.loads(request.content)
        self.deliveries.append([json.loads(base64.b64decode(item["body"])) for item in raw[1:]])
        return httpx.Response(200, headers={"Upstash-Workflow-Sdk-Version": "1"})

    @property
    def last_step(self) -> dict[str, Any]:
        return self.deliveries[-1][-1]


@pytest.fixture
def route(qstash: FakeQStash) -> Route:
    app = Route()
    qstash.mount("https://shop.test", app)
    return app


def start_waiting(
    qstash: FakeQStash, event_id: str, *, timeout: str | None = None, run_id: str | None = None
) -> str:
    """A run that starts and waits for ``event_id``, as the TypeScript SDK's waitForEvent."""
    run_id = qstash.trigger(FLOW, {"order": 7}, run_id=run_id)
    qstash.tick()
    send_wait(qstash, run_id, event_id, timeout)
    return run_id


def send_wait(qstash: FakeQStash, run_id: str, event_id: str, timeout: str | None = None) -> None:
    """The TypeScript SDK's ``POST /v2/wait/{eventId}`` for the run."""
    body: dict[str, Any] = {
        "url": FLOW,
        "timeoutUrl": FLOW,
        "timeoutHeaders": {"Upstash-Workflow-Runid": [run_id], "X-Tenant": ["acme"]},
        "step": {"stepId": 1, "stepType": "Wait", "stepName": "wait for payment", "concurrent": 1},
    }
    if timeout is not None:
        body["timeout"] = timeout
    answer = httpx.post(
        f"{API}/v2/wait/{event_id}",
        json=body,
        headers={
            "Authorization": f"Bearer {qstash.token}",
            "Upstash-Workflow-RunId": run_id,
            "Upstash-Workflow-Url": FLOW,
            "Upstash-Workflow-Init": "false",
            "Upstash-Workflow-CallType": "step",
            "Upstash-Forward-Upstash-Workflow-Sdk-Version": "1",
        },
    )
    assert answer.status_code == 200, answer.text


def test_a_notify_resumes_the_wait_with_its_data(
    qstash: FakeQStash, route: Route, client: QStash
) -> None:
    run_id = start_waiting(qstash, "order-7-paid")

    [waiter] = qstash.waiters
    assert (waiter.event_id, waiter.run_id, waiter.step_name) == (
        "order-7-paid",
        run_id,
        "wait for payment",
    )
    assert waiter.deadline == qstash.now + timedelta(days=7)
    [listed] = client.http.request(path="/v2/waiters/order-7-paid", method="GET")
    assert listed["url"] == FLOW
    assert listed["deadline"] == int(waiter.deadline.timestamp())

    [answer] = client.http.request(
        path="/v2/notify/order-7-paid", method="POST", body='{"amount": 10}'
    )
    assert answer["workflowRunId"] == run_id
    assert answer["waiter"]["url"] == FLOW
    [delivery] = qstash.tick()

    assert delivery.message_id == answer["messageId"]
    step = route.last_step
    assert (step["stepName"], step["waitEventId"], step["waitTimeout"]) == (
        "wait for payment",
        "order-7-paid",
        False,
    )
    assert base64.b64decode(step["out"]) == b'{"amount": 10}'
    assert list(qstash.waiters) == []
    assert client.http.request(path="/v2/notify/order-7-paid", method="POST", body="x") == []


def test_the_timeout_resumes_the_wait_timed_out_and_drain_stops_before_it(
    qstash: FakeQStash, route: Route
) -> None:
    start_waiting(qstash, "never", timeout="1d")

    assert qstash.drain() == []  # the run waits: nothing to deliver until the timeout
    assert qstash.advance("23h59m") == []
    [delivery] = qstash.advance("1m")

    step = route.last_step
    assert step["waitTimeout"] is True
    assert "out" not in step
    assert delivery.headers["X-Tenant"] == "acme"  # the timeout headers the SDK gave
    assert list(qstash.waiters) == []


def test_a_notify_for_a_run_is_kept_until_it_waits(qstash: FakeQStash, route: Route) -> None:
    run_id = qstash.trigger(FLOW, {"order": 8}, run_id="wfr_early")

    [kept] = qstash.notify("paid", "early bird", run_id=run_id)
    assert kept == {
        "workflowRunId": run_id,
        "workflowCreatedAt": kept["workflowCreatedAt"],
        "error": "",
    }
    assert qstash.notify("paid", "lost: nobody waits") == []

    start_waiting(qstash, "paid", run_id="wfr_early_2")  # another run: not this one's notify
    assert len(qstash.waiters) == 1
    qstash.tick()
    # The run it was kept for takes it at once when it waits.
    start_waiting_again = httpx.post(
        f"{API}/v2/wait/paid",
        json={"url": FLOW, "step": {"stepId": 1, "stepType": "Wait", "stepName": "w"}},
        headers={"Authorization": f"Bearer {qstash.token}", "Upstash-Workflow-RunId": run_id},
    )
    assert start_waiting_again.status_code == 200
    [delivery] = qstash.tick()
    assert base64.b64decode(route.last_step["out"]) == b"early bird"
    assert [w.run_id for w in qstash.waiters] == ["wfr_early_2"]
    assert delivery.headers["Upstash-Workflow-RunId"] == run_id


def test_notify_refuses_what_it_cannot_reach(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(ValueError, match="cannot notify run 'wfr_nope'"):
        qstash.notify("paid", run_id="wfr_nope")
    with pytest.raises(ValueError, match="invalid event id ''"):
        qstash.notify("")
    with pytest.raises(QStashError, match="Invalid workflow run ID"):
        client.http.request(path="/v2/notify/wfr_nope/paid", method="POST", body="x")


def test_cancelling_a_run_ends_its_waits(qstash: FakeQStash, route: Route, client: QStash) -> None:
    run_id = start_waiting(qstash, "cancelled")

    client.http.request(
        path=f"/v2/workflows/runs/{run_id}?cancel=true", method="DELETE", parse_response=False
    )

    assert list(qstash.waiters) == []
    assert qstash.notify("cancelled") == []
    assert qstash.advance("8d") == []


def test_the_report_shows_what_a_run_waits_for(qstash: FakeQStash, route: Route) -> None:
    run_id = start_waiting(qstash, "order-7-paid")

    report = section(qstash.store, len(qstash.deliveries)) or ""

    assert f"workflow run {run_id} at {FLOW} RUN_STARTED" in report
    deadline = qstash.waiters[0].deadline.isoformat()
    assert (
        f"    waiting for event 'order-7-paid' at step 'wait for payment' (Wait) until "
        f"{deadline}, when it times out; qstash.notify('order-7-paid', data) resumes it"
    ) in report


def test_a_webhook_call_resumes_the_run_without_a_token(qstash: FakeQStash, route: Route) -> None:
    run_id = start_waiting(qstash, "evt_hook")
    hook = f"{API}/v2/workflows/hooks/{DEFAULT_USER_ID}/{run_id}/evt_hook"

    assert httpx.get(f"{API}/v2/workflows/hooks/someone-else/{run_id}/evt_hook").status_code == 404
    malformed = httpx.post(f"{API}/v2/workflows/hooks/{DEFAULT_USER_ID}/{run_id}")
    assert malformed.status_code == 404
    assert "is not a webhook URL" in malformed.json()["error"]
    answer = httpx.patch(f"{hook}?a=1", content=b"payload", headers={"X-Sig": "s"})
    assert answer.status_code == 200, answer.text
    qstash.tick()

    request = json.loads(base64.b64decode(route.last_step["out"]))
    assert request["method"] == "PATCH"
    assert (request["proto"], request["host"]) == ("https", "qstash.upstash.io")
    assert request["url"] == f"/v2/workflows/hooks/{DEFAULT_USER_ID}/{run_id}/evt_hook?a=1"
    assert request["header"]["X-Sig"] == ["s"]
    assert base64.b64decode(request["body"]) == b"payload"


def test_tokens_are_shaped_as_qstashs() -> None:
    assert user_id_of(DEFAULT_TOKEN) == DEFAULT_USER_ID
    assert json.loads(base64.b64decode(make_token("u1", "p"))) == {"UserID": "u1", "Password": "p"}
    assert user_id_of("my-own-token") is None
    # What `pytest-qstash serve` generates when no token is given: a fresh user id each time.
    generated = {user_id_of(new_token()) for _ in range(3)}
    assert len(generated) == 3
    assert all(uuid.UUID(str(user)).version == 4 for user in generated)


def test_a_users_own_token_still_works() -> None:
    with FakeQStash(token="my-own-token") as fake:
        answer = httpx.get(f"{API}/v2/waiters/x", headers={"Authorization": "Bearer my-own-token"})
        assert (answer.status_code, answer.json()) == (200, [])
        assert fake.account.user_id is None


def test_the_resumed_step_reads_as_the_events_data(qstash: FakeQStash, route: Route) -> None:
    run_id = start_waiting(qstash, "order-7-paid")
    qstash.notify("order-7-paid", {"amount": 10})
    qstash.tick()

    [step] = qstash.runs.one(run_id=run_id).steps
    assert (step.name, step.type, step.out) == ("wait for payment", "Wait", {"amount": 10})
    assert step.raw["waitTimeout"] is False


@pytest.mark.asyncio
async def test_the_async_sdk_notifies_a_run_that_waits(
    qstash: FakeQStash, route: Route, aclient: AsyncQStash
) -> None:
    run_id = qstash.trigger(FLOW, {"order": 9})
    await qstash.atick()
    send_wait(qstash, run_id, "async-paid")

    answer = await aclient.http.request(
        path=f"/v2/notify/{run_id}/async-paid", method="POST", body="ok"
    )
    await qstash.atick()

    assert answer["messageId"] == qstash.runs.one(run_id=run_id).steps[0].message_id
    assert base64.b64decode(route.last_step["out"]) == b"ok"
