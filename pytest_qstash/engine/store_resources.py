"""The Store's verbs on the resources the API manages beside messages: URL groups, schedules,
flow-control keys, queues and dead letters.

``ResourceVerbs`` is part of the ``Store`` (its base): each verb takes the store as ``self``,
seen through ``Engine``, the seam the rules modules use; the rules are the resources' own
(``url_groups.py``, ``schedules.py``, ``flow_control.py``, ``dlq.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from .engine import Engine
from .flow_control import FlowKey
from .models import Message
from .options import MessageOptions
from .schedules import CronExpression, Schedule
from .url_groups import Endpoint, UrlGroup, upsert_group


class ResourceVerbs:
    """What the API and the fixture ask of URL groups, schedules, flow keys, queues and dead
    letters."""

    def upsert_url_group(self: Engine, name: str, endpoints: Iterable[Endpoint]) -> UrlGroup:
        """Add the endpoints to the group ``name`` (created if the plan has room for it); an
        endpoint whose URL it has already is renamed."""
        self.check_new_url_group(name)
        return upsert_group(self.url_groups, name, endpoints, self.clock.now_ms)

    def remove_url_group_endpoints(self: Engine, name: str, endpoints: Iterable[Endpoint]) -> None:
        """Remove the endpoints (by URL, or by name) from an existing group (``KeyError`` for
        an unknown one); QStash deletes a group once it is empty."""
        group = self.url_groups[name]
        for endpoint in endpoints:
            group.remove(endpoint.url or None, endpoint.name, self.clock.now_ms)
        if not group.endpoints:
            del self.url_groups[name]

    def delete_url_group(self: Engine, name: str) -> bool:
        return self.url_groups.pop(name, None) is not None

    def put_schedule(
        self: Engine,
        destination: str,
        cron: CronExpression,
        content: bytes,
        opts: MessageOptions,
    ) -> tuple[Schedule, bool]:
        """Create a schedule (or overwrite the one ``opts.schedule_id`` names); returns it and
        whether the creation was deduplicated into an existing one."""
        return self.schedules.put(destination, cron, content, opts, opts.schedule_id)

    def delete_schedule(self: Engine, schedule_id: str) -> bool:
        return self.schedules.delete(schedule_id)

    def pause_schedule(self: Engine, schedule: Schedule) -> None:
        self.schedules.pause(schedule)

    def resume_schedule(self: Engine, schedule: Schedule) -> None:
        self.schedules.resume(schedule)

    def fire_schedule(self: Engine, schedule_id: str, generation: int) -> list[Message]:
        """A cron firing: its schedule publishes from the template and plans the next one."""
        return self.schedules.fire(
            schedule_id, generation, lambda schedule: _publish_firing(self, schedule)
        )

    def pause_flow_key(self: Engine, key: str) -> FlowKey:
        """Hold every message of the key (created if it does not exist) until resumed."""
        flow = self.flow_key(key)
        flow.paused = True
        return flow

    def resume_flow_key(self: Engine, key: str) -> FlowKey:
        flow = self.flow_key(key)
        flow.paused = False
        self.wake_flow(key)
        return flow

    def pin_flow_key(
        self: Engine,
        key: str,
        *,
        parallelism: int | None = None,
        rate: int | None = None,
        period_s: int | None = None,
    ) -> FlowKey:
        """Pin the limits given on the key (created if it does not exist); a new rate period
        starts now."""
        flow = self.flow_key(key)
        flow.pin(self.clock.now_ms, parallelism=parallelism, rate=rate, period_s=period_s)
        self.wake_flow(key)
        return flow

    def unpin_flow_key(self: Engine, key: str, *, parallelism: bool, rate: bool) -> FlowKey:
        """Unpin the limits named on an existing key (``KeyError`` for an unknown one)."""
        flow = self.flow_keys[key]
        flow.unpin(parallelism=parallelism, rate=rate)
        self.wake_flow(key)
        return flow

    def reset_flow_rate(self: Engine, key: str) -> FlowKey:
        """Start a new rate period now on an existing key (``KeyError`` for an unknown one)."""
        flow = self.flow_keys[key]
        flow.reset_rate(self.clock.now_ms)
        self.wake_flow(key)
        return flow

    def retry_dlq_entry(
        self: Engine,
        dlq_id: str,
        overrides: MessageOptions | None = None,
        *,
        cause: Message | None = None,
    ) -> Message:
        """Publish a dead letter again and drop its entry: a new message (new id, retries
        counted from zero) with the stored URL, body, headers and options.

        ``overrides`` replace the stored options they name (``given``: ``Upstash-Retries:
        0``, ``Upstash-Forward-X: 2`` read by the API). Raises ``KeyError`` for an unknown
        id. Deduplication options are not carried over: the retry would otherwise be
        deduplicated into the message that failed.
        """
        entry = self.dlq[dlq_id]
        failed = entry.message
        opts = failed.options.republished()
        opts.retries = failed.max_retries
        if overrides is not None:
            opts = opts.overridden(overrides)
            opts.deduplication_id, opts.content_based_deduplication = None, False
        message = self.create_message(
            failed.url,
            failed.content,
            opts,
            queue=failed.queue,
            url_group=failed.url_group,
            endpoint_name=failed.endpoint_name,
            schedule_id=failed.schedule_id,
            callback_for=failed.callback_for,
            cause=cause,
        )
        message.is_failure_callback = failed.is_failure_callback
        message.retried_from = failed.message_id
        message.from_schedule = False  # the test's own doing now, whatever started it
        if failed.workflow_run_id is not None:
            self.workflows.replace_dead_letter(failed, message, entry)
        del self.dlq[dlq_id]
        return message

    def delete_dead_letter(self: Engine, dlq_id: str) -> bool:
        """Drop a DLQ entry; False when there is none with this id."""
        return self.dlq.delete(dlq_id)

    # -- queues (their other verbs: admission.py) -------------------------------------------
    def delete_queue(self: Engine, name: str) -> bool:
        queue = self.queues.pop(name, None)
        if queue is None:
            return False
        # Its waiting messages go with it (logged as cancelled), never delivered unordered.
        for message_id in list(queue.members):
            self.cancel(self.messages[message_id])
        return True


def _publish_firing(store: Engine, schedule: Schedule) -> list[Message]:
    opts = schedule.options
    if opts.workflow_headers:
        opts = opts.copy()  # a run's step takes its settings in place: not the template's
    published, _ = store.publish(
        schedule.destination,
        schedule.content,
        opts,
        queue=schedule.queue,
        schedule_id=schedule.schedule_id,
    )
    return [p.message for p in published]
