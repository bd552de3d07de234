"""API calls the fake answered with an error: kept so a failure report can show a publish the
app tried, was refused, and swallowed the error of; and ``Refused``, what the engine raises
when it refuses a call (the API answers it with the status and message)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from .saved import Saved, saved_as

#: Only the newest are kept: an app retrying a bad call in a loop must not grow memory.
MAX_KEPT = 50


class Refused(Exception):
    """A call the engine refuses (a plan's limit, say), with the status QStash answers it
    with and the message of its ``{"error": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class RejectedCall:
    method: str
    #: The raw path, query left out (it may carry the token).
    path: str
    status: int
    error: str
    at_ms: int
    #: Answered by a fault armed with ``qstash.fail_next``, not by the API itself.
    injected: bool = False


class RejectedCalls(Saved):
    """The newest ``MAX_KEPT`` rejected calls, oldest first, and how many there were in all."""

    SAVED = saved_as("_kept total")

    def __init__(self) -> None:
        self._kept: deque[RejectedCall] = deque(maxlen=MAX_KEPT)
        self.total = 0

    def record(self, call: RejectedCall) -> None:
        self._kept.append(call)
        self.total += 1

    def __iter__(self) -> Iterator[RejectedCall]:
        return iter(self._kept)

    def __len__(self) -> int:
        return len(self._kept)
