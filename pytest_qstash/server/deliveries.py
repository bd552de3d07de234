"""How the server delivers: many attempts in flight at once, as QStash makes them.

The engine decides what may start: a queue's parallelism, a flow-control key's parallelism
and rate, and the plan's global parallelism all count the attempts in flight
(``Store.may_start``), so what waits behind a slow attempt is only what its own limits hold
back. Here each attempt that may start becomes a task of the server's event loop, its HTTP
request bounded in real time, and its answer is applied when it comes. One endpoint that
hangs holds its own attempts, never the others, nor the API and control calls.

Two drivers, one per clock:

- Virtual clock (``run``, what ``tick``/``advance``/``drain`` use): time stands still while
  attempts are in flight. At one virtual instant, every attempt that may start is started
  together, in due order (ties in publish order); once all of them have answered, their
  answers are applied in that same order, so ``deliveries`` and the list a move returns are in
  a stable order whatever order the answers came back in. What they led to (messages their
  handlers published for now, retries, the next message of a queue) starts in the next round
  at the same instant; the clock moves on once nothing more is due there.
- Real clock (``start_due``, called by the server's wall-clock task): every attempt due by
  now starts at once; each is applied when its own answer comes, at the wall clock's time.

An attempt gets no longer than the server's attempt timeout (``--attempt-timeout``) in real
time, or the message's own ``Upstash-Timeout`` when that is shorter; past it the attempt is a
failed one, retried as the message's retry policy says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

import httpx

from ..delivery.dispatcher import Dispatcher, Job
from ..delivery.transports import Outcome, Unrouted
from ..fake import FakeQStash
from ..state.attempts import timeout_error
from ..state.models import Delivery

#: The default real-time bound on one attempt, in seconds.
DEFAULT_ATTEMPT_TIMEOUT_S = 30.0

_log = logging.getLogger("pytest_qstash.server")


def attempt_timeout_error(bound_s: float) -> str:
    """What an attempt cut by the server's own bound is recorded with."""
    return (
        f"no answer within {bound_s:g} s, the server's attempt timeout "
        "(pytest-qstash serve --attempt-timeout)"
    )


class ServerDeliveries:
    """The attempts in flight of one fake, on the running event loop.

    ``catch_up`` (real clock only) moves the fake's clock to the wall clock's now; an
    attempt's answer is applied at that moment."""

    def __init__(
        self,
        fake: FakeQStash,
        attempt_timeout_s: float = DEFAULT_ATTEMPT_TIMEOUT_S,
        *,
        catch_up: Callable[[], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        self._dispatcher: Dispatcher = fake.dispatcher
        self._store = fake.store
        self._sender = fake.sender
        self.attempt_timeout_s = attempt_timeout_s
        self._catch_up = catch_up
        self._on_end = on_end
        #: Attempts in flight, in the order they started.
        self._flights: dict[asyncio.Task[Delivery | None], Job] = {}
        fake.deliver_async_with(self.run)  # the fake's async moves deliver through here

    # -- virtual clock ----------------------------------------------------------------------
    async def run(self, until_ms: int) -> list[Delivery]:
        """Deliver what is due up to ``until_ms``, round by round at each virtual instant."""
        made: list[Delivery] = []
        dispatcher = self._dispatcher
        try:
            while True:
                started = self._start_round(until_ms, made)
                if not started:
                    break
                try:
                    outcomes = await asyncio.gather(*(self._send(job) for job in started))
                except BaseException:  # cancelled (a shutdown): these attempts did not happen
                    for job in reversed(started):
                        dispatcher.abandon(job)
                    raise
                for job, outcome in zip(started, outcomes, strict=True):
                    delivery = dispatcher.answered(job, outcome)
                    if delivery is not None:
                        made.append(delivery)
                self._point_delivering([])
        finally:
            dispatcher.cause = None
        dispatcher.settle(until_ms)
        return made

    def _start_round(self, until_ms: int, made: list[Delivery]) -> list[Job]:
        """Start every attempt that may start at the next due instant (up to ``until_ms``);
        attempts in flight that end there end first. The clock stays at that instant."""
        dispatcher = self._dispatcher
        started: list[Job] = []
        limit = until_ms
        try:
            while (job := dispatcher.next_job(limit, len(made) + len(started))) is not None:
                limit = self._store.clock.now_ms  # the rest of the round: this instant only
                if job.request is None:
                    made.append(dispatcher.finish(job.attempt))
                else:
                    started.append(job)
        except BaseException:
            # The loop guard stopped a runaway cascade: what was started did not happen.
            for job in reversed(started):
                dispatcher.abandon(job)
            raise
        self._point_delivering(reversed(started))
        return started

    # -- real clock -------------------------------------------------------------------------
    def start_due(self) -> list[asyncio.Task[Delivery | None]]:
        """Start every attempt due by now; each is applied when it answers. Returns their
        tasks (a task's result: the delivery made)."""
        assert self._catch_up is not None, "start_due drives a real clock"
        dispatcher = self._dispatcher
        loop = asyncio.get_running_loop()
        started: list[asyncio.Task[Delivery | None]] = []
        try:
            while (job := dispatcher.next_job(self._store.clock.now_ms, 0)) is not None:
                if job.request is None:
                    dispatcher.finish(job.attempt)
                    continue
                task = loop.create_task(self._attempt(job))
                self._flights[task] = job
                task.add_done_callback(self._landed)
                started.append(task)
        finally:
            self._point_delivering(reversed(self._flights.values()))
        return started

    async def _attempt(self, job: Job) -> Delivery | None:
        try:
            outcome = await self._send(job)
        except asyncio.CancelledError:
            self._dispatcher.abandon(job)  # a reset or shutdown: the attempt did not happen
            raise
        assert self._catch_up is not None
        self._catch_up()
        try:
            return self._dispatcher.answered(job, outcome)
        finally:
            self._flights.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self._point_delivering(reversed(self._flights.values()))
            if self._on_end is not None:
                self._on_end()

    def _landed(self, task: asyncio.Task[Delivery | None]) -> None:
        self._flights.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            _log.error("applying an attempt's answer failed", exc_info=task.exception())

    async def cancel(self) -> None:
        """Cut every attempt in flight (a reset, a shutdown): none of them happened."""
        tasks = list(self._flights)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._flights.clear()

    # -- shared -----------------------------------------------------------------------------
    async def _send(self, job: Job) -> Outcome:
        """One attempt's HTTP call, bounded by the server's attempt timeout or the message's
        own deadline, whichever is shorter; past it, a failed attempt saying which."""
        request = job.request
        assert request is not None
        deadline_s = self._store.deadline_ms(job.message) / 1000
        bound_s = min(self.attempt_timeout_s, deadline_s)
        # The bound cancels this task itself: ``asyncio.wait_for`` would start a task of its
        # own per attempt, a quarter of the CPU time a delivery costs.
        task = asyncio.current_task()
        assert task is not None
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        timer = asyncio.get_running_loop().call_later(bound_s, expire)
        try:
            return await self._sender.asend(request)
        except asyncio.CancelledError:
            if not expired or not _uncancelled(task):
                raise  # a reset or a shutdown: not this attempt's timeout
            if deadline_s <= self.attempt_timeout_s:
                error = timeout_error(request.method, str(request.url))  # QStash's own words
            else:
                error = attempt_timeout_error(bound_s)
            return Outcome(None, httpx.Headers(), b"", error)
        except Unrouted as exc:
            return self._dispatcher.unrouted(job, exc)
        except Exception as exc:  # our own failure: a failed attempt, never a stuck message
            _log.exception("delivering %s failed", job.message.message_id)
            return Outcome(None, httpx.Headers(), b"", f"{type(exc).__name__}: {exc}")
        finally:
            timer.cancel()

    def _point_delivering(self, newest_first: Iterable[Job]) -> None:
        """Over HTTP a publish cannot be told from which delivery (if any) made it. While
        attempts are in flight it counts as a follow-up of the newest of them, preferring one
        not from a schedule (a drain never skips it then): what the loop guard and ``drain``
        read. With none in flight, it is nobody's."""
        chosen = None
        for job in newest_first:
            if chosen is None:
                chosen = job.message
            if not job.message.from_schedule:
                chosen = job.message
                break
        self._dispatcher.cause = chosen


def _uncancelled(task: asyncio.Task[Any]) -> bool:
    """Take back the cancellation the timeout asked for; False when another one (a reset, a
    shutdown) is pending as well. Python 3.10 counts no cancellations: there it is taken
    back unconditionally."""
    uncancel = getattr(task, "uncancel", None)
    if uncancel is None:
        return True
    return bool(uncancel() == 0)
