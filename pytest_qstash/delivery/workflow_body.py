"""What a delivery of an Upstash Workflow run's message carries.

A ``step`` message goes to the workflow URL with the run's steps so far as its body (the
SDK's ``serve()`` replays them) and the run id in ``Upstash-Workflow-RunId``. A third-party
call (``toCallback``) goes as published; a call's callback and the failure callback go with
their QStash callback JSON as published, plus the run id.
"""

from __future__ import annotations

import httpx

from ..engine.models import Message
from ..engine.workflows import STEP, TO_CALLBACK, WorkflowRuns

RUN_ID_HEADER = "Upstash-Workflow-RunId"
CREATED_AT_HEADER = "Upstash-Workflow-CreatedAt"

#: The SDK forwards every header of the delivery it handled as a "user header", so a run's
#: messages carry the previous delivery's transport headers. Sent again they would describe
#: the wrong request (a stale Content-Length breaks it); the fresh ones are set per delivery.
_NOT_FORWARDED = frozenset(
    {
        b"host",
        b"content-length",
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"accept-encoding",
        b"proxy-connection",
    }
)


def workflow_delivery(runs: WorkflowRuns, message: Message) -> tuple[bytes, httpx.Headers]:
    """The body and headers (before QStash's own delivery headers) for a run's message."""
    headers = httpx.Headers(
        [(name, value) for name, value in message.headers.raw if name.lower() not in _NOT_FORWARDED]
    )
    membership = runs.membership(message.message_id)
    if membership is None:
        return message.content, headers
    run, call_type = membership
    if call_type == TO_CALLBACK:
        return message.content, headers  # to the third party: exactly what the app asked for
    headers[RUN_ID_HEADER] = run.run_id
    headers[CREATED_AT_HEADER] = str(run.created_ms)
    if call_type == STEP:
        return runs.steps_body(message.message_id), headers
    return message.content, headers
