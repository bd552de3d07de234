"""Delivery into real FastAPI, Starlette and Flask apps, from sync and async tests."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from datetime import timedelta

import fastapi
import httpx
import jwt
import pytest
import respx
from apps import FACTORIES, WebApp, make_fastapi_app, make_flask_app, make_starlette_app
from qstash import AsyncQStash, QStash
from qstash.message import PublishResponse

from pytest_qstash import DeliveryLoopError, FakeQStash, ReentrantCallError, UnroutedDeliveryError

BASE = "https://app.example.com"


@pytest.fixture(params=sorted(FACTORIES))
def web(request: pytest.FixtureRequest, qstash: FakeQStash) -> WebApp:
    """Each framework's app, fresh, mounted at BASE."""
    app: WebApp = FACTORIES[request.param]()
    qstash.mount(BASE, app.app)
    return app


def publish(client: QStash, url: str, body: str = "payload", **options: object) -> str:
    response = client.message.publish(url=url, body=body, **options)  # type: ignore[arg-type]
    assert isinstance(response, PublishResponse)
    return response.message_id


async def apublish(client: AsyncQStash, url: str, body: str = "payload", **options: object) -> str:
    response = await client.message.publish(url=url, body=body, **options)  # type: ignore[arg-type]
    assert isinstance(response, PublishResponse)
    return response.message_id


def claims(signature: str) -> dict[str, object]:
    # Read only: the app's Receiver is what verifies it.
    decoded: dict[str, object] = jwt.decode(signature, options={"verify_signature": False})
    return decoded


def body_hash(body: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(body).digest()).decode()


# -- what the app receives -------------------------------------------------------------------
def test_delivery_verifies_and_carries_qstash_headers(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    url = f"{BASE}/webhook?order=1&note=a%20b"
    message_id = client.message.publish_json(
        url=url, body={"order": 1}, headers={"X-Tenant": "acme"}
    ).message_id  # type: ignore[union-attr]

    [delivery] = qstash.tick()

    assert web.inbox.signature_errors == []
    assert delivery.status == 200
    assert delivery.response_body == "ok"
    assert delivery.message_id == message_id
    assert delivery.url == url
    assert delivery.at == qstash.now
    [received] = web.inbox.received
    assert received.url == url
    assert received.method == "POST"
    assert received.body == '{"order": 1}'
    assert received.headers["upstash-message-id"] == message_id
    assert received.headers["upstash-retried"] == "0"
    assert received.headers["user-agent"] == "Upstash-QStash"
    assert received.headers["x-tenant"] == "acme"
    assert received.headers["content-type"] == "application/json"
    token = claims(received.headers["upstash-signature"])
    assert token["sub"] == url
    assert token["iss"] == "Upstash"
    assert token["body"] == body_hash(b'{"order": 1}')
    assert token["iat"] == int(qstash.now.timestamp())
    assert token["exp"] == token["iat"] + 300  # type: ignore[operator]
    assert qstash.messages[0].state == "DELIVERED"
    assert qstash.messages[0].deliveries == [delivery]


@pytest.mark.asyncio
async def test_async_delivery_pytest_asyncio(
    qstash: FakeQStash, aclient: AsyncQStash, web: WebApp
) -> None:
    url = f"{BASE}/webhook?x=1"
    message_id = await apublish(aclient, url, "async body", headers={"X-A": "1"})

    [delivery] = await qstash.atick()

    assert web.inbox.signature_errors == []
    assert delivery.status == 200
    [received] = web.inbox.received
    assert (received.url, received.body) == (url, "async body")
    assert received.headers["upstash-message-id"] == message_id
    assert received.headers["x-a"] == "1"


@pytest.mark.anyio
async def test_async_delivery_anyio(qstash: FakeQStash, aclient: AsyncQStash, web: WebApp) -> None:
    await apublish(aclient, f"{BASE}/webhook", "anyio body", delay="1m")

    assert await qstash.atick() == []
    [delivery] = await qstash.aadvance("1m")

    assert delivery.status == 200
    assert web.inbox.signature_errors == []
    assert [r.body for r in web.inbox.received] == ["anyio body"]


def test_signing_key_rotation(qstash: FakeQStash, client: QStash, web: WebApp) -> None:
    # The app's Receiver holds the keys it was configured with (current, next).
    client.signing_key.rotate()  # next becomes current: the app still verifies with its next key
    publish(client, f"{BASE}/webhook", "after one rotation")
    assert [d.status for d in qstash.tick()] == [200]

    client.signing_key.rotate()  # now signed with a key the app has never seen
    publish(client, f"{BASE}/webhook", "after two rotations")
    assert [d.status for d in qstash.tick()] == [401]
    assert len(web.inbox.signature_errors) == 1
    assert [r.body for r in web.inbox.received] == ["after one rotation"]


@pytest.mark.parametrize("method", ["PUT", "DELETE", "GET", "PATCH"])
def test_method_is_honoured(qstash: FakeQStash, client: QStash, web: WebApp, method: str) -> None:
    body = "" if method == "GET" else "b"
    publish(client, f"{BASE}/webhook", body, method=method)

    [delivery] = qstash.tick()

    assert delivery.status == 200
    assert delivery.method == method
    assert [(r.method, r.body) for r in web.inbox.received] == [(method, body)]


# -- where a delivery goes -------------------------------------------------------------------
def test_longest_mount_wins(qstash: FakeQStash, client: QStash) -> None:
    site = make_starlette_app()
    api = make_fastapi_app()
    qstash.mount(BASE, site.app)
    qstash.mount(f"{BASE}/api", api.app)  # the app still sees the full path, /api/...

    def on_api(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="api")

    qstash.mount(f"{BASE}/api/v2", on_api)
    publish(client, f"{BASE}/webhook", "to site")
    publish(client, f"{BASE}/apiary", "to site, not api")
    publish(client, f"{BASE}/api/v2/x", "to the callable")

    deliveries = qstash.tick()

    assert [d.status for d in deliveries] == [200, 404, 200]  # site has no /apiary route
    assert [r.body for r in site.inbox.received] == ["to site"]
    assert api.inbox.received == []
    assert deliveries[2].response_body == "api"


@pytest.mark.parametrize(
    "spelled",
    [
        "https://Shop.Example.com",
        "https://shop.example.com:443",
        "https://shop.example.com/",
        "HTTPS://SHOP.EXAMPLE.COM:443/",
    ],
)
def test_a_mount_url_is_read_as_delivery_urls_are(
    qstash: FakeQStash, client: QStash, spelled: str
) -> None:
    # Host case and the default port do not make another base URL.
    seen: list[str] = []
    qstash.mount(spelled, lambda request: seen.append(str(request.url)))
    publish(client, "https://shop.example.com/orders", "x")

    [delivery] = qstash.tick()

    assert delivery.status == 200
    assert seen == ["https://shop.example.com/orders"]
    qstash.unmount(spelled)
    assert qstash.mounts.base_urls == []
    with pytest.raises(ValueError, match=r"nothing is mounted at 'https://shop\.example\.com'"):
        qstash.unmount("https://shop.example.com")


def test_an_unrouted_url_points_at_a_mount_under_another_scheme(
    qstash: FakeQStash, client: QStash
) -> None:
    qstash.mount("https://jobs.example.com", lambda request: None)
    publish(client, "http://jobs.example.com/run", "x")

    with pytest.raises(UnroutedDeliveryError) as info:
        qstash.tick()

    assert "https://jobs.example.com is mounted for the same host, under another scheme" in str(
        info.value
    )


def test_plain_callable_mounts(qstash: FakeQStash, client: QStash) -> None:
    seen: list[httpx.Request] = []

    def created(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, text="made", headers={"X-Answer": "yes"})

    def status_only(request: httpx.Request) -> int:
        seen.append(request)
        return 204

    async def coroutine(request: httpx.Request) -> None:
        seen.append(request)

    qstash.mount("https://a.test", created)
    qstash.mount("https://b.test", status_only)
    qstash.mount("https://c.test", coroutine)
    for host in "abc":
        publish(client, f"https://{host}.test/in", host)

    deliveries = qstash.tick()

    assert [(d.url, d.status) for d in deliveries] == [
        ("https://a.test/in", 201),
        ("https://b.test/in", 204),
        ("https://c.test/in", 200),
    ]
    assert deliveries[0].response_body == "made"
    assert deliveries[0].response_headers["x-answer"] == "yes"
    assert [r.content for r in seen] == [b"a", b"b", b"c"]
    assert all("upstash-signature" in r.headers for r in seen)


def test_unmounted_url_answered_by_users_respx_route(
    qstash: FakeQStash, client: QStash, respx_mock: respx.MockRouter
) -> None:
    route = respx_mock.post("https://partner.test/hook").mock(
        return_value=httpx.Response(200, text="thanks")
    )
    message_id = publish(client, "https://partner.test/hook", "to partner")

    [delivery] = qstash.tick()

    assert delivery.status == 200
    assert delivery.response_body == "thanks"
    assert route.call_count == 1
    sent = route.calls.last.request
    assert sent.content == b"to partner"
    assert sent.headers["upstash-message-id"] == message_id
    assert claims(sent.headers["upstash-signature"])["sub"] == "https://partner.test/hook"


def test_a_bug_in_a_respx_side_effect_is_raised_not_taken_for_the_network(
    qstash: FakeQStash, client: QStash, respx_mock: respx.MockRouter
) -> None:
    def partner(request: httpx.Request) -> httpx.Response:
        raise KeyError("order_id")  # the test's own stand-in is broken

    respx_mock.post("https://partner.test/hook").mock(side_effect=partner)
    publish(client, "https://partner.test/hook", "to partner")

    with pytest.raises(KeyError, match="order_id"):
        qstash.tick()
    [delivery] = qstash.deliveries
    assert delivery.status == 500  # recorded as a failed attempt, as an app's exception is


def test_a_network_error_from_a_respx_side_effect_is_a_failed_attempt(
    qstash: FakeQStash, client: QStash, respx_mock: respx.MockRouter
) -> None:
    respx_mock.post("https://partner.test/hook").mock(side_effect=httpx.ConnectTimeout)
    publish(client, "https://partner.test/hook", "to partner")

    [delivery] = qstash.tick()

    assert delivery.status is None
    assert delivery.error is not None
    assert delivery.error.startswith("ConnectTimeout")


def _free_loopback_port() -> int:
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_nothing_listening_on_loopback_is_unrouted(qstash: FakeQStash, client: QStash) -> None:
    # A dev PUBLIC_URL (http://localhost:8000) with no server behind it: the app under test
    # was meant to answer, so the test hears so at once instead of a message left retrying.
    port = _free_loopback_port()
    publish(client, f"http://127.0.0.1:{port}/hook", "x")

    with pytest.raises(UnroutedDeliveryError) as raised:
        qstash.tick()

    text = str(raised.value)
    assert f"http://127.0.0.1:{port}/hook" in text
    assert f"nothing listens at http://127.0.0.1:{port}: mount the app" in text
    assert "nothing is mounted" in text
    [message] = qstash.messages
    assert message.state == "CREATED"
    assert qstash.deliveries == []


@pytest.mark.qstash(strict=False)
def test_nothing_listening_on_loopback_not_strict_is_a_failed_attempt(
    qstash: FakeQStash, client: QStash
) -> None:
    port = _free_loopback_port()
    publish(client, f"http://localhost:{port}/hook", "x")

    [delivery] = qstash.tick()

    assert delivery.status is None
    assert delivery.error == f"unrouted: nothing listens at http://localhost:{port}: mount the app"
    assert qstash.messages[0].state == "RETRY"


@pytest.mark.asyncio
async def test_nothing_listening_on_loopback_is_unrouted_in_async_tests(
    qstash: FakeQStash, aclient: AsyncQStash
) -> None:
    port = _free_loopback_port()
    await apublish(aclient, f"http://localhost:{port}/hook", "x")

    with pytest.raises(UnroutedDeliveryError, match="nothing listens at"):
        await qstash.atick()


@pytest.mark.asyncio
async def test_async_unmounted_url_answered_by_respx_context(
    qstash: FakeQStash, aclient: AsyncQStash
) -> None:
    await apublish(aclient, "https://partner.test/hook", "to partner")

    with respx.mock() as router:
        route = router.post("https://partner.test/hook").respond(503)
        [delivery] = await qstash.atick()

    assert route.called
    assert delivery.status == 503
    assert qstash.messages[0].state == "RETRY"


def test_unrouted_delivery_is_an_error_and_the_message_is_kept(
    qstash: FakeQStash, client: QStash
) -> None:
    other = make_flask_app()
    qstash.mount("https://other.test", other.app)
    message_id = publish(client, f"{BASE}/webhook", "waiting")

    with pytest.raises(UnroutedDeliveryError) as info:
        qstash.tick()

    text = str(info.value)
    assert f"{BASE}/webhook" in text
    assert "https://other.test" in text
    assert message_id in text
    assert info.value.url == f"{BASE}/webhook"
    assert info.value.mounts == ["https://other.test"]
    assert qstash.messages[0].state == "CREATED"
    assert qstash.deliveries == []

    web = make_fastapi_app()
    qstash.mount(BASE, web.app)
    [delivery] = qstash.tick()
    assert delivery.status == 200
    assert [r.body for r in web.inbox.received] == ["waiting"]
    assert other.inbox.received == []


@pytest.mark.respx(assert_all_called=False)
def test_unrouted_when_the_users_respx_routes_do_not_match(
    qstash: FakeQStash, client: QStash, respx_mock: respx.MockRouter
) -> None:
    respx_mock.post("https://partner.test/other").respond(200)
    publish(client, "https://partner.test/hook")

    with pytest.raises(UnroutedDeliveryError, match="respx") as info:
        qstash.tick()

    assert info.value.url == "https://partner.test/hook"
    assert qstash.messages[0].state == "CREATED"


@pytest.mark.asyncio
async def test_async_unrouted_delivery(qstash: FakeQStash, aclient: AsyncQStash) -> None:
    await apublish(aclient, f"{BASE}/webhook", "kept")

    with pytest.raises(UnroutedDeliveryError, match="nothing is mounted"):
        await qstash.atick()

    web = make_starlette_app()
    qstash.mount(BASE, web.app)
    assert [d.status for d in await qstash.atick()] == [200]
    assert [r.body for r in web.inbox.received] == ["kept"]


@pytest.mark.qstash(strict=False)
def test_unrouted_delivery_is_a_failed_attempt_when_not_strict(
    qstash: FakeQStash, client: QStash
) -> None:
    publish(client, f"{BASE}/webhook")

    [delivery] = qstash.tick()

    assert delivery.status is None
    assert delivery.error is not None
    assert "unrouted" in delivery.error
    assert qstash.messages[0].state == "RETRY"


# -- failures --------------------------------------------------------------------------------
def test_http_error_is_a_failed_attempt_and_retried(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    publish(client, f"{BASE}/http-500")

    [first] = qstash.tick()

    assert first.status == 500
    [message] = qstash.messages
    assert (message.state, message.retried) == ("RETRY", 1)
    assert message.not_before - first.at == timedelta(milliseconds=12_182)
    assert qstash.tick() == []  # the retry waits for its backoff (12 s for the first)

    [second] = qstash.advance("13s")

    assert second.status == 500
    assert second.at - first.at == timedelta(milliseconds=12_182)
    assert [r.headers["upstash-retried"] for r in web.inbox.received] == ["0", "1"]
    assert message.retried == 2
    assert qstash.dlq == []


def test_non_retryable_489_fails_at_once(qstash: FakeQStash, client: QStash, web: WebApp) -> None:
    publish(client, f"{BASE}/reject")

    [delivery] = qstash.tick()

    assert delivery.status == 489
    assert qstash.messages[0].state == "FAILED"
    [entry] = qstash.dlq
    assert entry.message_id == qstash.messages[0].message_id
    assert entry.response_status == 489
    assert entry.response_body == "bad payload"
    assert qstash.advance("7d") == []
    assert len(web.inbox.received) == 1


def test_app_exception_is_a_500_attempt_and_reraised(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    publish(client, f"{BASE}/crash")

    with pytest.raises(RuntimeError, match="handler bug") as info:
        qstash.tick()

    # Re-raised with the app's own traceback, down to the handler that failed.
    assert "crash" in [entry.name for entry in info.traceback]
    [delivery] = qstash.deliveries
    assert delivery.status == 500
    assert delivery.error is not None
    assert "RuntimeError: handler bug" in delivery.error
    assert qstash.messages[0].state == "RETRY"
    assert len(web.inbox.received) == 1


@pytest.mark.asyncio
async def test_async_app_exception_is_reraised(
    qstash: FakeQStash, aclient: AsyncQStash, web: WebApp
) -> None:
    await apublish(aclient, f"{BASE}/crash")

    with pytest.raises(RuntimeError, match="handler bug"):
        await qstash.atick()

    assert [d.status for d in qstash.deliveries] == [500]


@pytest.mark.qstash(raise_app_exceptions=False)
def test_app_exception_kept_quiet_when_asked(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    publish(client, f"{BASE}/crash", retries=1)

    [first] = qstash.tick()
    [second] = qstash.advance("1m")

    assert (first.status, second.status) == (500, 500)
    assert qstash.messages[0].state == "FAILED"
    assert len(qstash.dlq) == 1


# -- cascades --------------------------------------------------------------------------------
def test_republish_cascade_is_delivered_in_the_same_tick(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    publish(client, f"{BASE}/republish?to={BASE}/webhook", "cascade")

    deliveries = qstash.tick()

    assert [d.status for d in deliveries] == [200, 200]
    assert web.inbox.routes == ["republish", "webhook"]
    assert [m.url for m in qstash.messages] == [
        f"{BASE}/republish?to={BASE}/webhook",
        f"{BASE}/webhook",
    ]
    assert {m.state for m in qstash.messages} == {"DELIVERED"}


@pytest.mark.asyncio
async def test_async_republish_cascade(
    qstash: FakeQStash, aclient: AsyncQStash, web: WebApp
) -> None:
    await apublish(aclient, f"{BASE}/republish?to={BASE}/webhook", "cascade")

    deliveries = await qstash.atick()

    assert len(deliveries) == 2
    assert web.inbox.routes == ["republish", "webhook"]


@pytest.mark.qstash(max_deliveries_per_instant=25)
def test_runaway_cascade_stops_with_a_loop_error(
    qstash: FakeQStash, client: QStash, web: WebApp
) -> None:
    publish(client, f"{BASE}/loop", "again")

    with pytest.raises(DeliveryLoopError, match="loop") as info:
        qstash.tick()

    assert f"{BASE}/loop" in str(info.value)
    assert len(qstash.deliveries) == 25


@pytest.mark.qstash(max_deliveries_per_instant=5)
def test_a_tests_own_loop_of_ticks_is_no_runaway(qstash: FakeQStash, client: QStash) -> None:
    # Many tick() calls at one instant are the test's doing, not a cascade: each counts afresh.
    qstash.mount(BASE, lambda request: None)
    for n in range(8):
        publish(client, f"{BASE}/{n}")
        assert len(qstash.tick()) == 1


@pytest.mark.qstash(max_deliveries_per_instant=5)
def test_many_independent_messages_due_at_once_are_no_runaway(
    qstash: FakeQStash, client: QStash
) -> None:
    # A burst the test itself published is not a cascade, however large.
    qstash.mount(BASE, lambda request: None)
    client.message.batch(
        [{"url": f"{BASE}/{n}", "body": str(n)} for n in range(50)]  # type: ignore[typeddict-item]
    )
    assert len(qstash.tick()) == 50


@pytest.mark.qstash(max_deliveries_per_instant=40)
def test_a_fan_out_that_feeds_itself_is_a_runaway(qstash: FakeQStash, client: QStash) -> None:
    # Each delivery publishes two more at once: the chains stay short (about log2 of the
    # deliveries), but the cascade never ends; it must stop at the limit, not at max per call.
    republisher = QStash(os.environ["QSTASH_TOKEN"], retry=False)

    def twice(request: httpx.Request) -> None:
        for _ in range(2):
            republisher.message.publish(url=str(request.url), body=request.content)

    qstash.mount(BASE, twice)
    publish(client, f"{BASE}/split")

    with pytest.raises(DeliveryLoopError, match="40 deliveries at the virtual instant"):
        qstash.tick()
    assert len(qstash.deliveries) == 40  # the first one, then 39 of its cascade


@pytest.mark.qstash(max_deliveries_per_instant=40)
def test_a_wide_fan_out_that_ends_is_no_runaway(qstash: FakeQStash, client: QStash) -> None:
    republisher = QStash(os.environ["QSTASH_TOKEN"], retry=False)

    def fan_out(request: httpx.Request) -> None:
        if request.url.path == "/start":
            for n in range(30):
                republisher.message.publish(url=f"{BASE}/leaf/{n}", body=b"leaf")

    qstash.mount(BASE, fan_out)
    publish(client, f"{BASE}/start")

    assert len(qstash.tick()) == 31


def test_runaway_cascade_default_limit(qstash: FakeQStash, client: QStash) -> None:
    republisher = QStash(os.environ["QSTASH_TOKEN"], retry=False)

    def forever(request: httpx.Request) -> None:
        republisher.message.publish(url=str(request.url), body=request.content)

    qstash.mount(BASE, forever)
    publish(client, f"{BASE}/forever")

    with pytest.raises(DeliveryLoopError):
        qstash.tick()

    assert len(qstash.deliveries) == 5000


@pytest.mark.asyncio
@pytest.mark.qstash(max_deliveries_per_instant=10)
async def test_async_runaway_cascade(qstash: FakeQStash, aclient: AsyncQStash, web: WebApp) -> None:
    await apublish(aclient, f"{BASE}/loop")

    with pytest.raises(DeliveryLoopError):
        await qstash.atick()
    # The messages are kept: the last one is still waiting.
    assert any(m.state == "CREATED" for m in qstash.messages)


def test_sync_ticks_keep_one_event_loop_for_the_app(qstash: FakeQStash, client: QStash) -> None:
    # An ASGI app keeps loop-bound things between requests (a client, a lock, a queue) and
    # fires tasks it does not wait for: both work across sync ticks, as on a server.
    app = fastapi.FastAPI()
    loops: list[object] = []
    done: list[str] = []
    state: dict[str, asyncio.Lock] = {}

    async def send_email(body: str) -> None:
        await asyncio.sleep(0)
        done.append(body)

    @app.post("/job")
    async def job(request: fastapi.Request) -> dict[str, bool]:
        lock = state.setdefault("lock", asyncio.Lock())  # bound to the loop it first runs on
        async with lock:
            loops.append(asyncio.get_running_loop())
        asyncio.get_running_loop().create_task(send_email((await request.body()).decode()))
        return {"ok": True}

    qstash.mount(BASE, app)
    for body in ("one", "two"):
        publish(client, f"{BASE}/job", body)
        [delivery] = qstash.tick()
        assert delivery.status == 200

    assert loops[0] is loops[1]
    assert done == ["one", "two"]


# -- what an app does around its answer ----------------------------------------------------------
def background_failing_app(done: list[str]) -> fastapi.FastAPI:
    app = fastapi.FastAPI()

    def audit() -> None:
        raise RuntimeError("audit log down")

    @app.post("/charge")
    async def charge(tasks: fastapi.BackgroundTasks) -> dict[str, bool]:
        done.append("charged")
        tasks.add_task(audit)  # runs after the response is sent
        return {"ok": True}

    return app


def test_an_error_after_the_response_keeps_the_answer(qstash: FakeQStash, client: QStash) -> None:
    # QStash got the 200: the message is delivered once; the background task's bug still
    # surfaces from tick(), as Starlette's TestClient raises it.
    done: list[str] = []
    qstash.mount(BASE, background_failing_app(done))
    publish(client, f"{BASE}/charge", "x")

    with pytest.raises(RuntimeError, match="audit log down"):
        qstash.tick()

    [message] = qstash.messages
    assert message.state == "DELIVERED"
    [delivery] = message.deliveries
    assert delivery.status == 200
    assert delivery.error == "RuntimeError: audit log down (raised after the response was sent)"
    assert qstash.advance("1d") == []
    assert done == ["charged"]  # not charged again by a retry


@pytest.mark.qstash(raise_app_exceptions=False)
def test_an_error_after_the_response_is_recorded_quietly_when_asked(
    qstash: FakeQStash, client: QStash
) -> None:
    done: list[str] = []
    qstash.mount(BASE, background_failing_app(done))
    publish(client, f"{BASE}/charge", "x")

    [delivery] = qstash.tick()

    assert (delivery.status, qstash.messages[0].state) == (200, "DELIVERED")


def test_a_cancelled_delivery_leaves_the_message_due(qstash: FakeQStash, client: QStash) -> None:
    app = fastapi.FastAPI()

    @app.post("/job")
    async def job() -> None:
        raise asyncio.CancelledError  # not an app error: nothing was answered

    qstash.mount(BASE, app)
    publish(client, f"{BASE}/job", "x")
    with pytest.raises(asyncio.CancelledError):
        qstash.tick()

    [message] = qstash.messages
    assert message.state == "CREATED"  # not stuck ACTIVE
    assert [e.state for e in qstash.events] == ["CREATED"]  # no attempt happened
    qstash.mount(BASE, lambda request: None)
    [delivery] = qstash.tick()
    assert delivery.status == 200


@pytest.mark.asyncio
async def test_a_fire_and_forget_publish_is_there_when_atick_returns(
    qstash: FakeQStash, aclient: AsyncQStash
) -> None:
    app = fastapi.FastAPI()
    background: set[asyncio.Task[object]] = set()

    @app.post("/signup")
    async def signup() -> None:
        task = asyncio.create_task(aclient.message.publish(url=f"{BASE}/welcome", body="hi"))
        background.add(task)  # not awaited: the handler answers at once

    qstash.mount(BASE, app)
    qstash.mount(f"{BASE}/welcome", lambda request: None)
    await apublish(aclient, f"{BASE}/signup")

    deliveries = await qstash.atick()

    assert [d.url for d in deliveries] == [f"{BASE}/signup", f"{BASE}/welcome"]


@pytest.mark.parametrize("raise_app_exceptions", [True, False])
def test_ticking_from_inside_a_delivery_is_refused(
    client: QStash, raise_app_exceptions: bool
) -> None:
    # What an "eager" helper ends up doing: deliveries would nest and run out of time order.
    # A misuse of the fake, not an app failure: raised whatever raise_app_exceptions says.
    with FakeQStash(raise_app_exceptions=raise_app_exceptions) as qstash:

        def eager(request: httpx.Request) -> None:
            qstash.advance("1h")

        qstash.mount(BASE, eager)
        publish(client, f"{BASE}/job", "x")
        before = qstash.now

        with pytest.raises(ReentrantCallError, match=r"from inside a delivery"):
            qstash.tick()
        assert qstash.now == before  # the clock did not jump
        assert qstash.deliveries == []  # no attempt was made of it
        assert qstash.messages[0].state == "CREATED"  # due again


def test_ticking_from_an_async_handler_says_reentrant_not_async(
    qstash: FakeQStash, client: QStash
) -> None:
    app = fastapi.FastAPI()

    @app.post("/job")
    async def job() -> None:
        qstash.tick()

    qstash.mount(BASE, app)
    publish(client, f"{BASE}/job", "x")
    with pytest.raises(ReentrantCallError):
        qstash.tick()


class _SlowServer:
    """A real HTTP server on a loopback port that answers after ``delay_s`` of real time (or
    as soon as the test lets it go)."""

    def __init__(self, delay_s: float) -> None:
        import http.server
        import threading

        release = self.release = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                release.wait(delay_s)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slow_server() -> object:
    server = _SlowServer(delay_s=10)
    yield server
    server.close()


def test_a_real_server_gets_the_messages_timeout(
    qstash: FakeQStash, client: QStash, slow_server: _SlowServer
) -> None:
    # QStash waits for an endpoint as long as Upstash-Timeout says, then cuts the attempt and
    # retries; httpx's own 5 s default played no part in it.
    publish(client, f"{slow_server.url}/hook", "x", timeout="1s", retries=1)

    [delivery] = qstash.tick()

    assert delivery.status is None
    assert delivery.error == (
        f'Post "{slow_server.url}/hook": context deadline exceeded '
        "(Client.Timeout exceeded while awaiting headers)"
    )
    assert qstash.messages[0].state == "RETRY"


@pytest.mark.qstash(delivery_timeout=0.3)
def test_a_real_server_is_waited_for_no_longer_than_the_delivery_timeout(
    qstash: FakeQStash, client: QStash, slow_server: _SlowServer
) -> None:
    # No Upstash-Timeout: the plan's maximum (hours) is QStash's deadline; a test waits no
    # longer than delivery_timeout for a real server.
    publish(client, f"{slow_server.url}/hook", "x")

    [delivery] = qstash.tick()

    assert delivery.status is None
    assert delivery.error is not None
    assert "context deadline exceeded" in delivery.error


def test_telling_a_django_handler_apart_imports_no_django() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from starlette.applications import Starlette\n"
        "from pytest_qstash.delivery.mounts import MountTable\n"
        "mount = MountTable().add('https://a.test', Starlette())\n"
        "assert (mount.kind, mount.django) == ('asgi', False)\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'django'], 'django imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
