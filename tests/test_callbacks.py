"""Callbacks after every attempt and failure callbacks after the last one: their bodies,
headers, signatures, options (``Upstash-Callback-*`` / ``Upstash-Failure-Callback-*``) and
their own retries; never for cancelled messages."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import httpx
import jwt
import pytest
import respx
from apps import WebApp
from qstash import AsyncQStash, QStash
from reliability_apps import (
    BASE,
    HOOKS,
    apublish,
    backoff_ms,
    gaps_ms,
    make_app,
    make_flask_app,
    make_hooks_app,
    publish,
)

from pytest_qstash import FakeQStash


@pytest.fixture
def hooks(qstash: FakeQStash) -> WebApp:
    app = make_hooks_app()
    qstash.mount(HOOKS, app.app)
    return app


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def ms(qstash: FakeQStash) -> int:
    return int(qstash.now.timestamp() * 1000)


# -- the callback body -----------------------------------------------------------------------
def test_callback_after_every_attempt_carries_the_documented_fields(
    qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp
) -> None:
    created_ms = ms(qstash)
    message_id = publish(
        client,
        f"{BASE}/http-500?id=1",
        '{"order": 1}',
        content_type="application/json",
        headers={"X-Tenant": "acme"},
        retries=2,
        callback=f"{HOOKS}/callback",
    )

    qstash.advance("1h")

    callbacks = hooks.on("callback")
    assert len(callbacks) == 3  # one per attempt: 1 + 2 retries
    assert hooks.inbox.signature_errors == []
    attempts = [d for d in qstash.deliveries if d.message_id == message_id]
    # Each callback is published when its attempt ends, and delivered at once.
    assert [hit.now for hit in callbacks] == [a.at for a in attempts]
    assert [hit.json()["retried"] for hit in callbacks] == [0, 1, 2]
    for hit in callbacks:
        payload = hit.json()
        assert payload["status"] == 500
        assert payload["header"]["Content-Type"] == ["application/json"]
        assert payload["body"] == b64('{"detail":"database unavailable"}')
        assert payload["maxRetries"] == 2
        assert payload["sourceMessageId"] == message_id
        assert payload["url"] == f"{BASE}/http-500?id=1"
        assert payload["method"] == "POST"
        assert payload["sourceHeader"] == {
            "Content-Type": ["application/json"],
            "X-Tenant": ["acme"],
        }
        assert payload["sourceBody"] == b64('{"order": 1}')
        assert payload["createdAt"] == created_ms
        assert isinstance(payload["notBefore"], int)
        assert payload["callerIP"] == "127.0.0.1"
        assert "dlqId" not in payload
        assert "topicName" not in payload
        assert hit.method == "POST"
        assert hit.headers["content-type"] == "application/json"
        assert hit.headers["upstash-retried"] == "0"
        # Signed for the callback URL, not the source URL.
        claims = jwt.decode(hit.headers["upstash-signature"], options={"verify_signature": False})
        assert claims["sub"] == f"{HOOKS}/callback"


def test_callback_on_success_reports_the_answer(
    qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp
) -> None:
    publish(
        client,
        f"{BASE}/ok",
        callback=f"{HOOKS}/callback",
        failure_callback=f"{HOOKS}/failure",
    )

    qstash.tick()

    [callback] = hooks.on("callback")
    assert callback.json()["status"] == 200
    assert callback.json()["body"] == b64("ok")
    assert callback.json()["retried"] == 0
    assert hooks.on("failure") == []


def test_callbacks_are_messages_of_their_own(
    qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/ok", callback=f"{HOOKS}/callback")

    qstash.tick()

    source, callback = qstash.messages
    assert source.message_id == message_id
    assert callback.callback_for == message_id
    assert callback.url == f"{HOOKS}/callback"
    assert callback.state == "DELIVERED"
    assert [e.state for e in qstash.events if e.message_id == callback.message_id] == [
        "CREATED",
        "ACTIVE",
        "DELIVERED",
    ]


# -- failure callbacks -----------------------------------------------------------------------
def test_failure_callback_once_after_the_last_attempt_with_the_dlq_id(
    qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp
) -> None:
    message_id = publish(
        client, f"{BASE}/http-500", "lost order", retries=2, failure_callback=f"{HOOKS}/failure"
    )

    qstash.advance("1h")

    [failure] = hooks.on("failure")
    assert hooks.inbox.signature_errors == []
    last_attempt = qstash.messages[0].deliveries[-1]
    assert failure.now == last_attempt.at
    payload = failure.json()
    [entry] = qstash.dlq
    assert payload["dlqId"] == entry.dlq_id
    assert payload["sourceMessageId"] == message_id
    assert payload["status"] == 500
    assert payload["retried"] == payload["maxRetries"] == 2
    assert payload["sourceBody"] == b64("lost order")
    assert payload["body"] == b64('{"detail":"database unavailable"}')
    claims = jwt.decode(failure.headers["upstash-signature"], options={"verify_signature": False})
    assert claims["sub"] == f"{HOOKS}/failure"


def test_failure_callback_fires_on_a_non_retryable_answer(
    qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp
) -> None:
    publish(client, f"{BASE}/reject", retries=5, failure_callback=f"{HOOKS}/failure")

    qstash.tick()

    [failure] = hooks.on("failure")
    assert failure.json()["status"] == 489
    assert failure.json()["retried"] == 0
    assert failure.json()["body"] == b64("bad payload")
    assert failure.json()["dlqId"] == qstash.dlq[0].dlq_id


def test_failure_callback_options(
    qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp
) -> None:
    publish(
        client,
        f"{BASE}/http-500",
        retries=0,
        failure_callback=f"{HOOKS}/failure",
        failure_callback_headers={"Forward-X-Alert": "pager", "Method": "PUT", "Delay": "1m"},
    )

    qstash.tick()
    assert hooks.on("failure") == []
    qstash.advance("1m")

    [failure] = hooks.on("failure")
    assert failure.method == "PUT"
    assert failure.headers["x-alert"] == "pager"
    assert failure.now == qstash.messages[0].deliveries[0].at + timedelta(minutes=1)


# -- callback options ------------------------------------------------------------------------
def test_callback_method_forwarded_headers_and_the_sdk_prefix(
    qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp
) -> None:
    message_id = publish(
        client,
        f"{BASE}/ok",
        callback=f"{HOOKS}/callback",
        # The SDK sends these as Upstash-Callback-<key>: "Forward-X-Trace" forwards X-Trace,
        # "Method" configures the callback, and a bare "X-Plain" is an (ignored) option.
        callback_headers={"Forward-X-Trace": "t-1", "Method": "PUT", "X-Plain": "dropped"},
    )
    stored = client.message.get(message_id)

    qstash.tick()

    [callback] = hooks.on("callback")
    assert callback.method == "PUT"
    assert callback.headers["x-trace"] == "t-1"
    assert "x-plain" not in callback.headers
    assert stored.callback_headers == {
        "Upstash-Callback-Forward-X-Trace": ["t-1"],
        "Upstash-Callback-Method": ["PUT"],
        "Upstash-Callback-X-Plain": ["dropped"],
    }


def test_callback_delay(qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp) -> None:
    publish(client, f"{BASE}/ok", callback=f"{HOOKS}/callback", callback_headers={"Delay": "30s"})

    [delivered] = qstash.tick()
    assert hooks.hits == []
    qstash.advance("30s")

    [callback] = hooks.on("callback")
    assert callback.now == delivered.at + timedelta(seconds=30)


def test_failing_callback_is_retried_with_its_own_options(
    qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp
) -> None:
    publish(
        client,
        f"{BASE}/ok",
        callback=f"{HOOKS}/broken",
        callback_headers={"Retries": "1", "Retry-Delay": "5000"},
    )

    qstash.advance("1m")

    broken = hooks.on("broken")
    assert [hit.retried for hit in broken] == [0, 1]
    assert gaps_ms([hit.now for hit in broken]) == [5000]
    [entry] = qstash.dlq
    assert entry.url == f"{HOOKS}/broken"
    assert entry.message.callback_for == qstash.messages[0].message_id


def test_callback_retries_default_to_the_source_message_retries(
    qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp
) -> None:
    publish(client, f"{BASE}/ok", retries=2, callback=f"{HOOKS}/broken")

    qstash.advance("1h")

    broken = hooks.on("broken")
    assert len(broken) == 3
    assert gaps_ms([hit.now for hit in broken]) == [backoff_ms(1), backoff_ms(2)]


def test_url_group_callbacks_name_the_group_and_endpoint(
    qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp
) -> None:
    client.url_group.upsert_endpoints(
        url_group="fanout",
        endpoints=[{"url": f"{BASE}/ok", "name": "primary"}, {"url": f"{BASE}/reject"}],
    )
    client.message.publish(
        url_group="fanout",
        body="x",
        callback=f"{HOOKS}/callback",
        failure_callback=f"{HOOKS}/failure",
    )

    qstash.tick()

    by_url = {hit.json()["url"]: hit.json() for hit in hooks.on("callback")}
    assert by_url[f"{BASE}/ok"]["topicName"] == "fanout"
    assert by_url[f"{BASE}/ok"]["endpointName"] == "primary"
    assert by_url[f"{BASE}/reject"]["topicName"] == "fanout"
    [failure] = hooks.on("failure")
    assert (failure.json()["url"], failure.json()["topicName"]) == (f"{BASE}/reject", "fanout")


# -- not for cancelled messages --------------------------------------------------------------
def test_no_callbacks_for_a_cancelled_message(
    qstash: FakeQStash, client: QStash, shop: WebApp, hooks: WebApp
) -> None:
    message_id = publish(
        client,
        f"{BASE}/http-500",
        delay="10m",
        callback=f"{HOOKS}/callback",
        failure_callback=f"{HOOKS}/failure",
    )
    client.message.cancel(message_id)

    qstash.advance("30d")

    assert hooks.hits == []
    assert shop.hits == []
    assert len(qstash.messages) == 1


@pytest.mark.parametrize("make", [make_app, make_flask_app], ids=["asgi", "wsgi"])
def test_message_cancelled_during_its_own_attempt_gets_no_callback_or_retry(
    qstash: FakeQStash, client: QStash, hooks: WebApp, make: Any
) -> None:
    app: WebApp = make()
    qstash.mount(BASE, app.app)
    publish(
        client,
        f"{BASE}/cancel-self",
        retries=3,
        callback=f"{HOOKS}/callback",
        failure_callback=f"{HOOKS}/failure",
    )

    qstash.advance("1d")

    [attempt] = qstash.deliveries
    assert attempt.status == 500
    assert qstash.messages[0].state == "CANCELED"
    assert hooks.hits == []
    assert qstash.dlq == []
    assert [e.state for e in qstash.events] == [
        "CREATED",
        "ACTIVE",
        "CANCEL_REQUESTED",
        "CANCELED",
    ]


# -- async -----------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_async_callbacks_and_failure_callback(
    qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp, hooks: WebApp
) -> None:
    message_id = await apublish(
        aclient,
        f"{BASE}/flaky?fail=5",
        retries=1,
        retry_delay="1000",
        callback=f"{HOOKS}/callback",
        failure_callback=f"{HOOKS}/failure",
        failure_callback_headers={"Forward-X-Alert": "pager"},
    )

    await qstash.aadvance("1m")

    assert [hit.json()["retried"] for hit in hooks.on("callback")] == [0, 1]
    assert [hit.json()["status"] for hit in hooks.on("callback")] == [503, 503]
    [failure] = hooks.on("failure")
    assert failure.json()["sourceMessageId"] == message_id
    assert failure.json()["dlqId"] == qstash.dlq[0].dlq_id
    assert failure.headers["x-alert"] == "pager"
    assert hooks.inbox.signature_errors == []


def test_callback_for_an_unreachable_destination_reports_status_0(
    qstash: FakeQStash, client: QStash, hooks: WebApp
) -> None:
    with respx.mock(assert_all_called=False) as user_routes:
        user_routes.post("https://down.example.com/hook").mock(
            side_effect=httpx.ConnectError("connection refused")
        )
        publish(client, "https://down.example.com/hook", retries=0, callback=f"{HOOKS}/callback")

        qstash.tick()

    [callback] = hooks.on("callback")
    assert callback.json()["status"] == 0
    assert callback.json()["error"] == "ConnectError: connection refused"
    assert callback.json()["body"] == ""
