"""The answers to what the account's plan refuses: the store decides (``state/plans.py``: an
oversized body, a delay too far ahead, too many retries, more messages than a day allows,
more URL groups, active schedules or queues than the plan holds, a queue parallelism above
the plan's); here its ``PlanLimitExceeded`` becomes the status and ``{"error": ...}`` naming
the limit and the plan, and the daily quota's the ``RateLimit-*`` headers."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from ..state.options import MessageOptions
from ..state.plans import DailyQuotaExceeded, PlanLimitExceeded
from ..state.store import Store
from ._http import ApiError


@contextmanager
def plan_limits() -> Iterator[None]:
    """Answer a ``PlanLimitExceeded`` raised inside with its status and message: a daily
    quota's with the ``RateLimit-*`` headers the SDK turns into
    ``DailyMessageLimitExceededError``."""
    try:
        yield
    except DailyQuotaExceeded as exc:
        raise ApiError(
            exc.status,
            exc.message,
            {
                "RateLimit-Limit": str(exc.limit),
                "RateLimit-Remaining": str(max(0, exc.limit - exc.used)),
                "RateLimit-Reset": str(exc.reset_ms // 1000),
            },
        ) from None
    except PlanLimitExceeded as exc:
        raise ApiError(exc.status, exc.message) from None


def check_message(store: Store, opts: MessageOptions, content: bytes) -> None:
    """Refuse a publish (or a schedule's template) over the plan's size, delay or retries."""
    with plan_limits():
        store.check_message(opts, content)


def check_daily(store: Store, count: int) -> None:
    """Count ``count`` more messages against the day's quota (``Store.count_daily``), or
    refuse them all: 429."""
    with plan_limits():
        store.count_daily(count)


def check_new_url_group(store: Store, name: str) -> None:
    with plan_limits():
        store.check_new_url_group(name)


def check_new_schedule(store: Store, schedule_id: str | None) -> None:
    with plan_limits():
        store.check_new_schedule(schedule_id)


def check_resumed_schedule(store: Store, schedule_id: str) -> None:
    with plan_limits():
        store.check_resumed_schedule(schedule_id)


def check_queues(store: Store, names: Iterable[str | None], parallelism: int | None = None) -> None:
    with plan_limits():
        store.check_queues(names, parallelism)
