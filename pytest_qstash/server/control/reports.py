"""The failure report of a test that used a server: what the server saw since the test began.

A test takes a ``Mark`` (how far each of the store's histories had got) when it starts; the
report is the in-process one (``pytest_qstash.testing.report``) over a view of the store that holds
only what is newer: the messages created or attempted since, their DLQ entries, the runs
started since, the API calls rejected since. A mark from before a reset covers everything the
fresh store holds. Schedules are resources, not history: all of them are shown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...engine.store import Store
from ...engine.store_view import view_since
from ...testing import report

#: What a test calls the server by: the verbs its report suggests are this fixture's.
FIXTURE = "qstash_server"


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
    return report.section(
        view, len(store.deliveries) + store.deliveries.dropped - mark.deliveries, fixture=FIXTURE
    )


def _view(store: Store, mark: Mark) -> Store:
    """A view of ``store`` whose histories start at ``mark``: read, never changed."""
    return view_since(
        store,
        messages=mark.messages,
        deliveries=mark.deliveries,
        runs=mark.runs,
        api_errors=mark.api_errors,
    )


def _forgotten(store: Store) -> tuple[int, int]:
    """How many messages and runs the store's retention forgot (0 without retention)."""
    forgotten = store.forgotten()
    return forgotten["messages"], forgotten["runs"]
