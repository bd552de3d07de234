"""Callbacks: what QStash publishes about an attempt, to ``Upstash-Callback`` after each
attempt and to ``Upstash-Failure-Callback`` once the retries ran out: the payload it builds and
the options the callback message takes from the ``Upstash-(Failure-)Callback-*`` headers."""

from __future__ import annotations

import base64
import json
from typing import Any

from .models import Delivery, DlqEntry, Message
from .options import MessageOptions, header_lists
from .workflows import WorkflowRuns


def callback_payload(
    source: Message,
    delivery: Delivery,
    workflows: WorkflowRuns,
    dlq_entry: DlqEntry | None = None,
) -> bytes:
    """The JSON body QStash sends a callback about ``delivery`` (an attempt of ``source``)."""
    payload: dict[str, Any] = {
        "status": delivery.status if delivery.status is not None else 0,
        "header": header_lists(delivery.response_headers),
        "body": base64.b64encode(delivery.response_content).decode(),
        "retried": delivery.retried,
        "maxRetries": source.max_retries,
        "sourceMessageId": source.message_id,
        "url": source.url,
        "method": source.method,
        "sourceHeader": header_lists(source.headers),
        "sourceBody": base64.b64encode(source.content).decode(),
        "notBefore": source.not_before_ms,
        "createdAt": source.created_ms,
        "callerIP": source.caller_ip,
    }
    for key, value in (
        ("topicName", source.url_group),
        ("endpointName", source.endpoint_name),
        ("scheduleId", source.schedule_id),
    ):
        if value:
            payload[key] = value
    if dlq_entry is not None:
        payload["dlqId"] = dlq_entry.dlq_id
        if source.workflow_run_id is not None:
            # A workflow's failure callback names the run; sourceBody is its initial payload.
            payload.update(workflows.failure_fields(source))
    if delivery.error and delivery.status is None:
        payload["error"] = delivery.error
    return json.dumps(payload, separators=(",", ":")).encode()


def callback_options(source: Message, *, failure: bool) -> MessageOptions:
    """The callback message's options, from the source's prefixed callback headers."""
    given = source.options.failure_callback_options if failure else source.options.callback_options
    opts = given.copy() if given is not None else MessageOptions()
    opts.headers["Content-Type"] = opts.headers.get("Content-Type", "application/json")
    return opts
