"""Deliveries on an event loop, bounded in real time (the loop's monotonic clock, which no app
clock moves): past the timeout one is cancelled and ``DeliveryTimeoutError`` raised. On an
asyncio loop a watch also looks, every few tens of milliseconds, whether the loop is idle (no
callback ready, no timer, no I/O, no worker thread busy) while the delivery still waits:
nothing can then ever finish it, so after a short grace it is reported at once. After a
delivery, what the app started and did not wait for runs a few passes of the loop."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import weakref
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import httpx

from ..errors import DeliveryTimeoutError

_T = TypeVar("_T")
#: How many passes of the loop what an app left running gets after a delivery.
BACKGROUND_PASSES = 20
#: How often the watch of a delivery on an asyncio loop looks at it (real seconds).
_WATCH_INTERVAL_S = 0.05
#: How long a loop must stay idle, the delivery waiting, before it is called stuck: long
#: enough for a thread the watch cannot see (a library's own) to wake it when done.
STALL_GRACE_S = 1.0


class LoopWatches:
    """One watch per event loop deliveries run on (the fake's own, a portal's, the test's)."""

    def __init__(self) -> None:
        self._watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWatch] = (
            weakref.WeakKeyDictionary()
        )

    async def bounded(
        self,
        coroutine: Awaitable[_T],
        request: httpx.Request,
        timeout: float,
        *,
        idle_watch: bool = True,
    ) -> _T:
        """Await one delivery on the running loop, bounded in real time (see the module);
        without ``idle_watch``, by the timeout alone."""
        __tracebackhide__ = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio: its own clock bounds it; no idle watch
            with anyio.move_on_after(timeout):
                return await coroutine
            raise delivery_timeout_error(request, timeout, stalled=False) from None
        task = asyncio.current_task()
        assert task is not None
        watch = self._watches.get(loop)
        if watch is None:
            watch = self._watches[loop] = _LoopWatch(loop)
        delivery = watch.begin(task, timeout, idle_watch=idle_watch)
        try:
            result = await coroutine
        except asyncio.CancelledError:
            if delivery.verdict is None:
                raise  # cancelled by someone else: not ours to turn into an error
        finally:
            watch.end(delivery)
        if delivery.verdict is not None:
            if sys.version_info >= (3, 11):
                task.uncancel()  # the cancellation was the watch's, and is spent
            raise delivery_timeout_error(request, timeout, stalled=delivery.verdict == "stalled")
        return result


@contextlib.asynccontextmanager
async def settling_background_tasks() -> AsyncIterator[None]:
    """After a delivery on the test's loop, let the tasks the app started and did not await
    (a fire-and-forget publish) run a few passes, as the sync path does on its own loop:
    what they publish is there when ``atick()`` returns. Never a wait: a task waiting on
    something else stays pending."""
    try:
        before = asyncio.all_tasks()
    except RuntimeError:  # not an asyncio loop (trio): nothing to settle this way
        yield
        return
    yield
    started = asyncio.all_tasks() - before
    for _ in range(BACKGROUND_PASSES):
        if all(task.done() for task in started):
            break
        await asyncio.sleep(0)


@dataclass(eq=False, slots=True)
class _InFlight:
    task: asyncio.Task[Any]
    deadline: float
    idle_since: float | None = None
    #: Whether an idle loop ends it early (not when its work runs where the watch cannot see).
    idle_watch: bool = True
    #: Why the watch cancelled it: "timeout" or "stalled"; None while it runs its course.
    verdict: str | None = None


class _LoopWatch:
    """Bounds the deliveries in flight on one asyncio loop, in real time: a timer looks at
    them every ``_WATCH_INTERVAL_S`` and cancels one past its deadline, or once the loop has
    been idle for ``STALL_GRACE_S`` while it still waits. The timer is shared by every
    delivery and only armed while one is in flight (a burst of quick deliveries costs one
    timer per interval, not one each), and no deadline timer is set, so that the loop it
    watches can look idle."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # Read here, in a delivery's task: AnyIO finds its loop only from inside a task.
        self._limiter = anyio.to_thread.current_default_thread_limiter()
        self._in_flight: list[_InFlight] = []
        self._timer: asyncio.TimerHandle | None = None

    def begin(
        self, task: asyncio.Task[Any], timeout: float, *, idle_watch: bool = True
    ) -> _InFlight:
        delivery = _InFlight(task, self._loop.time() + timeout, idle_watch=idle_watch)
        self._in_flight.append(delivery)
        if self._timer is None:
            self._timer = self._loop.call_later(min(_WATCH_INTERVAL_S, timeout), self._look)
        return delivery

    def end(self, delivery: _InFlight) -> None:
        self._in_flight.remove(delivery)

    def _look(self) -> None:
        self._timer = None
        now = self._loop.time()
        idle: bool | None = None  # asked once per look, and only when it matters
        next_look = _WATCH_INTERVAL_S
        for delivery in self._in_flight:
            if delivery.verdict is not None:
                continue
            if now >= delivery.deadline:
                delivery.verdict = "timeout"
            elif delivery.idle_watch:
                if idle is None:
                    idle = _loop_idle(self._loop, self._limiter)
                if not idle:
                    delivery.idle_since = None
                elif delivery.idle_since is None:
                    delivery.idle_since = now
                elif now - delivery.idle_since >= STALL_GRACE_S:
                    delivery.verdict = "stalled"
            if delivery.verdict is not None:
                delivery.task.cancel()
            else:
                next_look = min(next_look, delivery.deadline - now)
        if any(d.verdict is None for d in self._in_flight):
            self._timer = self._loop.call_later(max(next_look, 0.0), self._look)


def ready_to_run(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether a callback is ready on the loop (asyncio's private queue of them); on a loop
    without one (uvloop), whether any task is pending at all."""
    ready = getattr(loop, "_ready", None)
    return bool(ready) if ready is not None else bool(asyncio.all_tasks(loop))


def _loop_idle(loop: asyncio.AbstractEventLoop, limiter: anyio.CapacityLimiter) -> bool:
    """Whether nothing the loop knows of can make progress: no callback ready, no timer, no
    file descriptor watched (its own wake-up pipe aside), no worker thread of its default
    executor or of AnyIO's busy. Only a thread the loop cannot see (a library's own) could
    still wake it. False whenever the loop is not the standard library's (uvloop, say)."""
    try:
        if loop._ready or any(not h.cancelled() for h in loop._scheduled):  # type: ignore[attr-defined]
            return False
        wakeup = loop._ssock.fileno()  # type: ignore[attr-defined]
        watched = loop._selector.get_map().values()  # type: ignore[attr-defined]
        if any(key.fd != wakeup for key in watched):
            return False
        executor = loop._default_executor  # type: ignore[attr-defined]
        if executor is not None and (
            executor._work_queue.qsize() or len(executor._threads) > executor._idle_semaphore._value
        ):
            return False
        return limiter.borrowed_tokens == 0
    except Exception:
        return False


def delivery_timeout_error(
    request: httpx.Request, timeout: float, *, stalled: bool, detail: str = ""
) -> DeliveryTimeoutError:
    return DeliveryTimeoutError(
        str(request.url),
        request.headers.get("Upstash-Message-Id", "?"),
        timeout,
        stalled=stalled,
        detail=detail,
    )
