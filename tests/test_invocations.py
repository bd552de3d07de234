"""``context.invoke`` in-process: the engine's side of the TypeScript SDK's invoke.

The invoke publish is sent as the SDK sends it (test_node_invoke.py runs the SDK itself on
Node); both runs' routes are a plain app that keeps what each delivery carries, so the
invoked run's payload and the invoking step's result are asserted as the SDK reads them."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from qstash import QStash
from qstash.errors import QStashError

from pytest_qstash import FakeQStash

INVOKER = "https://shop.test/workflows/checkout"
INVOKED = "https://shop.test/workflows/charge"


class Routes:
    def __init__(self) -> None:
        self.deliveries: list[tuple[str, list[dict[str, Any]], httpx.Headers]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        raw = json.loads(request.content)
        steps = [json.loads(base64.b64decode(item["body"]) or b"null") for item in raw]
        self.deliveries.append((str(request.url), steps, request.headers))
        return httpx.Response(200, headers={"Upstash-Workflow-Sdk-Version": "1"})


@pytest.fixture
def routes(qstash: FakeQStash) -> Routes:
    app = Routes()
    qstash.mount("https://shop.test", app)
    return app


def invoke(client: QStash, invoker_run: str, *, workflow_url: str = INVOKER) -> str:
    """What the SDK publishes for ``context.invoke("charge card", {body, headers})``."""
    envelope = {
        "body": json.dumps({"amount": 42}),
        "headers": {
            "Upstash-Workflow-RunId": [invoker_run],
            "Upstash-Workflow-Url": [INVOKER],
            "Upstash-Workflow-Init": ["false"],
            "Upstash-Forward-Upstash-Workflow-Sdk-Version": ["1"],
            "Authorization": ["Bearer the-invokers-token"],
        },
        "workflowRunId": invoker_run,
        "workflowRunCreatedAt": 1,
        "workflowUrl": workflow_url,
        "step": {"stepId": 2, "stepName": "charge card", "stepType": "Invoke", "concurrent": 1},
    }
    answer = client.http.request(
        path=f"/v2/publish/{INVOKED}",
        method="POST",
        body=json.dumps(envelope),
        headers={
            "Upstash-Workflow-Init": "true",
            "Upstash-Workflow-RunId": "wfr_charge",
            "Upstash-Workflow-Url": INVOKED,
            "Upstash-Workflow-Invoke": "true",
            "Upstash-Forward-X-Invoke-Header": "from the invoker",
            "Upstash-Forward-Upstash-Workflow-Sdk-Version": "1",
        },
    )
    return str(answer["messageId"])


def test_the_invoked_run_gets_the_body_and_its_end_resumes_the_invoker(
    qstash: FakeQStash, routes: Routes, client: QStash
) -> None:
    invoker_run = qstash.trigger(INVOKER, {"cart": 1})
    qstash.tick()
    invoke(client, invoker_run)
    qstash.tick()

    invoked = qstash.runs.one(run_id="wfr_charge")
    assert invoked.json() == {"amount": 42}  # the body, not the envelope
    assert invoked.invoker is not None
    assert (invoked.invoker.run_id, invoked.invoker.url) == (invoker_run, INVOKER)
    url, steps, headers = routes.deliveries[-1]
    assert (url, steps[0], headers["X-Invoke-Header"]) == (
        INVOKED,
        {"amount": 42},
        "from the invoker",
    )

    # The invoked route returns: the SDK ends its run with the result.
    client.http.request(
        path="/v2/workflows/runs/wfr_charge?cancel=false",
        method="DELETE",
        body='{"charged": true}',
        parse_response=False,
    )
    qstash.tick()

    url, steps, headers = routes.deliveries[-1]
    assert url == INVOKER
    assert "authorization" not in headers  # the invoker's token is not delivered
    step = steps[-1]
    assert (step["stepName"], step["stepType"]) == ("charge card", "Invoke")
    result = json.loads(step["out"])
    assert result == {"isFailed": False, "isCanceled": False, "body": '{"charged": true}'}
    assert qstash.runs.one(run_id=invoker_run).step("charge card").out["isFailed"] is False


def test_a_cancelled_invoked_run_resumes_the_invoker_as_cancelled(
    qstash: FakeQStash, routes: Routes, client: QStash
) -> None:
    invoker_run = qstash.trigger(INVOKER, {"cart": 2})
    qstash.tick()
    invoke(client, invoker_run)

    client.http.request(
        path="/v2/workflows/runs/wfr_charge?cancel=true", method="DELETE", parse_response=False
    )
    qstash.tick()

    result = json.loads(routes.deliveries[-1][1][-1]["out"])
    assert result == {"isFailed": False, "isCanceled": True}


def test_an_invoke_that_could_not_resume_its_invoker_is_refused(
    qstash: FakeQStash, client: QStash
) -> None:
    with pytest.raises(QStashError, match="the invoker's workflowUrl 'nowhere'"):
        invoke(client, "wfr_x", workflow_url="nowhere")
    assert list(qstash.runs) == []
