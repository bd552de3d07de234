"""How much of an endpoint's answer is kept: the attempt's record, its log entries and its DLQ
entry keep the first ``KEPT_RESPONSE_BYTES``; a callback still carries the whole answer (a
workflow's ``context.call`` reads its result from one)."""

from __future__ import annotations

import base64
import json
from typing import Any

from qstash import QStash

from pytest_qstash import FakeQStash
from pytest_qstash.engine.models import KEPT_RESPONSE_BYTES

ANSWER = b"e" * (3 * KEPT_RESPONSE_BYTES)
callbacks: list[dict[str, Any]] = []


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    request = await receive()
    if scope["path"] == "/callback":
        callbacks.append(json.loads(request["body"]))
        status, body = 200, b"ok"
    else:
        status, body = (500, ANSWER) if scope["path"] == "/big" else (500, b"small")
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": body})


def test_an_answer_is_kept_up_to_the_bound(qstash: FakeQStash) -> None:
    callbacks.clear()
    qstash.mount("https://example.test", app)
    client = QStash(qstash.token)
    big = client.message.publish(
        url="https://example.test/big",
        body="{}",
        retries=0,
        callback="https://example.test/callback",
    ).message_id  # type: ignore[union-attr]
    small = client.message.publish(url="https://example.test/small", body="{}", retries=0)
    qstash.tick()

    [delivery] = qstash.deliveries.filter(message_id=big)
    assert delivery.status == 500
    assert delivery.response_content == ANSWER[:KEPT_RESPONSE_BYTES]
    [entry] = [e for e in qstash.dlq if e.message_id == big]
    assert entry.response_content == ANSWER[:KEPT_RESPONSE_BYTES]
    logged = [e for e in qstash.events if e.message_id == big and e.response_content]
    assert logged
    assert {len(e.response_content or b"") for e in logged} == {KEPT_RESPONSE_BYTES}
    # The callback was published with the whole answer.
    [callback] = callbacks
    assert base64.b64decode(callback["body"]) == ANSWER
    # A small answer is kept whole.
    [answer] = qstash.deliveries.filter(message_id=small.message_id)  # type: ignore[union-attr]
    assert answer.response_content == b"small"
