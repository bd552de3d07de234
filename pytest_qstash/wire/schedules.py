"""Schedules: ``/v2/schedules`` (create/overwrite, get, list, delete, pause, resume)."""

from __future__ import annotations

from typing import Any

import httpx

from ..engine.models import FINAL_STATES, Message, split_labels
from ..engine.schedules import CronExpression, InvalidCron, Schedule
from ..engine.store import Store
from ._http import (
    ApiError,
    backoff_text,
    empty_response,
    flow_control_fields,
    header_map,
    json_response,
    put_body,
)
from .publish import check_name, publish_options


def create_schedule(store: Store, request: httpx.Request, destination: str) -> httpx.Response:
    # Upstash-Not-Before does not apply to schedules (an absolute time would hold every
    # firing's message until then): it is ignored, and does not hide Upstash-Delay.
    headers = httpx.Headers(
        [(k, v) for k, v in request.headers.raw if k.lower() != b"upstash-not-before"]
    )
    opts = publish_options(store, headers)
    if opts.cron is None:
        raise ApiError(400, "Upstash-Cron header is required to create a schedule")
    try:
        cron = CronExpression.parse(opts.cron)
        cron.next_after_ms(store.clock.now_ms)  # a first run after the year 9999 is refused
    except InvalidCron as exc:
        raise ApiError(400, str(exc)) from None
    if opts.schedule_id is not None:
        check_name(opts.schedule_id, "schedule id")
    if opts.queue is not None:
        check_name(opts.queue, "queue name")
    destination = store.checked_destination(destination, group_needs_endpoints=False)
    store.check_message(opts, request.content)
    store.check_new_schedule(opts.schedule_id)
    schedule, deduplicated = store.put_schedule(destination, cron, request.content, opts)
    # A deduplicated creation answers the existing schedule's id with 202, as a publish does.
    return json_response({"scheduleId": schedule.schedule_id}, 202 if deduplicated else 200)


def get_schedule(store: Store, request: httpx.Request, schedule_id: str) -> httpx.Response:
    return json_response(schedule_json(store, _schedule(store, schedule_id)))


def list_schedules(store: Store, request: httpx.Request) -> httpx.Response:
    return json_response([schedule_json(store, s) for s in store.schedules.values()])


def delete_schedule(store: Store, request: httpx.Request, schedule_id: str) -> httpx.Response:
    store.delete_schedule(schedule_id)
    return empty_response()


def pause_schedule(store: Store, request: httpx.Request, schedule_id: str) -> httpx.Response:
    store.pause_schedule(_schedule(store, schedule_id))
    return empty_response()


def resume_schedule(store: Store, request: httpx.Request, schedule_id: str) -> httpx.Response:
    store.check_resumed_schedule(schedule_id)
    schedule = _schedule(store, schedule_id)
    try:
        schedule.expression.next_after_ms(store.clock.now_ms)
    except InvalidCron as exc:
        raise ApiError(400, str(exc)) from None
    store.resume_schedule(schedule)
    return empty_response()


def _schedule(store: Store, schedule_id: str) -> Schedule:
    schedule = store.schedules.get(schedule_id)
    if schedule is None:
        raise ApiError(404, f"schedule {schedule_id} not found")
    return schedule


def schedule_json(store: Store, schedule: Schedule) -> dict[str, Any]:
    opts = schedule.options
    labels = split_labels(opts.label)
    out: dict[str, Any] = {
        "scheduleId": schedule.schedule_id,
        "destination": schedule.destination,
        "cron": schedule.cron,
        "createdAt": schedule.created_ms,
        "method": opts.method,
        "retries": opts.retries if opts.retries is not None else store.default_retries,
        "isPaused": schedule.paused,
        "callerIP": schedule.caller_ip,
        "callerIp": schedule.caller_ip,
        "nextScheduleTime": schedule.next_ms,
    }
    if opts.headers:
        out["header"] = header_map(opts.headers, opts.redact)
    put_body(out, schedule.content, redact="body" in opts.redact)
    optional: dict[str, Any] = {
        "callback": opts.callback,
        "failureCallback": opts.failure_callback,
        "queueName": schedule.queue,
        "retryDelayExpression": backoff_text(opts),
        # `Upstash-Label: a,b` is two labels, shown as a message's are.
        "label": labels[0] if labels else None,
        "labels": list(labels) or None,
        "lastScheduleTime": schedule.last_ms,
        "error": schedule.error,
    }
    out.update({k: v for k, v in optional.items() if v is not None})
    if opts.delay_ms:
        out["delay"] = opts.delay_ms // 1000
    if opts.timeout_ms is not None:
        out["timeout"] = opts.timeout_ms // 1000
    if opts.callback_headers:
        out["callbackHeader"] = header_map(opts.callback_headers)
    if opts.failure_callback_headers:
        out["failureCallbackHeader"] = header_map(opts.failure_callback_headers)
    out.update(flow_control_fields(opts.flow_control))
    if schedule.last_message_ids:
        out["lastScheduleStates"] = {
            mid: _schedule_state(store.messages.get(mid)) for mid in schedule.last_message_ids
        }
    return out


def _schedule_state(message: Message | None) -> str:
    if message is None or message.state not in FINAL_STATES:
        return "IN_PROGRESS"
    return "SUCCESS" if message.state == "DELIVERED" else "FAIL"
