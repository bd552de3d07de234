"""Cron schedules: QStash's 5-field cron (UTC, or ``CRON_TZ=<zone>``), on the virtual clock.

Fire times come from cronsim (a small, well-tested evaluator that handles DST in aware
datetimes); a firing is one due event on the clock, so a quiet year costs nothing and a
week of a minutely schedule costs one event per minute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .models import ms_to_datetime
from .options import MessageOptions


class InvalidCron(ValueError):
    """A cron expression QStash would refuse."""


@dataclass(frozen=True, slots=True)
class CronExpression:
    text: str
    fields: str
    zone: tzinfo

    @classmethod
    def parse(cls, text: str) -> CronExpression:
        text = text.strip()
        zone: tzinfo = timezone.utc
        fields = text
        if text.startswith(("CRON_TZ=", "TZ=")):
            spec, _, fields = text.partition(" ")
            name = spec.split("=", 1)[1]
            try:
                zone = ZoneInfo(name)
            except (ZoneInfoNotFoundError, ValueError):
                raise InvalidCron(
                    f"invalid cron {text!r}: unknown time zone {name!r} (expected an IANA name "
                    "such as America/New_York)"
                ) from None
            fields = fields.strip()
        if len(fields.split()) != 5:
            raise InvalidCron(
                f"invalid cron {text!r}: expected 5 fields (minute hour day-of-month month "
                "day-of-week), optionally prefixed with CRON_TZ=<zone>"
            )
        try:
            CronSim(fields, datetime(2000, 1, 1, tzinfo=timezone.utc))
        except CronSimError as exc:
            raise InvalidCron(f"invalid cron {text!r}: {exc}") from None
        return cls(text, fields, zone)

    def next_after_ms(self, ms: int) -> int:
        """The first firing strictly after ``ms`` (cron has a 1-minute resolution)."""
        start = ms_to_datetime(ms).astimezone(self.zone)
        fire: datetime = next(iter(CronSim(self.fields, start)))
        if fire <= start:  # cronsim may answer the start itself when it is on a minute
            fire = next(iter(CronSim(self.fields, start + timedelta(seconds=1))))
        return round(fire.timestamp() * 1000)


@dataclass(eq=False, slots=True)
class Schedule:
    schedule_id: str
    destination: str
    expression: CronExpression
    content: bytes
    options: MessageOptions
    created_ms: int
    next_ms: int
    paused: bool = False
    queue: str | None = None
    caller_ip: str = "127.0.0.1"
    last_ms: int | None = None
    #: Ids of the messages the last firing created.
    last_message_ids: list[str] = field(default_factory=list)
    error: str | None = None
    #: Bumped on every change, so the clock's stale firing events are skipped.
    generation: int = 0

    @property
    def cron(self) -> str:
        return self.expression.text

    @property
    def created_at(self) -> datetime:
        return ms_to_datetime(self.created_ms)

    @property
    def next_run(self) -> datetime:
        return ms_to_datetime(self.next_ms)

    @property
    def last_run(self) -> datetime | None:
        return None if self.last_ms is None else ms_to_datetime(self.last_ms)

    @property
    def body(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    @property
    def method(self) -> str:
        return self.options.method

    def __repr__(self) -> str:
        state = " paused" if self.paused else ""
        return (
            f"<Schedule {self.schedule_id} {self.cron!r} -> {self.destination}{state} "
            f"next_run={self.next_run.isoformat()}>"
        )
