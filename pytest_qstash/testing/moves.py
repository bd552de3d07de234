"""The fake's clock moves: ``tick``, ``advance``, ``advance_to``, ``drain`` and their async forms,
each delivering what falls due on the way; ``next_due``. One drain plan serves both forms."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Generator
from datetime import datetime

from ..delivery.dispatcher import AsyncRunner, Dispatcher
from ..engine.clock import VirtualClock
from ..engine.durations import DRAIN_WITHIN, Duration, parse_duration_ms
from ..engine.models import Delivery, ms_to_datetime
from ..engine.options import LATEST_MS
from ..engine.scheduler import Scheduler
from ..errors import AsyncContextError
from .moments import moment_ms
from .query import Found

#: What a drain asks to run until next (a moment, unix ms), sent back what that delivered;
#: returns everything it delivered.
DrainPlan = Generator[int, list[Delivery], list[Delivery]]


class ClockMoves:
    """``FakeQStash``'s clock moves (a mixin over the fake's clock, dispatcher and scheduler)."""

    clock: VirtualClock
    _dispatcher: Dispatcher
    _scheduler: Scheduler
    #: What the async moves (``atick``, ``aadvance``, ``aadvance_to``, ``adrain``) deliver
    #: through: the dispatcher's loop, one attempt at a time; a server sets its concurrent
    #: runner over the same loop (``server.runner.deliveries.ServerDeliveries``).
    async_runner: AsyncRunner

    @property
    def now(self) -> datetime:
        return self.clock.now

    def tick(self) -> Found[Delivery]:
        """Deliver everything due now (and whatever that publishes for now), in order.
        Returns the deliveries made, callbacks included (``.filter(kind="message")`` leaves
        them out)."""
        __tracebackhide__ = True
        self._dispatcher.refuse_reentry()
        _refuse_inside_loop("tick()", "atick()")
        return _made(self._dispatcher.run(self.clock.now_ms))

    def advance(self, duration: Duration) -> Found[Delivery]:
        """Move time forward by ``duration``, delivering each due message at its own time.
        Returns the deliveries made, as ``tick()``."""
        __tracebackhide__ = True
        self._dispatcher.refuse_reentry()
        _refuse_inside_loop("advance(...)", "aadvance(...)")
        return _made(self._dispatcher.run(self._target(duration)))

    def advance_to(self, moment: datetime | str) -> Found[Delivery]:
        """Move time forward to ``moment``, delivering each due message at its own time.
        Returns the deliveries made, as ``tick()``."""
        __tracebackhide__ = True
        self._dispatcher.refuse_reentry()
        _refuse_inside_loop("advance_to(...)", "aadvance_to(...)")
        return _made(self._dispatcher.run(self._moment(moment)))

    def drain(self, within: Duration = DRAIN_WITHIN) -> Found[Delivery]:
        """Deliver everything pending, each at its own due time, until nothing more is due
        before ``within`` from now, the moment of the call (default 30 days). Unlike
        ``advance(within)``, the clock stops at the last thing delivered, not at the limit:
        "run this workflow to its end". Schedules do not keep it going: their firings, and
        what they lead to, happen on the way when they fall before the last pending delivery."""
        __tracebackhide__ = True
        self._dispatcher.refuse_reentry()
        _refuse_inside_loop("drain()", "adrain()")
        return _made(_follow(self._drain_plan(within), self._dispatcher.run))

    async def adrain(self, within: Duration = DRAIN_WITHIN) -> Found[Delivery]:
        __tracebackhide__ = True
        return _made(await _afollow(self._drain_plan(within), self.async_runner.arun))

    async def atick(self) -> Found[Delivery]:
        __tracebackhide__ = True
        return _made(await self.async_runner.arun(self.clock.now_ms))

    async def aadvance(self, duration: Duration) -> Found[Delivery]:
        __tracebackhide__ = True
        return _made(await self.async_runner.arun(self._target(duration)))

    async def aadvance_to(self, moment: datetime | str) -> Found[Delivery]:
        __tracebackhide__ = True
        return _made(await self.async_runner.arun(self._moment(moment)))

    def next_due(self) -> datetime | None:
        """When the next delivery, end of an attempt in flight, or cron firing is due, or None
        when nothing is pending.

        What cannot happen until the test acts is not due: a paused schedule's firings, and
        the messages held by a paused queue or a paused flow-control key."""
        due = self._scheduler.next_due_ms()
        return None if due is None else ms_to_datetime(due)

    def _drain_plan(self, within: Duration) -> DrainPlan:
        """``drain``'s steps, whichever runner takes them: everything due now, then each next
        moment the dispatcher names before the limit, until it names none."""
        limit = self._target(within)  # checked at the call, before anything is delivered
        return self._drain_steps(limit)

    def _drain_steps(self, limit: int) -> DrainPlan:
        made = yield self.clock.now_ms
        while (step := self._dispatcher.drain_step(limit, len(made))) is not None:
            target, stuck = step
            delivered = yield target
            if stuck and not delivered:
                break  # due, yet nothing could be delivered: never spin on it
            made += delivered
        return made

    def _target(self, duration: Duration) -> int:
        target = self.clock.now_ms + parse_duration_ms(duration)
        if target > LATEST_MS:
            raise ValueError(
                f"cannot advance by {duration!r}: it would take the clock past the year 9999"
            )
        return target

    def _moment(self, moment: datetime | str) -> int:
        ms = moment_ms(moment)
        if ms < self.clock.now_ms:
            raise ValueError(
                f"cannot advance_to {moment!r}: it is before now ({self.now.isoformat()}); "
                "time never goes backwards"
            )
        return ms


def _follow(plan: DrainPlan, run: Callable[[int], list[Delivery]]) -> list[Delivery]:
    __tracebackhide__ = True
    try:
        target = next(plan)
        while True:
            target = plan.send(run(target))
    except StopIteration as done:
        made: list[Delivery] = done.value
        return made


async def _afollow(
    plan: DrainPlan, arun: Callable[[int], Awaitable[list[Delivery]]]
) -> list[Delivery]:
    __tracebackhide__ = True
    try:
        target = next(plan)
        while True:
            target = plan.send(await arun(target))
    except StopIteration as done:
        made: list[Delivery] = done.value
        return made


def _made(deliveries: list[Delivery]) -> Found[Delivery]:
    return Found(deliveries, "delivery")


def _refuse_inside_loop(name: str, async_name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        if not _other_async_library_running():
            return
    raise AsyncContextError(
        f"qstash.{name} blocks, and this code runs inside an event loop: "
        f"use `await qstash.{async_name}` here instead"
    )


def _other_async_library_running() -> bool:
    """Whether trio (or another library sniffio knows) runs in this thread. Trio imports
    sniffio, so when sniffio was never imported, nothing it knows can be running."""
    sniffio = sys.modules.get("sniffio")
    if sniffio is None:
        return False
    try:
        sniffio.current_async_library()
    except Exception:  # AsyncLibraryNotFoundError: plain sync code
        return False
    return True
