"""The reporting service under test: requests go through Django's test client, the tasks they
queue through django-qstash's real QStash client into pytest-qstash, and back into Django's
webhook view on ``qstash.tick()`` / ``qstash.advance(...)``, retries included, in virtual time."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from reports_project import reporting
from reports_project.asgi import application as asgi_application

if TYPE_CHECKING:
    from django.test import Client

pytestmark = pytest.mark.qstash(start="2026-03-02T09:00:00Z")

BASE = "https://reports.example.com"
WEBHOOK = f"{BASE}/qstash/webhook/"


def request_report(client: Client, month: str = "2026-01") -> dict[str, Any]:
    response = client.post("/reports/", {"month": month}, content_type="application/json")
    assert response.status_code == 202, response.content
    report: dict[str, Any] = response.json()
    return report


def get_report(client: Client, report_id: int) -> dict[str, Any]:
    report: dict[str, Any] = client.get(f"/reports/{report_id}/").json()
    return report


# docs/how-to/django.md shows the test below.
# --8<-- [start:docs]
def test_report_is_built_by_the_task(qstash, client):
    report = request_report(client)
    assert report["status"] == "queued"

    # .delay() published one message, addressed to django-qstash's webhook.
    [job] = qstash.messages
    assert (job.message_id, job.url) == (report["task_id"], WEBHOOK)
    assert (job.json()["function"], job.json()["args"]) == ("build_report", [1])
    assert get_report(client, 1)["status"] == "queued"  # nothing runs until time is driven

    [delivery] = qstash.tick()

    assert delivery.status == 200, delivery.response_body
    assert json.loads(delivery.response_body) == {
        "status": "success",
        "task_name": "build_report",
        "result": {"report_id": 1, "revenue_cents": 5160},
    }
    built = get_report(client, 1)
    assert (built["status"], built["order_count"], built["revenue_cents"]) == ("ready", 3, 5160)
    # The task read the time from Django's clock, which follows the fake's.
    assert built["built_at"] == qstash.now.isoformat()
    assert job.state == "DELIVERED"


# --8<-- [end:docs]


def test_nightly_digest_goes_out_at_two(qstash, client):
    response = client.post(
        "/reports/digest/", {"email": "cfo@example.com"}, content_type="application/json"
    )
    assert response.status_code == 202
    send_at = datetime(2026, 3, 3, 2, 0, tzinfo=timezone.utc)  # 17 h after the 09:00 start
    assert response.json()["send_at"] == send_at.isoformat()
    [digest_job] = qstash.messages
    assert digest_job.not_before == send_at

    # A report requested after the digest was scheduled is built meanwhile...
    request_report(client, "2026-02")
    assert [d.status for d in qstash.tick()] == [200]
    assert qstash.advance("16h59m") == []
    assert reporting.mailer.outbox == []

    [delivery] = qstash.advance("1m")

    # ...and is in the digest, which reads the reports when it runs, not when it was queued.
    assert (delivery.message_id, delivery.at, delivery.status) == (
        digest_job.message_id,
        send_at,
        200,
    )
    [email] = reporting.mailer.outbox
    assert (email.to, email.subject) == ("cfo@example.com", "Nightly digest: 1 report(s) ready")
    assert email.body == "2026-02: 2 orders, 10000 cents"
    assert email.sent_at == send_at


def test_a_sales_api_blip_is_retried_after_the_backoff(qstash, client):
    reporting.sales_api.failures_left = 1
    report = request_report(client)

    [first] = qstash.tick()

    # The task raised: django-qstash answers 422 and QStash schedules a retry.
    assert first.status == 422
    assert json.loads(first.response_body)["error_type"] == "TaskError"
    assert qstash.messages[0].state == "RETRY"
    assert get_report(client, 1)["status"] == "queued"
    assert qstash.advance("12s") == []  # QStash's first retry comes e^2.5 s (12.18 s) later

    [retry] = qstash.advance("1s")

    assert (retry.message_id, retry.status) == (report["task_id"], 200)
    assert retry.headers["Upstash-Retried"] == "1"
    assert (get_report(client, 1)["status"], get_report(client, 1)["attempts"]) == ("ready", 2)


def test_a_long_outage_ends_in_the_dlq(qstash, client):
    reporting.sales_api.failures_left = 100  # down for the rest of the day
    report = request_report(client)

    deliveries = qstash.advance("1h")

    # 1 attempt + the task's 3 retries, on QStash's backoff: 12 s, 2 min 28 s, 30 min 8 s.
    assert [(d.url, d.status) for d in deliveries] == [(WEBHOOK, 422)] * 4
    gaps = [
        round((later.at - earlier.at).total_seconds()) for earlier, later in pairwise(deliveries)
    ]
    assert gaps == [12, 148, 1808]
    assert [d.headers["Upstash-Retried"] for d in deliveries] == ["0", "1", "2", "3"]
    job = qstash.messages[0]
    assert (job.state, job.retried) == ("FAILED", 3)
    [dead] = qstash.dlq
    assert (dead.message_id, dead.response_status) == (report["task_id"], 422)
    assert "sales API timed out" in dead.response_body
    # On its last attempt the task marked the report failed instead of leaving it queued.
    failed = get_report(client, 1)
    assert (failed["status"], failed["attempts"]) == ("failed", 4)
    assert failed["error"] == "sales API timed out"
    assert qstash.advance("1d") == []  # nothing left to retry


def test_webhook_refuses_unsigned_requests(qstash, client):
    report = request_report(client)
    forged_task = qstash.messages[0].body

    forged = client.post("/qstash/webhook/", forged_task, content_type="application/json")

    assert forged.status_code == 400
    assert forged.json()["error_type"] == "SignatureError"
    assert get_report(client, 1)["attempts"] == 0
    # QStash's own, signed delivery of the same task gets through.
    [delivery] = qstash.tick()
    assert (delivery.message_id, delivery.status) == (report["task_id"], 200)


def test_bad_requests_queue_nothing(qstash, client):
    response = client.post("/reports/", {"period": "Q1"}, content_type="application/json")

    assert response.status_code == 400
    assert qstash.messages == []


@pytest.mark.asyncio
async def test_reports_from_async_code_through_asgi(qstash):
    # Serve the webhook from the ASGI application too (replaces the WSGI mount of qstash_apps).
    qstash.mount(BASE, asgi_application)
    transport = httpx.ASGITransport(app=asgi_application)
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        response = await client.post("/reports/", json={"month": "2026-02"})
        assert response.status_code == 202

        # Inside an event loop, use the awaitable forms: Django's ASGI handler runs on this loop.
        [delivery] = await qstash.atick()

        assert delivery.status == 200, delivery.response_body
        report = (await client.get("/reports/1/")).json()
    assert (report["status"], report["revenue_cents"]) == ("ready", 10000)
    assert await qstash.aadvance(timedelta(days=1)) == []
