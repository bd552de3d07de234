"""The signup service under test: the user's requests go through FastAPI's TestClient, the jobs
they publish through the real QStash SDK into pytest-qstash, and back into the app when the test
says so (``qstash.tick()``, ``qstash.advance(...)``)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import httpx
import pytest
import signup_app

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

# A fixed start makes every timestamp in these tests the same on every run.
pytestmark = pytest.mark.qstash(start="2026-03-02T09:00:00Z")


def sign_up(client: TestClient, email: str = "ada@example.com", name: str = "Ada") -> list[str]:
    response = client.post("/signup", json={"email": email, "name": name})
    assert response.status_code == 201, response.text
    jobs: list[str] = response.json()["jobs"]
    return jobs


def test_signup_sends_the_welcome_email(qstash, client):
    welcome_id, reminder_id = sign_up(client)

    # Publishing only queues the jobs: nothing reaches the app until time is driven.
    assert [m.message_id for m in qstash.messages] == [welcome_id, reminder_id]
    assert signup_app.email_provider.outbox == []

    deliveries = qstash.tick()

    # Only the welcome job is due now; the reminder waits a day.
    assert [(d.url, d.status) for d in deliveries] == [
        ("https://signup.example.com/jobs/welcome-email", 200)
    ]
    assert [e.subject for e in signup_app.email_provider.outbox] == ["Welcome, Ada!"]
    welcome, reminder = qstash.messages
    assert welcome.state == "DELIVERED"
    assert welcome.json() == {"email": "ada@example.com"}
    assert reminder.state == "CREATED"
    assert reminder.not_before == qstash.now + timedelta(days=1)


def test_reminder_goes_out_one_day_later(qstash, client):
    sign_up(client)
    qstash.tick()

    assert qstash.advance("23h") == []  # not yet

    deliveries = qstash.advance("1h")

    assert [d.url for d in deliveries] == ["https://signup.example.com/jobs/onboarding-reminder"]
    reminder = signup_app.email_provider.outbox[-1]
    assert reminder.subject == "Finish setting up your account"
    # The app's own clock (datetime.now) followed the virtual one.
    assert reminder.sent_at == qstash.now


def test_no_reminder_once_onboarded(qstash, client):
    sign_up(client)
    qstash.tick()
    client.post("/onboarding/complete", json={"email": "ada@example.com"})

    [delivery] = qstash.advance("1d")

    # The job still ran (and succeeded), but decided there was nothing to send.
    assert delivery.status == 200
    assert delivery.response_body == '{"sent":false,"reason":"already onboarded"}'
    assert [e.subject for e in signup_app.email_provider.outbox] == ["Welcome, Ada!"]


def test_provider_outage_is_retried_after_retry_after(qstash, client):
    signup_app.email_provider.failures_left = 1  # the provider fails the next call
    welcome_id, _ = sign_up(client)

    [first] = qstash.tick()

    assert first.status == 503
    assert signup_app.email_provider.outbox == []
    welcome = qstash.messages[0]
    assert welcome.state == "RETRY"
    # QStash honours the Retry-After: 30 the app answered with.
    assert welcome.not_before == first.at + timedelta(seconds=30)
    assert qstash.advance("29s") == []

    [retry] = qstash.advance("1s")

    assert retry.status == 200
    assert retry.message_id == welcome_id
    assert retry.headers["Upstash-Retried"] == "1"
    assert [e.subject for e in signup_app.email_provider.outbox] == ["Welcome, Ada!"]
    assert [d.status for d in welcome.deliveries] == [503, 200]


def test_job_routes_refuse_unsigned_requests(qstash, client):
    sign_up(client)

    forged = client.post("/jobs/welcome-email", json={"email": "ada@example.com"})
    tampered = client.post(
        "/jobs/welcome-email",
        json={"email": "ada@example.com"},
        headers={"Upstash-Signature": "not-a-jwt"},
    )

    assert (forged.status_code, tampered.status_code) == (401, 401)
    assert signup_app.email_provider.outbox == []
    # The genuine, signed delivery is accepted.
    assert [d.status for d in qstash.tick()] == [200]


@pytest.mark.asyncio
async def test_signup_from_async_code(qstash):
    transport = httpx.ASGITransport(app=signup_app.app)
    async with httpx.AsyncClient(transport=transport, base_url=signup_app.BASE_URL) as client:
        response = await client.post("/signup", json={"email": "lin@example.com", "name": "Lin"})
        assert response.status_code == 201

        # Inside an event loop, use the awaitable forms: the app runs on this test's loop.
        deliveries = await qstash.atick()

    assert [d.status for d in deliveries] == [200]
    assert [e.to for e in signup_app.email_provider.outbox] == ["lin@example.com"]
    later = await qstash.aadvance("1d")
    assert [d.url for d in later] == ["https://signup.example.com/jobs/onboarding-reminder"]
