"""The answers to what the account's plan refuses: the store decides (``state/plans.py``: an
oversized body, a delay too far ahead, too many retries, more messages than a day allows,
more URL groups, active schedules or queues than the plan holds, a queue parallelism above
the plan's); here its ``PlanLimitExceeded`` becomes the status and ``{"error": ...}`` naming
the limit and the plan, and the daily quota's the ``RateLimit-*`` headers. ``api.handle``
answers every handler through it: a handler asks the store (``store.check_message(...)``,
``store.count_daily(...)``) and lets the refusal rise."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..state.plans import DailyQuotaExceeded, PlanLimitExceeded
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
