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


def test_the_daily_digest_goes_out_at_eight(
    qstash_server: ServerProcess, reminders: AppProcess
) -> None:
    # The schedule the app created when it started is still there for this test.
    schedule = qstash_server.schedules.one(schedule_id="daily-digest")
    assert schedule.next_run.hour == 8

    [delivery] = qstash_server.advance("1d")
    assert delivery.url == f"{reminders.url}/digest"
    assert delivery.at == schedule.next_run
    assert delivery.status == 204
    assert sent(reminders) == ["daily digest"]


def test_a_redelivery_is_sent_again(qstash_server: ServerProcess, reminders: AppProcess) -> None:
    # QStash delivers at least once: the same message may come twice. This service sends
    # the reminder again; an app that must not would check Upstash-Message-Id.
    requests.post(
        f"{reminders.url}/reminders", json={"text": "call mum", "in": "0s"}, timeout=10
    ).raise_for_status()
    [first] = qstash_server.tick()
    qstash_server.redeliver(first.message_id)
    [second] = qstash_server.tick()
    assert second.message_id == first.message_id
    assert second.status == 204
    assert sent(reminders) == ["call mum", "call mum"]


def test_unsigned_calls_are_refused(reminders: AppProcess) -> None:
    forged = requests.post(f"{reminders.url}/send", json={"text": "spam"}, timeout=10)
    assert forged.status_code == 401
    assert sent(reminders) == []
