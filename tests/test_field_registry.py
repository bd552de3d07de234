"""The field registry (``pytest_qstash.server.fields``) is where a model's fields are said
once: the control API's records and the data dir are derived from it. A field added to a
copy of it (and to the model) travels in both with no other edit."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import httpx
from qstash import QStash

from pytest_qstash import FakeQStash
from pytest_qstash.engine.models import DlqEntry, Message
from pytest_qstash.server.control import records
from pytest_qstash.server.datadir import codec as codec
from pytest_qstash.server.fields import REGISTRY, Entry, Field


@dataclasses.dataclass(eq=False, slots=True)
class PriorityMessage(Message):
    """A message with two fields more: one plain, one of bytes."""

    priority: int = 0
    attachment: bytes = b""


def _with_priority(registry: tuple[Entry, ...]) -> tuple[Entry, ...]:
    """A copy of ``registry`` whose messages are ``PriorityMessage``s: its plain field
    needs no word; its bytes field (which takes the form of bytes by its type) only its
    name on the control API, which differs."""
    changed = []
    for entry in registry:
        if entry.cls is Message:
            entry = dataclasses.replace(entry, cls=PriorityMessage).with_field(
                Field("attachment", record="file")
            )
        changed.append(entry)
    return tuple(changed)


def _published(qstash: FakeQStash, client: QStash) -> PriorityMessage:
    sent = client.message.publish_json(
        url="https://app.test/x", body={"n": 1}, delay="1h", retry_delay="1000 * retried"
    )
    message = qstash.messages.one(message_id=sent.message_id)  # type: ignore[union-attr]
    values = {f.name: getattr(message, f.name) for f in dataclasses.fields(Message)}
    return PriorityMessage(**values, priority=7, attachment=bytes(range(256)))


def test_a_field_added_to_the_registry_travels_in_the_records(
    qstash: FakeQStash, client: QStash
) -> None:
    message = _published(qstash, client)
    model = records.models(_with_priority(REGISTRY))[PriorityMessage]
    sent = json.loads(json.dumps(model.render(message)))
    assert sent["priority"] == 7
    assert sent["file"] == bytes(range(256)).decode(errors="replace")
    assert sent["file_base64"] is not None
    copy = model.read(sent)
    assert type(copy) is PriorityMessage
    assert (copy.priority, copy.attachment) == (7, bytes(range(256)))
    assert copy.retry_delay == "1000 * retried"
    assert copy.content == message.content

    # A DLQ entry's message is the registry's message: it carries the field too.
    dlq = records.models(_with_priority(REGISTRY))[DlqEntry]
    entry = DlqEntry("dlq-1", message, 0, 500, httpx.Headers(), b"", None)
    assert dlq.read(json.loads(json.dumps(dlq.render(entry)))).message.priority == 7

    # The registry itself is unchanged: the package's records know no such field.
    assert "priority" not in records.MESSAGE.render(message)


def test_a_field_added_to_the_registry_travels_in_the_data_dir(
    qstash: FakeQStash, client: QStash
) -> None:
    message = _published(qstash, client)
    kinds = codec.kinds_of(_with_priority(REGISTRY))
    values, rows = codec.encode({"message": message}, kinds)
    [(_, text)] = [row for row in rows["messages"] if json.loads(row[1])["priority"] == 7]
    saved: dict[str, Any] = json.loads(text)
    assert base64.b64decode(saved["attachment"]["$bytes"]) == bytes(range(256))
    document = json.loads(
        json.dumps(
            {
                "meta": {},
                "roots": values,
                "kinds": {
                    kind: {m: json.loads(t) for m, t in found} for kind, found in rows.items()
                },
            }
        )
    )
    document["kinds"] = {
        kind: {int(m): fields for m, fields in found.items()}
        for kind, found in document["kinds"].items()
    }
    restored = codec.decode(document, {}, known=kinds)["message"]
    assert type(restored) is PriorityMessage
    assert (restored.priority, restored.attachment) == (7, bytes(range(256)))
    assert restored.options.retry_delay == message.options.retry_delay
    assert codec.fingerprint()["messages"] == tuple(
        f.name for f in dataclasses.fields(Message)
    )  # the package's own schema is unchanged
