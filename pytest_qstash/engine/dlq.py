"""The dead-letter queue: the messages that failed for good, with the answer that failed them,
until a test (or the API) deletes or retries them. Retrying publishes, so it stays with the
store; the entries, their ids and their deletion are here."""

from __future__ import annotations

from .attempts import AttemptResult
from .models import DlqEntry, Message
from .saved import Saved, saved_as


class DeadLetters(dict[str, DlqEntry], Saved):
    """The DLQ by dlq id, in the order messages failed."""

    SAVED = saved_as("_seq")

    def __init__(self) -> None:
        super().__init__()
        self._seq = 0

    def add(
        self, message: Message, result: AttemptResult, now_ms: int, dlq_id: str | None = None
    ) -> DlqEntry:
        """The entry of a message that failed for good with ``result``; ``dlq_id``: a
        recorded one's (``qstash.load``), else the next of this DLQ's own."""
        if dlq_id is None:
            self._seq += 1
            dlq_id = f"{now_ms}-{self._seq}"
        entry = DlqEntry(
            dlq_id=dlq_id,
            message=message,
            created_ms=now_ms,
            response_status=result.status,
            response_headers=result.headers,
            response_content=result.content,
            error=result.error,
        )
        self[entry.dlq_id] = entry
        return entry

    def delete(self, dlq_id: str) -> bool:
        """Remove one entry; False when there is none with this id."""
        return self.pop(dlq_id, None) is not None
