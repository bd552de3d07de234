"""Turns due events into signed HTTP deliveries and feeds their outcomes back into the store.

The scheduler decides what is due (``Scheduler.pop_work``) and the store what happens to it
(``start_attempt``,
``answered``, ``end_attempt``: cron firings, flow-control wakes, retries, the DLQ, callbacks);
the dispatcher signs, sends, and reports what the app answered. One step is split in two,
``next_job`` (the next attempt to make, its signed request built, or to end) and ``answered`` /
``finish``. An attempt whose handler takes virtual time is called at its start and finished by
its end event, later.

``DeliveryLoop`` is the one loop over those steps, with the rules every runner shares (the
loop guard, the cause of what an app publishes, putting back what did not happen, settling the
clock); three runners drive it, each a few lines: ``Dispatcher.run`` (one attempt at a time,
the test's thread), ``Dispatcher.arun`` (the same on an event loop) and the server's
concurrent one (``server/runner/deliveries.py``: rounds of attempts at one virtual instant, or each
attempt answered when it comes on the real clock). The fake's async moves deliver through an
``AsyncRunner``: the dispatcher in-process, the server's in a server.

Functions on the delivery path set ``__tracebackhide__``: pytest then shows a failed
delivery from the test's call straight to the app's frame (or our error).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import httpx

from ..engine.attempts import Attempt
from ..engine.models import Delivery, Message, ms_to_datetime
from ..engine.retention import Trail
from ..engine.scheduler import Scheduler
from ..engine.store import AttemptResult, Store
from ..errors import DeliveryLoopError, ReentrantCallError, UnroutedDeliveryError
from .handler_time import HandlerTimes
from .mounts import MountTable
from .outcome import Outcome, Unrouted
from .requests import delivery_request
from .transports import Sender

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


class AsyncRunner(Protocol):
    """What the fake's async moves (``atick``, ``aadvance``, ``adrain``, ...) deliver through:
    deliver what is due up to a moment (unix ms), return the deliveries made, in order."""

    async def arun(self, until_ms: int) -> list[Delivery]: ...


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
        #: The message whose app is being called: an API call the app makes meanwhile is
        #: caused by it (the facade passes it to ``api.handle``). The ``DeliveryLoop`` keeps
        #: it, among the attempts it has in flight (several in the server).
        self.cause: Message | None = None

    # -- the loop's two in-process runners -------------------------------------------------
    def run(self, until_ms: int) -> list[Delivery]:
        """Deliver what is due up to ``until_ms``, one attempt at a time."""
        __tracebackhide__ = True
        with DeliveryLoop(self, until_ms) as loop:
            for job in loop:
                assert job.request is not None
                try:
                    outcome = self.sender.send(job.request)
                except Unrouted as exc:
                    outcome = loop.unrouted(job, exc)
                loop.answer(job, outcome)
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
                    outcome = loop.unrouted(job, exc)
                loop.answer(job, outcome)
        return loop.made

    def begin_run(self) -> None:
        """A run (a ``DeliveryLoop`` up to a moment) starts; one already under way refuses
        it: runs do not nest."""
        __tracebackhide__ = True
        self.refuse_reentry()
        self._running = True

    def end_run(self) -> None:
        self._running = False

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
        attempt.sent(request.headers, request.content)
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
        return delivery_request(
            self.store,
            message,
            signing_key=self.settings.signing_key(),
            region=self.settings.region,
            jwt_id=self.store.ids.jwt_id(),
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
    """The one delivery loop, whatever sends and however many attempts it has in flight.

    A runner takes attempts from it (``next``, or iterating it: one at a time; ``round``:
    every attempt that may start at the next due instant; ``due``: every one that may start
    by a moment), calls their apps, and hands each answer back (``answer``; ``unrouted`` when
    nothing could answer). Attempts that end with no call (a handler's virtual time run out)
    are ended on the way. The loop keeps the rules every runner shares: the loop guard (in
    ``Dispatcher.next_job``), the cause of what an app publishes meanwhile (the newest
    attempt in flight, preferring one not from a schedule), putting back what did not happen
    (``abandon``; leaving the loop by an exception, a cancellation or Ctrl-C, puts back every
    attempt still in flight), and settling the clock at the end.

    Built with a moment (``DeliveryLoop(dispatcher, until_ms)``, used as a context manager),
    it is one run up to that moment: runs do not nest, and the deliveries made are kept in
    ``made``. Built with ``DeliveryLoop.open`` it is the real clock's: never entered, no end,
    no bound per call, nothing kept; each answer's delivery is returned by ``answer``."""

    def __init__(self, dispatcher: Dispatcher, until_ms: int | None) -> None:
        self._dispatcher = dispatcher
        self._until_ms = until_ms
        #: Attempts in flight (their apps called, not answered yet), in the order they
        #: started; keyed by identity.
        self._flights: dict[int, Job] = {}
        #: The deliveries made, in order (a run's; the open loop keeps none).
        self.made: list[Delivery] = []

    @classmethod
    def open(cls, dispatcher: Dispatcher) -> DeliveryLoop:
        """The real clock's loop: attempts start as they become due and each answer is
        applied when it comes, for as long as the server runs."""
        return cls(dispatcher, None)

    # -- a run ------------------------------------------------------------------------------
    def __enter__(self) -> DeliveryLoop:
        __tracebackhide__ = True
        assert self._until_ms is not None, "the open loop is never entered: it has no end"
        self._dispatcher.begin_run()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        __tracebackhide__ = True
        dispatcher = self._dispatcher
        dispatcher.end_run()
        if exc_type is not None:
            self.abandon_all()  # cut short: the attempts in flight did not happen
        dispatcher.cause = None
        if exc_type is None and self._until_ms is not None:
            dispatcher.settle(self._until_ms)

    # -- taking attempts --------------------------------------------------------------------
    def __iter__(self) -> DeliveryLoop:
        return self

    def __next__(self) -> Job:
        __tracebackhide__ = True
        job = self.next()
        if job is None:
            raise StopIteration
        return job

    def next(self) -> Job | None:
        """The next attempt whose app must be called (up to the run's moment), or None."""
        __tracebackhide__ = True
        return self._next(self._bound())

    def round(self) -> list[Job]:
        """Every attempt that may start at the next due instant (up to the run's moment), in
        due order (ties in publish order); the clock stays at that instant. Empty when
        nothing more is due."""
        __tracebackhide__ = True
        first = self._next(self._bound())
        if first is None:
            return []
        return [first, *self._take(self._dispatcher.clock.now_ms)]

    def due(self, until_ms: int) -> list[Job]:
        """Every attempt that may start by ``until_ms``, in due order."""
        __tracebackhide__ = True
        return self._take(until_ms)

    def _bound(self) -> int:
        assert self._until_ms is not None, "the open loop takes attempts with due()"
        return self._until_ms

    def _take(self, until_ms: int) -> list[Job]:
        __tracebackhide__ = True
        taken: list[Job] = []
        try:
            while (job := self._next(until_ms)) is not None:
                taken.append(job)
        except BaseException:
            # The loop guard stopped a runaway cascade: what was taken did not happen.
            for job in taken:
                self.abandon(job)
            raise
        return taken

    def _next(self, until_ms: int) -> Job | None:
        __tracebackhide__ = True
        dispatcher = self._dispatcher
        while (job := dispatcher.next_job(until_ms, self._count())) is not None:
            if job.request is None:
                self._keep(dispatcher.finish(job.attempt))
                continue
            self._flights[id(job)] = job
            self._point_cause()
            job.duration_ms = dispatcher.handler_times.duration_ms(job.request)
            return job
        return None

    # -- answers ----------------------------------------------------------------------------
    def answer(self, job: Job, outcome: Outcome) -> Delivery | None:
        """The app answered ``job`` (or it failed without an answer): the delivery made, or
        None while the attempt stays in flight until its end (a handler taking virtual
        time)."""
        __tracebackhide__ = True
        self._land(job)
        delivery = self._dispatcher.answered(job, outcome)
        if delivery is not None:
            self._keep(delivery)
        return delivery

    def unrouted(self, job: Job, exc: Unrouted) -> Outcome:
        """Nothing could answer ``job``: its outcome, to ``answer`` next, or
        ``UnroutedDeliveryError`` (strict routing; the attempt is put back)."""
        __tracebackhide__ = True
        try:
            return self._dispatcher.unrouted(job, exc)
        except BaseException:
            self._land(job)  # put back already
            raise

    def abandon(self, job: Job) -> None:
        """``job`` was cut short by what is no app error (a cancellation, a reset, a
        shutdown, KeyboardInterrupt): the attempt did not happen; the message is due again."""
        self._land(job)
        self._dispatcher.abandon(job)

    def abandon_all(self) -> None:
        """Every attempt in flight did not happen. They are put back in the order they
        started, so they are due again in the order they were due."""
        for job in list(self._flights.values()):
            self.abandon(job)

    # -- shared rules -----------------------------------------------------------------------
    def _count(self) -> int:
        """What the bound per call counts: the deliveries made and started (a run's)."""
        if self._until_ms is None:
            return 0
        return len(self.made) + len(self._flights)

    def _keep(self, delivery: Delivery) -> None:
        if self._until_ms is not None:
            self.made.append(delivery)

    def _land(self, job: Job) -> None:
        if self._flights.pop(id(job), None) is not None:
            self._point_cause()

    def _point_cause(self) -> None:
        """What an app publishes while attempts are in flight is caused by the one being
        made; with several in flight (the server), by the newest, preferring one not from a
        schedule (a drain never skips it then): what the loop guard and ``drain`` read. Over
        HTTP a publish cannot be told from which delivery (if any) made it. With none in
        flight, it is nobody's."""
        chosen = None
        for job in reversed(self._flights.values()):
            if chosen is None:
                chosen = job.message
            if not job.message.from_schedule:
                chosen = job.message
                break
        self._dispatcher.cause = chosen
