"""Loading an export into the fake: every resource it holds created as QStash had it, ids and
times kept (``FakeQStash.load``, the server's ``POST /_qstash/load``, ``serve --load``).

The file is read by ``export_entries.py`` (the document and each message) and
``recorded_runs.py`` (workflow runs). Loading is all or nothing: the whole document is read
and checked first (``read_plan``), then applied (``LoadPlan.apply``); what cannot be read is
``LoadError``, one sentence naming the entry's place in the file, and nothing is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..engine.deliverable import is_url
from ..engine.models import ms_to_datetime
from ..engine.options import MessageOptions
from ..engine.schedules import CronExpression, InvalidCron
from ..engine.store import Store
from ..engine.url_groups import Endpoint
from .export_entries import (
    FORMAT_VERSIONS,
    PAGED,
    PLAIN,
    At,
    LoadError,
    entries,
    export_time_ms,
    message_options,
    read_document,
)
from .recorded_runs import DeadLetter, RecordedRun, read_workflows

__all__ = [
    "LoadError",
    "LoadPlan",
    "Loaded",
    "export_start_ms",
    "load_export",
    "read_document",
    "read_plan",
]


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a load created, by resource."""

    source: str | None
    exported_at: datetime | None
    schedules: int = 0
    queues: int = 0
    url_groups: int = 0
    flow_control: int = 0
    dlq: int = 0
    workflow_runs: int = 0
    workflow_dlq: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "exported_at": None if self.exported_at is None else _iso(self.exported_at),
            "schedules": self.schedules,
            "queues": self.queues,
            "url_groups": self.url_groups,
            "flow_control": self.flow_control,
            "dlq": self.dlq,
            "workflow_runs": self.workflow_runs,
            "workflow_dlq": self.workflow_dlq,
        }


@dataclass(frozen=True, slots=True)
class _Schedule:
    """A schedule as the export shows it, read."""

    schedule_id: str
    destination: str
    cron: CronExpression
    content: bytes
    options: MessageOptions
    paused: bool
    created_ms: int | None


@dataclass
class LoadPlan:
    """An export read and checked: what ``apply`` creates."""

    source: str | None
    exported_at_ms: int | None
    queue_entries: list[tuple[str, int, bool, int | None]] = field(default_factory=list)
    group_entries: list[tuple[str, list[Endpoint]]] = field(default_factory=list)
    flow_entries: list[tuple[str, int | None, int | None, int | None, bool]] = field(
        default_factory=list
    )
    schedule_entries: list[_Schedule] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    runs: list[RecordedRun] = field(default_factory=list)

    def check_fits(self, store: Store) -> None:
        """Refuse what would clash with what the store holds already (nothing is replaced)."""
        for run in self.runs:
            if store.workflows.get(run.run_id) is not None:
                raise LoadError(f"workflow run {run.run_id} is loaded already: load it once")
        for letter in self.dead_letters + [r.failed for r in self.runs if r.failed]:
            if letter.dlq_id in store.dlq:
                raise LoadError(f"DLQ entry {letter.dlq_id} is loaded already: load it once")
        for schedule in self.schedule_entries:
            if schedule.schedule_id in store.schedules:
                raise LoadError(f"schedule {schedule.schedule_id} exists already: load it once")
        ids = {m.message.message_id for r in self.runs for m in r.members}
        ids.update(d.message.message_id for d in self.dead_letters)
        clash = next((i for i in sorted(ids) if i in store.messages), None)
        if clash is not None:
            raise LoadError(f"message {clash} is loaded already: load it once")

    def apply(self, store: Store) -> Loaded:
        for name, parallelism, paused, created in self.queue_entries:
            store.load_queue(name, parallelism, paused, created)
        for name, endpoints in self.group_entries:
            store.load_url_group(name, endpoints)
        for key, pinned_parallelism, pinned_rate, period, paused in self.flow_entries:
            if pinned_parallelism is not None or pinned_rate is not None:
                store.pin_flow_key(
                    key, parallelism=pinned_parallelism, rate=pinned_rate, period_s=period
                )
            # Created if it does not exist yet, paused or not as it was.
            (store.pause_flow_key if paused else store.resume_flow_key)(key)
        for schedule in self.schedule_entries:
            store.load_schedule(
                schedule.schedule_id,
                schedule.destination,
                schedule.cron,
                schedule.content,
                schedule.options,
                paused=schedule.paused,
                created_ms=schedule.created_ms,
            )
        for letter in self.dead_letters:
            store.load_dead_letter(letter.message, letter.dlq_id, letter.created_ms, letter.answer)
        for run in self.runs:
            loaded = store.load_run(
                run.run_id,
                run.url,
                run.created_ms,
                run.settings,
                run.members,
                run.wait_deadlines,
            )
            if run.failed is not None:
                letter = run.failed
                entry = store.load_dead_letter(
                    letter.message, letter.dlq_id, letter.created_ms, letter.answer
                )
                store.fail_loaded_run(loaded, letter.message.message_id, entry, run.ended_ms)
        return Loaded(
            source=self.source,
            exported_at=None
            if self.exported_at_ms is None
            else ms_to_datetime(self.exported_at_ms),
            schedules=len(self.schedule_entries),
            queues=len(self.queue_entries),
            url_groups=len(self.group_entries),
            flow_control=len(self.flow_entries),
            dlq=len(self.dead_letters) + sum(1 for r in self.runs if r.failed),
            workflow_runs=sum(1 for r in self.runs if r.failed is None),
            workflow_dlq=sum(1 for r in self.runs if r.failed),
        )


def read_plan(document: Mapping[str, Any], *, now_ms: int) -> LoadPlan:
    """Read and check a whole export document (``LoadError`` at the first entry that cannot
    be read); ``now_ms``: when a run that resumes from its last step is due."""
    root = At(document, "").obj()
    version = root.value.get("version")
    if version is None:
        raise LoadError(
            'the export has no "version": is it a file pytest-qstash export wrote (or one '
            "assembled as docs/how-to/export.md shows)?"
        )
    if version not in FORMAT_VERSIONS or type(version) is not int:
        raise LoadError(
            f"the export's format version is {version!r}; this release reads version "
            f"{', '.join(map(str, FORMAT_VERSIONS))} (a newer pytest-qstash wrote it? upgrade)"
        )
    known = {"version", "source", "exported_at", *PAGED, *PLAIN}
    unknown = sorted(set(root.value) - known)
    if unknown:
        raise LoadError(
            f"the export has the key {unknown[0]!r}, which format version {version} does not "
            f"have (expected: {', '.join(sorted(known))})"
        )
    plan = LoadPlan(source=root.optional_text("source"), exported_at_ms=export_time_ms(root))
    for queue in entries(root, "queues"):
        plan.queue_entries.append(
            (
                queue.text("name"),
                queue.number("parallelism", default=1, minimum=1),
                queue.flag("paused"),
                queue.optional_moment("createdAt"),
            )
        )
    for group in entries(root, "url_groups"):
        endpoints = [
            Endpoint(endpoint.obj().url("url"), endpoint.optional_text("name"))
            for endpoint in group.key("endpoints").items("endpoints")
        ]
        if endpoints:  # QStash deletes a group once it is empty
            plan.group_entries.append((group.text("name"), endpoints))
    for flow in entries(root, "flow_control"):
        pinned_parallelism = flow.flag("isPinnedParallelism")
        pinned_rate = flow.flag("isPinnedRate")
        plan.flow_entries.append(
            (
                flow.text("flowControlKey"),
                flow.number("parallelismMax", minimum=1) if pinned_parallelism else None,
                flow.number("rateMax", minimum=1) if pinned_rate else None,
                flow.number("ratePeriod", default=1, minimum=1) if pinned_rate else None,
                flow.flag("isPaused"),
            )
        )
    plan.schedule_entries = [_schedule(schedule) for schedule in entries(root, "schedules")]
    plan.dead_letters, plan.runs = read_workflows(root, now_ms)
    _check_unique(plan)
    return plan


def _schedule(entry: At) -> _Schedule:
    try:
        cron = CronExpression.parse(entry.text("cron"))
    except InvalidCron as exc:
        raise entry.key("cron").fail(str(exc)) from None
    return _Schedule(
        schedule_id=entry.text("scheduleId"),
        destination=_destination(entry),
        cron=cron,
        content=entry.body(),
        options=message_options(entry, retries_field="retries"),
        paused=entry.flag("isPaused"),
        created_ms=entry.optional_moment("createdAt"),
    )


def _destination(entry: At) -> str:
    """A schedule's destination: a URL QStash takes, or a URL group's name."""
    destination = entry.text("destination")
    if is_url(destination) or "://" in destination:
        return entry.url("destination")
    if not all(c.isalnum() or c in "-_." for c in destination):
        raise entry.key("destination").fail(
            f"invalid destination {destination!r}: expected an http(s) URL or a URL group's "
            "name (letters, digits, '-', '_' and '.')"
        )
    return destination


def _check_unique(plan: LoadPlan) -> None:
    seen: set[tuple[str, str]] = set()
    for what, key in (
        *(("queue", q[0]) for q in plan.queue_entries),
        *(("URL group", g[0]) for g in plan.group_entries),
        *(("schedule", s.schedule_id) for s in plan.schedule_entries),
        *(("DLQ entry", d.dlq_id) for d in plan.dead_letters),
        *(("workflow run", r.run_id) for r in plan.runs),
    ):
        if (what, key) in seen:
            raise LoadError(f"the export holds the {what} {key} twice: each must be there once")
        seen.add((what, key))


# -- the entry point -------------------------------------------------------------------------
def load_export(
    store: Store,
    source: str | os.PathLike[str] | Mapping[str, Any],
    *,
    start_ms: int | None = None,
) -> Loaded:
    """Create in ``store`` what the export ``source`` holds (a file's path, or its parsed
    JSON), all or nothing. ``start_ms``: move the clock there first (not backwards)."""
    document = read_document(source)
    if start_ms is not None and start_ms > store.clock.now_ms:
        store.clock.move_to(start_ms)
    plan = read_plan(document, now_ms=store.clock.now_ms)
    plan.check_fits(store)
    return plan.apply(store)


def export_start_ms(source: str | os.PathLike[str] | Mapping[str, Any]) -> int | None:
    """When the export was taken (its ``exported_at``), for a clock to start there; None
    when it does not say. ``LoadError`` for a file that cannot be read."""
    return export_time_ms(At(read_document(source), "").obj())


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
