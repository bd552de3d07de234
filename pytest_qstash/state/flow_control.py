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

from .models import FlowControl

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

    def roll(self, now_ms: int) -> None:
        if now_ms >= self.period_end_ms():
            self.period_start_ms, self.rate_count = now_ms, 0

    def admits(self, now_ms: int) -> bool:
        """Whether one more attempt may start now; counts it (rate and in flight) if so."""
        if self.paused or self.parallel_full:
            return False
        self.roll(now_ms)
        if self.rate is not None and self.rate_count >= self.rate:
            return False
        self.rate_count += 1
        self.active += 1
        return True

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
        """When an attempt could start, as ``admits`` would judge it, without counting
        anything: None while the key is paused or its parallelism is used up (an attempt's
        end, itself on the clock, frees it)."""
        if self.paused or self.parallel_full:
            return None
        period_end = self.period_end_ms()
        if self.rate is None or now_ms >= period_end or self.rate_count < self.rate:
            return now_ms
        return period_end
