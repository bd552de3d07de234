"""Flow control: per-key rate and parallelism limits and pausing, on the virtual clock.

A key's rate allows ``rate`` attempts to start per ``period``; its parallelism allows that many
attempts in flight at once. Messages over either wait in the key's FIFO wait list: one wake-up
event per period releases the next batch for the rate (so a long wait list costs one event per
period, not one per message per period), and an attempt's end releases the next one for the
parallelism.

The limits a key applies are those of its unfinished messages, the highest of each (QStash keeps
them per message and "effectively allows the highest rate/period or highest parallelism" while
messages with different settings coexist), unless pinned. A key exists from the first message
that names it, and stays (with the limits it last applied) for the fake's lifetime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice

from .options import FlowControl
from .saved import Saved

#: The longest rate period QStash takes: one week, in seconds.
MAX_PERIOD_S = 7 * 24 * 60 * 60

Limits = tuple[int | None, int | None, int]  # parallelism, rate, period (s)


@dataclass(eq=False, slots=True)
class FlowKey:
    key: str
    parallelism: int | None = None
    rate: int | None = None
    period_s: int = 1
    paused: bool = False
    pinned_parallelism: bool = False
    pinned_rate: bool = False
    period_start_ms: int = 0
    rate_count: int = 0
    #: Attempts of this key's messages in flight now (``parallelismCount``).
    active: int = 0
    #: Messages waiting for the key (paused, over the rate or the parallelism), in arrival order.
    waiting: dict[str, None] = field(default_factory=dict)
    #: When the pending wake-up event is due, if one is planned.
    wake_ms: int | None = None
    #: The limits the key's unfinished messages carry, with how many carry each.
    outstanding: dict[Limits, int] = field(default_factory=dict)

    @property
    def wait_list_size(self) -> int:
        return len(self.waiting)

    def add(self, config: FlowControl) -> None:
        """A message naming this key was created: its limits count until it finishes."""
        limits = (config.parallelism, config.rate, config.period)
        self.outstanding[limits] = self.outstanding.get(limits, 0) + 1
        self.refresh()

    def remove(self, config: FlowControl) -> None:
        limits = (config.parallelism, config.rate, config.period)
        left = self.outstanding.get(limits, 0) - 1
        if left > 0:
            self.outstanding[limits] = left
        else:
            self.outstanding.pop(limits, None)
        self.refresh()

    def refresh(self) -> None:
        """Apply the highest limits among the unfinished messages, except those pinned; with
        none left, the limits last applied stay."""
        if not self.outstanding:
            return
        if not self.pinned_parallelism:
            values = [p for p, _, _ in self.outstanding if p is not None]
            self.parallelism = max(values) if values else None
        if not self.pinned_rate:
            rates = [(r, s) for _, r, s in self.outstanding if r is not None]
            if rates:
                # The most permissive rate is the most calls per second (ties: shorter period).
                self.rate, self.period_s = max(rates, key=lambda rs: (rs[0] / rs[1], -rs[1]))
            else:
                self.rate, self.period_s = None, 1

    def pin(
        self, now_ms: int, *, parallelism: int | None, rate: int | None, period_s: int | None
    ) -> None:
        """Pin the limits given (they apply whatever the messages carry) and start a new
        rate period now."""
        if parallelism is not None:
            self.parallelism, self.pinned_parallelism = parallelism, True
        if rate is not None or period_s is not None:
            self.rate = rate if rate is not None else self.rate
            self.period_s = period_s if period_s is not None else self.period_s
            self.pinned_rate = True
        self.reset_rate(now_ms)

    def unpin(self, *, parallelism: bool, rate: bool) -> None:
        """Unpin the limits named: the unfinished messages' limits apply again (the pinned
        ones if none)."""
        if parallelism:
            self.pinned_parallelism = False
        if rate:
            self.pinned_rate = False
        self.refresh()

    def reset_rate(self, now_ms: int) -> None:
        """A new rate period starts now, nothing counted in it yet."""
        self.period_start_ms, self.rate_count = now_ms, 0

    def roll(self, now_ms: int) -> None:
        if now_ms >= self.period_end_ms():
            self.period_start_ms, self.rate_count = now_ms, 0

    def count_start(self, now_ms: int) -> None:
        """An attempt starts now (``next_start_ms`` said it may): it counts against the
        rate of the period it starts in, and in flight."""
        self.roll(now_ms)
        self.rate_count += 1
        self.active += 1

    @property
    def parallel_full(self) -> bool:
        return self.parallelism is not None and self.active >= self.parallelism

    def room(self, now_ms: int) -> int:
        """How many waiting messages may start now."""
        if self.paused:
            return 0
        self.roll(now_ms)
        room = len(self.waiting)
        if self.rate is not None:
            room = min(room, max(0, self.rate - self.rate_count))
        if self.parallelism is not None:
            room = min(room, max(0, self.parallelism - self.active))
        return room

    def period_end_ms(self) -> int:
        return self.period_start_ms + self.period_s * 1000

    def next_start_ms(self, now_ms: int) -> int | None:
        """When an attempt could start, without counting anything: None while the key is
        paused or its parallelism is used up (an attempt's end, itself on the clock, frees
        it); at the end of the period when its rate is used up."""
        if self.paused or self.parallel_full:
            return None
        period_end = self.period_end_ms()
        if self.rate is None or now_ms >= period_end or self.rate_count < self.rate:
            return now_ms
        return period_end


class FlowKeys(dict[str, FlowKey], Saved):
    """The account's flow-control keys by name, and what happens to them as messages come,
    start, end and go. Planning on the clock stays with the store (it owns the generations);
    this decides who waits, who is released, and when a key wants to wake."""

    def key(self, name: str, now_ms: int) -> FlowKey:
        """The key called ``name``, created (its period starting now) if it does not exist."""
        flow = self.get(name)
        if flow is None:
            flow = self[name] = FlowKey(name, period_start_ms=now_ms)
        return flow

    def named(self, config: FlowControl | None, now_ms: int) -> None:
        """A message naming a key was created (or is pending again): its limits count."""
        if config is not None and config.key:
            self.key(config.key, now_ms).add(config)

    def finished(self, message_id: str, config: FlowControl | None) -> None:
        """A message naming a key reached its final state: its limits stop counting, and it
        waits no more."""
        flow = self.get(config.key) if config is not None and config.key else None
        if flow is not None and config is not None:
            flow.waiting.pop(message_id, None)
            flow.remove(config)

    def attempt_ended(self, name: str) -> FlowKey | None:
        """An attempt counted against ``name`` ended (or never started): its slot is free."""
        flow = self.get(name)
        if flow is not None:
            flow.active = max(0, flow.active - 1)
        return flow

    def release(self, flow: FlowKey, now_ms: int) -> list[str]:
        """Take off the wait list the messages that may start now, in arrival order (they
        are counted when their attempt starts)."""
        if flow.paused or not flow.waiting:
            return []
        released = list(islice(flow.waiting, flow.room(now_ms)))
        for message_id in released:
            del flow.waiting[message_id]
        return released

    def plan_wake(self, flow: FlowKey, now_ms: int) -> int | None:
        """When the key wants to wake to release more, if it needs a wake-up event now: only a
        rate waits for the clock (a parallelism slot is freed by an attempt's end)."""
        if not flow.waiting or flow.paused or flow.wake_ms is not None or flow.rate is None:
            return None
        flow.wake_ms = max(flow.period_end_ms(), now_ms)
        return flow.wake_ms
