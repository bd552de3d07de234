"""Hostile input in-process: what QStash accepts is delivered intact, what could never be
delivered is refused at publish naming the field, nothing answers 5xx or raises into the SDK,
and authentication comes before everything else."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import flask
import httpx
import pytest
from qstash import AsyncQStash, QStash, Receiver
from qstash.errors import QStashError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pytest_qstash import FakeQStash

API = "https://qstash.upstash.io"
APP = "https://app.test"


@pytest.fixture(scope="module")
def sdk() -> QStash:
    """The SDK with its default retries: an exception out of the fake would cost real sleeps
    and show as more than one API call."""
    return QStash(os.environ["QSTASH_TOKEN"])


@pytest.fixture
def api(qstash: FakeQStash) -> Iterator[httpx.Client]:
    """A raw client, for what the SDK cannot send (bytes in headers, malformed JSON)."""
    headers = {"Authorization": f"Bearer {qstash.token}"}
    with httpx.Client(base_url=API, headers=headers) as client:
        yield client


def starlette_inbox(qstash: FakeQStash) -> list[list[tuple[bytes, bytes]]]:
    """An ASGI app at APP that verifies the signature and keeps every request's raw headers."""
    seen: list[list[tuple[bytes, bytes]]] = []
    receiver = Receiver(
        current_signing_key=qstash.current_signing_key, next_signing_key=qstash.next_signing_key
    )

    async def endpoint(request: Request) -> Response:
        receiver.verify(
            signature=request.headers["upstash-signature"],
            body=(await request.body()).decode(),
            url=str(request.url),
        )
        seen.append(list(request.scope["headers"]))
        return Response("ok")

    qstash.mount(APP, Starlette(routes=[Route("/{path:path}", endpoint, methods=["POST"])]))
    return seen


def assert_refused(qstash: FakeQStash, info: pytest.ExceptionInfo[QStashError], field: str) -> None:
    assert "400" in str(info.value)
    assert field in str(info.value)
    assert len(qstash.api_calls) == 1  # answered at once: the SDK did not retry
    assert qstash.messages == []


# -- accepted and delivered intact -------------------------------------------------------------
def test_utf8_header_values_in_a_batch_reach_an_asgi_app_intact(
    qstash: FakeQStash, sdk: QStash
) -> None:
    seen = starlette_inbox(qstash)
    [answer] = sdk.message.batch_json([{"url": f"{APP}/b", "headers": {"Name": "Zoë"}}])
    qstash.tick()
    assert (b"name", "Zoë".encode()) in seen[0]
    message = qstash.messages.one(message_id=answer.message_id)  # type: ignore[union-attr]
    assert message.headers["Name"] == "Zoë"
    assert len(qstash.api_calls) == 1


def test_utf8_header_values_reach_a_flask_app_as_wsgi_says(
    qstash: FakeQStash, api: httpx.Client
) -> None:
    app = flask.Flask(__name__)
    seen: list[str] = []

    @app.post("/f")
    def endpoint() -> str:
        seen.append(flask.request.environ["HTTP_NAME"])
        return "ok"

    qstash.mount(APP, app)
    response = api.post(f"/v2/publish/{APP}/f", headers=[(b"Upstash-Forward-Name", "Zoë".encode())])
    assert response.status_code == 200
    qstash.tick()
    # PEP 3333: the bytes as latin-1 text, which the app decodes back to UTF-8.
    assert [s.encode("latin-1").decode() for s in seen] == ["Zoë"]


def test_utf8_header_values_on_a_schedule_are_kept_and_shown(
    qstash: FakeQStash, api: httpx.Client
) -> None:
    seen = starlette_inbox(qstash)
    response = api.post(
        f"/v2/schedules/{APP}/s",
        headers=[(b"Upstash-Cron", b"* * * * *"), (b"Upstash-Forward-Name", "Zoë".encode())],
    )
    assert response.status_code == 200, response.text
    shown = api.get(f"/v2/schedules/{response.json()['scheduleId']}").json()
    assert shown["header"]["Name"] == ["Zoë"]
    qstash.advance("1m")
    assert (b"name", "Zoë".encode()) in seen[0]


def test_hop_by_hop_headers_are_not_forwarded(qstash: FakeQStash, sdk: QStash) -> None:
    seen = starlette_inbox(qstash)
    sdk.message.publish(
        url=f"{APP}/h",
        body="hello",
        headers={
            "Transfer-Encoding": "chunked",
            "Content-Length": "999",
            "Host": "evil.test",
            "Connection": "close",
            "Keep-Alive": "timeout=5",
            "TE": "trailers",
            "Trailer": "X",
            "Upgrade": "websocket",
            "X-Kept": "yes",
        },
    )
    [delivery] = qstash.tick()
    assert delivery.status == 200  # the signature verified: the body arrived as sent
    names = {name for name, _ in seen[0]}
    assert b"x-kept" in names
    assert not names & {b"transfer-encoding", b"connection", b"keep-alive", b"te", b"upgrade"}
    assert not names & {b"trailer"}
    assert dict(seen[0])[b"host"] == b"app.test"
    assert dict(seen[0])[b"content-length"] == b"5"


def test_an_upper_case_scheme_is_a_url(qstash: FakeQStash, sdk: QStash) -> None:
    seen = starlette_inbox(qstash)
    sdk.message.publish(url="HTTPS://app.test/up", body="x")
    assert qstash.messages.one().url == "https://app.test/up"
    qstash.tick()
    assert len(seen) == 1


def test_a_queue_named_in_unicode_is_created_read_and_deleted(
    qstash: FakeQStash, sdk: QStash
) -> None:
    sdk.queue.upsert("köln", parallelism=2)
    assert sdk.queue.get("köln").parallelism == 2
    sdk.queue.delete("köln")
    assert [q.name for q in sdk.queue.list()] == []


# -- refused at publish, naming the field --------------------------------------------------
@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ({"X-Evil": "a\r\nInjected: yes"}, "Upstash-Forward-X-Evil"),
        ({"X-Evil": "a\x00b"}, "Upstash-Forward-X-Evil"),
        ({"X-Evil": "a\nb"}, "Upstash-Forward-X-Evil"),
    ],
)
def test_undeliverable_header_values_are_refused(
    qstash: FakeQStash, sdk: QStash, headers: dict[str, str], field: str
) -> None:
    with pytest.raises(QStashError) as info:
        sdk.message.publish(url=f"{APP}/x", body="x", headers=headers)
    assert_refused(qstash, info, field)


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (
            {"destination": f"{APP}/x", "headers": {"Upstash-Forward-A B": "x"}},
            "invalid header name",
        ),
        (
            {"destination": f"{APP}/x", "headers": {"Upstash-Forward-A:B": "x"}},
            "invalid header name",
        ),
        (
            {"destination": f"{APP}/x", "headers": {"Upstash-Forward-X": "a\rb"}},
            "Upstash-Forward-X",
        ),
        ({"destination": "http://[::1/x"}, "destination url"),
        ({"destination": "http://app.test:99999/"}, "destination url"),
    ],
)
def test_undeliverable_batch_items_are_refused_and_nothing_is_created(
    qstash: FakeQStash, api: httpx.Client, item: dict[str, object], field: str
) -> None:
    good = {"destination": f"{APP}/ok", "body": "kept"}
    response = api.post("/v2/batch", json=[good, item])
    assert response.status_code == 400
    assert field in response.json()["error"]
    assert qstash.messages == []


@pytest.mark.parametrize(
    "url",
    ["http://[::1/x", "http://app.test:99999/x", "http://app.test:0/x", "http://"],
)
def test_undeliverable_destinations_are_refused(qstash: FakeQStash, sdk: QStash, url: str) -> None:
    with pytest.raises(QStashError) as info:
        sdk.message.publish(url=url, body="x")
    assert_refused(qstash, info, "destination url")


def test_a_nul_in_the_host_is_refused(qstash: FakeQStash, api: httpx.Client) -> None:
    response = api.post("/v2/batch", json=[{"destination": "http://app\x00.test/x"}])
    assert response.status_code == 400
    assert "destination url" in response.json()["error"]


def test_undeliverable_callbacks_and_endpoints_are_refused(qstash: FakeQStash, sdk: QStash) -> None:
    with pytest.raises(QStashError) as info:
        sdk.message.publish(url=f"{APP}/x", callback="http://app.test:99999/cb")
    assert_refused(qstash, info, "Upstash-Callback")
    with pytest.raises(QStashError, match="endpoint url"):
        sdk.url_group.upsert_endpoints("group", [{"url": f"{APP}/ok"}, {"url": "http://[::1/x"}])
    assert qstash.url_groups == []


def test_json_nested_deeply_is_a_400(qstash: FakeQStash, api: httpx.Client) -> None:
    for path in ("/v2/batch", "/v2/queues", "/v2/topics/g/endpoints", "/v2/dlq/retry"):
        response = api.post(path, content="[" * 5000 + "]" * 5000)
        assert response.status_code == 400, path
        assert "nested too deeply" in response.json()["error"]


@pytest.mark.qstash(start="9999-12-31T23:00:00Z")
def test_a_schedule_whose_next_run_is_after_9999_is_refused(
    qstash: FakeQStash, sdk: QStash
) -> None:
    with pytest.raises(QStashError) as info:
        sdk.schedule.create(destination=f"{APP}/s", cron="0 0 1 1 *")
    assert "after the year 9999" in str(info.value)
    assert len(qstash.api_calls) == 1
    # One that still runs this year is created; after its last run nothing more is planned.
    qstash.mount(APP, lambda request: None)
    sdk.schedule.create(destination=f"{APP}/s", cron="30 23 31 12 *")
    assert len(qstash.advance("59m")) == 1
    assert qstash.next_due() is None


def test_the_python_api_says_what_is_wrong(qstash: FakeQStash) -> None:
    with pytest.raises(ValueError, match=r"workflow url.*does not parse.*expected an http"):
        qstash.trigger("http://[::1/x")
    with pytest.raises(ValueError, match=r"Upstash-Forward-X.*control character"):
        qstash.trigger(f"{APP}/wf", headers={"X": "a\r\nb"})
    with pytest.raises(ValueError, match="failure_url"):
        qstash.trigger(f"{APP}/wf", failure_url="http://app.test:99999/")
    with pytest.raises(ValueError, match="run_id"):
        qstash.trigger(f"{APP}/wf", run_id="a\nb")
    with pytest.raises(TypeError, match="mapping of name to value"):
        qstash.trigger(f"{APP}/wf", headers={5: "x"})  # type: ignore[dict-item]
    assert qstash.runs == []


# -- never an exception ------------------------------------------------------------------------
def test_an_unexpected_error_is_answered_and_recorded(
    qstash: FakeQStash, sdk: QStash, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(qstash.store, "publish", broken)
    with pytest.raises(QStashError, match=r"400.*RuntimeError: boom.*a bug in pytest-qstash"):
        sdk.message.publish(url=f"{APP}/x", body="x")
    assert len(qstash.api_calls) == 1
    [rejected] = qstash.store.api_errors
    assert rejected.status == 400
    assert "boom" in rejected.error


# -- authentication first -------------------------------------------------------------------
def test_a_fault_is_not_consumed_by_a_caller_without_the_token(qstash: FakeQStash) -> None:
    fault = qstash.fail_next("publish", status=503)
    url = f"{API}/v2/publish/{APP}/x"
    assert httpx.post(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.post(url).status_code == 401
    assert fault.remaining == 1
    good = httpx.post(url, headers={"Authorization": f"Bearer {qstash.token}"})
    assert good.status_code == 503
    assert fault.remaining == 0


def test_refused_calls_are_kept_without_their_body(qstash: FakeQStash) -> None:
    big = b"x" * (2 * 1024 * 1024)
    for _ in range(5):
        answer = httpx.post(
            f"{API}/v2/publish/{APP}/x", headers={"Authorization": "Bearer wrong"}, content=big
        )
        assert answer.status_code == 401
    assert [(c.status, c.content) for c in qstash.api_calls] == [(401, b"")] * 5
    assert json.loads(qstash.api_calls[0].response_content)["error"].startswith("invalid token")


@pytest.mark.asyncio
async def test_the_async_sdk_gets_answers_not_exceptions(qstash: FakeQStash) -> None:
    seen = starlette_inbox(qstash)
    aclient = AsyncQStash(os.environ["QSTASH_TOKEN"])  # default retries, as an app has them
    await aclient.message.batch_json([{"url": f"{APP}/a", "headers": {"Name": "Zoë"}}])
    with pytest.raises(QStashError, match="destination url"):
        await aclient.message.publish(url="http://app.test:99999/x", body="x")
    assert len(qstash.api_calls) == 2
    await qstash.atick()
    assert (b"name", "Zoë".encode()) in seen[0]


def test_webhook_mode_does_not_forward_the_publish_requests_own_hop_by_hop_headers(
    qstash: FakeQStash, api: httpx.Client
) -> None:
    seen = starlette_inbox(qstash)
    response = api.post(
        f"/v2/publish/{APP}/hook",
        content=b"{}",
        headers={
            "Upstash-Header-Forward": "true",
            "Connection": "keep-alive",
            "Keep-Alive": "timeout=5",
            "TE": "trailers",
            "X-Signature": "from-the-sender",
        },
    )
    assert response.status_code == 200, response.text
    qstash.tick()
    headers = dict(seen[0])
    assert headers[b"x-signature"] == b"from-the-sender"
    assert b"keep-alive" not in headers
    assert b"te" not in headers
