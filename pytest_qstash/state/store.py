"""The in-memory QStash: messages and their lifecycle, the log, the DLQ, deduplication.

Every transition a message goes through happens here, is logged as QStash logs it, and puts
what comes next on the virtual clock. Nothing here knows HTTP.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from .account import Account
from .clock import VirtualClock
from .ids import IdGenerator
from .models import DlqEntry, Event, Message, MessageState
from .options import MessageOptions
from .retry import (
    DEFAULT_RETRIES,
    InvalidRetryDelay,
    RetryDelayExpression,
    default_backoff_ms,
    next_retry_delay_ms,
)
from .url_groups import UrlGroup

#: QStash answers 489 with this header set to mean "do not retry".
NON_RETRYABLE_STATUS = 489
DEFAULT_DEDUP_WINDOW_MS = 10 * 60 * 1000


@dataclass(slots=True)
class AttemptResult:
    status: int | None
    headers: httpx.Headers
    content: bytes
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def non_retryable(self) -> bool:
        return (
            self.status == NON_RETRYABLE_STATUS
            and self.headers.get("upstash-nonretryable-error", "").lower() == "true"
        )


class Store:
    def __init__(
        self,
        clock: VirtualClock,
        ids: IdGenerator,
        account: Account,
        *,
        default_retries: int = DEFAULT_RETRIES,
        dedup_window_ms: int = DEFAULT_DEDUP_WINDOW_MS,
    ) -> None:
        self.clock = clock
        self.ids = ids
        self.account = account
        self.default_retries = default_retries
        self.dedup_window_ms = dedup_window_ms
        self.messages: dict[str, Message] = {}
        self.events: list[Event] = []
        self.dlq: dict[str, DlqEntry] = {}
        self.url_groups: dict[str, UrlGroup] = {}
        self._dedup: dict[str, tuple[str, int]] = {}
        self._generation: dict[str, int] = {}
        self._dlq_seq = 0
        self._expressions: dict[str, RetryDelayExpression] = {}

    # -- creation ---------------------------------------------------------------------------
    def create_message(
        self,
        url: str,
        content: bytes,
        opts: MessageOptions,
        *,
        queue: str | None = None,
        url_group: str | None = None,
        endpoint_name: str | None = None,
        schedule_id: str | None = None,
        callback_for: str | None = None,
        max_retries: int | None = None,
    ) -> Message:
        now = self.clock.now_ms
        if opts.not_before_ms is not None:
            not_before = opts.not_before_ms
        else:
            not_before = now + (opts.delay_ms or 0)
        retries = opts.retries if opts.retries is not None else max_retries
        message = Message(
            message_id=self.ids.message_id(),
            url=url,
            method=opts.method,
            headers=opts.headers,
            content=content,
            created_ms=now,
            not_before_ms=not_before,
            max_retries=self.default_retries if retries is None else retries,
            queue=queue,
            url_group=url_group,
            endpoint_name=endpoint_name,
            schedule_id=schedule_id,
            label=opts.label,
            deduplication_id=opts.deduplication_id,
            content_based_deduplication=opts.content_based_deduplication,
            retry_delay=opts.retry_delay.text if opts.retry_delay else None,
            timeout_ms=opts.timeout_ms,
            callback=opts.callback,
            failure_callback=opts.failure_callback,
            callback_headers=opts.callback_headers,
            failure_callback_headers=opts.failure_callback_headers,
            flow_control=opts.flow_control,
            redact=opts.redact,
            callback_for=callback_for,
        )
        self.messages[message.message_id] = message
        self._log(message, "CREATED", next_delivery_ms=not_before if not_before > now else None)
        self._schedule(message, not_before)
        return message

    def dedup_key(self, url: str, content: bytes, opts: MessageOptions) -> str | None:
        """The key a publish is deduplicated on, or None when it asks for no deduplication."""
        if opts.deduplication_id is not None:
            return "id:" + opts.deduplication_id
        if not opts.content_based_deduplication:
            return None
        digest = hashlib.sha256()
        for part in (url.encode(), content, *_header_bytes(opts.headers)):
            digest.update(len(part).to_bytes(8, "big") + part)
        return "content:" + digest.hexdigest()

    def deduplicated(self, key: str | None) -> Message | None:
        """The message an earlier publish with the same key created within the window."""
        if key is None:
            return None
        hit = self._dedup.get(key)
        if hit is None or hit[1] <= self.clock.now_ms:
            return None
        return self.messages.get(hit[0])

    def remember_dedup(self, key: str | None, message: Message) -> None:
        if key is not None:
            self._dedup[key] = (message.message_id, self.clock.now_ms + self.dedup_window_ms)

    # -- lifecycle --------------------------------------------------------------------------
    def is_current(self, message_id: str, generation: int) -> Message | None:
        """The message a due event is for, unless the event went stale (cancelled, moved on)."""
        message = self.messages.get(message_id)
        if message is None or message.done or self._generation.get(message_id) != generation:
            return None
        return message

    def start_attempt(self, message: Message) -> None:
        message.state = "ACTIVE"
        self._log(message, "ACTIVE")

    def requeue(self, message: Message, previous: MessageState) -> None:
        """Put back an attempt that could not be made (nothing to deliver it to)."""
        message.state = previous
        self._schedule(message, self.clock.now_ms)

    def finish_attempt(self, message: Message, result: AttemptResult) -> DlqEntry | None:
        """Record an attempt's outcome; schedule the retry or fail for good (into the DLQ)."""
        if result.ok:
            message.state = "DELIVERED"
            self._log(message, "DELIVERED", result=result)
            return None
        self._log(message, "ERROR", result=result, error=_error_text(result))
        if result.non_retryable or message.retried >= message.max_retries:
            return self._fail(message, result)
        try:
            delay = next_retry_delay_ms(
                retried=message.retried,
                expression=self._expression(message.retry_delay),
                response_headers=result.headers,
                now_ms=self.clock.now_ms,
            )
        except InvalidRetryDelay:
            # The expression was valid at publish but not for this value of `retried`
            # (e.g. overflow): fall back to QStash's default backoff rather than lose it.
            delay = default_backoff_ms(message.retried + 1)
        message.retried += 1
        message.state = "RETRY"
        due = self.clock.now_ms + delay
        message.not_before_ms = due
        self._log(message, "RETRY", next_delivery_ms=due)
        self._schedule(message, due)
        return None

    def cancel(self, message: Message) -> bool:
        if message.done:
            return False
        self._generation[message.message_id] = -1  # any due event for it is now stale
        self._log(message, "CANCEL_REQUESTED")
        message.state = "CANCELED"
        self._log(message, "CANCELED")
        return True

    def pending(self) -> Iterable[Message]:
        return (m for m in self.messages.values() if not m.done)

    # -- internals --------------------------------------------------------------------------
    def _expression(self, text: str | None) -> RetryDelayExpression | None:
        if text is None:
            return None
        if text not in self._expressions:
            self._expressions[text] = RetryDelayExpression(text)
        return self._expressions[text]

    def _schedule(self, message: Message, due_ms: int) -> None:
        generation = self._generation.get(message.message_id, 0) + 1
        self._generation[message.message_id] = generation
        self.clock.schedule(due_ms, "deliver", message.message_id, generation)

    def _fail(self, message: Message, result: AttemptResult) -> DlqEntry:
        message.state = "FAILED"
        self._log(message, "FAILED", result=result, error=_error_text(result))
        self._dlq_seq += 1
        entry = DlqEntry(
            dlq_id=f"{self.clock.now_ms}-{self._dlq_seq}",
            message=message,
            created_ms=self.clock.now_ms,
            response_status=result.status,
            response_headers=result.headers,
            response_content=result.content,
            error=result.error,
        )
        self.dlq[entry.dlq_id] = entry
        return entry

    def _log(
        self,
        message: Message,
        state: MessageState,
        *,
        result: AttemptResult | None = None,
        error: str | None = None,
        next_delivery_ms: int | None = None,
    ) -> None:
        self.events.append(
            Event(
                message_id=message.message_id,
                state=state,
                time_ms=self.clock.now_ms,
                url=message.url,
                error=error,
                next_delivery_ms=next_delivery_ms,
                response_status=result.status if result else None,
                response_headers=result.headers if result else None,
                response_content=result.content if result else None,
                message=message,
            )
        )


def _header_bytes(headers: httpx.Headers) -> list[bytes]:
    return sorted(f"{k.lower()}:{v}".encode() for k, v in headers.multi_items())


def _error_text(result: AttemptResult) -> str:
    if result.error:
        return result.error
    if result.non_retryable:
        return f"non-retryable error: the endpoint answered {result.status}"
    return f"the endpoint answered {result.status}"
