"""Turns due events into signed HTTP deliveries and feeds their outcomes back into the store.

One step is split in two, ``next_job`` (pop what is due, mark it ACTIVE, build the signed
request) and ``finish`` (record the outcome, schedule a retry or fail, publish callbacks), so
the sync and async loops share everything but the line that sends.

Functions on the delivery path set ``__tracebackhide__``: pytest then shows a failed
delivery from the test's call straight to the app's frame (or our error).
"""

from __future__ import annotations

import base64
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import httpx

from ..errors import DeliveryLoopError, ReentrantCallError, UnroutedDeliveryError
from ..state.models import Delivery, DlqEntry, Message, MessageState, ms_to_datetime
from ..state.options import derived_options, header_lists, parse_options
from ..state.store import AttemptResult, Store
from .mounts import MountTable
from .signing import sign
from .transports import Outcome, Sender, Unrouted
from .workflow_body import workflow_delivery

USER_AGENT = "Upstash-QStash"
# A workflow of a few hundred steps and calls, none of them sleeping, is a legitimate chain of
# a thousand-odd deliveries at one instant; a runaway loop is stopped after this many.
_MAX_SAME_INSTANT = 5000
# Far above a year of an hourly schedule, a week of a minutely one; a handler republishing
# itself with a delay, forever, is stopped here within seconds instead of minutes.
_MAX_PER_CALL = 100_000


@dataclass(slots=True)
class Job:
    message: Message
    request: httpx.Request
    at_ms: int
    previous_state: MessageState


@dataclass
class DispatchSettings:
    signing_key: Callable[[], str]
    raise_app_exceptions: bool = True
    strict_routing: bool = True
    max_same_instant: int = _MAX_SAME_INSTANT
    max_per_call: int = _MAX_PER_CALL


class Dispatcher:
    def __init__(
        self,
        store: Store,
        mounts: MountTable,
        sender: Sender,
        settings: DispatchSettings,
        on_time: Callable[[int], None],
    ) -> None:
        self.store = store
        self.clock = store.clock
        self.mounts = mounts
        self.sender = sender
        self.settings = settings
        self.deliveries: list[Delivery] = []
        self._on_time = on_time  # keeps the app-visible clock on the virtual one
        self._recent: deque[tuple[str, str]] = deque(maxlen=5)
        self._running = False  # a run()/arun() is under way: they do not nest
        # Deliveries at one virtual instant of messages published by deliveries at that
        # instant: what the loop guard counts (a chain, or a fan-out that feeds itself).
        self._cascade_instant = -1
        self._cascade_deliveries = 0
        # Parsed destination URLs: parsing is half the cost of building a delivery request.
        self._urls: dict[str, httpx.URL] = {}

    # -- the two loops ----------------------------------------------------------------------
    def run(self, until_ms: int) -> list[Delivery]:
        __tracebackhide__ = True
        self._enter()
        made: list[Delivery] = []
        try:
            while (job := self.next_job(until_ms, len(made))) is not None:
                try:
                    outcome = self.sender.send(job.request)
                except Unrouted as exc:
                    outcome = self._unrouted(job, exc)
                except BaseException:
                    self._abandon(job)
                    raise
                made.append(self.finish(job, outcome))
        finally:
            self.store.delivering = None
            self._running = False
        self.settle(until_ms)
        return made

    async def arun(self, until_ms: int) -> list[Delivery]:
        __tracebackhide__ = True
        self._enter()
        made: list[Delivery] = []
        try:
            while (job := self.next_job(until_ms, len(made))) is not None:
                try:
                    outcome = await self.sender.asend(job.request)
                except Unrouted as exc:
                    outcome = self._unrouted(job, exc)
                except BaseException:
                    self._abandon(job)
                    raise
                made.append(self.finish(job, outcome))
        finally:
            self.store.delivering = None
            self._running = False
        self.settle(until_ms)
        return made

    def _enter(self) -> None:
        __tracebackhide__ = True
        self.refuse_reentry()
        self._running = True

    def refuse_reentry(self) -> None:
        """Refuse a tick()/advance() from inside a delivery; the fake checks this before it
        checks for a running event loop, the truer of the two errors for an async handler."""
        __tracebackhide__ = True
        if self._running:
            raise ReentrantCallError(
                "qstash.tick()/advance() was called from inside a delivery (an app's handler, "
                "or a respx side effect answering one): deliveries do not nest. Publishing "
                "there only enqueues; the tick()/advance() already running delivers what "
                "becomes due."
            )

    # -- steps ------------------------------------------------------------------------------
    def next_job(self, until_ms: int, made: int) -> Job | None:
        __tracebackhide__ = True
        while (event := self.clock.pop_due(until_ms)) is not None:
            if event.kind == "cron":
                self.store.fire_schedule(event.target, event.generation)
                continue
            if event.kind == "flow":
                self.store.wake_flow(event.target)
                continue
            message = self.store.live_message(event.target, event.generation)
            if message is None:
                continue  # stale: cancelled, or rescheduled since
            if not self.store.may_start(message):
                continue  # parked behind its queue's earlier messages; released later
            previous = message.state
            self._guard(message, made)
            self._on_time(self.clock.now_ms)
            self.store.start_attempt(message)
            self.store.delivering = message
            return Job(message, self._request(message), self.clock.now_ms, previous)
        return None

    def finish(self, job: Job, outcome: Outcome) -> Delivery:
        __tracebackhide__ = True
        message = job.message
        delivery = Delivery(
            message_id=message.message_id,
            url=message.url,
            method=message.method,
            headers=job.request.headers,
            content=job.request.content,
            at_ms=job.at_ms,
            retried=message.retried,
            status=outcome.status,
            response_headers=outcome.headers,
            response_content=outcome.content,
            error=outcome.error,
            exception=outcome.exception,
            kind=message.kind,
        )
        message.deliveries.append(delivery)
        self.deliveries.append(delivery)
        result = AttemptResult(outcome.status, outcome.headers, outcome.content, outcome.error)
        dlq_entry = self.store.finish_attempt(message, result)
        # No callbacks for a message cancelled while this attempt was in flight.
        if message.callback and message.state != "CANCELED":
            self._callback(message, delivery, message.callback, "upstash-callback-")
        if dlq_entry is not None and message.failure_callback:
            self._callback(
                message, delivery, message.failure_callback, "upstash-failure-callback-", dlq_entry
            )
        # What is published from here on (a cron firing, the test) is no part of its cascade.
        self.store.delivering = None
        if outcome.exception is not None and self.settings.raise_app_exceptions:
            raise outcome.exception
        return delivery

    def settle(self, until_ms: int) -> None:
        if until_ms > self.clock.now_ms:
            self.clock.move_to(until_ms)
        self._on_time(self.clock.now_ms)

    # -- helpers ----------------------------------------------------------------------------
    def _request(self, message: Message) -> httpx.Request:
        body = message.content
        if message.workflow_run_id is not None:
            # A workflow run's message: a step delivery carries the run's steps so far.
            body, headers = workflow_delivery(self.store.workflows, message)
        else:
            headers = httpx.Headers(message.headers)
        headers["User-Agent"] = USER_AGENT
        headers["Upstash-Message-Id"] = message.message_id
        headers["Upstash-Retried"] = str(message.retried)
        if message.url_group:
            headers["Upstash-Topic-Name"] = message.url_group
        if message.schedule_id:
            headers["Upstash-Schedule-Id"] = message.schedule_id
        headers["Upstash-Caller-Ip"] = message.caller_ip
        # Issued on the clock the app verifies with, read as PyJWT (every Receiver's verifier)
        # reads it: the virtual one while the fake moves the app's clock, the real one with
        # freeze_time=False, and a test's own freezer's when one (a @freeze_time decorator,
        # say) overrides ours, even one whose tz_offset shifts aware now() (freezegun's bug).
        iat = int(datetime.now(timezone.utc).timestamp())
        headers["Upstash-Signature"] = sign(
            content=body,
            url=message.url,
            key=self.settings.signing_key(),
            iat=iat,
            jti=self.store.ids.jwt_id(),
        )
        content = body if body or message.method != "GET" else None
        url = self._urls.get(message.url)
        if url is None:
            if len(self._urls) >= 1024:  # bounded: unique URLs per message must not pile up
                self._urls.clear()
            url = self._urls[message.url] = httpx.URL(message.url)
        return httpx.Request(message.method, url, headers=headers, content=content)

    def _abandon(self, job: Job) -> None:
        """A delivery cut short by what is no app error (a cancellation, KeyboardInterrupt,
        SystemExit): the attempt did not happen; the message is due again, not stuck ACTIVE."""
        self.store.requeue(job.message, job.previous_state)

    def _unrouted(self, job: Job, exc: Unrouted) -> Outcome:
        __tracebackhide__ = True
        if self.settings.strict_routing:
            self.store.requeue(job.message, job.previous_state)
            reason = exc.reason
            message = job.message
            if message.callback_for is not None:
                reason += f"; it is a callback reporting on {message.callback_for}"
            elif self.store.workflows.is_third_party_call(message):
                step = (message.callback_headers or httpx.Headers()).get(
                    "upstash-callback-forward-upstash-workflow-stepname", "?"
                )
                reason += (
                    f"; it is the context.call {step!r} of workflow run "
                    f"{message.workflow_run_id}: mount or mock that third party"
                )
            raise UnroutedDeliveryError(
                job.message.url, job.message.message_id, self.mounts.base_urls, reason
            ) from None
        return Outcome(None, httpx.Headers(), b"", f"unrouted: {exc.reason}")

    def _guard(self, message: Message, made: int) -> None:
        """Stop a runaway cascade: deliveries publishing more deliveries for the same instant
        (a chain, or a fan-out feeding itself), so that time never moves. Plenty of
        independent messages due at once are no cascade, and are never stopped."""
        __tracebackhide__ = True
        self._recent.append((message.message_id, message.url))
        now = self.clock.now_ms
        if message.cascade_depth and message.created_ms == now:
            if self._cascade_instant != now:
                self._cascade_instant, self._cascade_deliveries = now, 0
            self._cascade_deliveries += 1
        runaway = (
            self._cascade_instant == now
            and self._cascade_deliveries >= self.settings.max_same_instant
        )
        if not runaway and made < self.settings.max_per_call:
            return
        self.store.requeue(message, message.state)
        recent = "; ".join(f"{mid} -> {url}" for mid, url in self._recent)
        if runaway:
            what = (
                f"{self._cascade_deliveries} deliveries at the virtual instant "
                f"{ms_to_datetime(now).isoformat()} of messages that deliveries at that same "
                f"instant published (chains up to {message.cascade_depth} long): a handler "
                "seems to republish at once, forever"
            )
            option = "max_deliveries_per_instant"
        else:
            what = f"{made} deliveries in one call"
            option = "max_deliveries_per_call"
        raise DeliveryLoopError(
            f"delivery loop stopped after {what}. Most recent: {recent}. "
            "Nothing is lost: the messages are kept. If this is intended, raise the limit: "
            f"@pytest.mark.qstash({option}=...) or FakeQStash({option}=...)."
        )

    def _callback(
        self,
        source: Message,
        delivery: Delivery,
        url: str,
        prefix: str,
        dlq_entry: DlqEntry | None = None,
    ) -> None:
        payload: dict[str, Any] = {
            "status": delivery.status if delivery.status is not None else 0,
            "header": header_lists(delivery.response_headers),
            "body": base64.b64encode(delivery.response_content).decode(),
            "retried": delivery.retried,
            "maxRetries": source.max_retries,
            "sourceMessageId": source.message_id,
            "url": source.url,
            "method": source.method,
            "sourceHeader": header_lists(source.headers),
            "sourceBody": base64.b64encode(source.content).decode(),
            "notBefore": source.not_before_ms,
            "createdAt": source.created_ms,
            "callerIP": source.caller_ip,
        }
        for key, value in (
            ("topicName", source.url_group),
            ("endpointName", source.endpoint_name),
            ("scheduleId", source.schedule_id),
        ):
            if value:
                payload[key] = value
        if dlq_entry is not None:
            payload["dlqId"] = dlq_entry.dlq_id
            if source.workflow_run_id is not None:
                # A workflow's failure callback names the run; sourceBody is its initial payload.
                payload.update(self.store.workflows.failure_fields(source))
        if delivery.error and delivery.status is None:
            payload["error"] = delivery.error
        headers = derived_options(
            source.failure_callback_headers if dlq_entry else source.callback_headers, prefix
        )
        opts = parse_options(headers)
        opts.headers["Content-Type"] = opts.headers.get("Content-Type", "application/json")
        callback = self.store.create_message(
            url,
            json.dumps(payload, separators=(",", ":")).encode(),
            opts,
            callback_for=source.message_id,
            max_retries=source.max_retries,
        )
        callback.is_failure_callback = dlq_entry is not None
