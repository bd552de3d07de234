"""The in-memory QStash: messages and their lifecycle, and the log.

Every transition a message goes through happens here, is logged as QStash logs it, and puts
what comes next on the virtual clock. The resources beside messages are collections that own
their rules (the DLQ, deduplication, queues, flow-control keys, schedules, workflow runs); the
store holds them and delegates. Nothing here knows HTTP.

The Store is composed of its verbs, grouped by what they act on: ``admission.py`` (when a
due message may start), ``store_runs.py`` (workflow runs), ``store_resources.py`` (URL
groups, schedules, flow keys, dead letters), ``store_limits.py`` (the plan's checks). This
module keeps the state, a message's creation and its attempts.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice

import httpx

from .account import Account
from .admission import Admission
from .attempts import (
    CANCELED_IN_FLIGHT,
    NON_RETRYABLE_STATUS,
    Attempt,
    AttemptResult,
    is_non_retryable,
    timeout_error,
)
from .callbacks import callback_options, callback_payload
from .clock import VirtualClock
from .dedup import DEFAULT_DEDUP_WINDOW_MS, Deduplication, dedup_key
from .deliverable import is_url
from .dlq import DeadLetters
from .engine import Published
from .flow_control import FlowKeys
from .ids import IdGenerator
from .models import KEPT_RESPONSE_BYTES, Delivery, DlqEntry, Event, Message
from .options import MessageOptions
from .plans import DEFAULT_PLAN, PLANS, Plan
from .queues import Queues
from .rejections import RejectedCall, RejectedCalls
from .retention import Retention, Trail
from .retry import DEFAULT_RETRIES
from .saved import UNSET, Saved, saved_as
from .schedules import Schedules
from .simulation import Simulation
from .store_limits import PlanChecks
from .store_loading import LoadVerbs
from .store_resources import ResourceVerbs
from .store_runs import RunVerbs
from .url_groups import UnknownDestination, UrlGroup
from .waiters import Waiters
from .workflows import WorkflowRuns

__all__ = [
    "DEFAULT_DEDUP_WINDOW_MS",
    "NON_RETRYABLE_STATUS",
    "AttemptResult",
    "Published",
    "Store",
    "UnknownDestination",
    "is_non_retryable",
]


class Store(RunVerbs, ResourceVerbs, LoadVerbs, PlanChecks, Admission, Saved):
    #: What a data dir keeps of a store (its tables save their own fields).
    SAVED = saved_as(
        "clock ids account default_retries messages events dlq dedup url_groups schedules queues"
        " flow_keys _generation _set_aside _callbacks_pending workflows waiters api_errors"
        " deliveries in_flight plan global_parallelism _global_waiting max_response_ms"
        " _attempt_seq _published_day retention"
    )
    #: A simulation is one run's choice (``serve --simulate``), not state to keep.
    UNSAVED = {"simulation": UNSET}

    def __init__(
        self,
        clock: VirtualClock,
        ids: IdGenerator,
        account: Account,
        *,
        default_retries: int = DEFAULT_RETRIES,
        dedup_window_ms: int = DEFAULT_DEDUP_WINDOW_MS,
        plan: Plan | None = None,
        retention: bool = False,
    ) -> None:
        self.clock = clock
        self.ids = ids
        self.account = account
        self.default_retries = default_retries
        self.messages: dict[str, Message] = {}
        self.events: Trail[Event] = Trail()
        self.dlq = DeadLetters()
        #: Deduplication of published messages (schedule creations keep their own).
        self.dedup = Deduplication(dedup_window_ms)
        self.url_groups: dict[str, UrlGroup] = {}
        self.schedules = Schedules(clock, ids, dedup_window_ms)
        self.queues = Queues()
        self.flow_keys = FlowKeys()
        self._generation, self._set_aside = {}, {}  # typed where Admission declares them
        #: Callback messages not finished yet, by the message they report on: a queued
        #: message keeps its slot until they are done, as on QStash.
        self._callbacks_pending: dict[str, set[str]] = {}
        self.workflows = WorkflowRuns()
        self.workflows.tell_weakly(self._run_ended)
        #: Workflow runs waiting for an event (``context.waitForEvent``, webhooks).
        self.waiters = Waiters()
        #: API calls answered with an error (the newest kept), for the failure report.
        self.api_errors = RejectedCalls()
        #: Every attempt that ended, in the order they ended.
        self.deliveries: Trail[Delivery] = Trail()
        #: Attempts started and not ended yet, by message id.
        self.in_flight: dict[str, Attempt] = {}
        #: What the account's plan limits.
        self.plan = plan if plan is not None else PLANS[DEFAULT_PLAN]
        #: Account-wide cap on attempts in flight; messages over it wait here, in order.
        self.global_parallelism = self.plan.global_parallelism
        self._global_waiting: dict[str, None] = {}
        #: The longest an attempt may take (the plan's maximum HTTP response duration).
        self.max_response_ms = self.plan.max_response_ms
        self._attempt_seq = 0
        #: Messages the API published on one UTC day: (the day's start, how many).
        self._published_day = (0, 0)
        #: The faults a simulation injects (``simulate``); None: QStash's happy path.
        self.simulation: Simulation | None = None
        #: What the plan's retention forgets as time passes; None: everything is kept.
        self.retention: Retention | None = None
        if retention:
            self.retention = Retention(
                self.plan,
                messages=self.messages,
                events=self.events,
                deliveries=self.deliveries,
                dlq=self.dlq,
                workflows=self.workflows,
                forget_message=self.forget_message,
                awaits_callbacks=self.awaits_callbacks,
            )
            clock.on_move = self.retention.expire

    def restored(self) -> None:
        # The tables it owns call it, and its retention reads its messages, as when built.
        self.workflows.tell_weakly(self._run_ended)
        retention = self.retention
        if retention is not None:
            retention.attach(self.messages, self.forget_message, self.awaits_callbacks)
        self.clock.on_move = retention.expire if retention is not None else None

    @property
    def dedup_window_ms(self) -> int:
        return self.dedup.window_ms

    def forget_message(self, message_id: str) -> None:
        """Drop a finished message from memory (what retention no longer keeps)."""
        del self.messages[message_id]
        self._generation.pop(message_id, None)

    def record_rejection(self, call: RejectedCall) -> None:
        """Keep an API call answered with an error, for the failure report."""
        self.api_errors.record(call)

    def forgotten(self) -> dict[str, int]:
        """How many messages, runs and DLQ entries retention forgot (none without it)."""
        if self.retention is None:
            return {"messages": 0, "runs": 0, "dlq": 0}
        return dict(self.retention.forgotten)

    def awaits_callbacks(self, message_id: str) -> bool:
        """Whether callbacks about the message are still to finish."""
        return message_id in self._callbacks_pending

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
        cause: Message | None = None,
        message_id: str | None = None,  # a recorded one's (``store_loading.py``)
    ) -> Message:
        """A new message, due when ``opts`` say. The message keeps ``opts`` (a run's later
        step fills in its run's settings there): options another message or a schedule holds
        are copied first. ``cause``: the message whose delivery (or attempt, for a callback)
        published it, if any: what the loop guard and ``drain`` follow."""
        now = self.clock.now_ms
        if opts.workflow_headers:
            self.workflows.inherit(opts)  # a later step takes its run's trigger settings
        not_before = opts.due_ms(now)
        retries = opts.retries if opts.retries is not None else max_retries
        message = Message(
            message_id=message_id or self.ids.message_id(),
            url=url,
            content=content,
            created_ms=now,
            not_before_ms=not_before,
            max_retries=self.default_retries if retries is None else retries,
            options=opts,
            queue=queue,
            url_group=url_group,
            endpoint_name=endpoint_name,
            schedule_id=schedule_id,
            callback_for=callback_for,
        )
        parent = cause
        if parent is not None and not_before <= now:
            message.cascade_depth = parent.cascade_depth + 1
        message.from_schedule = schedule_id is not None or (
            parent is not None and parent.from_schedule
        )
        self.messages[message.message_id] = message
        if self.simulation is not None:
            self.simulation.created(message)
        if callback_for is not None:
            self._callbacks_pending.setdefault(callback_for, set()).add(message.message_id)
        self.queues.join(queue, message.message_id, now)
        # A key exists (and takes this message's limits) from the publish naming it.
        self.flow_keys.named(opts.flow_control, now)
        self._record(message.created(now))
        self._plan_delivery(message, not_before)
        # Upstash Workflow: the one place a message joins its run (or starts one).
        if opts.workflow_headers and not self.workflows.track(
            message, opts.workflow_headers, now, opts
        ):
            self.cancel(message)  # for a run that has ended: never delivered
        elif cause is not None and cause.workflow_run_id is None:
            self._link_started_run(cause, message)
        return message

    def _link_started_run(self, cause: Message, message: Message) -> None:
        """A plain message whose delivery began a run (a publish to a workflow route): the
        run's first message is its start, and the plain one says which run it started."""
        found = self.workflows.membership(message.message_id) if message.workflow_run_id else None
        if found is not None and found[0].messages[:1] == [message]:
            cause.started_run_id = message.workflow_run_id

    def publish(
        self,
        destination: str,
        content: bytes,
        opts: MessageOptions,
        *,
        queue: str | None = None,
        schedule_id: str | None = None,
        cause: Message | None = None,
    ) -> tuple[list[Published], bool]:
        """Publish to a URL, or fan out to every endpoint of a URL group (one message each,
        each deduplicated on its own). Returns what was published and whether it was a group.
        ``cause``: the message whose delivery published this (``create_message``)."""
        if is_url(destination):
            one = self._publish_one(destination, content, opts, queue, schedule_id, cause=cause)
            return [one], False
        group = self.url_groups.get(destination)
        if group is None or not group.endpoints:
            raise UnknownDestination(destination)
        return [
            self._publish_one(
                endpoint.url,
                content,
                opts,
                queue,
                schedule_id,
                group.name,
                endpoint.name,
                cause=cause,
            )
            for endpoint in group.endpoints
        ], True

    def _publish_one(
        self,
        url: str,
        content: bytes,
        opts: MessageOptions,
        queue: str | None,
        schedule_id: str | None,
        url_group: str | None = None,
        endpoint_name: str | None = None,
        *,
        cause: Message | None,
    ) -> Published:
        key = dedup_key(url, content, opts)
        if key is not None and url_group is not None:
            # One deduplication id, many endpoints: each endpoint message is its own entry.
            key = f"{key}|{url}"
        original_id = self.dedup.deduplicated(key, self.clock.now_ms)
        original = self.messages.get(original_id) if original_id is not None else None
        original = original or self.workflows.existing_init(opts.workflow_headers)
        endpoint_url = url if url_group else None
        if original is not None:
            return Published(original, True, endpoint_url)
        message = self.create_message(
            url,
            content,
            opts,
            queue=queue,
            url_group=url_group,
            endpoint_name=endpoint_name,
            schedule_id=schedule_id,
            cause=cause,
        )
        self.dedup.remember(key, message.message_id, self.clock.now_ms)
        return Published(message, False, endpoint_url)

    # -- lifecycle --------------------------------------------------------------------------
    def live_message(self, message_id: str, generation: int) -> Message | None:
        """The message a due event is for, unless the event went stale (cancelled, moved on)."""
        message = self.messages.get(message_id)
        if message is None or message.done or self._generation.get(message_id) != generation:
            return None
        return message

    def start_attempt(self, message: Message) -> Attempt:
        """An attempt starts now: the message is ACTIVE until the attempt ends. Until the app
        has answered, what its app publishes is caused by it (the dispatcher says so)."""
        previous = message.state
        self._record(message.start(self.clock.now_ms))
        self._attempt_seq += 1
        fc = message.flow_control
        attempt = Attempt(
            message,
            self.clock.now_ms,
            previous,
            self._attempt_seq,
            flow_key=fc.key if fc is not None and fc.key else None,
        )
        self.in_flight[message.message_id] = attempt
        return attempt

    def answered(self, attempt: Attempt, result: AttemptResult, duration_ms: int) -> bool:
        """The app answered the call an attempt started with. Returns True when the attempt
        ends now; otherwise it stays in flight until ``duration_ms`` after its start, or until
        its timeout cuts it (the answer is then discarded), and an end event is planned."""
        message = attempt.message
        if message.state == "CANCELED" or duration_ms <= 0:
            attempt.result, attempt.ends_ms = result, attempt.started_ms
            return True  # cancelled while being called: its answer is what it answered
        limit = self.deadline_ms(message)
        if duration_ms > limit:
            result = AttemptResult(
                None,
                httpx.Headers(),
                b"",
                timeout_error(message.method, message.url),
                result.exception,
            )
            duration_ms = limit
        attempt.result = result
        attempt.ends_ms = attempt.started_ms + duration_ms
        if attempt.ends_ms <= self.clock.now_ms:
            return True
        self.clock.schedule(attempt.ends_ms, "end", message.message_id, attempt.generation)
        return False

    def deadline_ms(self, message: Message) -> int:
        """The longest an attempt of ``message`` may take: its ``Upstash-Timeout``, capped by
        the plan's maximum response duration (a timeout only shortens the plan's)."""
        if message.timeout_ms is None:
            return self.max_response_ms
        return min(self.max_response_ms, message.timeout_ms)

    def attempt_due(self, message_id: str, generation: int) -> Attempt | None:
        """The attempt an end event is for, unless it ended already (cut by a cancel)."""
        attempt = self.in_flight.get(message_id)
        if attempt is None or attempt.generation != generation:
            return None
        return attempt

    def end_attempt(self, attempt: Attempt) -> tuple[Delivery, DlqEntry | None]:
        """An attempt ends now: record it as a delivery, apply its outcome (retry, fail into
        the DLQ, or delivered), and free its slots."""
        message = attempt.message
        result = attempt.result
        assert result is not None
        if self.simulation is not None:
            result = self.simulation.answer_seen(message, result, self.clock.now_ms)
        delivery = Delivery(
            message_id=message.message_id,
            url=message.url,
            method=message.method,
            headers=attempt.headers if attempt.headers is not None else httpx.Headers(),
            content=attempt.content,
            at_ms=attempt.started_ms,
            retried=message.retried,
            status=result.status,
            response_headers=result.headers,
            response_content=result.content,
            error=result.error,
            exception=result.exception,
            kind=message.kind,
            ended_ms=self.clock.now_ms,
        )
        message.deliveries.append(delivery)
        self.deliveries.append(delivery)
        self._release_slots(attempt)
        dlq_entry = self.finish_attempt(message, result)
        # No callbacks for a message cancelled while this attempt was in flight.
        if message.callback and message.state != "CANCELED":
            self._publish_callback(message, delivery, message.callback)
        if dlq_entry is not None and message.failure_callback:
            self._publish_callback(message, delivery, message.failure_callback, dlq_entry)
        if len(result.content) > KEPT_RESPONSE_BYTES:
            self._keep_the_start(delivery, dlq_entry, result.content)
        simulation = self.simulation
        if simulation is not None and simulation.delivers_again(message, self.clock.now_ms):
            self.redeliver(message)
        return delivery, dlq_entry

    def simulate(self, simulation: Simulation | None) -> None:
        """Inject ``simulation``'s faults from now on (None: none)."""
        self.simulation = simulation
        self.clock.rank = simulation.rank if simulation is not None else None
        if simulation is not None:
            simulation.bind(self.messages)

    def _keep_the_start(self, delivery: Delivery, dlq_entry: DlqEntry | None, whole: bytes) -> None:
        """Callbacks have carried the whole answer; the attempt's record, its log entries and
        its DLQ entry keep its first ``KEPT_RESPONSE_BYTES``, so that endpoints answering
        megabytes do not make the store grow by as much at every attempt."""
        kept = whole[:KEPT_RESPONSE_BYTES]
        delivery.response_content = kept
        if dlq_entry is not None:
            dlq_entry.response_content = kept
        # This attempt's log entries are among the last few (callbacks log after them).
        for event in self.events[-16:]:
            if event.response_content is whole:
                event.response_content = kept

    def _publish_callback(
        self,
        source: Message,
        delivery: Delivery,
        url: str,
        dlq_entry: DlqEntry | None = None,
    ) -> None:
        callback = self.create_message(
            url,
            callback_payload(source, delivery, self.workflows, dlq_entry),
            callback_options(source, failure=dlq_entry is not None),
            callback_for=source.message_id,
            max_retries=source.max_retries,
            cause=source,  # a callback continues the cascade
        )
        callback.is_failure_callback = dlq_entry is not None

    def _release_slots(self, attempt: Attempt) -> None:
        """The attempt is no longer in flight: what waited for its slot may start."""
        self.in_flight.pop(attempt.message.message_id, None)
        if attempt.flow_key is not None:
            flow = self.flow_keys.attempt_ended(attempt.flow_key)
            if flow is not None:
                self._release(flow)
        if self._global_waiting:
            room = self.global_parallelism - len(self.in_flight)
            for message_id in list(islice(self._global_waiting, max(0, room))):
                del self._global_waiting[message_id]
                self._plan_delivery(self.messages[message_id], self.clock.now_ms)

    def requeue(self, attempt: Attempt) -> None:
        """Put back an attempt that could not be made (nothing to deliver it to, or cut
        short); the log forgets the ACTIVE it was started with, as no attempt happened."""
        message = attempt.message
        # Cancelled while its app was being called: the cancel stands (it is not due again).
        cancelled = message.state == "CANCELED"
        if not cancelled:
            message.put_back(attempt.previous_state)
        for position in range(len(self.events) - 1, -1, -1):
            event = self.events[position]
            if event.message_id == message.message_id:
                if event.state == "ACTIVE":
                    del self.events[position]
                break
        if attempt.flow_key is not None and attempt.flow_key in self.flow_keys:
            flow = self.flow_keys[attempt.flow_key]
            flow.rate_count = max(0, flow.rate_count - 1)  # it never started
        self._release_slots(attempt)
        if not cancelled:
            self._plan_delivery(message, self.clock.now_ms)

    def finish_attempt(self, message: Message, result: AttemptResult) -> DlqEntry | None:
        """Record an attempt's outcome; schedule the retry or fail for good (into the DLQ)."""
        if message.state == "CANCELED":
            # Cancelled while this attempt was in flight (e.g. by the handler itself): the
            # attempt happened, but a cancelled message is never retried nor dead-lettered.
            return None
        now = self.clock.now_ms
        if result.ok:
            self._record(message.succeed(result, now))
            self._finished(message)
            return None
        self._record(message.error(result, now))
        if result.non_retryable or message.retried >= message.max_retries:
            return self._fail(message, result)
        due = now + message.delay_before_retry_ms(result.headers, now)
        self._record(message.retry(due, now))
        self._plan_delivery(message, due)
        return None

    def cancel(self, message: Message) -> bool:
        if message.done:
            return False
        self._generation[message.message_id] = -1  # any due event for it is now stale
        self._record(*message.cancel(self.clock.now_ms))
        self._global_waiting.pop(message.message_id, None)
        attempt = self.in_flight.get(message.message_id)
        if attempt is not None and attempt.ends_ms is not None:
            # In flight past its call: cut now, its answer discarded, its slots freed. (One
            # cancelled while its app is being called ends with the app's answer instead.)
            attempt.result = AttemptResult(None, httpx.Headers(), b"", CANCELED_IN_FLIGHT)
            self.end_attempt(attempt)
        self._finished(message)
        return True

    def redeliver(self, message: Message) -> None:
        """Deliver a DELIVERED message again, as QStash's at-least-once delivery may: same
        id, body and headers, the same ``Upstash-Retried``, a fresh signature. It is pending
        again (CREATED) and due now; the log shows a second ACTIVE and DELIVERED."""
        now = self.clock.now_ms
        message.redeliver(now)  # InvalidTransition (a ValueError) unless DELIVERED
        self.queues.join(message.queue, message.message_id, now)
        self.flow_keys.named(message.flow_control, now)
        self._plan_delivery(message, now)

    def run_now(self, message: Message) -> None:
        """Make a waiting message due now (QStash's "run now" / "retry now"):
        ``InvalidTransition`` unless it is waiting (CREATED, or RETRY)."""
        message.run_now(self.clock.now_ms)
        self._plan_delivery(message, self.clock.now_ms)

    def pending(self) -> Iterable[Message]:
        return (m for m in self.messages.values() if not m.done)

    # -- a message's end: its queue slot, once its callbacks are done ------------------------
    def _finished(self, message: Message) -> None:
        """A message reached its final state: free its queue slot, unless callbacks about it
        are still to come (they are published right after this attempt) or to finish."""
        if self.retention is not None:
            self.retention.message_finished(message.message_id, self.clock.now_ms)
        if message.callback_for is not None:
            self._callback_finished(message)
        self.flow_keys.finished(message.message_id, message.flow_control)
        awaits_callbacks = message.state != "CANCELED" and (
            message.callback is not None
            or (message.state == "FAILED" and message.failure_callback is not None)
            or message.message_id in self._callbacks_pending
        )
        if not awaits_callbacks:
            self._leave_queue(message)

    def _callback_finished(self, callback: Message) -> None:
        source_id = callback.callback_for
        assert source_id is not None
        pending = self._callbacks_pending.get(source_id)
        if pending is None:
            return
        pending.discard(callback.message_id)
        if pending:
            return
        del self._callbacks_pending[source_id]
        source = self.messages.get(source_id)
        if source is not None and source.done:
            self._leave_queue(source)

    def _leave_queue(self, message: Message) -> None:
        self._start_released(self.queues.leave(message.queue, message.message_id))

    # -- internals --------------------------------------------------------------------------
    def _record(self, *events: Event) -> None:
        """Log what a message's transition returned (``Message.start``, ``fail``, ...)."""
        for event in events:
            self.events.append(event)

    def _fail(self, message: Message, result: AttemptResult) -> DlqEntry | None:
        self._record(message.fail(result, self.clock.now_ms))
        self._finished(message)
        if message.workflow_run_id is not None and self.workflows.is_third_party_call(message):
            return None
        entry = self.dlq.add(message, result, self.clock.now_ms)
        if self.retention is not None:
            self.retention.dead_lettered(entry)
        if message.workflow_run_id is not None:
            self.workflows.message_failed(message, entry, self.clock.now_ms)
        return entry
