"""Queues: FIFO delivery with a parallelism limit, pausable.

A queued message may start only while it is among the first ``parallelism`` unfinished
messages of its queue; a message that is retrying keeps its slot, so the next one waits for
all of its retries, as on QStash. A message that may not start yet is parked, and released
when a slot frees up (finish, cancel, resume, more parallelism).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice

from .models import ms_to_datetime


@dataclass(eq=False, slots=True)
class Queue:
    name: str
    created_ms: int
    updated_ms: int
    parallelism: int = 1
    paused: bool = False
    #: Unfinished messages in FIFO order (a dict keeps insertion order, removes in O(1)).
    members: dict[str, None] = field(default_factory=dict)
    parked: set[str] = field(default_factory=set)

    @property
    def lag(self) -> int:
        """Messages in the queue not yet processed."""
        return len(self.members)

    @property
    def created_at(self) -> datetime:
        return ms_to_datetime(self.created_ms)

    def may_start(self, message_id: str) -> bool:
        if self.paused:
            return False
        return message_id in islice(self.members, self.parallelism)

    def startable_parked(self) -> list[str]:
        """Parked messages that hold a slot now."""
        if self.paused:
            return []
        return [m for m in islice(self.members, self.parallelism) if m in self.parked]

    def __repr__(self) -> str:
        state = " paused" if self.paused else ""
        return f"<Queue {self.name} parallelism={self.parallelism} lag={self.lag}{state}>"
