"""How the server delivers: many attempts in flight at once, as QStash makes them.

The engine decides what may start: a queue's parallelism, a flow-control key's parallelism
and rate, and the plan's global parallelism all count the attempts in flight
(``Store.may_start``), so what waits behind a slow attempt is only what its own limits hold
back. Here each attempt that may start becomes a task of the server's event loop, its HTTP
request bounded in real time, and its answer is applied when it comes. One endpoint that
hangs holds its own attempts, never the others, nor the API and control calls.

Both drivers below are thin runners over the fake's own ``DeliveryLoop`` (the loop guard,
the cause of what an app publishes, putting back what did not happen and settling the clock
are the loop's, as in-process); this module only sends, bounded in real time. One per clock:

- Virtual clock (``arun``, what ``tick``/``advance``/``drain`` use, as the fake's
  ``async_runner``): time stands still while
  attempts are in flight. At one virtual instant, every attempt that may start is started
  together, in due order (ties in publish order); once all of them have answered, their
  answers are applied in that same order, so ``deliveries`` and the list a move returns are in
  a stable order whatever order the answers came back in. What they led to (messages their
  handlers published for now, retries, the next message of a queue) starts in the next round
  at the same instant; the clock moves on once nothing more is due there.
- Real clock (``start_due``, called by the server's wall-clock task, over the loop opened
  for the server's lifetime): every attempt due by now starts at once; each is applied when
  its own answer comes, at the wall clock's time.

A cancelled attempt (a reset, a shutdown) did not happen: its message is due again.

An attempt gets no longer than the server's attempt timeout (``--attempt-timeout``) in real
time, or the message's own ``Upstash-Timeout`` when that is shorter; past it the attempt is a
failed one, retried as the message's retry policy says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import httpx

from ...delivery.dispatcher import DeliveryLoop, Dispatcher, Job
from ...delivery.outcome import Outcome, Unrouted
from ...engine.attempts import timeout_error
from ...engine.models import Delivery
from ...testing.fake import FakeQStash
from .holdback import Holdback

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
    """The server's concurrent runner over the fake's ``DeliveryLoop``, on the running event
    loop. Built over a fake, it becomes the runner of the fake's async moves
    (``FakeQStash.async_runner``).

    ``catch_up`` (real clock only) moves the fake's clock to the wall clock's now; an
    attempt's answer is applied at that moment."""

    def __init__(
        self,
        fake: FakeQStash,
        attempt_timeout_s: float = DEFAULT_ATTEMPT_TIMEOUT_S,
        *,
        catch_up: Callable[[], None] | None = None,
        on_end: Callable[[], None] | None = None,
        holdback: Holdback | None = None,
    ) -> None:
        self._dispatcher: Dispatcher = fake.dispatcher
        self._store = fake.store
        self._sender = fake.sender
        self.attempt_timeout_s = attempt_timeout_s
        self._catch_up = catch_up
        self._on_end = on_end
        #: What may not go out is held back there instead of attempted (``holdback``).
        self._holdback = holdback
        #: The real clock's loop, open for the server's lifetime.
        self._open = DeliveryLoop.open(fake.dispatcher)
        #: The real clock's attempts in flight.
        self._tasks: set[asyncio.Task[Delivery | None]] = set()
        fake.async_runner = self  # the fake's async moves deliver through here

    # -- virtual clock ----------------------------------------------------------------------
    async def arun(self, until_ms: int) -> list[Delivery]:
        """Deliver what is due up to ``until_ms``, round by round at each virtual instant:
        a round's attempts start together and their answers are applied in start order."""
        with DeliveryLoop(self._dispatcher, until_ms) as loop:
            while started := loop.round():
                outcomes = await asyncio.gather(*(self._send(loop, job) for job in started))
                for job, outcome in zip(started, outcomes, strict=True):
                    if outcome is not None:  # None: held back, no attempt
                        loop.answer(job, outcome)
        return loop.made

    # -- real clock -------------------------------------------------------------------------
    def start_due(self) -> list[asyncio.Task[Delivery | None]]:
        """Start every attempt due by now; each is applied when it answers. Returns their
        tasks (a task's result: the delivery made)."""
        assert self._catch_up is not None, "start_due drives a real clock"
        loop = asyncio.get_running_loop()
        started: list[asyncio.Task[Delivery | None]] = []
        for job in self._open.due(self._store.clock.now_ms):
            task = loop.create_task(self._attempt(job))
            self._tasks.add(task)
            task.add_done_callback(self._landed)
            started.append(task)
        return started

    async def _attempt(self, job: Job) -> Delivery | None:
        try:
            outcome = await self._send(self._open, job)
        except asyncio.CancelledError:
            self._open.abandon(job)  # a reset or shutdown: the attempt did not happen
            raise
        if outcome is None:  # held back: no attempt
            return None
        assert self._catch_up is not None
        self._catch_up()
        try:
            return self._open.answer(job, outcome)
        finally:
            if self._on_end is not None:
                self._on_end()

    def _landed(self, task: asyncio.Task[Delivery | None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("applying an attempt's answer failed", exc_info=task.exception())

    async def cancel(self) -> None:
        """Cut every attempt in flight (a reset, a shutdown): none of them happened."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks.clear()
        self._open.abandon_all()  # those whose task was cut before it ever ran

    # -- shared -----------------------------------------------------------------------------
    async def _send(self, loop: DeliveryLoop, job: Job) -> Outcome | None:
        """One attempt's HTTP call, bounded by the server's attempt timeout or the message's
        own deadline, whichever is shorter; past it, a failed attempt saying which. None when
        the attempt may not go out (``holdback``): it is put back and held, nothing sent."""
        request = job.request
        assert request is not None
        if self._holdback is not None:
            why = self._holdback.reason(str(request.url))
            if why is not None:
                loop.abandon(job)
                self._holdback.hold(job.message, why)
                return None
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
            return loop.unrouted(job, exc)
        except Exception as exc:  # our own failure: a failed attempt, never a stuck message
            _log.exception("delivering %s failed", job.message.message_id)
            return Outcome(None, httpx.Headers(), b"", f"{type(exc).__name__}: {exc}")
        finally:
            timer.cancel()


def _uncancelled(task: asyncio.Task[Any]) -> bool:
    """Take back the cancellation the timeout asked for; False when another one (a reset, a
    shutdown) is pending as well. Python 3.10 counts no cancellations: there it is taken
    back unconditionally."""
    uncancel = getattr(task, "uncancel", None)
    if uncancel is None:
        return True
    return bool(uncancel() == 0)
