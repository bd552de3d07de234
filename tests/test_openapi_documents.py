"""Our answers, shaped as Upstash documents them.

Every operation of Upstash's OpenAPI documents of the QStash and Workflow APIs
(``openapi_documents.py`` finds and loads them) is called with a valid request on real state,
made through the SDKs (``qstash``, and ``upstash-workflow`` apps) and the engine, and its answer
is held to the documented status and JSON schema. Then schemathesis drives generated requests
at every operation of both documents through the server's ASGI app, and no answer may be a 5xx
(each 4xx is JSON with an ``error``).

Every operation is served: an answer of 501 (not implemented) fails, as any answer the
document does not list. Without the documents the module skips, naming them (in CI it fails:
``ci_requirements.OPENAPI_DOCUMENTS``).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from ci_requirements import OPENAPI_DOCUMENTS, missing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_documents import ABSENT, DOCUMENTS_DIR, ERRATA, describe, load
from qstash import QStash
from schemathesis.generation.case import Case
from schemathesis.schemas import BaseSchema
from workflow_apps import STOCK_URL, Journal, fastapi_workflow_app, stock_app

from pytest_qstash import FakeQStash
from pytest_qstash.server.control.app import QStashServerApp, ServerSettings

if DOCUMENTS_DIR is None:
    missing(OPENAPI_DOCUMENTS, ABSENT, module_level=True)

API = "https://qstash.upstash.io"
APP = "https://app.test"
WORKFLOW_APP = "https://flows.test"
START = "2026-03-02T08:00:00Z"
TOKEN = "openapi-server-token"
DOCS = Path(__file__).resolve().parent.parent / "docs"


# -- the apps deliveries reach ------------------------------------------------------------------
def endpoint(request: httpx.Request) -> httpx.Response:
    """The destination of plain messages: ``/fail`` answers 500, anything else 200."""
    if request.url.path.startswith("/fail"):
        return httpx.Response(500, json={"error": "out of stock"})
    return httpx.Response(200, text="ok")


class World:
    """A fake with apps mounted, and the calls that make the state each operation needs."""

    def __init__(self, qstash: FakeQStash, client: QStash) -> None:
        self.qstash = qstash
        self.client = client
        self.journal = Journal()
        qstash.mount(APP, endpoint)
        qstash.mount(WORKFLOW_APP, fastapi_workflow_app(self.journal))
        qstash.mount(STOCK_URL, stock_app(self.journal))

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.qstash.token}", **kwargs.pop("headers", {})}
        return httpx.request(method, f"{API}{path}", headers=headers, **kwargs)

    # messages -----------------------------------------------------------------------------
    def group(self, name: str = "shipping") -> str:
        self.client.url_group.upsert_endpoints(
            name,
            [
                {"url": f"{APP}/warehouse", "name": "warehouse"},
                {"url": f"{APP}/billing"},
            ],
        )
        return name

    def waiting_message(self) -> str:
        """A delayed message carrying every option a message can show."""
        result = self.client.message.publish_json(
            url=f"{APP}/orders?tenant=acme",
            body={"order": 7},
            headers={"X-Tenant": "acme"},
            delay="1h",
            retries=2,
            retry_delay="1000 * (1 + retried)",
            callback=f"{APP}/callback",
            failure_callback=f"{APP}/failed",
            timeout="30s",
            label="orders",
            flow_control={"key": "orders", "parallelism": 2, "rate": 10, "period": "1m"},
        )
        return result.message_id  # type: ignore[union-attr]

    def dead_letters(self, count: int = 2) -> list[str]:
        for index in range(count):
            self.client.message.publish(
                url=f"{APP}/fail/{index}",
                body=f"order {index}",
                headers={"X-Tenant": "acme"},
                retries=0,
                label="orders",
            )
        self.qstash.tick()
        return [entry.dlq_id for entry in self.qstash.dlq]

    def schedule(self) -> str:
        schedule_id = self.client.schedule.create_json(
            destination=f"{APP}/report",
            cron="*/5 * * * *",
            body={"report": "daily"},
            headers={"X-Tenant": "acme"},
            retries=1,
            callback=f"{APP}/callback",
            delay="10s",
            timeout="20s",
            label="reports",
        )
        self.qstash.advance("11m")  # two firings: last and next times, last states
        return schedule_id

    def queue(self, name: str = "billing") -> str:
        self.client.queue.upsert(name, parallelism=2)
        self.client.message.enqueue_json(queue=name, url=f"{APP}/charge", body={"amount": 3})
        return name

    def flow_key(self, key: str = "orders") -> str:
        self.client.message.publish(
            url=f"{APP}/limited",
            body="x",
            delay="1h",
            flow_control={"key": key, "parallelism": 1, "rate": 5, "period": 60},
        )
        return key

    # workflow runs ------------------------------------------------------------------------
    def finished_run(self) -> str:
        """A run through every step kind the Python SDK has (run, sleep, call, sleep_until)."""
        ship_at = int(self.qstash.now.timestamp()) + 3600
        run_id = self.qstash.trigger(
            f"{WORKFLOW_APP}/order", {"order": 7, "sku": "A-1", "qty": 2, "ship_at": ship_at}
        )
        self.qstash.advance("2h")
        return run_id

    def failed_run(self, failure_url: str | None = None) -> str:
        """A run whose step fails for good: dead-lettered, its failure function called."""
        run_id = self.qstash.trigger(
            f"{WORKFLOW_APP}/fails", {"card": "4242"}, failure_url=failure_url
        )
        self.qstash.advance("1d")
        return run_id

    def dlq_id_of(self, run_id: str) -> str:
        (run,) = [run for run in self.qstash.runs if run.run_id == run_id]
        assert run.dlq_id is not None, run
        return run.dlq_id

    def active_run(self) -> str:
        run_id = self.qstash.trigger(f"{WORKFLOW_APP}/many", {"steps": 3})
        self.qstash.tick()
        return run_id


Answers = list[httpx.Response]
Call = Callable[[World], Answers]


# -- the QStash document's operations -----------------------------------------------------------
def publish(w: World) -> Answers:
    group = w.group()
    return [
        w.call(
            "POST",
            f"/v2/publish/{APP}/orders",
            content=b'{"order": 7}',
            headers={"Content-Type": "application/json", "Upstash-Delay": "1m"},
        ),
        w.call("POST", f"/v2/publish/{group}", content=b"to the group"),
    ]


def enqueue(w: World) -> Answers:
    group = w.group()
    return [
        w.call("POST", f"/v2/enqueue/billing/{APP}/charge", content=b"charge"),
        w.call("POST", f"/v2/enqueue/billing/{group}", content=b"to the group"),
    ]


def batch(w: World) -> Answers:
    group = w.group()
    items = [
        {"destination": f"{APP}/a", "body": "a", "headers": {"Upstash-Delay": "1m"}},
        {"destination": group, "body": "to the group"},
        {"destination": f"{APP}/b", "body": "b", "queue": "billing"},
    ]
    return [w.call("POST", "/v2/batch", json=items)]


def get_message(w: World) -> Answers:
    return [w.call("GET", f"/v2/messages/{w.waiting_message()}")]


def cancel_message(w: World) -> Answers:
    return [w.call("DELETE", f"/v2/messages/{w.waiting_message()}")]


def cancel_messages(w: World) -> Answers:
    first, second = w.waiting_message(), w.waiting_message()
    w.waiting_message()
    return [
        w.call("DELETE", "/v2/messages", params={"messageIds": first}),
        w.call("DELETE", "/v2/messages", params={"label": "orders", "count": 1}),
        w.call("DELETE", "/v2/messages", json={"messageIds": [second]}),
    ]


def upsert_queue(w: World) -> Answers:
    return [w.call("POST", "/v2/queues", json={"queueName": "billing", "parallelism": 2})]


def list_queues(w: World) -> Answers:
    w.queue()
    w.queue("emails")
    return [w.call("GET", "/v2/queues")]


def get_queue(w: World) -> Answers:
    return [w.call("GET", f"/v2/queues/{w.queue()}")]


def delete_queue(w: World) -> Answers:
    return [w.call("DELETE", f"/v2/queues/{w.queue()}")]


def pause_queue(w: World) -> Answers:
    return [w.call("POST", f"/v2/queues/{w.queue()}/pause")]


def resume_queue(w: World) -> Answers:
    name = w.queue()
    w.client.queue.pause(name)
    return [w.call("POST", f"/v2/queues/{name}/resume")]


def create_schedule(w: World) -> Answers:
    return [
        w.call(
            "POST",
            f"/v2/schedules/{APP}/report",
            content=b"report",
            headers={"Upstash-Cron": "0 9 * * *", "Upstash-Retries": "1"},
        ),
        w.call(
            "POST",
            f"/v2/schedules/{w.group()}",
            headers={"Upstash-Cron": "CRON_TZ=Europe/Paris 0 9 * * 1", "Upstash-Schedule-Id": "w"},
        ),
    ]


def list_schedules(w: World) -> Answers:
    w.schedule()
    return [w.call("GET", "/v2/schedules")]


def get_schedule(w: World) -> Answers:
    return [w.call("GET", f"/v2/schedules/{w.schedule()}")]


def delete_schedule(w: World) -> Answers:
    return [w.call("DELETE", f"/v2/schedules/{w.schedule()}")]


def pause_schedule(w: World) -> Answers:
    return [w.call("POST", f"/v2/schedules/{w.schedule()}/pause")]


def resume_schedule(w: World) -> Answers:
    schedule_id = w.schedule()
    w.client.schedule.pause(schedule_id)
    return [w.call("POST", f"/v2/schedules/{schedule_id}/resume")]


def list_url_groups(w: World) -> Answers:
    w.group()
    w.group("audit")
    return [w.call("GET", "/v2/topics")]


def get_url_group(w: World) -> Answers:
    return [w.call("GET", f"/v2/topics/{w.group()}")]


def delete_url_group(w: World) -> Answers:
    return [w.call("DELETE", f"/v2/topics/{w.group()}")]


def upsert_endpoints(w: World) -> Answers:
    body = {"endpoints": [{"url": f"{APP}/a", "name": "a"}, {"url": f"{APP}/b"}]}
    return [w.call("POST", "/v2/topics/shipping/endpoints", json=body)]


def remove_endpoints(w: World) -> Answers:
    group = w.group()
    body = {"endpoints": [{"name": "warehouse"}]}
    return [w.call("DELETE", f"/v2/topics/{group}/endpoints", json=body)]


def list_dlq(w: World) -> Answers:
    w.dead_letters(3)
    return [w.call("GET", "/v2/dlq"), w.call("GET", "/v2/dlq", params={"count": 2})]


def delete_dlq_many(w: World) -> Answers:
    first, *_ = w.dead_letters(3)
    return [
        w.call("DELETE", "/v2/dlq", params={"dlqIds": first}),
        w.call("DELETE", "/v2/dlq", params={"count": 1}),
    ]


def get_dlq(w: World) -> Answers:
    return [w.call("GET", f"/v2/dlq/{w.dead_letters(1)[0]}")]


def delete_dlq(w: World) -> Answers:
    return [w.call("DELETE", f"/v2/dlq/{w.dead_letters(1)[0]}")]


def retry_dlq(w: World) -> Answers:
    return [w.call("POST", f"/v2/dlq/retry/{w.dead_letters(1)[0]}")]


def retry_dlq_many(w: World) -> Answers:
    first, *_ = w.dead_letters(3)
    return [
        w.call("POST", "/v2/dlq/retry", params={"dlqIds": first}),
        w.call("POST", "/v2/dlq/retry", params={"count": 1}),
    ]


def list_flow_keys(w: World) -> Answers:
    w.flow_key()
    return [w.call("GET", "/v2/flowControl")]


def get_flow_key(w: World) -> Answers:
    return [w.call("GET", f"/v2/flowControl/{w.flow_key()}")]


def pause_flow_key(w: World) -> Answers:
    return [w.call("POST", f"/v2/flowControl/{w.flow_key()}/pause")]


def resume_flow_key(w: World) -> Answers:
    key = w.flow_key()
    w.call("POST", f"/v2/flowControl/{key}/pause")
    return [w.call("POST", f"/v2/flowControl/{key}/resume")]


def pin_flow_key(w: World) -> Answers:
    key = w.flow_key()
    params = {"parallelism": 3, "rate": 20, "period": 60}
    return [w.call("POST", f"/v2/flowControl/{key}/pin", params=params)]


def unpin_flow_key(w: World) -> Answers:
    key = w.flow_key()
    w.call("POST", f"/v2/flowControl/{key}/pin", params={"parallelism": 3})
    return [w.call("POST", f"/v2/flowControl/{key}/unpin", params={"parallelism": "true"})]


def reset_rate(w: World) -> Answers:
    return [w.call("POST", f"/v2/flowControl/{w.flow_key()}/resetRate")]


def global_parallelism(w: World) -> Answers:
    w.flow_key()
    return [w.call("GET", "/v2/globalParallelism")]


def get_keys(w: World) -> Answers:
    return [w.call("GET", "/v2/keys")]


def rotate_keys(w: World) -> Answers:
    return [w.call("POST", "/v2/keys/rotate")]


def list_logs(w: World) -> Answers:
    w.dead_letters(1)
    w.call("DELETE", f"/v2/messages/{w.waiting_message()}")
    w.client.message.publish(url=f"{APP}/ok", body="delivered", label="orders")
    w.qstash.tick()
    return [w.call("GET", "/v2/logs"), w.call("GET", "/v2/logs", params={"count": 2})]


QSTASH_CALLS: dict[str, Call] = {
    "POST /v2/publish/{destination}": publish,
    "POST /v2/enqueue/{queueName}/{destination}": enqueue,
    "POST /v2/batch": batch,
    "GET /v2/messages/{messageId}": get_message,
    "DELETE /v2/messages/{messageId}": cancel_message,
    "DELETE /v2/messages": cancel_messages,
    "POST /v2/queues": upsert_queue,
    "GET /v2/queues": list_queues,
    "GET /v2/queues/{queueName}": get_queue,
    "DELETE /v2/queues/{queueName}": delete_queue,
    "POST /v2/queues/{queueName}/pause": pause_queue,
    "POST /v2/queues/{queueName}/resume": resume_queue,
    "POST /v2/schedules/{destination}": create_schedule,
    "GET /v2/schedules": list_schedules,
    "GET /v2/schedules/{scheduleId}": get_schedule,
    "DELETE /v2/schedules/{scheduleId}": delete_schedule,
    "POST /v2/schedules/{scheduleId}/pause": pause_schedule,
    "POST /v2/schedules/{scheduleId}/resume": resume_schedule,
    "GET /v2/topics": list_url_groups,
    "GET /v2/topics/{urlGroupName}": get_url_group,
    "DELETE /v2/topics/{urlGroupName}": delete_url_group,
    "POST /v2/topics/{urlGroupName}/endpoints": upsert_endpoints,
    "DELETE /v2/topics/{urlGroupName}/endpoints": remove_endpoints,
    "GET /v2/dlq": list_dlq,
    "DELETE /v2/dlq": delete_dlq_many,
    "GET /v2/dlq/{dlqId}": get_dlq,
    "DELETE /v2/dlq/{dlqId}": delete_dlq,
    "POST /v2/dlq/retry/{dlqId}": retry_dlq,
    "POST /v2/dlq/retry": retry_dlq_many,
    "GET /v2/flowControl": list_flow_keys,
    "GET /v2/flowControl/{flowControlKey}": get_flow_key,
    "POST /v2/flowControl/{flowControlKey}/pause": pause_flow_key,
    "POST /v2/flowControl/{flowControlKey}/resume": resume_flow_key,
    "POST /v2/flowControl/{flowControlKey}/pin": pin_flow_key,
    "POST /v2/flowControl/{flowControlKey}/unpin": unpin_flow_key,
    "POST /v2/flowControl/{flowControlKey}/resetRate": reset_rate,
    "GET /v2/globalParallelism": global_parallelism,
    "GET /v2/keys": get_keys,
    "POST /v2/keys/rotate": rotate_keys,
    "GET /v2/logs": list_logs,
}


# -- the Workflow document's operations ---------------------------------------------------------
def trigger(w: World) -> Answers:
    return [
        w.call(
            "POST",
            f"/v2/trigger/{WORKFLOW_APP}/many",
            json={"steps": 1},
            headers={"Upstash-Retries": "1", "Upstash-Label": "nightly"},
        )
    ]


def batch_trigger(w: World) -> Answers:
    items = [
        {"destination": f"{WORKFLOW_APP}/many", "body": json.dumps({"steps": 1})},
        {"destination": f"{WORKFLOW_APP}/many", "headers": {"Upstash-Workflow-RunId": "wfr_b"}},
    ]
    return [w.call("POST", "/v2/batch/trigger", json=items)]


def cancel_run(w: World) -> Answers:
    return [w.call("DELETE", f"/v2/workflows/runs/{w.active_run()}")]


def cancel_runs(w: World) -> Answers:
    first, _ = w.active_run(), w.active_run()
    return [
        w.call("DELETE", "/v2/workflows/runs", params={"workflowRunIds": first}),
        w.call("DELETE", "/v2/workflows/runs", params={"workflowUrl": WORKFLOW_APP}),
    ]


def workflow_logs(w: World) -> Answers:
    w.finished_run()
    w.failed_run()
    w.active_run()
    return [
        w.call("GET", "/v2/workflows/logs"),
        w.call("GET", "/v2/workflows/logs", params={"count": 1}),
    ]


def workflow_dlq_list(w: World) -> Answers:
    w.failed_run()
    return [w.call("GET", "/v2/workflows/dlq")]


def workflow_dlq_delete_many(w: World) -> Answers:
    dlq_id = w.dlq_id_of(w.failed_run())
    w.failed_run()
    return [
        w.call("DELETE", "/v2/workflows/dlq", params={"dlqIds": dlq_id}),
        w.call("DELETE", "/v2/workflows/dlq", params={"workflowUrl": f"{WORKFLOW_APP}/fails"}),
    ]


def workflow_dlq_get(w: World) -> Answers:
    return [w.call("GET", f"/v2/workflows/dlq/{w.dlq_id_of(w.failed_run())}")]


def workflow_dlq_delete(w: World) -> Answers:
    return [w.call("DELETE", f"/v2/workflows/dlq/{w.dlq_id_of(w.failed_run())}")]


def workflow_dlq_resume(w: World) -> Answers:
    dlq_id = w.dlq_id_of(w.failed_run())
    return [w.call("POST", f"/v2/workflows/dlq/resume/{dlq_id}", headers={"Upstash-Retries": "0"})]


def workflow_dlq_resume_many(w: World) -> Answers:
    dlq_id = w.dlq_id_of(w.failed_run())
    return [w.call("POST", "/v2/workflows/dlq/resume", params={"dlqIds": dlq_id})]


def workflow_dlq_restart(w: World) -> Answers:
    return [w.call("POST", f"/v2/workflows/dlq/restart/{w.dlq_id_of(w.failed_run())}")]


def workflow_dlq_restart_many(w: World) -> Answers:
    dlq_id = w.dlq_id_of(w.failed_run())
    return [w.call("POST", "/v2/workflows/dlq/restart", params={"dlqIds": dlq_id})]


def workflow_dlq_retry_callback(w: World) -> Answers:
    # The failure URL answers 500: the run's failure callback fails, and may be retried.
    dlq_id = w.dlq_id_of(w.failed_run(failure_url=f"{APP}/fail/callback"))
    return [w.call("POST", f"/v2/workflows/dlq/callback/{dlq_id}")]


def workflow_dlq_cancel_callback(w: World) -> Answers:
    dlq_id = w.dlq_id_of(w.failed_run(failure_url=f"{APP}/fail/callback"))
    retried = w.call("POST", f"/v2/workflows/dlq/callback/{dlq_id}")
    if retried.status_code == 501:
        return [retried]
    return [w.call("DELETE", f"/v2/workflows/dlq/callback/{dlq_id}")]


def notify_event(w: World) -> Answers:
    w.active_run()
    return [w.call("POST", "/v2/notify/order-paid", json={"amount": 10})]


def notify_run(w: World) -> Answers:
    run_id = w.active_run()
    return [w.call("POST", f"/v2/notify/{run_id}/order-paid", json={"amount": 10})]


def list_waiters(w: World) -> Answers:
    w.active_run()
    return [w.call("GET", "/v2/waiters/order-paid")]


WORKFLOW_CALLS: dict[str, Call] = {
    "POST /v2/trigger/{workflowUrl}": trigger,
    "POST /v2/batch/trigger": batch_trigger,
    "DELETE /v2/workflows/runs/{workflowRunId}": cancel_run,
    "DELETE /v2/workflows/runs": cancel_runs,
    "GET /v2/workflows/logs": workflow_logs,
    "GET /v2/workflows/dlq": workflow_dlq_list,
    "DELETE /v2/workflows/dlq": workflow_dlq_delete_many,
    "GET /v2/workflows/dlq/{dlqId}": workflow_dlq_get,
    "DELETE /v2/workflows/dlq/{dlqId}": workflow_dlq_delete,
    "POST /v2/workflows/dlq/resume/{dlqId}": workflow_dlq_resume,
    "POST /v2/workflows/dlq/resume": workflow_dlq_resume_many,
    "POST /v2/workflows/dlq/restart/{dlqId}": workflow_dlq_restart,
    "POST /v2/workflows/dlq/restart": workflow_dlq_restart_many,
    "POST /v2/workflows/dlq/callback/{dlqId}": workflow_dlq_retry_callback,
    "DELETE /v2/workflows/dlq/callback/{dlqId}": workflow_dlq_cancel_callback,
    # The flow-control and signing-key operations are the QStash document's too.
    **{
        operation: QSTASH_CALLS[operation]
        for operation in (
            "GET /v2/flowControl",
            "GET /v2/flowControl/{flowControlKey}",
            "POST /v2/flowControl/{flowControlKey}/pause",
            "POST /v2/flowControl/{flowControlKey}/resume",
            "POST /v2/flowControl/{flowControlKey}/pin",
            "POST /v2/flowControl/{flowControlKey}/unpin",
            "POST /v2/flowControl/{flowControlKey}/resetRate",
            "GET /v2/globalParallelism",
            "GET /v2/keys",
            "POST /v2/keys/rotate",
        )
    },
    "POST /v2/notify/{eventId}": notify_event,
    "POST /v2/notify/{workflowRunId}/{eventId}": notify_run,
    "GET /v2/waiters/{eventId}": list_waiters,
}

CALLS = {"qstash": QSTASH_CALLS, "workflow": WORKFLOW_CALLS}


# -- the tests ----------------------------------------------------------------------------------
@pytest.mark.parametrize("document", CALLS)
def test_every_documented_operation_is_called(document: str) -> None:
    assert list(CALLS[document]) == load(document).operations()


@pytest.mark.qstash(start=START)
@pytest.mark.parametrize(
    ("document", "operation"),
    [(document, operation) for document, calls in CALLS.items() for operation in calls],
)
def test_answer_is_shaped_as_documented(
    qstash: FakeQStash, client: QStash, document: str, operation: str
) -> None:
    answers = CALLS[document][operation](World(qstash, client))
    spec = load(document)
    for answer in answers:
        problems = spec.problems(operation, answer)
        assert not problems, f"{describe(answer)}\n" + "\n".join(problems)


# An answer about a resource that has every option set shows every field the document gives
# it, but those named here, which such a resource cannot have.
def full_message(w: World) -> Answers:
    w.call(
        "POST",
        f"/v2/enqueue/billing/{w.group()}",
        content=b"to the group",
        headers={
            "Upstash-Forward-X-Tenant": "acme",
            "Upstash-Retries": "2",
            "Upstash-Retry-Delay": "1000",
            "Upstash-Callback": f"{APP}/callback",
            "Upstash-Failure-Callback": f"{APP}/failed",
            "Upstash-Label": "orders",
            "Upstash-Flow-Control-Key": "orders",
            "Upstash-Flow-Control-Value": "parallelism=2, rate=10, period=1m",
        },
    )
    named = [m for m in w.qstash.messages if m.url == f"{APP}/warehouse"]
    return [w.call("GET", f"/v2/messages/{named[0].message_id}")]


def full_schedule(w: World) -> Answers:
    schedule_id = w.client.schedule.create(
        destination=f"{APP}/report",
        cron="*/5 * * * *",
        body="report",
        headers={"X-Tenant": "acme"},
        retries=1,
        retry_delay="1000",
        callback=f"{APP}/callback",
        failure_callback=f"{APP}/failed",
        delay="10s",
        label="reports",
        flow_control={"key": "reports", "parallelism": 1, "rate": 5, "period": 60},
    )
    w.qstash.advance("6m")
    return [w.call("GET", f"/v2/schedules/{schedule_id}")]


def full_dead_letter(w: World) -> Answers:
    w.client.message.publish(
        url_group=w.group(),
        body="to the group",
        headers={"X-Tenant": "acme"},
        retries=0,
        callback=f"{APP}/callback",
        failure_callback=f"{APP}/failed",
        label="orders",
        flow_control={"key": "orders", "parallelism": 2, "rate": 10, "period": 60},
    )
    w.qstash.unmount(APP)
    w.qstash.mount(APP, lambda request: httpx.Response(500, text="down"))
    w.qstash.tick()
    named = [e for e in w.qstash.dlq if e.url == f"{APP}/warehouse"]
    return [w.call("GET", f"/v2/dlq/{named[0].dlq_id}")]


FULL: dict[str, tuple[Call, frozenset[str]]] = {
    # bodyBase64: the body is UTF-8; scheduleId: published, not fired by a schedule.
    "GET /v2/messages/{messageId}": (full_message, frozenset({"bodyBase64", "scheduleId"})),
    # queueName: a queued schedule shows it; it leaves out its flow-control key then.
    "GET /v2/schedules/{scheduleId}": (full_schedule, frozenset({"queueName"})),
    # a dead letter is no queued message: a queue delivers it again or not at all
    "GET /v2/dlq/{dlqId}": (
        full_dead_letter,
        frozenset({"bodyBase64", "responseBodyBase64", "queueName", "scheduleId"}),
    ),
    "GET /v2/queues/{queueName}": (get_queue, frozenset()),
    # name: one endpoint was added without a name
    "GET /v2/topics/{urlGroupName}": (get_url_group, frozenset({"name"})),
    "GET /v2/flowControl/{flowControlKey}": (get_flow_key, frozenset()),
    "GET /v2/globalParallelism": (global_parallelism, frozenset()),
    "GET /v2/keys": (get_keys, frozenset()),
}


def full_runs(w: World) -> Answers:
    w.finished_run()
    w.failed_run()
    return [w.call("GET", "/v2/workflows/logs")]


#: Workflow runs: what a Python SDK run can have. Not for these runs: labels and flow control
#: (run-wide settings), invoker and invoked runs, waits (the TypeScript SDK's), the response
#: (the Python SDK sends none); cursor: one page. retries and nextDeliveryTime are a pending
#: step's, dlqId and failureFunction a failed run's, shown in the other run.
WORKFLOW_FULL: dict[str, tuple[Call, frozenset[str]]] = {
    "GET /v2/workflows/logs": (
        full_runs,
        frozenset(
            {
                "cursor",
                "label",
                "labels",
                "flowControlKey",
                "invoker",
                "workflowRunResponse",
                "waitEventId",
                "waitTimeout",
                "invokedWorkflowRunId",
                "invokedWorkflowUrl",
                "retries",
                "nextDeliveryTime",
                "dlqId",
                "failureFunction",
                # call fields on the steps that are no calls, sleeps on the others
                "callUrl",
                "callMethod",
                "callBody",
                "callHeaders",
                "callResponseStatus",
                "callResponseBody",
                "callResponseHeaders",
            }
        ),
    ),
}


@pytest.mark.qstash(start=START)
@pytest.mark.parametrize("operation", WORKFLOW_FULL)
def test_a_workflow_answer_shows_every_documented_field(
    qstash: FakeQStash, client: QStash, operation: str
) -> None:
    call, cannot_apply = WORKFLOW_FULL[operation]
    (answer,) = call(World(qstash, client))
    spec = load("workflow")
    assert not spec.problems(operation, answer), describe(answer)
    assert spec.absent(operation, answer) <= cannot_apply, describe(answer)
    runs = answer.json()["runs"]
    calls = [s for r in runs for g in r["steps"] for s in g["steps"] if s.get("stepType") == "Call"]
    assert calls, runs
    for step in calls:
        assert {"callUrl", "callMethod", "callBody", "callHeaders"} <= set(step), step
    (failed,) = [r for r in runs if r["workflowState"] == "RUN_FAILED"]
    function = failed["failureFunction"]
    assert {"failStatus", "failHeaders", "failResponse", "responseHeaders"} <= set(function)
    assert function["failStatus"] == 500
    assert json.loads(function["failResponse"])["message"] == "card declined"


@pytest.mark.qstash(start=START)
@pytest.mark.parametrize("operation", FULL)
def test_an_answer_shows_every_documented_field(
    qstash: FakeQStash, client: QStash, operation: str
) -> None:
    call, cannot_apply = FULL[operation]
    (answer,) = call(World(qstash, client))
    spec = load("qstash")
    assert not spec.problems(operation, answer), describe(answer)
    assert spec.absent(operation, answer) <= cannot_apply, describe(answer)


# Refusals the documents give a status for: that status, with the documented error body.
REFUSALS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("qstash", "POST /v2/publish/{destination}", "/v2/publish/ftp://app.test/x", {}),
    (
        "qstash",
        "POST /v2/publish/{destination}",
        f"/v2/publish/{APP}/x",
        {"headers": {"Authorization": "Bearer not-the-token"}},
    ),
    ("qstash", "POST /v2/enqueue/{queueName}/{destination}", "/v2/enqueue/b/ftp://x", {}),
    ("qstash", "POST /v2/batch", "/v2/batch", {"json": [{"body": "no destination"}]}),
    ("qstash", "GET /v2/messages/{messageId}", "/v2/messages/msg_unknown", {}),
    ("qstash", "DELETE /v2/messages/{messageId}", "/v2/messages/msg_unknown", {}),
    ("qstash", "POST /v2/queues", "/v2/queues", {"json": {"queueName": "no spaces"}}),
    ("qstash", "GET /v2/queues/{queueName}", "/v2/queues/unknown", {}),
    ("qstash", "GET /v2/queues/{queueName}", "/v2/queues/no%20spaces", {}),
    (
        "qstash",
        "POST /v2/schedules/{destination}",
        f"/v2/schedules/{APP}/x",
        {"headers": {"Upstash-Cron": "*/5 * * * *", "Upstash-Schedule-Id": "no spaces"}},
    ),
    ("qstash", "GET /v2/schedules/{scheduleId}", "/v2/schedules/scd_unknown", {}),
    ("qstash", "GET /v2/topics/{urlGroupName}", "/v2/topics/unknown", {}),
    ("qstash", "GET /v2/dlq/{dlqId}", "/v2/dlq/1-1", {}),
    ("qstash", "DELETE /v2/dlq/{dlqId}", "/v2/dlq/1-1", {}),
    ("qstash", "POST /v2/dlq/retry/{dlqId}", "/v2/dlq/retry/1-1", {}),
    ("qstash", "GET /v2/flowControl/{flowControlKey}", "/v2/flowControl/unknown", {}),
    (
        "qstash",
        "POST /v2/flowControl/{flowControlKey}/pin",
        "/v2/flowControl/orders/pin",
        {"params": {"parallelism": "0"}},
    ),
    ("workflow", "DELETE /v2/workflows/runs/{workflowRunId}", "/v2/workflows/runs/wfr_x", {}),
    ("workflow", "GET /v2/workflows/logs", "/v2/workflows/logs", {"params": {"cursor": "x"}}),
    ("workflow", "POST /v2/notify/{workflowRunId}/{eventId}", "/v2/notify/wfr_x/paid", {}),
]


@pytest.mark.qstash(start=START)
@pytest.mark.parametrize(
    ("document", "operation", "path", "request_options"),
    REFUSALS,
    ids=[f"{operation} {path}" for _, operation, path, _ in REFUSALS],
)
def test_a_refusal_is_shaped_as_documented(
    qstash: FakeQStash,
    client: QStash,
    document: str,
    operation: str,
    path: str,
    request_options: dict[str, Any],
) -> None:
    world = World(qstash, client)
    answer = world.call(operation.split(" ", 1)[0], path, **request_options)
    assert 400 <= answer.status_code < 500, describe(answer)
    assert isinstance(answer.json().get("error"), str), describe(answer)
    problems = load(document).problems(operation, answer)
    assert not problems, f"{describe(answer)}\n" + "\n".join(problems)


def test_every_erratum_is_listed_in_the_fidelity_decisions() -> None:
    text = (DOCS / "fidelity.md").read_text(encoding="utf-8")
    section = text.partition("## Errata in Upstash's OpenAPI documents")[2]
    assert section, "docs/fidelity.md has no section on the documents' errata"
    missing = [item.name for item in ERRATA if f"`{item.name}`" not in section]
    assert not missing, f"errata patched in tests/openapi_documents.py, not listed: {missing}"


# -- generated requests (schemathesis) ----------------------------------------------------------
#: Per operation, of both documents (68): a few seconds in all, CI runs the suite often.
GENERATED_EXAMPLES = 2


@pytest.fixture
def server_app() -> Iterator[QStashServerApp]:
    """The server's ASGI app on a virtual clock: nothing is delivered unless told to. One per
    test (a few ms): what an operation's examples meet does not hang on the operations
    generated before them (a queue deleted, a quota used, in whatever order the tests ran)."""
    app = QStashServerApp(
        ServerSettings(
            token=TOKEN,
            current_signing_key="sig_current",
            next_signing_key="sig_next",
            clock="virtual",
            start=START,
        )
    )
    yield app
    asyncio.run(app.shutdown())


@functools.cache
def _schema(document: str) -> BaseSchema:
    return schemathesis.openapi.from_dict(load(document).raw)


@functools.cache
def _strategy(document: str, operation: str) -> st.SearchStrategy[Case]:
    # Requests valid by the document (schemathesis' positive mode): what a client that
    # follows the document may send. Its negative mode finds no example for some operations
    # in schemathesis 4.20 (the floor), so malformed input is left to the route tests.
    method, path = operation.split(" ", 1)
    return _schema(document)[path][method].as_strategy()


@pytest.mark.parametrize(
    ("document", "operation"),
    [(document, operation) for document, calls in CALLS.items() for operation in calls],
)
@settings(
    max_examples=GENERATED_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_generated_requests_get_no_server_error(
    server_app: QStashServerApp,
    document: str,
    operation: str,
    data: st.DataObject,
) -> None:
    case = data.draw(_strategy(document, operation))
    response = case.call(app=server_app, headers={"Authorization": f"Bearer {TOKEN}"})
    replay = case.as_curl_command(headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code < 500, f"{response.status_code} {response.text}\n{replay}"
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = None
        assert isinstance(body, dict), f"{response.status_code} {response.text!r}\n{replay}"
        assert isinstance(body.get("error"), str), f"{body}\n{replay}"
