"""Cron schedules: QStash's 5-field cron (UTC, or ``CRON_TZ=<zone>``), on the virtual clock.

Fire times come from cronsim (a small, well-tested evaluator that handles DST in aware
datetimes); a firing is one due event on the clock, so a quiet year costs nothing and a
week of a minutely schedule costs one event per minute. A paused schedule has no event on the
clock at all: resuming plans its next firing.

QStash's ``CRON_TZ=`` prefix is the syntax of Go's robfig/cron, whose standard parser also takes
``?`` for "any" in the day fields and the ``@daily``-style descriptors; cronsim takes neither, so
they are translated to plain fields first (the stored ``cron`` keeps the text as given).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .models import ms_to_datetime
from .options import MessageOptions


class InvalidCron(ValueError):
    """A cron expression QStash would refuse."""


#: robfig/cron's descriptors, as the five fields they stand for (``@every`` is not taken: its
#: firing times depend on when the scheduler started, which QStash does not document).
_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _plain_fields(fields: str) -> str:
    """The five fields cronsim reads: a descriptor expanded, a ``?`` day field made ``*``."""
    expanded = _DESCRIPTORS.get(fields)
    if expanded is not None:
        return expanded
    parts = fields.split()
    if len(parts) == 5:
        # "?" means "no specific value" in the day-of-month and day-of-week fields only.
        parts[2], parts[4] = ("*" if p == "?" else p for p in (parts[2], parts[4]))
    return " ".join(parts)


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
        fields = _plain_fields(fields)
        if len(fields.split()) != 5:
            raise InvalidCron(
                f"invalid cron {text!r}: expected 5 fields (minute hour day-of-month month "
                "day-of-week) or one of " + ", ".join(_DESCRIPTORS) + ", optionally prefixed "
                "with CRON_TZ=<zone>"
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
        """The next firing; while paused, the one that was next when the schedule was paused
        (QStash documents that pausing does not move ``nextScheduleTime``)."""
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


class Schedules(dict[str, Schedule]):
    """The account's schedules by id, with the rules of creating, overwriting, pausing,
    resuming and firing them. Each method that plans a firing returns it (the schedule, whose
    ``next_ms`` and ``generation`` say when and which) for the store to put on the clock."""

    def __init__(self) -> None:
        super().__init__()
        #: Deduplication of creations: key -> (schedule id, expiry).
        self._dedup: dict[str, tuple[str, int]] = {}

    def deduplicated(self, key: str | None, now_ms: int) -> Schedule | None:
        """The schedule an earlier creation with the same key made within the window."""
        hit = self._dedup.get(key) if key is not None else None
        if hit is None or hit[1] <= now_ms:
            return None
        return self.get(hit[0])

    def put(
        self,
        schedule_id: str,
        destination: str,
        cron: CronExpression,
        content: bytes,
        opts: MessageOptions,
        now_ms: int,
    ) -> Schedule:
        """Create the schedule, or replace every setting of the existing one with this id. The
        firings never carry the deduplication options (each would be deduplicated into the one
        before), nor ``Upstash-Not-Before``, which QStash does not take on schedules."""
        opts = replace(
            opts, deduplication_id=None, content_based_deduplication=False, not_before_ms=None
        )
        schedule = self.get(schedule_id)
        if schedule is None:
            schedule = self[schedule_id] = Schedule(
                schedule_id=schedule_id,
                destination=destination,
                expression=cron,
                content=content,
                options=opts,
                created_ms=now_ms,
                next_ms=cron.next_after_ms(now_ms),
                queue=opts.queue,
            )
        else:
            # An overwrite replaces the settings the request carries, on the same object (a
            # test holding it sees the change); the schedule's own state (created, paused or
            # not, its last firing) is no setting and stays.
            schedule.destination, schedule.expression = destination, cron
            schedule.content, schedule.options, schedule.queue = content, opts, opts.queue
            schedule.next_ms = cron.next_after_ms(now_ms)
            schedule.generation += 1  # the firing planned under the old settings goes stale
        return schedule

    def remember(self, key: str | None, schedule_id: str, expires_ms: int) -> None:
        if key is not None:
            self._dedup[key] = (schedule_id, expires_ms)

    @staticmethod
    def pause(schedule: Schedule) -> None:
        """Stop the firings. The planned one goes stale (skipped when due) and nothing more is
        planned, so a paused schedule costs nothing however far the clock moves."""
        if not schedule.paused:
            schedule.paused = True
            schedule.generation += 1

    @staticmethod
    def resume(schedule: Schedule, now_ms: int) -> bool:
        """Fire again from the next cron time after now (the firings skipped are not caught
        up); True when a firing is to be planned."""
        if not schedule.paused:
            return False
        schedule.paused = False
        schedule.generation += 1
        schedule.next_ms = schedule.expression.next_after_ms(now_ms)
        return True

    def due(self, schedule_id: str, generation: int) -> Schedule | None:
        """The schedule a firing event is for, unless deleted, replaced or paused since."""
        schedule = self.get(schedule_id)
        if schedule is None or schedule.generation != generation or schedule.paused:
            return None
        return schedule

    @staticmethod
    def fired(schedule: Schedule, now_ms: int, message_ids: list[str], error: str | None) -> None:
        """Record a firing and move on to the next cron time."""
        schedule.error = error
        schedule.last_ms = now_ms
        schedule.last_message_ids = message_ids
        schedule.next_ms = schedule.expression.next_after_ms(now_ms)
