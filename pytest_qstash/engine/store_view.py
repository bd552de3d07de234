"""A report's view of the Store: a shallow copy whose histories start at given positions, for
reading what a test saw since a mark (``server/control/reports.py``), never changed."""

from __future__ import annotations

import copy

from .dlq import DeadLetters
from .rejections import RejectedCalls
from .store import Store


def view_since(
    store: Store, *, messages: int, deliveries: int, runs: int, api_errors: int
) -> Store:
    """A shallow copy whose histories start at these positions (each counted over all
    there ever was, what retention forgot included): the messages created or attempted
    since, their DLQ entries, the runs started since, the API calls rejected since. For
    reading (a report), never changed."""
    view = copy.copy(store)
    since = max(0, deliveries - store.deliveries.dropped)
    touched = {d.message_id for d in store.deliveries[since:]}
    touched.update(store.in_flight)
    # Retention forgets the oldest first (mostly): what it forgot shifts the positions.
    forgotten = store.forgotten()
    view.messages = {
        message_id: message
        for index, (message_id, message) in enumerate(store.messages.items())
        if index + forgotten["messages"] >= messages or message_id in touched
    }
    view.dlq = DeadLetters()
    view.dlq.update(
        (dlq_id, entry)
        for dlq_id, entry in store.dlq.items()
        if entry.message.message_id in view.messages
    )
    view.workflows = copy.copy(store.workflows)
    first_run = max(0, runs - forgotten["runs"])
    view.workflows.runs = dict(list(store.workflows.runs.items())[first_run:])
    view.api_errors = RejectedCalls()
    new_errors = store.api_errors.total - api_errors
    for call in list(store.api_errors)[max(0, len(store.api_errors) - new_errors) :]:
        view.api_errors.record(call)
    view.api_errors.total = new_errors
    return view
