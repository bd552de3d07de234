"""Invoicing tasks, moved from Celery to django-qstash (docs/how-to/celery.md shows them)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from django_qstash import stashed_task

from .models import Invoice
from .services import RateLimited, ledger, mailer


# --8<-- [start:send_invoice]
# Celery: @shared_task(bind=True, max_retries=3)
@stashed_task(bind=True, retries=3)
def send_invoice(self: Any, invoice_id: int) -> dict[str, Any]:
    invoice = Invoice.objects.get(pk=invoice_id)
    invoice.attempts += 1
    invoice.save(update_fields=["attempts"])
    # Raises MailServerDown when the mail server is down: django-qstash answers 422 and
    # QStash delivers the task again, up to 3 more times, then puts it in the DLQ.
    mailer.send(invoice.customer, f"Invoice #{invoice.pk}")
    invoice.sent_at = timezone.now()
    invoice.save(update_fields=["sent_at"])
    return {"invoice": invoice.pk, "sent_at": invoice.sent_at.isoformat()}


# --8<-- [end:send_invoice]


# --8<-- [start:record_in_ledger]
@stashed_task(bind=True, retries=0)
def record_in_ledger(self: Any, invoice_id: int) -> str:
    try:
        ledger.record(invoice_id)
    except RateLimited as exc:
        # As in Celery: run again in 60 s (a new QStash message), up to max_retries times.
        raise self.retry(exc=exc, countdown=60, max_retries=5) from exc
    Invoice.objects.filter(pk=invoice_id).update(in_ledger=True)
    return "recorded"


# --8<-- [end:record_in_ledger]


# --8<-- [start:remind_unpaid]
@stashed_task
def remind_unpaid() -> int:
    unpaid = Invoice.objects.filter(sent_at__isnull=False, paid=False)
    for invoice in unpaid:
        mailer.send(invoice.customer, f"Reminder: invoice #{invoice.pk} is unpaid")
    return len(unpaid)


# --8<-- [end:remind_unpaid]
