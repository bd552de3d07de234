"""The fixture's verbs over a server: ``redeliver``, ``reset(keep=...)``, the plan, and the
failure report of a test that used ``qstash_server``. Real processes and ports: the server,
an app under uvicorn (``dashboard_app``), the real SDK as the client."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from inner_pytest import run_inner
from qstash import QStash
from qstash.errors import QStashError

from pytest_qstash.server import AppProcess, ServerError, ServerProcess

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def app(qstash_server: ServerProcess) -> Iterator[AppProcess]:
    with AppProcess.start("dashboard_app:app", cwd=HERE) as started:
        yield started


@pytest.fixture(autouse=True)
def _fresh(qstash_server: ServerProcess) -> None:
    qstash_server.reset()


@pytest.fixture
def sdk(qstash_server: ServerProcess) -> QStash:
    return QStash(qstash_server.token, base_url=qstash_server.url, retry=False)


def test_redeliver_sends_the_same_message_again(
    qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    published = sdk.message.publish_json(url=f"{app.url}/jobs/once", body={"n": 1})
    message_id = published.message_id  # type: ignore[union-attr]
    [first] = qstash_server.tick()
    assert first.status == 200

    again = qstash_server.redeliver(message_id)
    assert again.message_id == message_id
    assert again.state == "CREATED"  # due now, delivered by the next tick
    [second] = qstash_server.tick()
    assert second.message_id == message_id
    assert second.headers["Upstash-Message-Id"] == message_id
    assert second.status == 200  # signed afresh: the app's Receiver verified it
    counts = requests.get(f"{app.url}/once", timeout=10).json()
    assert counts == {"seen": {message_id: 2}, "done": {message_id: 1}}
    assert qstash_server.messages.one(message_id=message_id).state == "DELIVERED"

    with pytest.raises(ServerError) as unknown:
        qstash_server.redeliver("msg_nope")
    assert unknown.value.status == 400
    assert "no message has this id" in unknown.value.message


def test_reset_keeps_what_the_app_provisioned(
    qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    # What an app creates at start-up: a URL group, a queue, a schedule.
    sdk.url_group.upsert_endpoints("jobs", [{"url": f"{app.url}/jobs/grouped"}])
    sdk.queue.upsert("emails", parallelism=2)
    schedule_id = sdk.schedule.create(destination=f"{app.url}/jobs/cron", cron="*/5 * * * *")
    paused_id = sdk.schedule.create(destination=f"{app.url}/jobs/paused", cron="* * * * *")
    sdk.schedule.pause(paused_id)
    sdk.message.publish_json(url="jobs", body={"before": True})
    sdk.message.enqueue_json(queue="emails", url=f"{app.url}/jobs/queued", body={})
    fired = qstash_server.advance("5m")
    old_ids = {m.message_id for m in qstash_server.messages}
    assert any(d.url == f"{app.url}/jobs/cron" for d in fired)
    assert qstash_server.mark()["messages"] == 3

    qstash_server.reset(keep=True)

    assert qstash_server.messages == []
    assert qstash_server.deliveries == []
    assert qstash_server.dlq == []
    assert qstash_server.events == []
    [group] = qstash_server.url_groups
    assert [e.url for e in group.endpoints] == [f"{app.url}/jobs/grouped"]
    [queue] = qstash_server.queues
    assert (queue.name, queue.parallelism, queue.lag) == ("emails", 2, 0)
    schedule, paused = qstash_server.schedules
    assert schedule.schedule_id == schedule_id
    assert schedule.next_run >= qstash_server.now
    assert (paused.schedule_id, paused.paused) == (paused_id, True)  # and it stays paused
    # The app's first publish after the reset finds its group (no "invalid destination").
    sdk.message.publish_json(url="jobs", body={"after": True})
    deliveries = qstash_server.advance("5m")
    assert sorted(d.url for d in deliveries) == [f"{app.url}/jobs/cron", f"{app.url}/jobs/grouped"]
    made = qstash_server.messages.one(schedule_id=schedule_id)
    assert made.message_id not in old_ids  # what a kept schedule makes later is new
    assert made.state == "DELIVERED"

    # Keeping only some; the rest is forgotten.
    qstash_server.reset(keep=["queues"])
    assert [q.name for q in qstash_server.queues] == ["emails"]
    assert qstash_server.url_groups == []
    assert qstash_server.schedules == []


def test_reset_refuses_what_it_cannot_keep_and_forgets_nothing(
    qstash_server: ServerProcess, sdk: QStash
) -> None:
    sdk.message.publish_json(url="http://127.0.0.1:9/x", body={}, delay="1h")
    with pytest.raises(ServerError) as refused:
        qstash_server.reset(keep=["messages"])
    assert refused.value.status == 400
    assert "url_groups, queues, schedules" in refused.value.message
    with pytest.raises(ServerError) as bad_plan:
        qstash_server.reset(plan="platinum")
    assert "free" in bad_plan.value.message
    assert len(qstash_server.messages) == 1  # a refused reset forgets nothing


def test_a_reset_chooses_the_plan_until_the_next(qstash_server: ServerProcess, sdk: QStash) -> None:
    assert qstash_server.plan == "fixed_10m"
    qstash_server.reset(plan="free")
    assert qstash_server.plan == "free"
    with pytest.raises(QStashError, match="maximum retries of the free plan"):
        sdk.message.publish_json(url="http://127.0.0.1:9/x", body={}, retries=5)
    qstash_server.reset()
    assert qstash_server.plan == "fixed_10m"
    sdk.message.publish_json(url="http://127.0.0.1:9/x", body={}, retries=5)


def test_serve_takes_a_plan() -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "pytest_qstash", "serve", "--port", "0", "--plan", "platinum"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "unknown plan 'platinum': expected one of free, pay_as_you_go" in refused.stderr
    with ServerProcess.start(args=["--plan", "pay-as-you-go"]) as server:
        assert server.plan == "pay_as_you_go"
        server.reset(plan="free")
        server.reset()
        assert server.plan == "pay_as_you_go"  # a reset without a plan: the server's


def test_flow_control_keys_are_listed(qstash_server: ServerProcess, sdk: QStash) -> None:
    for n in range(3):
        sdk.message.publish_json(
            url="http://127.0.0.1:9/x",
            body={"n": n},
            delay="1h",
            flow_control={"key": "tenant-7", "parallelism": 1, "rate": 10, "period": "1m"},
        )
    key = qstash_server.flow_keys.one(key="tenant-7")
    assert (key.parallelism, key.rate, key.period_s, key.paused) == (1, 10, 60, False)
    assert (key.active, key.wait_list_size, key.waiting) == (0, 0, {})  # none due yet


def test_notify_is_the_fixture_s(qstash_server: ServerProcess) -> None:
    # No run waits (the Python SDK cannot), so the event reaches no one, as in-process.
    assert qstash_server.notify("order-shipped", {"id": 7}) == []
    with pytest.raises(ServerError) as bad:
        qstash_server.notify("")
    assert bad.value.status == 400
    assert "non-empty string" in bad.value.message


def test_report_since_a_mark(qstash_server: ServerProcess, sdk: QStash) -> None:
    assert qstash_server.report() is None  # a fresh server saw nothing
    sdk.message.publish_json(url="http://127.0.0.1:9/before", body={}, delay="1h")
    mark = qstash_server.mark()
    sdk.message.publish_json(url="http://127.0.0.1:9/after", body={}, retries=0)
    qstash_server.tick()
    text = qstash_server.report(since=mark)
    assert text is not None
    assert "http://127.0.0.1:9/after" in text
    assert "ConnectError" in text
    assert "/before" not in text
    assert "1 message(s), 1 delivery attempt(s), 1 in the DLQ" in text
    everything = qstash_server.report()
    assert everything is not None
    assert "/before" in everything
    with pytest.raises(ServerError) as bad:
        qstash_server.report(since={"messages": "x"})
    assert bad.value.status == 400


def test_a_failing_test_gets_a_report_of_what_the_server_saw(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_inner=textwrap.dedent(
            """
            from qstash import QStash

            def publish(server, path):
                QStash(server.token, base_url=server.url, retry=False).message.publish_json(
                    url=f"http://127.0.0.1:9/{path}", body={"path": path}, delay="1h"
                )

            def test_passes(qstash_server):
                publish(qstash_server, "earlier-test")

            def test_fails(qstash_server):
                publish(qstash_server, "this-test")
                assert qstash_server.tick() == ["something"]

            def test_fails_without_the_server():
                assert False
            """
        )
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:asyncio"
    )
    result.assert_outcomes(passed=1, failed=2)
    output = result.stdout.str()
    [section] = re.findall(r"-+ qstash -+\n(.*?)\n_{5,}", output, re.DOTALL)
    assert "http://127.0.0.1:9/this-test CREATED" in section
    assert "earlier-test" not in section  # only what the server saw since the test began
    assert "1 message(s), 0 delivery attempt(s), 0 in the DLQ" in section


def test_the_report_of_a_server_test_names_the_server_s_verbs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run waiting for an event: the report says which call resumes it, on qstash_server.
    # The inner run's server process imports this checkout's package, wherever it runs.
    monkeypatch.setenv("PYTHONPATH", str(HERE.parent))
    pytester.makepyfile(
        test_inner=textwrap.dedent(
            """
            import httpx

            def test_waits(qstash_server):
                flow = "http://127.0.0.1:9/flow"
                run_id = qstash_server.trigger(flow, {"order": 7})
                answer = httpx.post(
                    f"{qstash_server.url}/v2/wait/order-7-paid",
                    json={"url": flow, "timeoutUrl": flow, "timeoutHeaders": {},
                          "step": {"stepId": 1, "stepType": "Wait", "stepName": "pay"}},
                    headers={
                        "Authorization": f"Bearer {qstash_server.token}",
                        "Upstash-Workflow-RunId": run_id,
                        "Upstash-Workflow-Url": flow,
                        "Upstash-Forward-Upstash-Workflow-Sdk-Version": "1",
                    },
                )
                assert answer.status_code == 200, answer.text
                assert not qstash_server.waiters
            """
        )
    )
    result = run_inner(pytester, "-p", "no:randomly", "-p", "no:asyncio")
    result.assert_outcomes(failed=1)
    [section] = re.findall(
        r"-+ qstash -+\n(.*?)(?:\n_{5,}|\n=+ short)", result.stdout.str(), re.DOTALL
    )
    assert "waiting for event 'order-7-paid' at step 'pay' (Wait)" in section
    assert "qstash_server.notify('order-7-paid', data) resumes it" in section
    assert "qstash.notify" not in section


def test_a_failed_run_is_resumed_and_restarted_through_the_client(
    qstash_server: ServerProcess, app: AppProcess
) -> None:
    # The declined workflow always fails at "charge": resumed, it keeps "validate" and fails
    # at "charge" again; restarted, it runs from the start. Each is a new run.
    run_id = qstash_server.trigger(f"{app.url}/workflow/declined", {"order": 1})
    qstash_server.drain()
    [entry] = qstash_server.workflow_dlq
    assert entry.run_id == run_id

    resumed = qstash_server.resume_run(entry.dlq_id, retries=0)
    restarted = qstash_server.restart_run(entry.dlq_id)
    assert len({run_id, resumed.run_id, restarted.run_id}) == 3
    assert resumed.resumed_from == entry.dlq_id  # the entry it came from
    qstash_server.drain()
    assert qstash_server.runs.one(run_id=resumed.run_id).state == "RUN_FAILED"
    assert qstash_server.runs.one(run_id=restarted.run_id).state == "RUN_FAILED"
    resumed_steps = [s.name for s in qstash_server.runs.one(run_id=resumed.run_id).steps]
    assert resumed_steps[:1] == ["validate"]

    with pytest.raises(ServerError) as refused:
        qstash_server.resume_run("no-such-dlq-id")
    assert refused.value.status in (400, 404)
