"""django-qstash tasks. django-qstash finds them because this module sits next to the
settings module, and its webhook runs only tasks it found."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from django_qstash import stashed_task

from .reporting import SalesApiUnavailable, mailer, reports, sales_api


# retries=3: QStash re-delivers a failed run 3 times (4 attempts in all) before the DLQ.
# bind=True gives the body ``self.request``, whose ``retries`` counts those re-deliveries.
@stashed_task(bind=True, retries=3)
def build_report(self: Any, report_id: int) -> dict[str, Any]:
    report = reports[report_id]
    report.attempts += 1
    try:
        orders = sales_api.monthly_orders(report.month)
    except SalesApiUnavailable as exc:
        if self.request.retries >= self.max_retries:
            # QStash will not try again: say so on the report rather than leave it queued.
            report.status = "failed"
            report.error = str(exc)
        raise  # django-qstash answers 422, which QStash retries
    report.order_count = len(orders)
    report.revenue_cents = sum(orders)
    report.built_at = datetime.now(timezone.utc)
    report.status = "ready"
    return {"report_id": report_id, "revenue_cents": report.revenue_cents}


@stashed_task
def send_digest(to: str) -> int:
    ready = [r for r in reports.values() if r.status == "ready"]
    lines = [f"{r.month}: {r.order_count} orders, {r.revenue_cents} cents" for r in ready]
    mailer.send(to, f"Nightly digest: {len(ready)} report(s) ready", "\n".join(lines))
    return len(ready)
