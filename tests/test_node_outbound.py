"""The TypeScript SDK (@upstash/workflow on Node) against the server, for what reaches beyond
the app: an agent workflow's ``context.api.openai`` and ``context.call`` go, through the
server's outbound mounts, to a 20-line fake OpenAI (tests/node/fake-openai.mjs, the one
docs/typescript.md shows) and a partner API faked by the Node app (tests/node/outbound.mjs),
offline, and keep their original URLs in every record; and the steps the other Node tests leave out:
``context.sleepUntil``, ``context.cancel()`` and ``WorkflowRetryAfterError``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from node_support import NODE_DIR, NodeHarness, node_packages

from pytest_qstash.server import NodeApp, ServerProcess

OPENAI = "https://api.openai.com/v1/chat/completions"
PARTNER = "https://api.partner.test/v1/quotes?sku=42"


@pytest.fixture(scope="module")
def outbound_app(qstash_server: ServerProcess) -> Iterator[NodeHarness]:
    node_packages()
    app = NodeApp.start_script(NODE_DIR / "outbound.mjs", cwd=NODE_DIR, env=qstash_server.env)
    harness = NodeHarness(app)
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture(scope="module")
def fake_openai(outbound_app: NodeHarness) -> Iterator[NodeApp]:
    with NodeApp.start_script(NODE_DIR / "fake-openai.mjs", cwd=NODE_DIR) as app:
        yield app


@pytest.fixture
def node(outbound_app: NodeHarness, qstash_server: ServerProcess) -> Iterator[NodeHarness]:
    qstash_server.reset()
    outbound_app.clear()
    yield outbound_app
    for prefix in qstash_server.mounts:
        qstash_server.unmount(prefix)


def test_an_agent_calls_openai_and_a_partner_through_mounts(
    node: NodeHarness, fake_openai: NodeApp, qstash_server: ServerProcess
) -> None:
    qstash_server.mount("https://api.openai.com", fake_openai.url)
    qstash_server.mount("https://api.partner.test", f"{node.url}/fake-partner")

    run_id = node.trigger("agent", {"question": "capital of France?"})
    qstash_server.drain()

    [result] = node.records("agent", "result")
    assert result == {
        "openai": {"status": 200, "reply": "Paris"},
        "partner": {"status": 201, "body": {"quote": 99, "for": "Paris"}},
    }
    # What reached the fakes: the requests QStash made, method, headers and body kept.
    [to_openai] = httpx.get(fake_openai.url, trust_env=False).json()
    assert to_openai["path"] == "/v1/chat/completions"
    assert to_openai["auth"] == "Bearer sk-test"
    assert to_openai["body"]["messages"] == [{"role": "user", "content": "capital of France?"}]
    [to_partner] = node.records("partner", "request")
    assert to_partner["method"] == "POST"
    assert to_partner["path"] == "/fake-partner/v1/quotes?sku=42"
    assert to_partner["host"] == "api.partner.test"
    assert to_partner["partnerKey"] == "pk-test"
    assert to_partner["body"] == {"reply": "Paris"}

    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"
    delivered = [d.url for d in qstash_server.deliveries]
    assert {OPENAI, PARTNER} <= set(delivered)
    targets = (f"{node.url}/fake-partner", fake_openai.url)
    assert not any(url.startswith(targets) for url in delivered)
    # The workflow logs, as the SDK reads them, name the original URLs too.
    [logged] = node.call("logs", {"workflowRunId": run_id})["runs"]
    call_urls = [
        step["callUrl"]
        for group in logged["steps"]
        for step in group.get("steps", [])
        if step.get("callUrl")
    ]
    assert call_urls == [OPENAI, PARTNER]


def test_without_a_mount_the_call_fails_offline_and_the_records_say_so(
    node: NodeHarness, fake_openai: NodeApp, qstash_server: ServerProcess
) -> None:
    # The partner host resolves nowhere: the attempt fails, as QStash's would.
    qstash_server.mount("https://api.openai.com", fake_openai.url)
    node.trigger("agent", {"question": "q"})
    qstash_server.advance("1m")

    [result] = node.records("agent", "result")
    assert result["openai"] == {"status": 200, "reply": "Paris"}
    assert result["partner"]["status"] != 201
    assert node.records("partner") == []
    failed = qstash_server.deliveries.filter(url=PARTNER)
    assert failed
    assert all(d.status is None and d.error for d in failed)


def test_sleep_until_wakes_at_that_moment(node: NodeHarness, qstash_server: ServerProcess) -> None:
    until = qstash_server.now + timedelta(hours=3)
    run_id = node.trigger("sleepUntil", {"until": until.isoformat()})
    qstash_server.drain(within="1h")
    assert node.records("sleepUntil") == []

    qstash_server.advance_to(until - timedelta(seconds=1))
    assert node.records("sleepUntil") == []
    qstash_server.advance("1s")
    qstash_server.tick()

    assert node.records("sleepUntil", "woke") == [True]
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"


def test_cancel_from_inside_ends_the_run(node: NodeHarness, qstash_server: ServerProcess) -> None:
    run_id = node.trigger("selfCancel")
    qstash_server.drain()

    assert node.records("selfCancel", "ran") == ["before"]
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_CANCELED"
    assert qstash_server.next_due() is None


def test_retry_after_error_retries_the_step_after_that_delay(
    node: NodeHarness, qstash_server: ServerProcess
) -> None:
    run_id = node.trigger("retryAfter")
    qstash_server.tick()
    qstash_server.tick()
    assert node.records("retryAfter", "ran") == [1]

    failed = [d for d in qstash_server.deliveries if d.status == 429]
    assert len(failed) == 1
    qstash_server.advance("29s")
    assert node.records("retryAfter", "ran") == [1]
    qstash_server.advance("1s")
    qstash_server.drain()

    assert node.records("retryAfter", "ran") == [1, 2]
    assert node.records("retryAfter", "result") == ["ok after 2"]
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_SUCCESS"


def test_the_fake_openai_of_the_docs_is_the_one_tested() -> None:
    page = (NODE_DIR.parent.parent / "docs" / "typescript.md").read_text(encoding="utf-8")
    fake = (NODE_DIR / "fake-openai.mjs").read_text(encoding="utf-8")
    assert f"```js\n{fake}```" in page
    assert len(fake.splitlines()) <= 20
