"""What the account's plan refuses: an oversized body, a delay too far ahead, too many
retries, more messages than a day allows, more URL groups, active schedules or queues than
the plan holds, a queue parallelism above the plan's. Each answers with a status and an
``{"error": ...}`` naming the limit and the plan."""

from __future__ import annotations

from collections.abc import Iterable

from ..state.options import MessageOptions
from ..state.plans import DailyQuotaExceeded
from ..state.store import Store
from ._http import ApiError


def check_message(store: Store, opts: MessageOptions, content: bytes) -> None:
    """Refuse a publish (or a schedule's template) over the plan's size, delay or retries."""
    plan = store.plan
    if len(content) > plan.max_message_bytes:
        raise ApiError(
            413,
            f"message size {len(content)} bytes exceeds the limit of the {plan.name} plan "
            f"({plan.max_message_bytes} bytes)",
        )
    now = store.clock.now_ms
    delay = opts.due_ms(now) - now
    if plan.max_delay_ms is not None and delay > plan.max_delay_ms:
        raise ApiError(
            400,
            f"delay of {delay // 1000}s exceeds the maximum delay of the {plan.name} plan "
            f"({plan.max_delay_ms // 1000}s)",
        )
    if (
        plan.max_retries is not None
        and opts.retries is not None
        and opts.retries > plan.max_retries
    ):
        raise ApiError(
            400,
            f"retries {opts.retries} exceeds the maximum retries of the {plan.name} plan "
            f"({plan.max_retries})",
        )


def check_daily(store: Store, count: int) -> None:
    """Count ``count`` more messages against the day's quota (``Store.count_daily``), or
    refuse them all: 429 with the ``RateLimit-*`` headers the SDK turns into
    ``DailyMessageLimitExceededError``."""
    try:
        store.count_daily(count)
    except DailyQuotaExceeded as exc:
        raise ApiError(
            429,
            str(exc),
            {
                "RateLimit-Limit": str(exc.limit),
                "RateLimit-Remaining": str(max(0, exc.limit - exc.used)),
                "RateLimit-Reset": str(exc.reset_ms // 1000),
            },
        ) from None


def check_new_url_group(store: Store, name: str) -> None:
    limit = store.plan.url_groups
    if name not in store.url_groups and len(store.url_groups) >= limit:
        raise ApiError(
            412, f"url group limit of the {store.plan.name} plan reached ({limit} url groups)"
        )


def check_new_schedule(store: Store, schedule_id: str | None) -> None:
    if schedule_id is not None and schedule_id in store.schedules:
        return  # an overwrite creates nothing
    _check_active_schedules(store)


def check_resumed_schedule(store: Store, schedule_id: str) -> None:
    """A paused schedule that resumes becomes active again: it counts against the limit."""
    schedule = store.schedules.get(schedule_id)
    if schedule is not None and schedule.paused:
        _check_active_schedules(store)


def check_queues(store: Store, names: Iterable[str | None], parallelism: int | None = None) -> None:
    """Refuse an upsert or enqueue that would create more queues than the plan holds (queues
    that exist already create nothing), or give a queue more parallelism than it allows."""
    plan = store.plan
    if parallelism is not None and parallelism > plan.queue_parallelism:
        raise ApiError(
            412,
            f"queue parallelism {parallelism} exceeds the maximum of the {plan.name} plan "
            f"({plan.queue_parallelism})",
        )
    new = {name for name in names if name is not None and name not in store.queues}
    if new and len(store.queues) + len(new) > plan.queues:
        raise ApiError(412, f"queue limit of the {plan.name} plan reached ({plan.queues} queues)")


def _check_active_schedules(store: Store) -> None:
    limit = store.plan.active_schedules
    active = sum(1 for s in store.schedules.values() if not s.paused)
    if active >= limit:
        raise ApiError(
            412,
            f"active schedule limit of the {store.plan.name} plan reached ({limit} schedules)",
        )
