"""Attempts in flight: an HTTP call to a destination from its start to its end.

The app is called when an attempt starts (the request is signed then, and what the handler
publishes exists from that moment); its answer is applied when the attempt ends. An attempt
without a duration starts and ends at the same instant. Between the two the message is
ACTIVE and the attempt counts against its queue, its flow-control key's parallelism and the
account's global parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from .models import Message, MessageState

#: QStash answers 489 with this header set to mean "do not retry".
NON_RETRYABLE_STATUS = 489


@dataclass(slots=True)
class AttemptResult:
    status: int | None
    headers: httpx.Headers
    content: bytes
    error: str | None = None
    #: The exception the app raised, kept for re-raising when the attempt ends.
    exception: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def non_retryable(self) -> bool:
        return is_non_retryable(self.status, self.headers)


def is_non_retryable(status: int | None, headers: httpx.Headers) -> bool:
    """489 with ``Upstash-NonRetryable-Error: true``: QStash gives up at once."""
    return (
        status == NON_RETRYABLE_STATUS
        and headers.get("upstash-nonretryable-error", "").lower() == "true"
    )


def timeout_error(method: str, url: str) -> str:
    """What QStash logs for an attempt it cut at its timeout (Go's HTTP client error)."""
    return (
        f'{method.title()} "{url}": context deadline exceeded '
        "(Client.Timeout exceeded while awaiting headers)"
    )


CANCELED_IN_FLIGHT = "the message was cancelled while this attempt was in flight"


@dataclass(eq=False, slots=True)
class Attempt:
    message: Message
    started_ms: int
    #: The message's state before the attempt started (put back if it cannot be made).
    previous_state: MessageState
    #: Which end event belongs to this attempt: a stale one is skipped.
    generation: int
    #: The request as sent (headers, body), kept for the delivery record.
    headers: httpx.Headers | None = None
    content: bytes = b""
    #: When the attempt ends: None while the app is being called.
    ends_ms: int | None = None
    #: What the attempt will be recorded as when it ends.
    result: AttemptResult | None = None
    #: The flow-control key whose parallelism this attempt counts against.
    flow_key: str | None = None

    def sent(self, headers: httpx.Headers, content: bytes) -> None:
        """The request the attempt made, as sent: kept for the delivery record."""
        self.headers, self.content = headers, content
