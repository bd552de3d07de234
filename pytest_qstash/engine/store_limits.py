"""What the plan and the destinations allow, asked before a publish, a schedule, a URL group
or a queue is created: the Store's checks (their rules: ``plans.py``, ``deliverable.py``).

``PlanChecks`` is part of the ``Store`` (its base): each check reads the store as ``self``,
seen through ``Engine``, and changes nothing; it refuses with ``PlanLimitExceeded`` or
``Undeliverable``. The daily quota is counted here too (``count_daily``).
"""

from __future__ import annotations

from collections.abc import Iterable

from . import plans
from .clock import VirtualClock
from .deliverable import checked_destination
from .engine import Engine
from .options import MessageOptions
from .plans import DAY_MS, DailyQuotaExceeded, Plan


class PlanChecks:
    """The refusals a request meets before anything is created."""

    plan: Plan
    clock: VirtualClock
    #: Messages the API published on one UTC day: (the day's start, how many).
    _published_day: tuple[int, int]

    def check_message(self: Engine, opts: MessageOptions, content: bytes) -> None:
        """Refuse a publish (or a schedule's template) over the plan's size, delay or retries
        (``PlanLimitExceeded``)."""
        now = self.clock.now_ms
        plans.check_message(self.plan, len(content), opts.due_ms(now) - now, opts.retries)

    def check_new_url_group(self: Engine, name: str) -> None:
        """Refuse a URL group the plan has no room for (one that exists creates nothing)."""
        if name not in self.url_groups:
            plans.check_url_groups(self.plan, len(self.url_groups))

    def check_new_schedule(self: Engine, schedule_id: str | None) -> None:
        """Refuse a schedule over the plan's active schedules (an overwrite creates none)."""
        if schedule_id is not None and schedule_id in self.schedules:
            return
        plans.check_active_schedules(self.plan, _active_schedules(self))

    def check_resumed_schedule(self: Engine, schedule_id: str) -> None:
        """A paused schedule that resumes becomes active again: it counts against the limit."""
        schedule = self.schedules.get(schedule_id)
        if schedule is not None and schedule.paused:
            plans.check_active_schedules(self.plan, _active_schedules(self))

    def check_queues(
        self: Engine, names: Iterable[str | None], parallelism: int | None = None
    ) -> None:
        """Refuse an upsert or enqueue that would create more queues than the plan holds
        (queues that exist create nothing), or give a queue more parallelism than it allows."""
        new = {name for name in names if name is not None and name not in self.queues}
        plans.check_queues(self.plan, len(self.queues), len(new), parallelism)

    def checked_destination(self: Engine, destination: str, *, group_needs_endpoints: bool) -> str:
        """The destination a publish or schedule names, as it is published to, or
        ``Undeliverable`` (``deliverable.checked_destination``)."""
        return checked_destination(
            destination, self.url_groups, group_needs_endpoints=group_needs_endpoints
        )

    # -- the plan's daily quota -------------------------------------------------------------
    def count_daily(self, count: int) -> None:
        """Count ``count`` messages the API publishes against the plan's daily quota (a UTC
        day), or refuse them all (``DailyQuotaExceeded``) when they would exceed it. Only
        what the API publishes counts: not retries, callbacks or schedule firings."""
        limit = self.plan.messages_per_day
        if limit is None:
            return
        now = self.clock.now_ms
        day_start = now - now % DAY_MS
        day, used = self._published_day
        if day != day_start:
            used = 0
        if used + count > limit:
            raise DailyQuotaExceeded(self.plan.name, limit, used, day_start + DAY_MS)
        self._published_day = (day_start, used + count)


def _active_schedules(store: Engine) -> int:
    return sum(1 for s in store.schedules.values() if not s.paused)
