"""The failure report of a test that used a server: what the server saw since the test began.

A test takes a ``Mark`` (how far each of the store's histories had got) when it starts; the
report is the in-process one (``pytest_qstash.report``) over a view of the store that holds
only what is newer: the messages created or attempted since, their DLQ entries, the runs
started since, the API calls rejected since. A mark from before a reset covers everything the
fresh store holds. Schedules are resources, not history: all of them are shown.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any

from .. import report
from ..state.dlq import DeadLetters
from ..state.rejections import RejectedCalls
from ..state.store import Store


@dataclass(frozen=True)
class Mark:
    #: Which store (the server counts its resets): a mark of another one covers everything.
    generation: int
    messages: int
    deliveries: int
    runs: int
    api_errors: int

    @classmethod
    def of(cls, store: Store, generation: int) -> Mark:
        # Counting what retention forgot: the mark stays a position in all there ever was.
        messages, runs = _forgotten(store)
        return cls(
            generation,
            len(store.messages) + messages,
            len(store.deliveries) + store.deliveries.dropped,
            len(store.workflows.runs) + runs,
            store.api_errors.total,
        )

    @classmethod
    def read(cls, fields: dict[str, Any]) -> Mark:
        try:
            return cls(**{name: int(fields[name]) for name in cls.__dataclass_fields__})
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"invalid mark {fields!r}: expected the object GET /_qstash/mark answers "
                f"({', '.join(cls.__dataclass_fields__)})"
            ) from None

    def json(self) -> dict[str, int]:
        return asdict(self)


def since(store: Store, mark: Mark | None, generation: int) -> str | None:
    """The report section's text for what ``store`` saw after ``mark``, None when nothing."""
    if mark is None or mark.generation != generation:
        mark = Mark(generation, 0, 0, 0, 0)
    view = _view(store, mark)
    return report.section(view, len(store.deliveries) + store.deliveries.dropped - mark.deliveries)


def _view(store: Store, mark: Mark) -> Store:
    """A shallow copy of ``store`` whose histories start at ``mark``: read, never changed."""
    view = copy.copy(store)
    since = max(0, mark.deliveries - store.deliveries.dropped)
    touched = {d.message_id for d in store.deliveries[since:]}
    touched.update(store.in_flight)
    # Retention forgets the oldest first (mostly): what it forgot shifts the positions.
    forgotten_messages, forgotten_runs = _forgotten(store)
    view.messages = {
        message_id: message
        for index, (message_id, message) in enumerate(store.messages.items())
        if index + forgotten_messages >= mark.messages or message_id in touched
    }
    view.dlq = DeadLetters()
    view.dlq.update(
        (dlq_id, entry)
        for dlq_id, entry in store.dlq.items()
        if entry.message.message_id in view.messages
    )
    view.workflows = copy.copy(store.workflows)
    first_run = max(0, mark.runs - forgotten_runs)
    view.workflows.runs = dict(list(store.workflows.runs.items())[first_run:])
    view.api_errors = RejectedCalls()
    new_errors = store.api_errors.total - mark.api_errors
    for call in list(store.api_errors)[max(0, len(store.api_errors) - new_errors) :]:
        view.api_errors.record(call)
    view.api_errors.total = new_errors
    return view


def _forgotten(store: Store) -> tuple[int, int]:
    """How many messages and runs the store's retention forgot (0 without retention)."""
    if store.retention is None:
        return 0, 0
    return store.retention.forgotten["messages"], store.retention.forgotten["runs"]
