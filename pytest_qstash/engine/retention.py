"""Retention as QStash has it: log entries, finished messages (with their deliveries) and
finished workflow runs are kept for the plan's log retention, DLQ entries for its DLQ
retention; then they are gone, from the API's answers and from memory.

What is expired is decided here, on the virtual clock's time, whenever it moves. Everything
kept is queued in the order it expires (a log only grows at its end, and the clock never goes
back), so a move looks at the head of each queue only: forgetting costs in proportion to what
is forgotten, and skipping a year of idle time costs nothing more than skipping a second.

The store builds one only when retention is on (a server's default); in-process a test's
records stay whole unless it asks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

from .dlq import DeadLetters
from .models import Delivery, DlqEntry, Event, Message
from .plans import Plan
from .saved import UNSET, Saved, saved_as
from .workflows import WorkflowRun, WorkflowRuns

T = TypeVar("T")

#: A dropped slot of a ``Trail``, until the next compaction (the entry itself is freed).
_GONE: Any = None
#: A trail compacts once this many entries at its start are dropped (and half of it is).
_COMPACT_AT = 1024


class Trail(Generic[T], Saved):
    """An append-only history (the log, the deliveries) whose oldest entries can be dropped:
    a list with a moving start, compacted once half of it is dropped, so that dropping is
    amortized O(1) per entry and indexing stays O(1). ``dropped`` counts what was dropped in
    all, so that an absolute position (a log cursor) stays valid across drops."""

    SAVED = saved_as("_items _start dropped")

    __slots__ = ("_items", "_start", "dropped")

    def __init__(self) -> None:
        self._items: list[T] = []
        self._start = 0
        self.dropped = 0

    def append(self, item: T) -> None:
        self._items.append(item)

    def __len__(self) -> int:
        return len(self._items) - self._start

    def __bool__(self) -> bool:
        return len(self._items) > self._start

    def __iter__(self) -> Iterator[T]:
        items = self._items
        return iter(items[self._start :] if self._start else items)

    def __reversed__(self) -> Iterator[T]:
        items, start = self._items, self._start
        return (items[i] for i in range(len(items) - 1, start - 1, -1))

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return self._items[self._start :][index]
        return self._items[self._position(index)]

    def __delitem__(self, index: int) -> None:
        del self._items[self._position(index)]

    def _position(self, index: int) -> int:
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("trail index out of range")
        return self._start + index

    def drop_while(self, expired: Callable[[T], bool]) -> int:
        """Drop entries from the oldest on while ``expired`` holds; returns how many."""
        items, start = self._items, self._start
        end = len(items)
        first = start
        while start < end and expired(items[start]):
            items[start] = _GONE  # freed now, not at the next compaction
            start += 1
        count = start - first
        if count:
            self.dropped += count
            if start >= _COMPACT_AT and start * 2 >= end:
                del items[:start]
                start = 0
            self._start = start
        return count

    def __repr__(self) -> str:
        return f"<Trail of {len(self)} ({self.dropped} dropped)>"


class Retention(Saved):
    """Forgets what the plan's retention no longer keeps, as the clock moves past it.

    It is told what finished (a message, a run) and what was dead-lettered, and reads the
    log and the deliveries from their oldest end. A message of a workflow run goes with its
    run, a run only once all its messages are done and its DLQ entry (if any) is gone, and a
    message callbacks are still to report on waits for them: what a live thing needs is
    never forgotten under it."""

    SAVED = saved_as(
        "log_ms dlq_ms _events _deliveries _dlq _workflows _finished _finished_ms _runs _dead"
        " forgotten"
    )
    #: The store's own collection and methods: set again by the store it serves (``attach``).
    UNSAVED = {"_messages": UNSET, "_forget_message": UNSET, "_awaits_callbacks": UNSET}

    def __init__(
        self,
        plan: Plan,
        *,
        messages: Mapping[str, Message],
        events: Trail[Event],
        deliveries: Trail[Delivery],
        dlq: DeadLetters,
        workflows: WorkflowRuns,
        forget_message: Callable[[str], None],
        awaits_callbacks: Callable[[str], bool],
    ) -> None:
        self.log_ms = plan.log_retention_ms
        self.dlq_ms = plan.dlq_retention_ms
        self._events = events
        self._deliveries = deliveries
        self._dlq = dlq
        self._workflows = workflows
        self.attach(messages, forget_message, awaits_callbacks)
        #: (when it expires, message id), in that order; a message finished again since
        #: (redelivered) has a later entry, and the earlier one is skipped.
        self._finished: deque[tuple[int, str]] = deque()
        self._finished_ms: dict[str, int] = {}
        self._runs: deque[tuple[int, str]] = deque()
        self._dead: deque[tuple[int, str]] = deque()
        #: How many of each were forgotten (for reports and probes).
        self.forgotten: dict[str, int] = {"messages": 0, "runs": 0, "dlq": 0}

    def attach(
        self,
        messages: Mapping[str, Message],
        forget_message: Callable[[str], None],
        awaits_callbacks: Callable[[str], bool],
    ) -> None:
        """Serve the store whose messages these are: it forgets a message, and says whether
        callbacks about one are still due (a restored store attaches its retention again)."""
        self._messages = messages
        self._forget_message = forget_message
        self._awaits_callbacks = awaits_callbacks

    # -- told by the store ------------------------------------------------------------------
    def message_finished(self, message_id: str, now_ms: int) -> None:
        self._finished_ms[message_id] = now_ms
        self._finished.append((now_ms + self.log_ms, message_id))

    def run_ended(self, run_id: str, now_ms: int) -> None:
        self._runs.append((now_ms + self.log_ms, run_id))

    def dead_lettered(self, entry: DlqEntry) -> None:
        self._dead.append((entry.created_ms + self.dlq_ms, entry.dlq_id))

    # -- the clock moved --------------------------------------------------------------------
    def expire(self, now_ms: int) -> None:
        """Forget everything whose retention ended at or before ``now_ms``."""
        cutoff = now_ms - self.log_ms
        events = self._events
        if events and events[0].time_ms <= cutoff:
            events.drop_while(lambda event: event.time_ms <= cutoff)
        deliveries = self._deliveries
        if deliveries and _ended_ms(deliveries[0]) <= cutoff:
            deliveries.drop_while(lambda delivery: _ended_ms(delivery) <= cutoff)
        finished = self._finished
        while finished and finished[0][0] <= now_ms:
            due, message_id = finished.popleft()
            self._expire_message(message_id, due - self.log_ms, now_ms)
        dead = self._dead
        while dead and dead[0][0] <= now_ms:
            self._expire_dead_letter(dead.popleft()[1], now_ms)
        runs = self._runs
        while runs and runs[0][0] <= now_ms:
            run = self._workflows.get(runs.popleft()[1])
            if run is not None:
                self._expire_run(run, now_ms)

    def _expire_message(self, message_id: str, finished_ms: int, now_ms: int) -> None:
        if self._finished_ms.get(message_id) != finished_ms:
            return  # finished again later (redelivered): its later entry decides
        message = self._messages.get(message_id)
        if message is None or not message.done:
            return  # pending again: it is told again when it finishes
        if self._workflows.membership(message_id) is not None:
            del self._finished_ms[message_id]
            return  # goes with its run
        if self._awaits_callbacks(message_id):
            # Its callbacks still run (and free its queue slot when done): later.
            self.message_finished(message_id, now_ms)
            return
        self._forget(message)

    def _expire_dead_letter(self, dlq_id: str, now_ms: int) -> None:
        entry = self._dlq.pop(dlq_id, None)
        if entry is None:
            return  # deleted or retried already
        self.forgotten["dlq"] += 1
        run_id = entry.message.workflow_run_id
        run = self._workflows.get(run_id) if run_id is not None else None
        if run is not None and run.dlq_id == dlq_id:
            self._expire_run(run, now_ms)

    def _expire_run(self, run: WorkflowRun, now_ms: int) -> None:
        if run.active or run.completed_ms is None or run.completed_ms + self.log_ms > now_ms:
            return  # running again, or ended again later (a later entry decides)
        if run.dlq_id is not None and run.dlq_id in self._dlq:
            # The workflow DLQ shows it: it goes when its entry does (looked at again in a
            # while, should the entry be deleted rather than expire).
            self.run_ended(run.run_id, now_ms)
            return
        if not all(message.done for message in run.messages):
            self.run_ended(run.run_id, now_ms)  # its failure callback still runs: later
            return
        self.forgotten["runs"] += 1
        for message in self._workflows.forget(run):
            if self._messages.get(message.message_id) is message:
                self._forget(message)

    def _forget(self, message: Message) -> None:
        message_id = message.message_id
        self._forget_message(message_id)
        self._finished_ms.pop(message_id, None)
        self.forgotten["messages"] += 1

    def __repr__(self) -> str:
        return (
            f"<Retention logs {self.log_ms // 86_400_000}d, DLQ {self.dlq_ms // 86_400_000}d; "
            f"forgotten {self.forgotten}>"
        )


def _ended_ms(delivery: Delivery) -> int:
    return delivery.ended_ms if delivery.ended_ms is not None else delivery.at_ms
