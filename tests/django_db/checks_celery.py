"""Celery to QStash in a Django project: the invoicing tasks (``invoices/tasks.py``) and their
tests, under pytest-django with a database. docs/how-to/celery.md shows them; run by
tests/test_django_db.py in a pytest session of its own."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from dbproject.wsgi import application
from django.conf import settings
from django.utils import timezone
from django_qstash.results.models import TaskResult
from django_qstash.schedules.models import TaskSchedule
from invoices.models import Invoice
from invoices.services import ledger, mailer
from invoices.tasks import record_in_ledger, remind_unpaid, send_invoice

pytestmark = [
    pytest.mark.django_db,
    # 09:00 in Chicago, the project's TIME_ZONE.
    pytest.mark.qstash(start="2026-03-02T15:00:00Z"),
]
LOCAL = ZoneInfo(settings.TIME_ZONE)


@pytest.fixture(autouse=True)
def _services() -> None:
    mailer.outbox.clear()
    mailer.failures_left = ledger.rate_limited_calls_left = 0


# --8<-- [start:mount]
@pytest.fixture
def qstash_apps() -> dict[str, Any]:
    # django-qstash addresses every task to DJANGO_QSTASH_DOMAIN + DJANGO_QSTASH_WEBHOOK_PATH.
    return {settings.DJANGO_QSTASH_DOMAIN: application}


# --8<-- [end:mount]


# --8<-- [start:delay]
def test_an_invoice_is_sent_by_the_task(qstash):
    invoice = Invoice.objects.create(customer="ada@example.com", amount_cents=4200)

    queued = send_invoice.delay(invoice.pk)  # as with Celery

    [message] = qstash.messages
    assert message.message_id == queued.id
    assert mailer.outbox == []  # nothing runs until the test moves time on

    [delivery] = qstash.tick()

    assert delivery.status == 200, delivery.response_body
    invoice.refresh_from_db()
    assert invoice.sent_at == qstash.now
    assert mailer.outbox == [("ada@example.com", f"Invoice #{invoice.pk}")]
    # What Celery's result backend kept: the webhook's answer, and django_qstash.results.
    assert json.loads(delivery.response_body)["result"]["invoice"] == invoice.pk
    stored = TaskResult.objects.get(task_id=queued.id)
    assert stored.status == "SUCCESS"


# --8<-- [end:delay]


# --8<-- [start:apply_async]
def test_countdown_and_eta_become_the_messages_delivery_times(qstash):
    invoice = Invoice.objects.create(customer="ada@example.com", amount_cents=4200)
    tomorrow_at_nine = datetime(2026, 3, 3, 9, 0, tzinfo=LOCAL)

    send_invoice.apply_async(args=(invoice.pk,), countdown=3600)
    send_invoice.apply_async(args=(invoice.pk,), eta=tomorrow_at_nine)

    in_an_hour, tomorrow = qstash.messages
    assert in_an_hour.not_before == qstash.now + timedelta(hours=1)
    assert tomorrow.not_before == tomorrow_at_nine
    assert qstash.advance("59m") == []
    assert [d.message_id for d in qstash.advance("1m")] == [in_an_hour.message_id]
    assert [d.message_id for d in qstash.advance_to(tomorrow_at_nine)] == [tomorrow.message_id]


# --8<-- [end:apply_async]


# --8<-- [start:retries]
def test_a_mail_server_outage_is_retried_by_qstash(qstash):
    mailer.failures_left = 1
    invoice = Invoice.objects.create(customer="ada@example.com", amount_cents=4200)
    send_invoice.delay(invoice.pk)

    [failed] = qstash.tick()

    assert failed.status == 422  # django-qstash's answer to a task that raised
    assert "the mail server did not answer" in failed.response_body
    assert qstash.messages[0].state == "RETRY"
    [retried] = qstash.advance("13s")  # QStash's first backoff: e^2.5 s, about 12.2 s
    assert (retried.status, retried.headers["Upstash-Retried"]) == (200, "1")
    invoice.refresh_from_db()
    assert (invoice.attempts, invoice.sent_at) == (2, retried.at)


def test_self_retry_with_a_countdown_publishes_the_task_again(qstash):
    ledger.rate_limited_calls_left = 1
    invoice = Invoice.objects.create(customer="ada@example.com", amount_cents=4200)
    record_in_ledger.delay(invoice.pk)

    [rate_limited] = qstash.tick()

    assert json.loads(rate_limited.response_body)["status"] == "retry"
    first, again = qstash.messages  # self.retry() published the task once more
    assert first.state == "DELIVERED"  # answered: QStash does not retry it itself
    assert again.not_before == qstash.now + timedelta(seconds=60)
    [recorded] = qstash.advance("60s")
    assert (recorded.message_id, recorded.status) == (again.message_id, 200)
    invoice.refresh_from_db()
    assert invoice.in_ledger


# --8<-- [end:retries]


# --8<-- [start:beat]
def test_the_nightly_reminder_runs_at_two_in_the_projects_time_zone(qstash):
    # Celery beat: crontab(hour=2, minute=0) in CELERY_TIMEZONE. On QStash: a schedule, its
    # cron in the project's zone through CRON_TZ (QStash reads a bare cron as UTC).
    TaskSchedule.objects.create(
        name="Remind unpaid invoices",
        task=remind_unpaid,
        cron=f"CRON_TZ={settings.TIME_ZONE} 0 2 * * *",
    )
    invoice = Invoice.objects.create(
        customer="ada@example.com", amount_cents=4200, sent_at=timezone.now()
    )

    [schedule] = qstash.schedules
    assert schedule.cron == "CRON_TZ=America/Chicago 0 2 * * *"
    two_tonight = datetime(2026, 3, 3, 2, 0, tzinfo=LOCAL)  # 08:00 UTC
    assert schedule.next_run == two_tonight

    [reminder] = qstash.advance_to(two_tonight)

    assert (reminder.at, reminder.status) == (two_tonight, 200)
    assert json.loads(reminder.response_body)["result"] == 1
    assert mailer.outbox == [("ada@example.com", f"Reminder: invoice #{invoice.pk} is unpaid")]


# --8<-- [end:beat]
