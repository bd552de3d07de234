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
from .saved import Saved


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


class Queues(dict[str, Queue], Saved):
    """The account's queues by name, and the FIFO rules of joining, waiting and leaving. The
    store plans on the clock what these rules release."""

    def queue(self, name: str, now_ms: int) -> Queue:
        """The queue called ``name``, created (parallelism 1) if it does not exist."""
        queue = self.get(name)
        if queue is None:
            queue = self[name] = Queue(name, now_ms, now_ms)
        return queue

    def join(self, name: str | None, message_id: str, now_ms: int) -> None:
        """A message enters its queue, behind the ones already there."""
        if name is not None:
            self.queue(name, now_ms).members[message_id] = None

    def park(self, name: str | None, message_id: str) -> None:
        """A due message its queue holds back waits there until released."""
        queue = self.get(name) if name else None
        if queue is not None:
            queue.parked.add(message_id)

    def holds(self, name: str | None, message_id: str) -> bool:
        """Whether its queue holds the message back now (read only)."""
        queue = self.get(name) if name else None
        return queue is not None and not queue.may_start(message_id)

    def leave(self, name: str | None, message_id: str) -> list[str]:
        """A message leaves its queue for good; returns the parked messages that may start."""
        queue = self.get(name) if name else None
        if queue is None:
            return []
        queue.members.pop(message_id, None)
        queue.parked.discard(message_id)
        return self.release(queue)

    @staticmethod
    def release(queue: Queue) -> list[str]:
        """Take the parked messages that hold a slot now off the parked set."""
        released = queue.startable_parked()
        queue.parked.difference_update(released)
        return released
