"""The reminder service end to end: its own process, real HTTP, the real SDK and Receiver,
and QStash's time moved by the test, so a reminder due in an hour is tested in milliseconds."""

from __future__ import annotations

import requests

from pytest_qstash.server import AppProcess, ServerProcess


def sent(app: AppProcess) -> list[str]:
    return [r["text"] for r in requests.get(f"{app.url}/sent", timeout=10).json()]


def test_a_reminder_is_sent_when_due(qstash_server: ServerProcess, reminders: AppProcess) -> None:
    answer = requests.post(
        f"{reminders.url}/reminders", json={"text": "stand up", "in": "1h"}, timeout=10
    )
    message_id = answer.json()["message_id"]

    assert qstash_server.advance("59m") == []
    assert sent(reminders) == []

    [delivery] = qstash_server.advance("1m")
    assert delivery.message_id == message_id
    assert delivery.status == 204  # the service verified the signature and sent it
    assert sent(reminders) == ["stand up"]
    assert qstash_server.messages.one(message_id=message_id).state == "DELIVERED"


def test_a_failed_send_is_retried(qstash_server: ServerProcess, reminders: AppProcess) -> None:
    requests.post(
        f"{reminders.url}/reminders",
        json={"text": "water the plants", "in": "10s", "flaky": True},
        timeout=10,
    ).raise_for_status()

    deliveries = qstash_server.drain()
    assert [d.status for d in deliveries] == [503, 204]
    assert deliveries[0].response_body == "SMS provider unavailable"
    assert deliveries[1].retried == 1
    assert sent(reminders) == ["water the plants"]


def test_unsigned_calls_are_refused(reminders: AppProcess) -> None:
    forged = requests.post(f"{reminders.url}/send", json={"text": "spam"}, timeout=10)
    assert forged.status_code == 401
    assert sent(reminders) == []
