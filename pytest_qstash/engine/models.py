"""What the fake keeps in memory: plain objects a test reads, knowing nothing of HTTP.

Times are stored as integer milliseconds since the epoch (exact, cheap to compare); the
``datetime`` views users read are derived on access.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Protocol

import httpx

from .options import FlowControl, MessageOptions
from .retry import (
    InvalidRetryDelay,
    default_backoff_ms,
    delay_before_retry_ms,
)

MessageState = Literal[
    "CREATED", "ACTIVE", "RETRY", "ERROR", "DELIVERED", "FAILED", "CANCEL_REQUESTED", "CANCELED"
]
#: States after which nothing more happens to a message.
FINAL_STATES: frozenset[str] = frozenset({"DELIVERED", "FAILED", "CANCELED"})
#: What a delivery carries: a message the app (or the test) published, or a (failure)
#: callback QStash sends about one.
DeliveryKind = Literal["message", "callback", "failure_callback"]


class InvalidTransition(ValueError):
    """A message or a workflow run was asked to go where its state does not lead (a
    ``ValueError``): delivered again while still pending, say, or resumed while running."""


class Answer(Protocol):
    """What an attempt's end reports (``attempts.AttemptResult``), as the log reads it."""

    @property
    def status(self) -> int | None: ...

    @property
    def headers(self) -> httpx.Headers: ...

    @property
    def content(self) -> bytes: ...

    @property
    def error(self) -> str | None: ...

    @property
    def non_retryable(self) -> bool: ...


def ms_to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def split_labels(label: str | None) -> tuple[str, ...]:
    """``Upstash-Label`` as the labels it names: ``"a,b"`` is the labels ``a`` and ``b``."""
    if not label:
        return ()
    return tuple(dict.fromkeys(part.strip() for part in label.split(",") if part.strip()))


#: How much of an endpoint's answer an attempt's record keeps (and its log entries and DLQ
#: entry): its first MiB. QStash documents no bound for what its logs keep; its callbacks carry
#: the answer cut to the plan's largest message, the smallest of which is 1 MiB.
KEPT_RESPONSE_BYTES = 1024 * 1024


@dataclass(eq=False, slots=True)
class Delivery:
    """One HTTP attempt of a message (or callback) to its destination."""

    message_id: str
    url: str
    method: str
    headers: httpx.Headers
    content: bytes
    at_ms: int
    retried: int
    status: int | None = None
    response_headers: httpx.Headers = field(default_factory=httpx.Headers)
    response_content: bytes = b""
    error: str | None = None
    #: The exception the app raised, kept for re-raising with its traceback.
    exception: BaseException | None = field(default=None, repr=False)
    #: ``"message"``, or ``"callback"`` / ``"failure_callback"`` for the callbacks QStash
    #: sends about a message (they are deliveries too, usually into the same app).
    kind: DeliveryKind = "message"
    #: When the attempt ended (its answer arrived, or it was cut): ``at_ms`` plus the time
    #: the handler took.
    ended_ms: int | None = None

    @property
    def body(self) -> str:
        return _text(self.content)

    @property
    def response_body(self) -> str:
        return _text(self.response_content)

    @property
    def at(self) -> datetime:
        """When the attempt started (the app was called, the request signed)."""
        return ms_to_datetime(self.at_ms)

    @property
    def ended_at(self) -> datetime:
        """When the attempt ended; the same as ``at`` for a handler that takes no time."""
        return ms_to_datetime(self.at_ms if self.ended_ms is None else self.ended_ms)

    @property
    def duration(self) -> timedelta:
        """How long the attempt was in flight, on the virtual clock."""
        end = self.at_ms if self.ended_ms is None else self.ended_ms
        return timedelta(milliseconds=end - self.at_ms)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.content)

    def __repr__(self) -> str:
        outcome = f"status={self.status}" if self.status is not None else f"error={self.error!r}"
        kind = "" if self.kind == "message" else f" ({self.kind})"
        return (
            f"<Delivery {self.message_id}{kind} {self.method} {self.url} "
            f"retried={self.retried} {outcome} at={self.at.isoformat()}>"
        )


@dataclass(eq=False, slots=True)
class Message:
    """A message as QStash keeps it, from publish to its final state."""

    message_id: str
    url: str
    content: bytes
    created_ms: int
    not_before_ms: int
    max_retries: int
    #: What it was published with; ``method``, ``headers``, ``label``, ``callback``... read it.
    options: MessageOptions = field(default_factory=MessageOptions, repr=False)
    state: MessageState = "CREATED"
    retried: int = 0
    queue: str | None = None
    url_group: str | None = None
    endpoint_name: str | None = None
    schedule_id: str | None = None
    caller_ip: str = "127.0.0.1"
    #: When this message is a (failure) callback: the id of the message it reports on.
    callback_for: str | None = None
    #: On a callback message: whether it is the failure callback (sent once the retries ran
    #: out) rather than the callback sent after each attempt.
    is_failure_callback: bool = False
    workflow_run_id: str | None = None
    #: The Upstash Workflow run this message's delivery started: a plain publish to a
    #: workflow route, whose run begins with a message of its own (``workflow_run_id``).
    started_run_id: str | None = None
    #: When a DLQ retry published this message: the id of the message that failed.
    retried_from: str | None = None
    deliveries: list[Delivery] = field(default_factory=list)
    #: How many deliveries in a row, at one virtual instant, led to this message (0 when it
    #: was published by the test, or is due later): what the loop guard watches.
    cascade_depth: int = 0
    #: Whether a schedule's firing started the chain that published this message (its own
    #: firing, or a delivery of such a message): ``drain()`` does not wait for these.
    from_schedule: bool = False

    @property
    def body(self) -> str:
        return _text(self.content)

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def created_at(self) -> datetime:
        return ms_to_datetime(self.created_ms)

    @property
    def not_before(self) -> datetime:
        return ms_to_datetime(self.not_before_ms)

    @property
    def content_type(self) -> str | None:
        value: str | None = self.headers.get("content-type")
        return value

    # -- what it was published with (its options) ------------------------------------------
    @property
    def method(self) -> str:
        return self.options.method

    @property
    def headers(self) -> httpx.Headers:
        """Headers delivered with the message: Content-Type and the forwarded headers,
        prefix stripped."""
        return self.options.headers

    @property
    def label(self) -> str | None:
        return self.options.label

    @property
    def deduplication_id(self) -> str | None:
        return self.options.deduplication_id

    @property
    def content_based_deduplication(self) -> bool:
        return self.options.content_based_deduplication

    @property
    def retry_delay(self) -> str | None:
        """The ``Upstash-Retry-Delay`` expression as given."""
        expression = self.options.retry_delay
        return None if expression is None else expression.text

    def delay_before_retry_ms(self, response_headers: Mapping[str, str] | None, now_ms: int) -> int:
        """How long to wait before retrying this message, whose attempt just failed with
        ``response_headers`` (``retry.delay_before_retry_ms``). An expression that cannot be
        evaluated for this retry (valid when published, an overflow now) gives QStash's
        default backoff rather than lose the message."""
        try:
            return delay_before_retry_ms(
                retried=self.retried,
                expression=self.options.retry_delay,
                response_headers=response_headers,
                now_ms=now_ms,
            )
        except InvalidRetryDelay:
            return default_backoff_ms(self.retried + 1)

    @property
    def timeout_ms(self) -> int | None:
        return self.options.timeout_ms

    @property
    def callback(self) -> str | None:
        return self.options.callback

    @property
    def failure_callback(self) -> str | None:
        return self.options.failure_callback

    @property
    def callback_headers(self) -> httpx.Headers | None:
        """Raw ``Upstash-Callback-*`` headers, prefix kept."""
        return self.options.callback_headers

    @property
    def failure_callback_headers(self) -> httpx.Headers | None:
        """Raw ``Upstash-Failure-Callback-*`` headers, prefix kept."""
        return self.options.failure_callback_headers

    @property
    def flow_control(self) -> FlowControl | None:
        return self.options.flow_control

    @property
    def redact(self) -> tuple[str, ...]:
        return self.options.redact

    @property
    def labels(self) -> tuple[str, ...]:
        """The labels ``label`` names (``Upstash-Label: a,b`` is ``("a", "b")``)."""
        return split_labels(self.label)

    @property
    def last_delivery(self) -> Delivery | None:
        return self.deliveries[-1] if self.deliveries else None

    @property
    def done(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def kind(self) -> DeliveryKind:
        """``"message"``, or ``"callback"`` / ``"failure_callback"`` for a callback QStash
        publishes about another message (``callback_for``)."""
        if self.callback_for is None:
            return "message"
        return "failure_callback" if self.is_failure_callback else "callback"

    # -- transitions: each checks it is allowed, and returns what it logs ------------------
    def created(self, now_ms: int) -> Event:
        """The log entry of its publish at ``now_ms``: CREATED, with when it is due if later."""
        self._require("be created", _NEW)
        due = self.not_before_ms
        return self._event("CREATED", now_ms, next_delivery_ms=due if due > now_ms else None)

    def start(self, now_ms: int) -> Event:
        """An attempt starts: CREATED or RETRY to ACTIVE, until the attempt ends."""
        self._require("start an attempt", _STARTABLE)
        self.state = "ACTIVE"
        return self._event("ACTIVE", now_ms)

    def put_back(self, previous: MessageState) -> None:
        """An attempt started that could not be made: back to the state it started from
        (the store forgets the ACTIVE entry; nothing is logged)."""
        self._require("be put back", _ATTEMPTING)
        if previous not in _STARTABLE:
            raise InvalidTransition(
                f"message {self.message_id} cannot be put back to {previous}: an attempt "
                f"starts from {_names(_STARTABLE)}"
            )
        self.state = previous

    def succeed(self, answer: Answer, now_ms: int) -> Event:
        """Its attempt was answered with success: DELIVERED."""
        self._require("be delivered", _ATTEMPTING)
        self.state = "DELIVERED"
        return self._event("DELIVERED", now_ms, answer)

    def error(self, answer: Answer, now_ms: int) -> Event:
        """Its attempt failed (an error status, no answer): logged ERROR; it stays ACTIVE
        until it is retried (``retry``) or fails for good (``fail``)."""
        self._require("log an error", _ATTEMPTING)
        return self._event("ERROR", now_ms, answer, error=_error_text(answer))

    def retry(self, due_ms: int, now_ms: int) -> Event:
        """Its failed attempt is retried at ``due_ms``: RETRY, one more retry counted."""
        self._require("be retried", _ATTEMPTING)
        self.retried += 1
        self.state = "RETRY"
        self.not_before_ms = due_ms
        return self._event("RETRY", now_ms, next_delivery_ms=due_ms)

    def fail(self, answer: Answer, now_ms: int) -> Event:
        """Its retries ran out (or the answer was non-retryable): FAILED."""
        self._require("fail", _ATTEMPTING)
        self.state = "FAILED"
        return self._event("FAILED", now_ms, answer, error=_error_text(answer))

    def cancel(self, now_ms: int) -> tuple[Event, Event]:
        """Cancelled before its final state: CANCEL_REQUESTED, then CANCELED."""
        self._require("be cancelled", _PENDING)
        requested = self._event("CANCEL_REQUESTED", now_ms)
        self.state = "CANCELED"
        return requested, self._event("CANCELED", now_ms)

    def redeliver(self, now_ms: int) -> None:
        """Delivered once more (QStash's at-least-once delivery): DELIVERED to CREATED, due
        at ``now_ms``, the cascade it came from over; nothing is logged until it starts."""
        if self.state != "DELIVERED":
            raise InvalidTransition(
                f"cannot redeliver {self.message_id}: it is {self.state}; only a DELIVERED "
                "message is delivered again (a pending one will be delivered anyway)"
            )
        self.state = "CREATED"
        self.cascade_depth, self.from_schedule = 0, False
        self.not_before_ms = now_ms

    def run_now(self, now_ms: int) -> None:
        """A waiting message (delayed, or between retries) is due at ``now_ms``."""
        self._require("run now", _STARTABLE)
        self.not_before_ms = now_ms

    def _require(self, transition: str, allowed: frozenset[str]) -> None:
        if self.state not in allowed:
            raise InvalidTransition(
                f"message {self.message_id} cannot {transition}: it is {self.state} "
                f"(only from {_names(allowed)})"
            )

    def _event(
        self,
        state: MessageState,
        now_ms: int,
        answer: Answer | None = None,
        *,
        error: str | None = None,
        next_delivery_ms: int | None = None,
    ) -> Event:
        return Event(
            message_id=self.message_id,
            state=state,
            time_ms=now_ms,
            url=self.url,
            error=error,
            next_delivery_ms=next_delivery_ms,
            response_status=None if answer is None else answer.status,
            response_headers=None if answer is None else answer.headers,
            response_content=None if answer is None else answer.content,
            message=self,
        )

    def __repr__(self) -> str:
        return (
            f"<Message {self.message_id} {self.method} {self.url} state={self.state} "
            f"retried={self.retried}/{self.max_retries} not_before={self.not_before.isoformat()}>"
        )


#: Where each message transition may start from.
_NEW: frozenset[str] = frozenset({"CREATED"})
_STARTABLE: frozenset[str] = frozenset({"CREATED", "RETRY"})
_ATTEMPTING: frozenset[str] = frozenset({"ACTIVE"})
_PENDING: frozenset[str] = frozenset({"CREATED", "ACTIVE", "RETRY"})


def _names(states: frozenset[str]) -> str:
    return " or ".join(sorted(states))


def _error_text(answer: Answer) -> str:
    """What the log says of a failed attempt."""
    if answer.error:
        return answer.error
    if answer.non_retryable:
        return f"non-retryable error: the endpoint answered {answer.status}"
    return f"the endpoint answered {answer.status}"


@dataclass(eq=False, slots=True)
class DlqEntry:
    """A message whose retries ran out (or that was refused as non-retryable)."""

    dlq_id: str
    message: Message
    created_ms: int
    response_status: int | None
    response_headers: httpx.Headers
    response_content: bytes
    error: str | None = None

    @property
    def message_id(self) -> str:
        return self.message.message_id

    @property
    def url(self) -> str:
        return self.message.url

    @property
    def body(self) -> str:
        return self.message.body

    def json(self) -> Any:
        return self.message.json()

    @property
    def response_body(self) -> str:
        return _text(self.response_content)

    @property
    def retried(self) -> int:
        return self.message.retried

    @property
    def workflow_run_id(self) -> str | None:
        return self.message.workflow_run_id

    @property
    def created_at(self) -> datetime:
        return ms_to_datetime(self.created_ms)

    def __repr__(self) -> str:
        return (
            f"<DlqEntry {self.dlq_id} {self.message_id} {self.url} "
            f"response_status={self.response_status} retried={self.retried}>"
        )


@dataclass(eq=False, slots=True)
class Event:
    """One entry of QStash's log (``GET /v2/events``): a state a message entered."""

    message_id: str
    state: MessageState
    time_ms: int
    url: str
    error: str | None = None
    next_delivery_ms: int | None = None
    response_status: int | None = None
    response_headers: httpx.Headers | None = None
    response_content: bytes | None = None
    #: The message this entry is about, for filters and the API's message fields.
    message: Message | None = field(default=None, repr=False)

    @property
    def time(self) -> datetime:
        return ms_to_datetime(self.time_ms)

    @property
    def next_delivery_time(self) -> datetime | None:
        return None if self.next_delivery_ms is None else ms_to_datetime(self.next_delivery_ms)

    @property
    def response_body(self) -> str | None:
        return None if self.response_content is None else _text(self.response_content)

    def __repr__(self) -> str:
        return f"<Event {self.time.isoformat()} {self.message_id} {self.state} {self.url}>"


@dataclass(eq=False, slots=True)
class ApiCall:
    """One call to the QStash HTTP API and the fake's answer, as the client saw them."""

    method: str
    #: The API path (without the query, and without a proxy's prefix from ``QSTASH_URL``).
    path: str
    request_url: httpx.URL
    headers: httpx.Headers
    content: bytes
    at_ms: int
    #: ``None`` when the call got no answer (a ``fail_next(kind="network")``).
    status: int | None
    response_headers: httpx.Headers = field(default_factory=httpx.Headers)
    response_content: bytes = b""
    #: Why there was no answer (the exception raised to the client), else None.
    error: str | None = None

    @property
    def url(self) -> str:
        """The URL called, query included (made into text when read: calls are many)."""
        return str(self.request_url)

    @property
    def body(self) -> str:
        return _text(self.content)

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def response_body(self) -> str:
        return _text(self.response_content)

    def response_json(self) -> Any:
        return json.loads(self.response_content)

    @property
    def at(self) -> datetime:
        return ms_to_datetime(self.at_ms)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def __repr__(self) -> str:
        outcome = f"status={self.status}" if self.status is not None else f"error={self.error!r}"
        return f"<ApiCall {self.method} {self.path} {outcome} at={self.at.isoformat()}>"


@dataclass(eq=False, slots=True)
class Invoker:
    """The run whose ``context.invoke`` started a run, and how to resume it."""

    run_id: str
    url: str
    created_ms: int | None
    #: The invoke step as the SDK sent it (``stepId``, ``stepName``, ``stepType: Invoke``).
    step: dict[str, Any] = field(repr=False)
    #: The publish headers of the step that resumes the invoker.
    headers: dict[str, str] = field(repr=False)
    #: What resumes the invoker: the invoke step's publish into its run (read from
    #: ``headers`` by the API when the invoke is published).
    options: MessageOptions | None = field(default=None, repr=False)

    @property
    def created_at(self) -> datetime | None:
        return None if self.created_ms is None else ms_to_datetime(self.created_ms)

    def resumed_with(self, options: MessageOptions) -> Invoker:
        """This invoker, resumed by a publish with ``options`` (read from ``headers``)."""
        return replace(self, options=options)

    def __repr__(self) -> str:
        return f"<Invoker {self.run_id} {self.url} step={self.step.get('stepName')!r}>"
