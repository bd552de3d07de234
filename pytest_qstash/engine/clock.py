"""The virtual clock and its heap of due events.

Time moves only when told. Work is kept in a heap ordered by ``(due_ms, rank)`` (the rank is
the event's sequence, unless a simulation reorders events due at one moment), so moving the
clock costs in proportion to the events crossed, never to the time skipped: advancing ten idle
years is one comparison.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from .models import ms_to_datetime
from .saved import UNSET, Saved, saved_as

EventKind = Literal["deliver", "end", "cron", "flow", "wait"]


@dataclass(frozen=True, slots=True)
class DueEvent:
    due_ms: int
    seq: int
    kind: EventKind
    #: The id of what is due (a message id, a schedule id).
    target: str
    #: Which attempt this event was scheduled for; a stale event (its message moved on, was
    #: cancelled or rescheduled) is skipped when popped rather than searched out of the heap.
    generation: int = 0


class VirtualClock(Saved):
    SAVED = saved_as("now_ms _heap _seq")
    UNSAVED = {"on_move": UNSET, "rank": UNSET}

    def __init__(self, start_ms: int) -> None:
        self.now_ms = start_ms
        self._heap: list[tuple[int, int, DueEvent]] = []
        self._seq = 0
        #: Told the new time whenever the clock moves forward (retention forgets what
        #: expired then); None: nobody listens.
        self.on_move: Callable[[int], None] | None = None
        #: Where a new event ranks among those due at its moment (a simulation's reorder);
        #: None: by its sequence, the order they were scheduled in.
        self.rank: Callable[[DueEvent, Iterable[DueEvent]], int] | None = None

    @property
    def now(self) -> datetime:
        return ms_to_datetime(self.now_ms)

    def schedule(self, due_ms: int, kind: EventKind, target: str, generation: int = 0) -> DueEvent:
        # Nothing is ever due in the past: a late event is due now, after what is already due.
        self._seq += 1
        event = DueEvent(max(due_ms, self.now_ms), self._seq, kind, target, generation)
        rank = event.seq if self.rank is None else self.rank(event, self.pending())
        heapq.heappush(self._heap, (event.due_ms, rank, event))
        return event

    def pop_due(self, until_ms: int) -> DueEvent | None:
        """Pop the earliest event due at or before ``until_ms``, moving the clock to it."""
        if not self._heap or self._heap[0][0] > until_ms:
            return None
        _, _, event = heapq.heappop(self._heap)
        if event.due_ms > self.now_ms:
            self.now_ms = event.due_ms
            if self.on_move is not None:
                self.on_move(self.now_ms)
        return event

    def move_to(self, ms: int) -> None:
        if ms < self.now_ms:
            raise ValueError(
                f"time never goes backwards: {ms_to_datetime(ms).isoformat()} is before "
                f"now ({self.now.isoformat()})"
            )
        moved = ms > self.now_ms
        self.now_ms = ms
        if moved and self.on_move is not None:
            self.on_move(ms)

    def start_over_at(self, ms: int) -> None:
        """Set the time anywhere, the past included: only while nothing is planned (a fake
        that holds nothing yet starts at the time an export was taken)."""
        if self._heap:
            raise ValueError("the clock can start over only while nothing is planned on it")
        self.now_ms = ms

    def pending(self) -> Iterator[DueEvent]:
        """The events in due order, lazily: a walk of the heap that costs in proportion to
        the events looked at (log n each), so a caller stopping at the first live one does
        not pay for sorting the whole heap."""
        heap = self._heap
        frontier = [(heap[0], 0)] if heap else []
        while frontier:
            entry, index = heapq.heappop(frontier)
            yield entry[2]
            for child in (2 * index + 1, 2 * index + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))

    def __len__(self) -> int:
        return len(self._heap)
