"""Turns due events into signed HTTP deliveries and feeds their outcomes back into the store.

The scheduler decides what is due (``Scheduler.pop_work``) and the store what happens to it
(``start_attempt``,
``answered``, ``end_attempt``: cron firings, flow-control wakes, retries, the DLQ, callbacks);
the dispatcher signs, sends, and reports what the app answered. One step is split in two,
``next_job`` (the next attempt to make, its signed request built, or to end) and ``answered`` /
``finish``, so the sync and async loops share everything but the line that sends. An attempt
whose handler takes virtual time is called at its start and finished by its end event, later.

Functions on the delivery path set ``__tracebackhide__``: pytest then shows a failed
delivery from the test's call straight to the app's frame (or our error).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from types import TracebackType

import httpx

from ..errors import DeliveryLoopError, ReentrantCallError, UnroutedDeliveryError
from ..state.attempts import Attempt
from ..state.models import Delivery, Message, ms_to_datetime
from ..state.retention import Trail
from ..state.scheduler import Scheduler
from ..state.store import AttemptResult, Store
from .handler_time import HandlerTimes
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
    attempt: Attempt
    #: The request to send; None for an attempt in flight that ends now.
    request: httpx.Request | None
    duration_ms: int = 0

    @property
    def message(self) -> Message:
        return self.attempt.message


@dataclass
class DispatchSettings:
    signing_key: Callable[[], str]
    raise_app_exceptions: bool = True
    strict_routing: bool = True
    max_same_instant: int = _MAX_SAME_INSTANT
    max_per_call: int = _MAX_PER_CALL
    #: ``Upstash-Region``'s value (``US-EAST-1``), or None: no header.
    region: str | None = None


class Dispatcher:
    def __init__(
        self,
        store: Store,
        mounts: MountTable,
        sender: Sender,
        settings: DispatchSettings,
        on_time: Callable[[int], None],
        handler_times: HandlerTimes | None = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.store = store
        #: What is due next: the one place the loop and the read-only questions ask.
        self.scheduler = scheduler if scheduler is not None else Scheduler(store)
        self.handler_times = handler_times if handler_times is not None else HandlerTimes()
        self.clock = store.clock
        self.mounts = mounts
        self.sender = sender
        self.settings = settings
        self._on_time = on_time  # keeps the app-visible clock on the virtual one
        self._recent: deque[tuple[str, str]] = deque(maxlen=5)
        self._running = False  # a run()/arun() is under way: they do not nest
        # Deliveries at one virtual instant of messages published by deliveries at that
        # instant: what the loop guard counts (a chain, or a fan-out that feeds itself).
        self._cascade_instant = -1
        self._cascade_deliveries = 0
        # Parsed destination URLs: parsing is half the cost of building a delivery request.
        self._urls: dict[str, httpx.URL] = {}
        #: The message whose app is being called: an API call the app makes meanwhile is
        #: caused by it (the facade passes it to ``api.handle``). The server's concurrent
        #: runner sets it to its best guess among the attempts it has in flight.
        self.cause: Message | None = None

    # -- the loop, and its runners ---------------------------------------------------------
    def run(self, until_ms: int) -> list[Delivery]:
        """Deliver what is due up to ``until_ms``, one attempt at a time."""
        __tracebackhide__ = True
        with DeliveryLoop(self, until_ms) as loop:
            for job in loop:
                assert job.request is not None
                try:
                    outcome = self.sender.send(job.request)
                except Unrouted as exc:
                    outcome = loop.unrouted(exc)
                loop.answer(outcome)
        return loop.made

    async def arun(self, until_ms: int) -> list[Delivery]:
        """``run`` on an event loop: the app's call awaited."""
        __tracebackhide__ = True
        with DeliveryLoop(self, until_ms) as loop:
            for job in loop:
                assert job.request is not None
                try:
                    outcome = await self.sender.asend(job.request)
                except Unrouted as exc:
                    outcome = loop.unrouted(exc)
                loop.answer(outcome)
        return loop.made

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
    @property
    def deliveries(self) -> Trail[Delivery]:
        return self.store.deliveries

    def next_job(self, until_ms: int, made: int) -> Job | None:
        """The next attempt to make (signed request built) or to end, moving the clock to it;
        the store decides what is due and what may start."""
        __tracebackhide__ = True
        work = self.scheduler.pop_work(until_ms)
        if work is None:
            return None
        self._on_time(self.clock.now_ms)
        if isinstance(work, Attempt):
            return Job(work, None)
        attempt = self.store.start_attempt(work)
        self._guard(attempt, made)
        request = self._request(work)
        attempt.headers, attempt.content = request.headers, request.content
        return Job(attempt, request)

    def answered(self, job: Job, outcome: Outcome) -> Delivery | None:
        """The app answered: finish the attempt now, or leave it in flight until its end."""
        __tracebackhide__ = True
        result = AttemptResult(
            outcome.status, outcome.headers, outcome.content, outcome.error, outcome.exception
        )
        if self.store.answered(job.attempt, result, job.duration_ms):
            return self.finish(job.attempt)
        return None

    def finish(self, attempt: Attempt) -> Delivery:
        """End an attempt (the store records it, retries or fails it, publishes callbacks);
        re-raise the app's exception, if it raised one."""
        __tracebackhide__ = True
        delivery, _ = self.store.end_attempt(attempt)
        if delivery.exception is not None and self.settings.raise_app_exceptions:
            raise delivery.exception
        return delivery

    def drain_step(self, limit_ms: int, made: int) -> tuple[int, bool] | None:
        """Where a drain goes next (the next due moment, and whether it is already due), or
        None once nothing more is due by ``limit_ms``. Each step is its own run, so the drain
        as a whole is bounded here (``made`` deliveries so far) as one run is bounded."""
        __tracebackhide__ = True
        # Cron firings alone do not keep a drain going (a schedule is never idle); those
        # that fall before the last pending delivery fire on the way.
        due = self.scheduler.next_due_ms(scheduled=False)
        if due is None or due > limit_ms:
            return None
        limit = self.settings.max_per_call
        if made >= limit:
            raise DeliveryLoopError(
                f"drain() stopped after {made} deliveries (max_deliveries_per_call={limit}) "
                f"at {ms_to_datetime(self.clock.now_ms).isoformat()}: something keeps "
                "publishing (a handler republishing itself with a delay?). Nothing is lost; "
                "raise the limit if this is intended."
            )
        return max(due, self.clock.now_ms), due <= self.clock.now_ms

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
        if self.settings.region is not None:
            headers["Upstash-Region"] = self.settings.region
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
        # The attempt's deadline, for a real server's answer (a mounted app's is bounded on
        # the virtual clock): httpx's own default would cut it after 5 s.
        timeout = httpx.Timeout(self.store.deadline_ms(message) / 1000).as_dict()
        return httpx.Request(
            message.method, url, headers=headers, content=content, extensions={"timeout": timeout}
        )

    def abandon(self, job: Job) -> None:
        """A delivery cut short by what is no app error (a cancellation, KeyboardInterrupt,
        SystemExit): the attempt did not happen; the message is due again, not stuck ACTIVE."""
        self.store.requeue(job.attempt)

    def unrouted(self, job: Job, exc: Unrouted) -> Outcome:
        """Nothing could answer the attempt: ``UnroutedDeliveryError`` under strict routing
        (the attempt is put back), else a failed attempt's outcome."""
        __tracebackhide__ = True
        job.duration_ms = 0  # nothing answered: the attempt fails at once
        if self.settings.strict_routing:
            self.store.requeue(job.attempt)
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

    def _guard(self, attempt: Attempt, made: int) -> None:
        """Stop a runaway cascade: deliveries publishing more deliveries for the same instant
        (a chain, or a fan-out feeding itself), so that time never moves. Plenty of
        independent messages due at once are no cascade, and are never stopped."""
        __tracebackhide__ = True
        message = attempt.message
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
        self.store.requeue(attempt)
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


class DeliveryLoop:
    """One delivery loop up to a moment, whatever sends: iterating it gives each attempt whose
    app must be called (attempts that end with no call are ended on the way), ``answer`` gives
    it the app's outcome. While the app is called, the dispatcher names the message as the
    cause of what the app publishes. Leaving it by an exception (a cancellation, Ctrl-C) puts
    back the attempt being made: it did not happen."""

    def __init__(self, dispatcher: Dispatcher, until_ms: int) -> None:
        self._dispatcher = dispatcher
        self._until_ms = until_ms
        self._job: Job | None = None
        #: The deliveries made, in order.
        self.made: list[Delivery] = []

    def __enter__(self) -> DeliveryLoop:
        __tracebackhide__ = True
        self._dispatcher._enter()
        return self

    def __iter__(self) -> DeliveryLoop:
        return self

    def __next__(self) -> Job:
        __tracebackhide__ = True
        dispatcher = self._dispatcher
        while (job := dispatcher.next_job(self._until_ms, len(self.made))) is not None:
            if job.request is None:
                self.made.append(dispatcher.finish(job.attempt))
                continue
            self._job, dispatcher.cause = job, job.message
            job.duration_ms = dispatcher.handler_times.duration_ms(job.request)
            return job
        raise StopIteration

    def answer(self, outcome: Outcome) -> None:
        """The app answered the attempt last given (or it failed without an answer)."""
        __tracebackhide__ = True
        job, self._job = self._job, None
        assert job is not None
        self._dispatcher.cause = None
        if (delivery := self._dispatcher.answered(job, outcome)) is not None:
            self.made.append(delivery)

    def unrouted(self, exc: Unrouted) -> Outcome:
        """Nothing could answer the attempt last given: its outcome, or ``UnroutedDeliveryError``
        (strict routing; the attempt is put back)."""
        __tracebackhide__ = True
        job, self._job = self._job, None
        assert job is not None
        self._dispatcher.cause = None
        outcome = self._dispatcher.unrouted(job, exc)
        self._job = job  # answered next
        return outcome

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        __tracebackhide__ = True
        dispatcher = self._dispatcher
        dispatcher.cause = None
        dispatcher._running = False
        if exc_type is not None:
            if self._job is not None:
                dispatcher.abandon(self._job)  # cut short: the attempt did not happen
            return
        dispatcher.settle(self._until_ms)
