"""The answers to what the store refuses, as QStash answers them. The store decides
(``engine/plans.py``: an oversized body, a delay too far ahead, too many retries, more messages
than a day allows, more URL groups, active schedules or queues than the plan holds, a queue
parallelism above the plan's; ``engine/deliverable.py``: a destination or URL that cannot be
delivered to); here its ``PlanLimitExceeded`` becomes the status and ``{"error": ...}``
naming the limit and the plan (the daily quota's with the ``RateLimit-*`` headers), and its
``Undeliverable`` a 400 saying why. ``api.handle`` answers every handler through it: a
handler asks the store (``store.check_message(...)``, ``store.checked_destination(...)``)
and lets the refusal rise; one that has more to say about where (a batch's position) catches
it itself."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..engine.deliverable import Undeliverable
from ..engine.plans import DailyQuotaExceeded, PlanLimitExceeded
from ._http import ApiError


@contextmanager
def store_refusals() -> Iterator[None]:
    """Answer a ``PlanLimitExceeded`` raised inside with its status and message (a daily
    quota's with the ``RateLimit-*`` headers the SDK turns into
    ``DailyMessageLimitExceededError``), an ``Undeliverable`` with a 400."""
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
    except Undeliverable as exc:
        raise ApiError(400, str(exc)) from None
