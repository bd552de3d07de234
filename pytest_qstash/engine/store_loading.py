"""The Store's verbs for state recorded elsewhere: what an export of a QStash account holds
(``wire/load.py`` reads the file), taken in as QStash had it, ids and times kept.

``LoadVerbs`` is part of the ``Store`` (its base), each verb taking the store as ``self``
(seen through ``Engine``). A recorded message that is still owed a delivery goes through the
store's own ``create_message``, so it joins its queue, its flow key and its run, and is
planned, exactly as a publish would be; one that is over (delivered, or failed into the DLQ)
is taken in as it ended, never delivered again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .attempts import AttemptResult
from .engine import Engine
from .models import DlqEntry, Message, MessageState
from .options import MessageOptions
from .queues import Queue
from .run_settings import RunSettings
from .schedules import CronExpression, Schedule
from .url_groups import Endpoint, UrlGroup, upsert_group
from .workflows import STEP, WorkflowRun


@dataclass(frozen=True, slots=True)
class RecordedMessage:
    """A message as an export recorded it: what QStash showed of it."""

    message_id: str
    url: str
    content: bytes
    options: MessageOptions
    created_ms: int
    not_before_ms: int
    max_retries: int | None = None
    retried: int = 0
    queue: str | None = None
    url_group: str | None = None
    endpoint_name: str | None = None
    schedule_id: str | None = None
    caller_ip: str = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class RecordedRunMessage:
    """One message of a recorded workflow run, in the run's order: the init message first."""

    message: RecordedMessage
    call_type: str
    #: Still owed a delivery (the run resumes with it); otherwise it was delivered.
    pending: bool = False


class LoadVerbs:
    """What the loader asks of the store: each resource created as it was recorded."""

    def load_queue(
        self: Engine, name: str, parallelism: int, paused: bool, created_ms: int | None
    ) -> Queue:
        queue = self.update_queue(name, parallelism=parallelism, paused=paused)
        if created_ms is not None:
            queue.created_ms = created_ms
        return queue

    def load_url_group(self: Engine, name: str, endpoints: Iterable[Endpoint]) -> UrlGroup:
        """A URL group with its endpoints, whatever the plan's limit (what the account held)."""
        return upsert_group(self.url_groups, name, endpoints, self.clock.now_ms)

    def load_schedule(
        self: Engine,
        schedule_id: str,
        destination: str,
        cron: CronExpression,
        content: bytes,
        opts: MessageOptions,
        *,
        paused: bool,
        created_ms: int | None,
    ) -> Schedule:
        """The schedule, firing from the clock's now on (a paused one not at all)."""
        opts = opts.copy()
        opts.deduplication_id, opts.content_based_deduplication = None, False
        schedule, _ = self.schedules.put(destination, cron, content, opts, schedule_id)
        if created_ms is not None:
            schedule.created_ms = created_ms
        if paused:
            self.schedules.pause(schedule)
        return schedule

    def load_dead_letter(
        self: Engine,
        recorded: RecordedMessage,
        dlq_id: str,
        created_ms: int,
        answer: AttemptResult,
    ) -> DlqEntry:
        """A message that failed into the DLQ, with the last answer it got: ``retry``
        publishes it again, ``delete`` drops it, as for one that failed here."""
        return self.dlq.add(_ended(self, recorded, "FAILED"), answer, created_ms, dlq_id)

    def load_run(
        self: Engine,
        run_id: str,
        url: str,
        created_ms: int,
        settings: RunSettings,
        members: Iterable[RecordedRunMessage],
        wait_deadlines: Mapping[str, int] | None = None,
    ) -> WorkflowRun:
        """A workflow run at its recorded step: the messages delivered are its history, the
        pending ones are planned as QStash would deliver them (each carrying the run's steps
        so far), so the next ``tick`` resumes it in the app mounted at its URL. A wait in
        progress (``wait_deadlines``: event id to its deadline) keeps its deadline when the
        app asks for it again."""
        run = self.workflows.start(run_id, url, created_ms, settings)
        run.wait_deadlines.update(wait_deadlines or {})
        for member in members:
            recorded = member.message
            if not member.pending:
                self.workflows.adopt(run, _ended(self, recorded, "DELIVERED"), member.call_type)
                continue
            opts = recorded.options.copy()
            opts.not_before_ms, opts.delay_ms = recorded.not_before_ms, None
            opts.workflow_headers = {
                "upstash-workflow-runid": run_id,
                "upstash-workflow-init": "false",
                "upstash-workflow-url": url,
                "upstash-workflow-calltype": member.call_type,
            }
            message = self.create_message(
                recorded.url,
                recorded.content,
                opts,
                queue=recorded.queue,
                message_id=recorded.message_id,
            )
            message.created_ms, message.retried = recorded.created_ms, recorded.retried
            message.caller_ip = recorded.caller_ip
        return run

    def fail_loaded_run(
        self: Engine, run: WorkflowRun, message_id: str, entry: DlqEntry, ended_ms: int
    ) -> None:
        """A recorded run that failed through ``entry``, whose message (the one recorded as
        ``message_id``) takes that message's place in the run: the workflow DLQ's resume and
        restart work on it."""
        failed = next((m for m in run.messages if m.message_id == message_id), None)
        if failed is None:  # not among the steps recorded: the run's last message
            self.workflows.adopt(run, entry.message, STEP)
        else:
            self.workflows.replace_dead_letter(failed, entry.message, entry)
        self.workflows.fail_loaded(run, ended_ms, entry.dlq_id)


def _ended(store: Engine, recorded: RecordedMessage, state: MessageState) -> Message:
    """A recorded message that is over: kept (the lists show it), never planned."""
    options = recorded.options
    retries = options.retries if recorded.max_retries is None else recorded.max_retries
    message = Message(
        message_id=recorded.message_id,
        url=recorded.url,
        content=recorded.content,
        created_ms=recorded.created_ms,
        not_before_ms=recorded.not_before_ms,
        max_retries=store.default_retries if retries is None else retries,
        options=options,
        state=state,
        retried=recorded.retried,
        queue=recorded.queue,
        url_group=recorded.url_group,
        endpoint_name=recorded.endpoint_name,
        schedule_id=recorded.schedule_id,
        caller_ip=recorded.caller_ip,
    )
    store.messages[message.message_id] = message
    return message
