"""The service's state and the outside world it talks to, kept in memory.

``reports`` is where the tasks write their results (a real service would use its database);
``sales_api`` and ``mailer`` stand in for the third-party APIs the tasks call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any


# -- the outside world: a sales API and an email provider ----------------------------------
class SalesApiUnavailable(Exception):
    pass


@dataclass
class SalesApi:
    """Stands in for the sales system's API: the order totals (in cents) of each month."""

    orders: dict[str, list[int]] = field(default_factory=dict)
    #: How many of the next calls fail, as during an outage.
    failures_left: int = 0

    def monthly_orders(self, month: str) -> list[int]:
        if self.failures_left > 0:
            self.failures_left -= 1
            raise SalesApiUnavailable("sales API timed out")
        return list(self.orders.get(month, []))


@dataclass
class Email:
    to: str
    subject: str
    body: str
    sent_at: datetime


@dataclass
class Mailer:
    """Stands in for an email API: what it sends lands in ``outbox``."""

    outbox: list[Email] = field(default_factory=list)

    def send(self, to: str, subject: str, body: str) -> None:
        self.outbox.append(Email(to, subject, body, sent_at=datetime.now(timezone.utc)))


sales_api = SalesApi()
mailer = Mailer()


# -- the reports ---------------------------------------------------------------------------
@dataclass
class Report:
    id: int
    month: str
    status: str = "queued"  # then "ready", or "failed" once QStash gives up
    task_id: str = ""
    attempts: int = 0
    order_count: int | None = None
    revenue_cents: int | None = None
    built_at: datetime | None = None
    error: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "month": self.month,
            "status": self.status,
            "task_id": self.task_id,
            "attempts": self.attempts,
            "order_count": self.order_count,
            "revenue_cents": self.revenue_cents,
            "built_at": self.built_at.isoformat() if self.built_at else None,
            "error": self.error,
        }


reports: dict[int, Report] = {}


def new_report(month: str) -> Report:
    report = Report(id=len(reports) + 1, month=month)
    reports[report.id] = report
    return report


def reset() -> None:
    """Forget all reports and sent emails, and end any outage (tests call this)."""
    reports.clear()
    mailer.outbox.clear()
    sales_api.orders = {"2026-01": [1200, 3400, 560], "2026-02": [9900, 100]}
    sales_api.failures_left = 0
