"""Waits, notifies and webhooks through the TypeScript SDK (@upstash/workflow on Node) against
the server: ``context.waitForEvent`` resumed by ``client.notify``, listed by
``client.getWaiters``, timed out by the virtual clock; ``context.createWebhook`` and
``waitForWebhook`` resumed by a request to the webhook URL."""

from __future__ import annotations

from datetime import timedelta

import httpx
from node_support import NodeHarness

from pytest_qstash.server import ServerProcess


def test_wait_for_event_resumes_with_the_notified_data(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    run_id = node.trigger("wait", {"eventId": "order-7-paid"})
    qstash_server.drain()

    [waiter] = node.call("getWaiters", {"eventId": "order-7-paid"})
    assert waiter["url"] == node.workflow_url("wait")
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_STARTED"

    [answer] = node.call("notify", {"eventId": "order-7-paid", "eventData": {"paid": 42}})
    assert answer["workflowRunId"] == run_id
    assert answer["waiter"]["url"] == node.workflow_url("wait")
    qstash_server.drain()

    assert node.records("wait", "resumed") == [{"eventData": {"paid": 42}, "timedOut": False}]
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"
    assert node.call("getWaiters", {"eventId": "order-7-paid"}) == []


def test_an_unnotified_wait_times_out_after_seven_days(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    run_id = node.trigger("wait", {"eventId": "never"})
    qstash_server.drain()  # a drain stops where the run waits: the timeout is 7 days away
    assert node.records("wait") == []

    assert qstash_server.advance("6d23h59m") == []
    resumed = qstash_server.advance("1m")

    assert resumed  # the timed-out step, then the route's end
    assert node.records("wait", "resumed") == [{"timedOut": True}]  # eventData undefined
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"
    assert node.call("getWaiters", {"eventId": "never"}) == []


def test_a_notify_for_the_run_is_kept_until_it_waits(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    run_id = node.trigger("wait", {"eventId": "early", "timeout": "1h"})
    # Sent before the run has even started waiting: kept for the run, not lost.
    kept = node.call("notify", {"eventId": "early", "eventData": "soon", "workflowRunId": run_id})
    assert kept == {
        "workflowRunId": run_id,
        "workflowCreatedAt": kept["workflowCreatedAt"],
        "error": "",
    }
    # Without the run id, an event nobody waits for is lost.
    assert node.call("notify", {"eventId": "lost", "eventData": 1}) == []

    qstash_server.drain()

    assert node.records("wait", "resumed") == [{"eventData": "soon", "timedOut": False}]
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"


def test_cancelling_a_waiting_run_ends_its_wait(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    run_id = node.trigger("wait", {"eventId": "cancelled"})
    qstash_server.drain()

    assert node.call("cancel", {"ids": run_id}) == {"cancelled": 1}

    assert node.call("getWaiters", {"eventId": "cancelled"}) == []
    assert node.call("notify", {"eventId": "cancelled", "eventData": 1}) == []
    assert qstash_server.advance("7d") == []
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_CANCELED"


def test_a_step_notifies_every_waiter_of_the_event(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    first = node.trigger("wait", {"eventId": "broadcast"})
    second = node.trigger("wait", {"eventId": "broadcast"})
    qstash_server.drain()

    node.trigger("notifier", {"eventId": "broadcast", "eventData": {"n": 1}})
    qstash_server.drain()

    [responses] = node.records("notifier", "notified")
    assert sorted(r["workflowRunId"] for r in responses) == sorted([first, second])
    assert node.records("wait", "resumed") == [{"eventData": {"n": 1}, "timedOut": False}] * 2


def test_a_webhook_request_resumes_the_waiting_step(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    run_id = node.trigger("webhook", {})
    qstash_server.drain()
    [url] = node.records("webhook", "url")
    assert url.startswith(f"{qstash_server.url}/v2/workflows/hooks/")
    assert f"/{run_id}/" in url

    # A third party calls it: no QStash token, any method.
    answer = httpx.put(
        f"{url}?ref=abc", content=b"signed payload", headers={"X-Hook-Header": "from stripe"}
    )
    assert answer.status_code == 200, answer.text
    qstash_server.drain()

    [seen] = node.records("webhook", "request")
    assert seen == {
        "method": "PUT",
        "url": f"{url}?ref=abc",
        "header": "from stripe",
        "body": "signed payload",
    }
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"


def test_the_python_side_sees_the_wait_and_notifies_it(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    run_id = node.trigger("wait", {"eventId": "from-python", "timeout": "2h"})
    qstash_server.drain()

    [waiter] = qstash_server.waiters
    assert (waiter.event_id, waiter.run_id, waiter.step_name) == (
        "from-python",
        run_id,
        "wait for event",
    )
    assert waiter.deadline - qstash_server.now == timedelta(hours=2)

    [answer] = qstash_server.notify("from-python", {"ok": True}, run_id=run_id)
    assert answer["workflowRunId"] == run_id
    qstash_server.drain()

    assert node.records("wait", "resumed") == [{"eventData": {"ok": True}, "timedOut": False}]
    assert list(qstash_server.waiters) == []


def test_parallel_waits_resume_one_by_one(node: NodeHarness, qstash_server: ServerProcess) -> None:
    run_id = node.trigger("waitBoth", {"first": "a-done", "second": "b-done"})
    qstash_server.drain()
    assert sorted(w.event_id for w in qstash_server.waiters) == ["a-done", "b-done"]

    node.call("notify", {"eventId": "b-done", "eventData": "B"})
    qstash_server.drain()
    assert node.records("waitBoth") == []  # one of two: the run still waits
    assert [w.event_id for w in qstash_server.waiters] == ["a-done"]

    qstash_server.advance("1d")  # the first wait times out

    assert node.records("waitBoth", "resumed") == [
        [{"timeout": True}, {"eventData": "B", "timeout": False}]
    ]
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"


def test_a_webhook_called_before_the_wait_is_kept_and_an_uncalled_one_times_out(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    early = node.trigger("webhook", {"sleepFirst": "1h"})
    late = node.trigger("webhook", {"sleepFirst": "1h"})
    qstash_server.drain(within="10m")  # both sleep for an hour before waiting
    # The server delivers both runs at once: their URLs come in either order.
    recorded = node.records("webhook", "url")
    urls = {run_id: url for url in recorded for run_id in (early, late) if f"/{run_id}/" in url}
    assert len(recorded) == 2
    assert set(urls) == {early, late}

    assert httpx.post(urls[early], content=b"early").status_code == 200  # nobody waits yet
    qstash_server.advance("1h")  # both wait: the early call resumes its run at once
    assert node.records("webhook", "request") == [
        {"method": "POST", "url": urls[early], "header": None, "body": "early"}
    ]

    qstash_server.advance("1h")  # the other one's wait times out

    assert node.records("webhook", "request")[1] == {"timeout": True}
    assert {run.state for run in qstash_server.runs} == {"RUN_SUCCESS"}


def test_a_wait_in_progress_is_what_is_next_in_the_logs(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    run_id = node.trigger("wait", {"eventId": "order-9-paid", "timeout": "2h"})
    qstash_server.drain()
    answer = httpx.get(
        f"{qstash_server.url}/v2/workflows/logs",
        params={"workflowRunId": run_id},
        headers={"Authorization": f"Bearer {qstash_server.token}"},
    )
    [run] = answer.json()["runs"]
    assert run["workflowState"] == "RUN_STARTED"
    [wait] = run["steps"][-1]["steps"]
    assert run["steps"][-1]["type"] == "next"
    assert wait["stepType"] == "Wait"
    assert wait["waitEventId"] == "order-9-paid"
    assert wait["waitTimeoutDuration"] == "7200s"
    assert wait["waitTimeoutDeadline"] == wait["createdAt"] + 7_200_000
    assert wait["waitTimeout"] is False
    node.call("notify", {"eventId": "order-9-paid", "eventData": 1})
    qstash_server.drain()
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"
