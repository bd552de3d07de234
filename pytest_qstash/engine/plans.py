"""QStash plans and what each limits: message size, delay, retries, the longest an attempt
may take, messages per day, URL groups, active schedules, attempts in flight account-wide,
queues and the parallelism a queue may have; and how long its logs and DLQ entries are kept.
What goes over a limit is refused here (``PlanLimitExceeded``, with the status and message the
API answers), from the figures the store hands in.

Figures from Upstash's pricing page and docs; docs/api-coverage.md says which are confirmed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .rejections import Refused

_MB = 1024 * 1024
#: A day, the span of the daily message quota (a UTC day).
DAY_MS = 24 * 60 * 60 * 1000


class PlanLimitExceeded(Refused):
    """What the plan does not allow: a status and a message naming the limit and the plan."""


class DailyQuotaExceeded(PlanLimitExceeded):
    """Publishing would exceed the plan's messages a day: none of them is created."""

    def __init__(self, plan: str, limit: int, used: int, reset_ms: int) -> None:
        super().__init__(
            429, f"daily message limit of the {plan} plan exceeded ({limit} messages a day)"
        )
        self.limit = limit
        self.used = used
        #: When the next day starts and the quota is whole again.
        self.reset_ms = reset_ms


@dataclass(frozen=True, slots=True)
class Plan:
    name: str
    #: Largest request body a publish may carry, in bytes.
    max_message_bytes: int
    #: Longest delay (or not-before distance) a message may be published with; None: any.
    max_delay_ms: int | None
    #: Most retries a message may ask for; None: any.
    max_retries: int | None
    #: Longest an attempt may take (the "max HTTP response duration"): a longer
    #: ``Upstash-Timeout`` is capped to it, and an attempt without one is cut there.
    max_response_ms: int
    #: Messages a day (UTC) may create; None: unlimited.
    messages_per_day: int | None
    url_groups: int
    active_schedules: int
    #: Attempts in flight at once, account-wide.
    global_parallelism: int
    #: Queues the account may hold.
    queues: int
    #: The highest parallelism a queue may be given.
    queue_parallelism: int
    #: How long log entries (and finished messages, runs, deliveries) are kept.
    log_retention_ms: int = 14 * DAY_MS
    #: How long a DLQ entry is kept.
    dlq_retention_ms: int = 90 * DAY_MS


PLANS: dict[str, Plan] = {
    plan.name: plan
    for plan in (
        Plan(
            "free",
            _MB,
            7 * DAY_MS,
            3,
            15 * 60_000,
            1_000,
            1,
            10,
            10,
            10,
            2,
            log_retention_ms=3 * DAY_MS,
            dlq_retention_ms=3 * DAY_MS,
        ),
        Plan(
            "pay_as_you_go",
            10 * _MB,
            365 * DAY_MS,
            5,
            2 * 3_600_000,
            None,
            100,
            1_000,
            100,
            100,
            10,
            log_retention_ms=7 * DAY_MS,
            dlq_retention_ms=7 * DAY_MS,
        ),
        Plan(
            "fixed_1m",
            50 * _MB,
            None,
            20,
            6 * 3_600_000,
            1_000_000,
            1_000,
            10_000,
            200,
            1_000,
            10,
            log_retention_ms=14 * DAY_MS,
            dlq_retention_ms=30 * DAY_MS,
        ),
        Plan(
            "fixed_10m",
            50 * _MB,
            None,
            20,
            12 * 3_600_000,
            10_000_000,
            2_000,
            50_000,
            1_000,
            1_000,
            10,
            log_retention_ms=14 * DAY_MS,
            # "3 months": counted as 90 days.
            dlq_retention_ms=90 * DAY_MS,
        ),
    )
}
_ALIASES = {"payg": "pay_as_you_go", "fixed": "fixed_10m"}
#: The most permissive plan: what the fake applies unless told otherwise.
DEFAULT_PLAN = "fixed_10m"


def plan_named(name: str) -> Plan:
    """The plan called ``name`` (case, spaces and dashes do not matter: "Pay as you go")."""
    if not isinstance(name, str):
        raise TypeError(f"invalid plan {name!r}: expected one of {', '.join(PLANS)}")
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    key = _ALIASES.get(key, key)
    plan = PLANS.get(key)
    if plan is None:
        raise ValueError(
            f"unknown plan {name!r}: expected one of {', '.join(PLANS)} (or 'payg', 'fixed')"
        )
    return plan


# -- what a plan refuses ----------------------------------------------------------------------
def check_message(plan: Plan, size: int, delay_ms: int, retries: int | None) -> None:
    """Refuse a message (a publish, a schedule's template) of ``size`` bytes, due
    ``delay_ms`` from now, asking for ``retries``, over the plan's size, delay or retries."""
    if size > plan.max_message_bytes:
        raise PlanLimitExceeded(
            413,
            f"message size {size} bytes exceeds the limit of the {plan.name} plan "
            f"({plan.max_message_bytes} bytes)",
        )
    if plan.max_delay_ms is not None and delay_ms > plan.max_delay_ms:
        raise PlanLimitExceeded(
            400,
            f"delay of {delay_ms // 1000}s exceeds the maximum delay of the {plan.name} plan "
            f"({plan.max_delay_ms // 1000}s)",
        )
    if plan.max_retries is not None and retries is not None and retries > plan.max_retries:
        raise PlanLimitExceeded(
            400,
            f"retries {retries} exceeds the maximum retries of the {plan.name} plan "
            f"({plan.max_retries})",
        )


def check_url_groups(plan: Plan, existing: int) -> None:
    """Refuse a new URL group when the account holds ``existing`` already."""
    if existing >= plan.url_groups:
        raise PlanLimitExceeded(
            412, f"url group limit of the {plan.name} plan reached ({plan.url_groups} url groups)"
        )


def check_active_schedules(plan: Plan, active: int) -> None:
    """Refuse one more active schedule when ``active`` are already."""
    if active >= plan.active_schedules:
        raise PlanLimitExceeded(
            412,
            f"active schedule limit of the {plan.name} plan reached "
            f"({plan.active_schedules} schedules)",
        )


def check_queues(plan: Plan, existing: int, new: int, parallelism: int | None) -> None:
    """Refuse ``new`` queues more than the ``existing`` the plan holds, or a queue given more
    ``parallelism`` than it allows (checked first)."""
    if parallelism is not None and parallelism > plan.queue_parallelism:
        raise PlanLimitExceeded(
            412,
            f"queue parallelism {parallelism} exceeds the maximum of the {plan.name} plan "
            f"({plan.queue_parallelism})",
        )
    if new and existing + new > plan.queues:
        raise PlanLimitExceeded(
            412, f"queue limit of the {plan.name} plan reached ({plan.queues} queues)"
        )
