"""Flow control: per-key rate limits and pausing, enforced on the virtual clock.

A key's rate allows ``rate`` attempts to start per ``period``; messages over it wait in the
key's FIFO wait list and one wake-up event per period releases the next batch, so a long
wait list costs one event per period, not one per message per period. Parallelism is kept
and reported, but never binds here: the fake makes one HTTP call at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .models import FlowControl

#: The longest rate period QStash takes: one week, in seconds.
MAX_PERIOD_S = 7 * 24 * 60 * 60


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
    #: Messages waiting for the key (paused, or over the rate), in arrival order.
    waiting: dict[str, None] = field(default_factory=dict)
    #: When the pending wake-up event is due, if one is planned.
    wake_ms: int | None = None

    @property
    def wait_list_size(self) -> int:
        return len(self.waiting)

    def follow(self, config: FlowControl) -> None:
        """Take a message's limits, except those pinned."""
        if not self.pinned_parallelism:
            self.parallelism = config.parallelism
        if not self.pinned_rate:
            self.rate = config.rate
            self.period_s = config.period

    def roll(self, now_ms: int) -> None:
        if now_ms >= self.period_end_ms():
            self.period_start_ms, self.rate_count = now_ms, 0

    def admits(self, now_ms: int) -> bool:
        """Whether one more attempt may start now; counts it if so."""
        if self.paused:
            return False
        self.roll(now_ms)
        if self.rate is not None and self.rate_count >= self.rate:
            return False
        self.rate_count += 1
        return True

    def period_end_ms(self) -> int:
        return self.period_start_ms + self.period_s * 1000

    def next_start_ms(self, config: FlowControl, now_ms: int) -> int | None:
        """When an attempt of a message carrying ``config`` could start, as ``admits`` would
        judge it, without counting anything: None while the key is paused."""
        if self.paused:
            return None
        rate = self.rate if self.pinned_rate else config.rate
        period_s = self.period_s if self.pinned_rate else config.period
        period_end = self.period_start_ms + period_s * 1000
        if rate is None or now_ms >= period_end or self.rate_count < rate:
            return now_ms
        return period_end
