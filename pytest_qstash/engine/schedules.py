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

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .clock import VirtualClock
from .dedup import DEFAULT_DEDUP_WINDOW_MS, Deduplication, dedup_key
from .ids import IdGenerator
from .models import Message, ms_to_datetime
from .options import LATEST_MS, MessageOptions
from .saved import Saved, saved_as
from .url_groups import UnknownDestination


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
        """The first firing strictly after ``ms`` (cron has a 1-minute resolution);
        ``InvalidCron`` when there is none before the year 9999 ends."""
        try:
            start = ms_to_datetime(ms).astimezone(self.zone)
            fire: datetime = next(iter(CronSim(self.fields, start)))
            if fire <= start:  # cronsim may answer the start itself when it is on a minute
                fire = next(iter(CronSim(self.fields, start + timedelta(seconds=1))))
            fire_ms = round(fire.timestamp() * 1000)
        except (OverflowError, StopIteration, ValueError):
            fire_ms = LATEST_MS + 1
        if fire_ms > LATEST_MS:
            raise InvalidCron(
                f"invalid cron {self.text!r}: its next run would be after the year 9999"
            )
        return fire_ms


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


class Schedules(dict[str, Schedule], Saved):
    """The account's schedules by id, with the rules of creating, overwriting, deleting,
    pausing, resuming and firing them, and their firings on the virtual clock: a schedule has
    at most one planned firing, which goes stale (skipped when due) once the schedule is
    deleted, replaced or paused."""

    SAVED = saved_as("_clock _ids dedup")

    def __init__(
        self, clock: VirtualClock, ids: IdGenerator, dedup_window_ms: int = DEFAULT_DEDUP_WINDOW_MS
    ) -> None:
        super().__init__()
        self._clock = clock
        self._ids = ids
        #: Deduplication of creations (a schedule's firings are never deduplicated).
        self.dedup = Deduplication(dedup_window_ms)

    def put(
        self,
        destination: str,
        cron: CronExpression,
        content: bytes,
        opts: MessageOptions,
        schedule_id: str | None = None,
    ) -> tuple[Schedule, bool]:
        """Create a schedule, or replace every setting of an existing one with this id.

        Returns the schedule and whether the request was deduplicated: a deduplication id (or
        content-based deduplication) applies once, to the creation, as QStash evaluates it
        before creating the schedule; an earlier creation with the same key within the window
        is answered instead.
        """
        now = self._clock.now_ms
        key = _creation_key(destination, cron, content, opts, schedule_id)
        original = self.dedup.deduplicated(key, now)
        existing = self.get(original) if original is not None else None
        if existing is not None:
            return existing, True
        if schedule_id is None:
            schedule_id = "scd_" + self._ids.token(28)
        schedule = self._put(schedule_id, destination, cron, content, opts, now)
        if not schedule.paused:
            self._plan_firing(schedule)
        self.dedup.remember(key, schedule_id, now)
        return schedule, False

    def _put(
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

    def delete(self, schedule_id: str) -> bool:
        # Its planned firing stays on the clock, stale: it is skipped when due.
        return self.pop(schedule_id, None) is not None

    @staticmethod
    def pause(schedule: Schedule) -> None:
        """Stop the firings. The planned one goes stale (skipped when due) and nothing more is
        planned, so a paused schedule costs nothing however far the clock moves."""
        if not schedule.paused:
            schedule.paused = True
            schedule.generation += 1

    def resume(self, schedule: Schedule) -> None:
        """Fire again from the next cron time after now (the firings skipped are not caught
        up)."""
        if not schedule.paused:
            return
        schedule.paused = False
        schedule.generation += 1
        schedule.next_ms = schedule.expression.next_after_ms(self._clock.now_ms)
        self._plan_firing(schedule)

    def adopt(self, schedule: Schedule) -> None:
        """Take in a schedule made elsewhere (kept across a reset), planning its firing."""
        self[schedule.schedule_id] = schedule
        if not schedule.paused:
            self._plan_firing(schedule)

    def due(self, schedule_id: str, generation: int) -> Schedule | None:
        """The schedule a firing event is for, unless deleted, replaced or paused since."""
        schedule = self.get(schedule_id)
        if schedule is None or schedule.generation != generation or schedule.paused:
            return None
        return schedule

    def fire(
        self,
        schedule_id: str,
        generation: int,
        publish: Callable[[Schedule], list[Message]],
    ) -> list[Message]:
        """A cron firing: ``publish`` the template, record the firing (or why it published
        nothing), then plan the next one."""
        schedule = self.due(schedule_id, generation)
        if schedule is None:
            return []  # deleted, replaced or paused since this firing was planned
        created: list[Message] = []
        error = None
        try:
            created = publish(schedule)
        except UnknownDestination:
            error = f"url group {schedule.destination} does not exist"
        now = self._clock.now_ms
        schedule.error = error
        schedule.last_ms = now
        schedule.last_message_ids = [m.message_id for m in created]
        try:
            schedule.next_ms = schedule.expression.next_after_ms(now)
        except InvalidCron:  # the end of time: no firing is planned
            schedule.next_ms = LATEST_MS
            return created
        self._plan_firing(schedule)
        return created

    def _plan_firing(self, schedule: Schedule) -> None:
        self._clock.schedule(schedule.next_ms, "cron", schedule.schedule_id, schedule.generation)


def _creation_key(
    destination: str,
    cron: CronExpression,
    content: bytes,
    opts: MessageOptions,
    schedule_id: str | None,
) -> str | None:
    key = dedup_key(destination, content, opts)
    if key is None or opts.deduplication_id is not None:
        return key
    # Content-based: QStash hashes every header sent, so the cron and the id count too.
    extra = hashlib.sha256(f"{cron.text}\n{schedule_id or ''}".encode()).hexdigest()
    return f"{key}|{extra}"
