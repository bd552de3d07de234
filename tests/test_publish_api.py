"""The QStash HTTP API as the real SDKs use it: publish, enqueue, batch, messages, errors."""

from __future__ import annotations

import base64
import json
import os
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError
from qstash.message import FlowControlProperties, PublishResponse, PublishUrlGroupResponse

from pytest_qstash import FakeQStash
from pytest_qstash.engine.account import DEFAULT_TOKEN

APP = "https://app.test"
API = "https://qstash.upstash.io"
INVALID_DESTINATION = (
    "invalid destination url: endpoint has invalid scheme, add http:// or https://"
)


def capture(qstash: FakeQStash, base_url: str = APP) -> list[httpx.Request]:
    """Mount a plain callable that keeps every request it is delivered (answering 200)."""
    seen: list[httpx.Request] = []

    def endpoint(request: httpx.Request) -> None:
        seen.append(request)

    qstash.mount(base_url, endpoint)
    return seen


def ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def raw(method: str, path: str, **kwargs: object) -> httpx.Response:
    """A request the SDK cannot send (bad header values, no token, ...), straight to the API."""
    headers = {"Authorization": f"Bearer {os.environ['QSTASH_TOKEN']}"}
    headers.update(kwargs.pop("headers", {}))  # type: ignore[arg-type]
    with httpx.Client() as http:
        return http.request(method, API + path, headers=headers, **kwargs)  # type: ignore[arg-type]


# -- publish ---------------------------------------------------------------------------------
def test_publish_stores_the_message_as_sent(qstash: FakeQStash, client: QStash) -> None:
    response = client.message.publish(
        url=f"{APP}/orders", body="order 1", content_type="text/plain"
    )

    assert isinstance(response, PublishResponse)
    assert response.message_id.startswith("msg_")
    assert response.deduplicated is False
    [message] = qstash.messages
    assert message.message_id == response.message_id
    assert message.url == f"{APP}/orders"
    assert message.method == "POST"
    assert message.body == "order 1"
    assert message.headers["Content-Type"] == "text/plain"
    assert message.state == "CREATED"
    assert message.retried == 0
    assert message.max_retries == 3
    assert message.created_at == message.not_before == qstash.now
    assert message.queue is message.url_group is message.label is None
    assert message.deliveries == []


@pytest.mark.asyncio
async def test_async_publish_json(qstash: FakeQStash, aclient: AsyncQStash) -> None:
    response = await aclient.message.publish_json(url=f"{APP}/orders", body={"id": 7})

    assert isinstance(response, PublishResponse)
    [message] = qstash.messages
    assert message.message_id == response.message_id
    assert message.json() == {"id": 7}
    assert message.headers["Content-Type"] == "application/json"


def test_no_content_type_is_stored_when_none_is_given(qstash: FakeQStash, client: QStash) -> None:
    seen = capture(qstash)
    client.message.publish(url=f"{APP}/raw", body="x")

    assert "content-type" not in qstash.messages[0].headers
    qstash.tick()
    assert "content-type" not in seen[0].headers


def test_options_are_stored_and_shown_by_get(qstash: FakeQStash, client: QStash) -> None:
    response = client.message.publish(
        url=f"{APP}/orders",
        body="{}",
        content_type="application/json",
        method="PUT",
        headers={"X-Tenant": "acme"},
        retries=5,
        retry_delay="1000 * (1 + retried)",
        timeout=30,
        callback=f"{APP}/callback",
        callback_headers={"Forward-X-Cb": "cb-value"},
        failure_callback=f"{APP}/failed",
        failure_callback_headers={"Forward-X-Fcb": "fcb-value"},
        label="checkout",
    )
    assert isinstance(response, PublishResponse)

    [message] = qstash.messages
    assert message.method == "PUT"
    assert message.headers["X-Tenant"] == "acme"
    assert message.max_retries == 5
    assert message.retry_delay == "1000 * (1 + retried)"
    assert message.timeout_ms == 30_000
    assert message.callback == f"{APP}/callback"
    assert message.failure_callback == f"{APP}/failed"
    assert message.label == "checkout"

    got = client.message.get(response.message_id)
    assert got.message_id == response.message_id
    assert got.url == f"{APP}/orders"
    assert got.method == "PUT"
    assert got.body == "{}"
    assert got.body_base64 is None
    assert got.headers == {"Content-Type": ["application/json"], "X-Tenant": ["acme"]}
    assert got.max_retries == 5
    assert got.retry_delay_expression == "1000 * (1 + retried)"
    assert got.callback == f"{APP}/callback"
    assert got.failure_callback == f"{APP}/failed"
    assert got.label == "checkout"
    assert got.created_at == got.not_before == ms(qstash.now)
    assert got.caller_ip is not None
    assert got.url_group is got.queue is got.schedule_id is got.flow_control is None
    # Each callback's own headers are kept with the callback, not forwarded with the message.
    assert got.callback_headers is not None
    assert ["cb-value"] in got.callback_headers.values()
    assert got.failure_callback_headers is not None
    assert ["fcb-value"] in got.failure_callback_headers.values()
    assert "X-Cb" not in message.headers


def test_delay_and_not_before(qstash: FakeQStash, client: QStash) -> None:
    start = qstash.now
    delayed = client.message.publish(url=f"{APP}/a", body="a", delay="1h30m")
    seconds = client.message.publish(url=f"{APP}/b", body="b", delay=90)
    at = int(start.timestamp()) + 7200
    pinned = client.message.publish(url=f"{APP}/c", body="c", not_before=at, delay="5s")
    assert isinstance(delayed, PublishResponse)
    assert isinstance(seconds, PublishResponse)
    assert isinstance(pinned, PublishResponse)

    by_id = {m.message_id: m for m in qstash.messages}
    assert by_id[delayed.message_id].not_before == start + timedelta(hours=1, minutes=30)
    assert by_id[seconds.message_id].not_before == start + timedelta(seconds=90)
    # Upstash-Not-Before wins over Upstash-Delay.
    assert by_id[pinned.message_id].not_before == datetime.fromtimestamp(at, timezone.utc)
    assert client.message.get(pinned.message_id).not_before == at * 1000
    assert client.message.get(delayed.message_id).created_at == ms(start)


@pytest.mark.parametrize(
    ("flow_control", "expected"),
    [
        # period defaults to 1 s when only limits are given; "1m" and int seconds are converted
        ({"key": "t1", "parallelism": 2}, FlowControlProperties("t1", 2, None, 1)),
        ({"key": "t2", "rate": 10, "period": "1m"}, FlowControlProperties("t2", None, 10, 60)),
        (
            {"key": "t3", "parallelism": 1, "rate": 5, "period": 30},
            FlowControlProperties("t3", 1, 5, 30),
        ),
    ],
)
def test_flow_control_is_stored(
    qstash: FakeQStash, client: QStash, flow_control: dict[str, object], expected: object
) -> None:
    response = client.message.publish(url=f"{APP}/fc", body="x", flow_control=flow_control)  # type: ignore[arg-type]
    assert isinstance(response, PublishResponse)

    assert client.message.get(response.message_id).flow_control == expected
    stored = qstash.messages[0].flow_control
    assert stored is not None
    assert stored.key == flow_control["key"]


def test_forwarded_headers_and_content_type_reach_the_destination(
    qstash: FakeQStash, client: QStash
) -> None:
    seen = capture(qstash)
    client.message.publish(
        url=f"{APP}/in",
        body="<a/>",
        content_type="text/plain",
        # The SDK prefixes every user header: this one arrives as Upstash-Forward-Content-Type
        # and overrides the request's own Content-Type.
        headers={"Content-Type": "application/xml", "x-trace-id": "t-1"},
    )

    qstash.tick()

    [request] = seen
    assert request.headers["content-type"] == "application/xml"
    assert request.headers["x-trace-id"] == "t-1"
    assert request.content == b"<a/>"
    assert qstash.messages[0].headers["X-Trace-Id"] == "t-1"
    assert "authorization" not in request.headers  # the publisher's token is never passed on


# -- deduplication ---------------------------------------------------------------------------
def test_deduplication_by_id(qstash: FakeQStash, client: QStash) -> None:
    first = client.message.publish(url=f"{APP}/a", body="1", deduplication_id="order-1")
    again = client.message.publish(url=f"{APP}/b", body="2", deduplication_id="order-1")
    other = client.message.publish(url=f"{APP}/a", body="1", deduplication_id="order-2")
    assert isinstance(first, PublishResponse)
    assert isinstance(again, PublishResponse)
    assert isinstance(other, PublishResponse)

    assert again.message_id == first.message_id
    assert (first.deduplicated, again.deduplicated, other.deduplicated) == (False, True, False)
    assert other.message_id != first.message_id
    assert [m.body for m in qstash.messages] == ["1", "1"]
    assert qstash.messages[0].deduplication_id == "order-1"


def test_deduplication_by_content(qstash: FakeQStash, client: QStash) -> None:
    def publish(body: str, **extra: object) -> PublishResponse:
        response = client.message.publish(
            url=f"{APP}/a", body=body, content_based_deduplication=True, delay="1d", **extra
        )  # type: ignore[call-overload]
        assert isinstance(response, PublishResponse)
        return response

    first = publish("same")
    same = publish("same")
    other_body = publish("different")
    other_header = publish("same", headers={"X-Tenant": "b"})

    assert same.message_id == first.message_id
    assert same.deduplicated
    assert other_body.message_id != first.message_id
    assert not other_body.deduplicated
    assert other_header.message_id != first.message_id
    assert not other_header.deduplicated
    assert len(qstash.messages) == 3

    # The dedup window is ten minutes: after it the same content makes a new message.
    qstash.advance("10m")
    after = publish("same")
    assert after.message_id != first.message_id
    assert not after.deduplicated


def test_deduplicated_publish_answers_202(qstash: FakeQStash) -> None:
    headers = {"Upstash-Deduplication-Id": "d-1"}
    first = raw("POST", f"/v2/publish/{APP}/x", headers=headers, content=b"x")
    second = raw("POST", f"/v2/publish/{APP}/x", headers=headers, content=b"x")

    assert first.status_code == 200
    assert first.json() == {"messageId": qstash.messages[0].message_id}
    assert second.status_code == 202
    assert second.json() == {"messageId": qstash.messages[0].message_id, "deduplicated": True}


# -- redaction -------------------------------------------------------------------------------
def test_redacted_fields_are_hidden_from_get_but_delivered(
    qstash: FakeQStash, client: QStash
) -> None:
    seen = capture(qstash)
    response = client.message.publish(
        url=f"{APP}/secret",
        body="card=4242",
        headers={"Authorization": "Bearer app-secret", "X-Plain": "visible"},
        redact={"body": True, "header": ["Authorization"]},
    )
    assert isinstance(response, PublishResponse)

    got = client.message.get(response.message_id)
    assert got.body is not None
    assert got.body.startswith("REDACTED:")
    assert "4242" not in got.body
    assert got.headers is not None
    [shown] = got.headers["Authorization"]
    assert shown.startswith("REDACTED:")
    assert "app-secret" not in shown
    assert got.headers["X-Plain"] == ["visible"]

    qstash.tick()
    [request] = seen
    assert request.content == b"card=4242"
    assert request.headers["authorization"] == "Bearer app-secret"


def test_redact_all_headers(qstash: FakeQStash, client: QStash) -> None:
    response = client.message.publish(
        url=f"{APP}/secret", body="visible body", headers={"X-A": "1"}, redact={"header": True}
    )
    assert isinstance(response, PublishResponse)

    got = client.message.get(response.message_id)
    assert got.body == "visible body"
    assert got.headers is not None
    assert got.headers["X-A"][0].startswith("REDACTED:")


# -- destinations ----------------------------------------------------------------------------
def test_destination_query_string_and_encoding_are_preserved(
    qstash: FakeQStash, client: QStash
) -> None:
    seen = capture(qstash)
    url = f"{APP}/a%20b/c?x=1&y=%20z&x=2"
    response = client.message.publish(url=url, body="q")
    assert isinstance(response, PublishResponse)

    assert qstash.messages[0].url == url
    assert client.message.get(response.message_id).url == url
    qstash.tick()
    assert str(seen[0].url) == url


def test_url_group_fan_out(qstash: FakeQStash, client: QStash) -> None:
    seen = capture(qstash)
    client.url_group.upsert_endpoints(
        "orders", [{"url": f"{APP}/billing", "name": "billing"}, {"url": f"{APP}/shipping"}]
    )
    group = client.url_group.get("orders")
    assert [e.url for e in group.endpoints] == [f"{APP}/billing", f"{APP}/shipping"]
    assert [g.name for g in qstash.url_groups] == ["orders"]

    responses = client.message.publish(url_group="orders", body="order 9")

    assert isinstance(responses, list)
    assert all(isinstance(r, PublishUrlGroupResponse) for r in responses)
    assert [r.url for r in responses] == [f"{APP}/billing", f"{APP}/shipping"]
    assert len({r.message_id for r in responses}) == 2
    billing = client.message.get(responses[0].message_id)
    assert (billing.url_group, billing.endpoint, billing.url) == (
        "orders",
        "billing",
        f"{APP}/billing",
    )
    assert [m.url_group for m in qstash.messages] == ["orders", "orders"]

    deliveries = qstash.tick()

    assert sorted(d.url for d in deliveries) == [f"{APP}/billing", f"{APP}/shipping"]
    assert {str(r.url): r.headers["upstash-topic-name"] for r in seen} == {
        f"{APP}/billing": "orders",
        f"{APP}/shipping": "orders",
    }
    assert {r.headers["upstash-message-id"] for r in seen} == {r.message_id for r in responses}


@pytest.mark.asyncio
async def test_async_url_group_fan_out_with_dedup(qstash: FakeQStash, aclient: AsyncQStash) -> None:
    await aclient.url_group.upsert_endpoints("g", [{"url": f"{APP}/1"}, {"url": f"{APP}/2"}])

    first = await aclient.message.publish(url_group="g", body="b", deduplication_id="d")
    again = await aclient.message.publish(url_group="g", body="b", deduplication_id="d")

    assert isinstance(first, list)
    assert isinstance(again, list)
    assert [r.message_id for r in again] == [r.message_id for r in first]
    assert [r.deduplicated for r in again] == [True, True]
    assert len(qstash.messages) == 2


# -- enqueue and batch -----------------------------------------------------------------------
def test_enqueue_records_the_queue(qstash: FakeQStash, client: QStash) -> None:
    response = client.message.enqueue_json(queue="emails", url=f"{APP}/send", body={"to": "a"})

    [message] = qstash.messages
    assert message.message_id == response.message_id  # type: ignore[union-attr]
    assert message.queue == "emails"
    assert message.json() == {"to": "a"}
    assert client.message.get(message.message_id).queue == "emails"


def test_batch(qstash: FakeQStash, client: QStash) -> None:
    client.url_group.upsert_endpoints("g", [{"url": f"{APP}/g1"}, {"url": f"{APP}/g2"}])

    responses = client.message.batch(
        [
            {"url": f"{APP}/one", "body": "1", "headers": {"X-N": "1"}, "retries": 0},
            {"url_group": "g", "body": "2"},
            {"queue": "q", "url": f"{APP}/three", "body": "3", "method": "PATCH"},
        ]
    )

    assert len(responses) == 3
    assert isinstance(responses[1], list)
    assert len(responses[1]) == 2
    by_url = {m.url: m for m in qstash.messages}
    assert set(by_url) == {f"{APP}/one", f"{APP}/g1", f"{APP}/g2", f"{APP}/three"}
    assert by_url[f"{APP}/one"].headers["X-N"] == "1"
    assert by_url[f"{APP}/one"].max_retries == 0
    assert by_url[f"{APP}/g1"].url_group == "g"
    assert (by_url[f"{APP}/three"].queue, by_url[f"{APP}/three"].method) == ("q", "PATCH")


@pytest.mark.asyncio
async def test_async_batch_json(qstash: FakeQStash, aclient: AsyncQStash) -> None:
    responses = await aclient.message.batch_json(
        [{"url": f"{APP}/a", "body": {"n": 1}}, {"url": f"{APP}/b", "body": {"n": 2}}]
    )

    assert [r.message_id for r in responses] == [m.message_id for m in qstash.messages]  # type: ignore[union-attr]
    assert [m.json() for m in qstash.messages] == [{"n": 1}, {"n": 2}]
    assert {m.headers["Content-Type"] for m in qstash.messages} == {"application/json"}


def test_batch_with_a_bad_item_creates_nothing(qstash: FakeQStash) -> None:
    items = [
        {"destination": f"{APP}/ok", "headers": {}, "body": "1", "queue": None},
        {"destination": "no-such-group", "headers": {}, "body": "2", "queue": None},
    ]
    response = raw("POST", "/v2/batch", content=json.dumps(items).encode())

    assert response.status_code == 400
    assert response.json() == {"error": INVALID_DESTINATION}
    assert qstash.messages == []


# -- reading and cancelling messages ---------------------------------------------------------
def test_get_after_delivery_is_404(qstash: FakeQStash, client: QStash) -> None:
    capture(qstash)
    response = client.message.publish(url=f"{APP}/x", body="x")
    assert isinstance(response, PublishResponse)
    qstash.tick()

    with pytest.raises(QStashError, match="404"):
        client.message.get(response.message_id)


def test_cancel_one(qstash: FakeQStash, client: QStash) -> None:
    seen = capture(qstash)
    response = client.message.publish(url=f"{APP}/x", body="x", delay="1m")
    assert isinstance(response, PublishResponse)

    client.message.cancel(response.message_id)

    assert qstash.messages[0].state == "CANCELED"
    with pytest.raises(QStashError, match="404") as info:
        client.message.get(response.message_id)
    assert response.message_id in str(info.value)
    with pytest.raises(QStashError, match="404"):
        client.message.cancel(response.message_id)
    assert qstash.advance("1h") == []
    assert seen == []
    assert qstash.dlq == []


def test_cancel_many_and_all(qstash: FakeQStash, client: QStash) -> None:
    ids = []
    for n in range(4):
        response = client.message.publish(url=f"{APP}/{n}", body=str(n), delay="1h")
        assert isinstance(response, PublishResponse)
        ids.append(response.message_id)

    assert client.message.cancel_many([ids[0], ids[1], "msg_unknown"]) == 2
    assert [m.state for m in qstash.messages] == ["CANCELED", "CANCELED", "CREATED", "CREATED"]
    client.message.get(ids[2])  # still there

    assert client.message.cancel_all() == 2
    assert {m.state for m in qstash.messages} == {"CANCELED"}
    for message_id in ids:
        with pytest.raises(QStashError, match="404"):
            client.message.get(message_id)
    assert client.message.cancel_all() == 0


def test_cancel_many_with_no_ids_cancels_everything(qstash: FakeQStash, client: QStash) -> None:
    # The SDK sends {"messageIds": []}; QStash's body-based API reads that as "all messages".
    client.message.publish(url=f"{APP}/a", body="a", delay="1h")
    client.message.publish(url=f"{APP}/b", body="b", delay="1h")

    assert client.message.cancel_many([]) == 2
    assert {m.state for m in qstash.messages} == {"CANCELED"}


@pytest.mark.asyncio
async def test_async_get_and_cancel(qstash: FakeQStash, aclient: AsyncQStash) -> None:
    response = await aclient.message.publish(url=f"{APP}/x", body="x", delay=60)
    assert isinstance(response, PublishResponse)

    got = await aclient.message.get(response.message_id)
    assert got.not_before == got.created_at + 60_000

    await aclient.message.cancel(response.message_id)
    with pytest.raises(QStashError, match="404"):
        await aclient.message.get(response.message_id)
    assert await aclient.message.cancel_all() == 0


# -- bad input -------------------------------------------------------------------------------
def test_wrong_token_is_401(qstash: FakeQStash) -> None:
    wrong = QStash("not-the-token", retry=False)

    with pytest.raises(QStashError, match="401") as info:
        wrong.message.publish(url=f"{APP}/x", body="x")
    assert '"error"' in str(info.value)
    assert qstash.messages == []


@pytest.mark.asyncio
async def test_async_wrong_token_is_401(qstash: FakeQStash) -> None:
    wrong = AsyncQStash("not-the-token", retry=False)

    with pytest.raises(QStashError, match="401"):
        await wrong.message.get("msg_x")


def test_missing_token_is_401(qstash: FakeQStash) -> None:
    with httpx.Client() as http:
        response = http.post(f"{API}/v2/publish/{APP}/x", content=b"x")

    assert response.status_code == 401
    assert set(response.json()) == {"error"}
    assert "authorization" in response.json()["error"]


def test_token_in_the_query_string_is_accepted_and_not_forwarded(qstash: FakeQStash) -> None:
    token = os.environ["QSTASH_TOKEN"]
    with httpx.Client() as http:
        response = http.post(f"{API}/v2/publish/{APP}/x?a=1&qstash_token={token}", content=b"x")

    assert response.status_code == 200
    assert qstash.messages[0].url == f"{APP}/x?a=1"


@pytest.mark.parametrize(
    "publish",
    [
        pytest.param({"url_group": "missing-group"}, id="unknown-group"),
        pytest.param({"url": "app.test/x"}, id="no-scheme"),
    ],
)
def test_invalid_destination(qstash: FakeQStash, client: QStash, publish: dict[str, str]) -> None:
    with pytest.raises(QStashError, match="400") as info:
        client.message.publish(body="x", **publish)  # type: ignore[arg-type]

    assert INVALID_DESTINATION in str(info.value)
    assert qstash.messages == []


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("Upstash-Delay", "7x"),
        ("Upstash-Delay", "-5s"),
        ("Upstash-Retries", "abc"),
        ("Upstash-Retries", "-1"),
        ("Upstash-Method", "FETCH"),
        ("Upstash-Retry-Delay", "__import__('os')"),
        ("Upstash-Timeout", "soon"),
        ("Upstash-Not-Before", "tomorrow"),
        ("Upstash-Callback", "app.test/cb"),
    ],
)
def test_bad_option_header_is_400_naming_it(qstash: FakeQStash, header: str, value: str) -> None:
    response = raw("POST", f"/v2/publish/{APP}/x", headers={header: value}, content=b"x")

    assert response.status_code == 400
    assert header in response.json()["error"]
    assert qstash.messages == []


def test_bad_duration_header_names_units_not_python_types(qstash: FakeQStash) -> None:
    response = raw("POST", f"/v2/publish/{APP}/x", headers={"Upstash-Delay": "7x"}, content=b"x")

    error = response.json()["error"]
    assert "units: ms, s, m, h, d" in error
    assert "timedelta" not in error


def test_times_after_the_year_9999_are_refused(qstash: FakeQStash, client: QStash) -> None:
    # The usual mistake: a not-before in milliseconds where QStash takes unix seconds.
    in_a_minute_ms = ms(qstash.now) + 60_000
    with pytest.raises(QStashError, match="400") as info:
        client.message.publish(url=f"{APP}/x", body="x", not_before=in_a_minute_ms)
    assert "Upstash-Not-Before" in str(info.value)
    assert "milliseconds" in str(info.value)

    with pytest.raises(QStashError, match="Upstash-Delay"):
        client.message.publish(url=f"{APP}/x", body="x", delay="3000000000d")
    assert qstash.messages == []
    assert qstash.next_due() is None


def test_bad_option_through_the_sdk(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match="400") as info:
        client.message.publish(url=f"{APP}/x", body="x", delay="7x")
    assert "Upstash-Delay" in str(info.value)

    with pytest.raises(QStashError, match="Upstash-Method"):
        client.message.publish(url=f"{APP}/x", body="x", method="FETCH")  # type: ignore[arg-type]


def test_unknown_message_is_404(qstash: FakeQStash, client: QStash) -> None:
    with pytest.raises(QStashError, match="404") as info:
        client.message.get("msg_does_not_exist")
    assert "msg_does_not_exist" in str(info.value)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2/not-a-thing"),  # no such endpoint
        ("PUT", "/v2/messages/msg_x"),  # a known path, another method
        ("PATCH", "/v2/topics/orders"),  # URL-group default headers: the SDK never sends it
    ],
)
def test_unserved_endpoint_is_an_error_naming_it(
    qstash: FakeQStash, method: str, path: str
) -> None:
    response = raw(method, path, content=b"{}")

    assert response.status_code in (404, 405, 501)
    assert f"{method} {path}" in response.json()["error"]


def test_binary_body_is_shown_as_base64_and_delivered_as_is(
    qstash: FakeQStash, client: QStash
) -> None:
    seen = capture(qstash)
    payload = b"\x00\xffbinary\xfe"
    response = client.message.publish(
        url=f"{APP}/bin", body=payload, content_type="application/octet-stream"
    )
    assert isinstance(response, PublishResponse)

    got = client.message.get(response.message_id)
    assert got.body is None
    assert got.body_base64 is not None
    assert base64.b64decode(got.body_base64) == payload
    qstash.tick()
    assert seen[0].content == payload


def test_cancel_a_message_waiting_for_its_retry(qstash: FakeQStash, client: QStash) -> None:
    attempts: list[str] = []

    def failing(request: httpx.Request) -> int:
        attempts.append(request.headers["upstash-retried"])
        return 503

    qstash.mount(APP, failing)
    response = client.message.publish(url=f"{APP}/flaky", body="x")
    assert isinstance(response, PublishResponse)
    qstash.tick()

    waiting = client.message.get(response.message_id)  # still there while retrying
    assert waiting.message_id == response.message_id
    assert client.message.cancel_many([response.message_id]) == 1

    assert qstash.advance("7d") == []
    assert attempts == ["0"]
    assert qstash.messages[0].state == "CANCELED"
    assert qstash.dlq == []
    with pytest.raises(QStashError, match="404"):
        client.message.get(response.message_id)


def test_run_now_releases_a_delayed_message(qstash: FakeQStash, client: QStash) -> None:
    hits: list[str] = []
    qstash.mount("https://later.test", lambda request: hits.append(request.url.path))
    message_id = client.message.publish(url="https://later.test/job", delay="7d").message_id

    response = raw("POST", f"/v2/messages/{message_id}/retry")

    assert response.status_code == 200
    assert qstash.tick()[0].message_id == message_id
    assert hits == ["/job"]
    assert raw("POST", f"/v2/messages/{message_id}/retry").status_code == 404


def test_run_now_refuses_a_message_being_delivered(qstash: FakeQStash, client: QStash) -> None:
    hits: list[str] = []
    qstash.mount("https://slow.test", lambda request: hits.append(request.url.path), duration=30)
    message_id = client.message.publish(url="https://slow.test/job").message_id
    assert qstash.tick() == []  # called now, answering in 30 s

    response = raw("POST", f"/v2/messages/{message_id}/retry")

    assert response.status_code == 400
    assert "is being delivered" in response.json()["error"]
    [delivery] = qstash.advance("30s")  # the one attempt ends, and no second one starts
    assert (delivery.message_id, hits) == (message_id, ["/job"])
    assert qstash.drain() == []


def test_webhook_mode_reads_options_from_the_query_and_forwards_headers(
    qstash: FakeQStash,
) -> None:
    # Senders that cannot set Upstash-* headers (third-party webhooks) pass them as query
    # parameters, and ask for their own headers to be forwarded as they are.
    seen: list[httpx.Request] = []
    qstash.mount("https://hooks.test", lambda request: seen.append(request) or 500)
    response = httpx.post(
        f"{API}/v2/publish/https://hooks.test/stripe?source=stripe"
        f"&qstash_token={qstash.token}&upstash-retries=0&upstash-header-forward=true",
        headers={"Stripe-Signature": "t=1,v1=abc", "Content-Type": "application/json"},
        content=b'{"type": "charge.succeeded"}',
    )

    assert response.status_code == 200
    [message] = qstash.messages
    assert message.url == "https://hooks.test/stripe?source=stripe"
    assert message.max_retries == 0
    qstash.tick()
    assert seen[0].headers["stripe-signature"] == "t=1,v1=abc"
    assert seen[0].headers["content-type"] == "application/json"
    assert message.state == "FAILED"  # no retries, as the query asked


def test_bulk_cancel_by_query_filters_with_the_token_in_the_query(
    qstash: FakeQStash, client: QStash
) -> None:
    client.message.publish(url="https://a.test/x", delay="1h")
    keep = client.message.publish(url="https://b.test/y", delay="1h")
    response = httpx.delete(
        f"{API}/v2/messages", params={"url": "https://a.test/x", "qstash_token": qstash.token}
    )
    assert response.status_code == 200
    assert response.json() == {"cancelled": 1}
    assert [m.state for m in qstash.messages] == ["CANCELED", "CREATED"]
    assert qstash.messages[1].message_id == keep.message_id  # type: ignore[union-attr]
    unknown = raw("DELETE", "/v2/messages?colour=blue")
    assert unknown.status_code == 400
    assert "colour" in unknown.json()["error"]


def test_bulk_cancel_takes_at_most_count_messages(qstash: FakeQStash, client: QStash) -> None:
    for _ in range(5):
        client.message.publish(url="https://a.test/x", delay="1h")

    response = raw("DELETE", "/v2/messages?url=https://a.test/x&count=2")

    assert response.json() == {"cancelled": 2}
    assert [m.state for m in qstash.messages] == ["CANCELED"] * 2 + ["CREATED"] * 3
    for bad in ("0", "501", "lots"):
        refused = raw("DELETE", f"/v2/messages?url=https://a.test/x&count={bad}")
        assert refused.status_code == 400
        assert "count" in refused.json()["error"]
    assert raw("DELETE", "/v2/messages?cursor=abc").status_code == 400  # not a cancel filter
    assert sum(m.state == "CREATED" for m in qstash.messages) == 3


def test_a_token_changed_mid_session_is_named_in_the_401(
    qstash: FakeQStash, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client built at import with the plugin's session token; a leftover setenv changes
    # the account's: the answer says what happened rather than only "invalid token".
    client = QStash(DEFAULT_TOKEN, retry=False)
    monkeypatch.setenv("QSTASH_TOKEN", "my_old_fixture_token")

    with pytest.raises(QStashError, match="401") as info:
        client.message.publish(url=f"{APP}/x", body="x")

    assert "QSTASH_TOKEN was changed after the client was built" in str(info.value)
    assert qstash.messages == []
