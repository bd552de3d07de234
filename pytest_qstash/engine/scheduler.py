"""What is due, held or stale on the virtual clock: the one place that reads the clock's
pending events against the store.

The delivery loop asks for the next piece of work (``pop_work``: it moves the clock, fires cron
schedules, wakes flow-control keys and times out waits on the way); every read-only question
asks without changing anything: when the next thing happens (``next_due_ms``, what
``qstash.next_due()`` and the server's state show), which messages are due and undelivered now
(``due_now``, the strict teardown check), and whether a pending event belongs to a schedule's
work (what ``drain()`` does not wait for).
"""

from __future__ import annotations

from .attempts import Attempt
from .clock import DueEvent
from .models import Message
from .store import Store


class Scheduler:
    def __init__(self, store: Store) -> None:
        self.store = store

    # -- the delivery loop ------------------------------------------------------------------
    def pop_work(self, until_ms: int) -> Message | Attempt | None:
        """Move the clock to what is due next, up to ``until_ms``: a message whose attempt may
        start now, or an attempt in flight that ends now. Cron firings, flow-control wakes and
        wait timeouts are handled on the way; stale events (a message cancelled or moved on,
        an attempt cut short) and messages their queue, key or the global parallelism hold
        are skipped (the store releases them with a new event)."""
        store = self.store
        while (event := store.clock.pop_due(until_ms)) is not None:
            kind = event.kind
            if kind == "end":
                attempt = store.attempt_due(event.target, event.generation)
                if attempt is not None:
                    return attempt
            elif kind == "cron":
                store.fire_schedule(event.target, event.generation)
            elif kind == "flow":
                store.wake_flow(event.target)
            elif kind == "wait":
                store.wait_timed_out(event.target, event.generation)
            else:
                message = store.live_message(event.target, event.generation)
                if message is not None and store.may_start(message):
                    return message
        return None

    # -- read-only questions ----------------------------------------------------------------
    def due_ms(self, event: DueEvent) -> int | None:
        """When a pending clock event will do something, read without changing anything; None
        when it is stale or held: a firing of a schedule paused, replaced or deleted since, a
        delivery of a message cancelled or moved on, or of one that waits in a paused queue
        (or behind its queue's earlier messages) or for a paused (or fully busy) flow-control
        key. A message over its key's rate is due when the key's period ends; an attempt in
        flight is due to end at its end."""
        store = self.store
        if event.kind == "cron":
            schedule = store.schedules.get(event.target)
            if schedule is None or schedule.paused or schedule.generation != event.generation:
                return None
            return event.due_ms
        if event.kind == "flow":
            flow = store.flow_keys.get(event.target)
            if flow is None or flow.paused or not flow.waiting or flow.wake_ms != event.due_ms:
                return None
            return event.due_ms
        if event.kind == "end":
            return event.due_ms if store.attempt_due(event.target, event.generation) else None
        if event.kind == "wait":
            return event.due_ms if store.waiters.live(event.target, event.generation) else None
        message = store.live_message(event.target, event.generation)
        if message is None:
            return None
        # Held ones are released with a new event (a queue's slot, an attempt's end).
        return store.start_ms(message, event.due_ms)

    def next_due_ms(self, *, scheduled: bool = True) -> int | None:
        """When the next delivery, end of an attempt in flight, cron firing, flow-control wake
        or wait timeout is due; None when nothing is pending. ``scheduled=False`` leaves out
        a schedule's work (``is_scheduled``). What cannot happen until the test acts (a
        paused schedule, a paused queue or key) is not due."""
        earliest: int | None = None
        for event in self.store.clock.pending():
            if earliest is not None and event.due_ms >= earliest:
                break  # events come in due order: none later can be earlier
            if not scheduled and self.is_scheduled(event):
                continue
            due = self.due_ms(event)
            if due is not None and (earliest is None or due < earliest):
                earliest = due
        return earliest

    def is_scheduled(self, event: DueEvent) -> bool:
        """A cron firing, or a delivery a firing led to (its message, a follow-up its handler
        published, their retries and callbacks): what never lets a schedule be idle. A wait's
        timeout counts too: a drain stops where a run waits."""
        if event.kind in ("cron", "wait"):
            return True
        message = self.store.messages.get(event.target) if event.kind != "flow" else None
        return message is not None and message.from_schedule

    def due_now(self) -> list[Message]:
        """Messages due at or before now that nothing has delivered yet (what a ``tick()``
        would deliver first); held ones (a paused queue or flow-control key) are not due."""
        now = self.store.clock.now_ms
        due: list[Message] = []
        for event in self.store.clock.pending():
            if event.due_ms > now:
                break  # events come in due order
            if event.kind != "deliver":
                continue
            due_ms = self.due_ms(event)
            if due_ms is None or due_ms > now:
                continue
            message = self.store.messages.get(event.target)
            if message is not None and message not in due:
                due.append(message)
        return due
