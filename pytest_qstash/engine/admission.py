"""When a due message may start, and planning its delivery: the admission rule (its queue, the
account's global parallelism, its flow-control key), what it holds back and what releases it.

``Admission`` is part of the ``Store`` (its base): the Store builds the collections named
here (``Store.__init__``) and is the one that calls these; the scheduler reads the rule
(``start_ms``) and the Store applies it (``may_start``).
"""

from __future__ import annotations

from typing import Literal

from .attempts import Attempt
from .clock import VirtualClock
from .flow_control import FlowKey, FlowKeys
from .models import Message
from .queues import Queue, Queues

#: What holds a due message back (``Admission.admission``).
Hold = Literal["queue", "parallelism", "flow"]


class Admission:
    """The admission rule, applied; the state it reads is the Store's (``Store.__init__``)."""

    clock: VirtualClock
    messages: dict[str, Message]
    queues: Queues
    flow_keys: FlowKeys
    #: Attempts started and not ended yet, by message id.
    in_flight: dict[str, Attempt]
    global_parallelism: int
    #: Messages over the global parallelism, waiting in order.
    _global_waiting: dict[str, None]
    #: Each message's latest planned delivery: an event of an older one is stale.
    _generation: dict[str, int]
    #: Messages a server holds back (``set_aside``), in order, with when each was set aside:
    #: nothing is planned for them.
    _set_aside: dict[str, int]

    def admission(self, message: Message, at_ms: int) -> tuple[Hold | None, int | None]:
        """The admission rule, read without changing anything: what holds a message due at
        ``at_ms`` back, if anything, and when it may start. In order: its queue (it is not
        among the first ``parallelism`` of the queue's unfinished messages, or the queue is
        paused), the account's global parallelism (used up), its flow-control key (paused or
        its parallelism used up: no time, an attempt's end or a resume releases it; over its
        rate: when the key's period ends). ``may_start`` applies it; the scheduler reads it
        (``start_ms``)."""
        if self.queues.holds(message.queue, message.message_id):
            return "queue", None
        if len(self.in_flight) >= self.global_parallelism:
            return "parallelism", None
        flow = self._flow_of(message)
        if flow is None:
            return None, at_ms
        start = flow.next_start_ms(at_ms)
        return (None if start == at_ms else "flow"), start

    def start_ms(self, message: Message, due_ms: int) -> int | None:
        """When a message due at ``due_ms`` may start as the admission rule stands now; None
        while something holds it until released (``admission``)."""
        return self.admission(message, due_ms)[1]

    def may_start(self, message: Message) -> bool:
        """Whether a due message may be attempted now (``admission``); if so its attempt is
        counted against its flow-control key. If not, it waits where it is held and is
        released when that allows it."""
        now = self.clock.now_ms
        fc = message.flow_control
        if fc is not None and fc.key:
            self.flow_keys.key(fc.key, now)  # a key exists from the first message naming it
        held_by, _ = self.admission(message, now)
        flow = self._flow_of(message)
        if held_by is None:
            if flow is not None:
                flow.count_start(now)
            return True
        if held_by == "queue":
            self.queues.park(message.queue, message.message_id)
        elif held_by == "parallelism":
            self._global_waiting[message.message_id] = None
        else:
            assert flow is not None
            flow.waiting[message.message_id] = None
            self._plan_wake(flow)
        return False

    def _flow_of(self, message: Message) -> FlowKey | None:
        fc = message.flow_control
        return self.flow_keys.get(fc.key) if fc is not None and fc.key else None

    def _release(self, flow: FlowKey) -> None:
        now = self.clock.now_ms
        for message_id in self.flow_keys.release(flow, now):
            self._plan_delivery(self.messages[message_id], now)
        self._plan_wake(flow)

    def _plan_wake(self, flow: FlowKey) -> None:
        wake_ms = self.flow_keys.plan_wake(flow, self.clock.now_ms)
        if wake_ms is not None:
            self.clock.schedule(wake_ms, "flow", flow.key)

    def flow_key(self, key: str) -> FlowKey:
        return self.flow_keys.key(key, self.clock.now_ms)

    def wake_flow(self, key: str) -> None:
        """A flow-control key's period ended (or it was resumed, pinned, reset): release what
        now fits."""
        flow = self.flow_keys.get(key)
        if flow is None:
            return
        flow.wake_ms = None
        self._release(flow)

    def queue(self, name: str) -> Queue:
        """The queue called ``name``, created (parallelism 1) if it does not exist."""
        return self.queues.queue(name, self.clock.now_ms)

    def update_queue(
        self, name: str, *, parallelism: int | None = None, paused: bool | None = None
    ) -> Queue:
        queue = self.queue(name)
        if parallelism is not None:
            queue.parallelism = parallelism
        if paused is not None:
            queue.paused = paused
        queue.updated_ms = self.clock.now_ms
        self._start_released(self.queues.release(queue))
        return queue

    def _start_released(self, message_ids: list[str]) -> None:
        """Plan the messages their queue let go, each when it is due."""
        for message_id in message_ids:
            message = self.messages[message_id]
            self._plan_delivery(message, max(message.not_before_ms, self.clock.now_ms))

    def _plan_delivery(self, message: Message, due_ms: int) -> None:
        self._set_aside.pop(message.message_id, None)  # planned again: no longer set aside
        generation = self._generation.get(message.message_id, 0) + 1
        self._generation[message.message_id] = generation
        self.clock.schedule(due_ms, "deliver", message.message_id, generation)

    # -- messages set aside: a server holding back what it may not send ------------------
    def set_aside(self, message: Message) -> None:
        """Plan nothing for a waiting message (an attempt ``requeue`` put back) until it is
        planned again (``take_back``, or a "run now"): the delivery planned for it goes
        stale. Nothing is logged and nothing failed: it waits, CREATED or RETRY."""
        if message.done:
            return
        self._generation[message.message_id] = self._generation.get(message.message_id, 0) + 1
        self._set_aside.setdefault(message.message_id, self.clock.now_ms)

    def take_back(self, message: Message) -> bool:
        """A message set aside is due now; False when it is not set aside (any more)."""
        if not self.is_set_aside(message.message_id):
            return False
        message.run_now(self.clock.now_ms)
        self._plan_delivery(message, self.clock.now_ms)
        return True

    def is_set_aside(self, message_id: str) -> bool:
        message = self.messages.get(message_id)
        return message is not None and not message.done and message_id in self._set_aside

    def set_aside_ids(self) -> dict[str, int]:
        """The messages set aside, in the order they were set aside, each with when it was
        (those that ended since, cancelled or forgotten, are dropped)."""
        for message_id in [m for m in self._set_aside if not self.is_set_aside(m)]:
            del self._set_aside[message_id]
        return dict(self._set_aside)
