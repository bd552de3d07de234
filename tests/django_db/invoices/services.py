"""The outside world the invoicing tasks talk to, as a test double: a mail server that can be
down and a ledger API that can ask callers to slow down."""

from __future__ import annotations

from dataclasses import dataclass, field


class MailServerDown(Exception):
    pass


class RateLimited(Exception):
    pass


@dataclass
class Mailer:
    outbox: list[tuple[str, str]] = field(default_factory=list)
    failures_left: int = 0

    def send(self, to: str, subject: str) -> None:
        if self.failures_left:
            self.failures_left -= 1
            raise MailServerDown("the mail server did not answer")
        self.outbox.append((to, subject))


@dataclass
class Ledger:
    rate_limited_calls_left: int = 0

    def record(self, invoice_id: int) -> None:
        if self.rate_limited_calls_left:
            self.rate_limited_calls_left -= 1
            raise RateLimited("429: slow down")


mailer = Mailer()
ledger = Ledger()
