"""Only QStash hosts are intercepted; everything else goes where it would have gone."""

from __future__ import annotations

import os
import time

import httpx
import pytest
import respx
from apps import make_fastapi_app
from pytest_httpx import HTTPXMock
from qstash import AsyncQStash, QStash

from pytest_qstash import FakeQStash, UnroutedDeliveryError

APP = "https://app.test"
OTHER = "https://api.other.test"


def token() -> str:
    return os.environ["QSTASH_TOKEN"]


# -- side by side with the user's own mocks ----------------------------------------------------
def test_users_respx_route_answers_other_hosts(
    qstash: FakeQStash, client: QStash, respx_mock: respx.MockRouter
) -> None:
    route = respx_mock.get(f"{OTHER}/users/1").respond(200, json={"name": "ada"})

    assert httpx.get(f"{OTHER}/users/1").json() == {"name": "ada"}
    client.message.publish(url=f"{APP}/x", body="to the fake")

    assert route.call_count == 1
    assert len(respx_mock.calls) == 1  # the QStash call never reached the user's router
    assert [m.body for m in qstash.messages] == ["to the fake"]


def test_users_respx_router_started_first(
    respx_mock: respx.MockRouter, qstash: FakeQStash, client: QStash
) -> None:
    route = respx_mock.post(f"{OTHER}/events").respond(201)

    assert httpx.post(f"{OTHER}/events", json={}).status_code == 201
    client.message.publish(url=f"{APP}/x", body="b")

    assert route.called
    assert len(qstash.messages) == 1


@pytest.mark.parametrize("order", ["respx first", "qstash first"])
@pytest.mark.respx(using="httpx")
def test_users_respx_router_on_the_same_httpx_mocker(
    request: pytest.FixtureRequest, order: str, client: QStash
) -> None:
    # respx's "httpx" mocker is the one our router sits on: the two routers share it.
    names = ["respx_mock", "qstash"] if order == "respx first" else ["qstash", "respx_mock"]
    fixtures = {name: request.getfixturevalue(name) for name in names}
    respx_mock: respx.MockRouter = fixtures["respx_mock"]
    qstash: FakeQStash = fixtures["qstash"]
    respx_mock.get(f"{OTHER}/x").respond(200, text="mine")
    respx_mock.post("https://partner.test/hook").respond(200, text="hooked")

    assert httpx.get(f"{OTHER}/x").text == "mine"
    client.message.publish(url="https://partner.test/hook", body="b")
    [delivery] = qstash.tick()

    assert len(qstash.messages) == 1
    assert delivery.response_body == "hooked"


@pytest.mark.asyncio
async def test_async_clients_with_a_respx_context(qstash: FakeQStash, aclient: AsyncQStash) -> None:
    with respx.mock(assert_all_called=True) as router:
        router.get(f"{OTHER}/ping").respond(200, text="pong")
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{OTHER}/ping")).text == "pong"
        await aclient.message.publish(url=f"{APP}/x", body="async")

    assert [m.body for m in qstash.messages] == ["async"]


def test_pytest_httpx_side_by_side(
    qstash: FakeQStash, client: QStash, httpx_mock: HTTPXMock
) -> None:
    httpx_mock.add_response(url=f"{OTHER}/rates", json={"eur": 1})
    httpx_mock.add_response(url="https://partner.test/hook", text="received")

    with httpx.Client() as http:
        assert http.get(f"{OTHER}/rates").json() == {"eur": 1}
    client.message.publish(url="https://partner.test/hook", body="hello partner")
    assert len(qstash.messages) == 1

    # An unmounted destination is sent through httpx, so pytest-httpx answers it too.
    [delivery] = qstash.tick()

    assert delivery.status == 200
    assert delivery.response_body == "received"
    hook = httpx_mock.get_request(url="https://partner.test/hook")
    assert hook is not None
    assert hook.content == b"hello partner"
    assert "upstash-signature" in hook.headers
    # pytest-httpx saw only non-QStash requests.
    assert all(r.url.host != "qstash.upstash.io" for r in httpx_mock.get_requests())


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_starlette_test_client_passes_through(qstash: FakeQStash, client: QStash) -> None:
    from fastapi.testclient import TestClient

    web = make_fastapi_app()
    qstash.mount(APP, web.app)
    with TestClient(web.app) as test_client:
        # An unsigned request straight to the app: the app's own check refuses it.
        assert test_client.post("/webhook", content=b"forged").status_code == 401
    client.message.publish(url=f"{APP}/webhook", body="signed")

    assert [d.status for d in qstash.tick()] == [200]
    assert [r.body for r in web.inbox.received] == ["signed"]
    assert len(web.inbox.signature_errors) == 1


# -- which hosts are QStash --------------------------------------------------------------------
@pytest.mark.parametrize(
    "base_url",
    ["https://qstash-us-east-1.upstash.io", "https://qstash-eu-central-1.upstash.io"],
)
def test_regional_hosts_are_intercepted(qstash: FakeQStash, base_url: str) -> None:
    regional = QStash(token(), base_url=base_url, retry=False)

    regional.message.publish(url=f"{APP}/x", body="regional")

    assert [m.body for m in qstash.messages] == ["regional"]


def test_qstash_url_host_is_intercepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QSTASH_URL", "https://qstash.internal.test:8443")
    # The fake reads QSTASH_URL when built, as the SDK reads it when the client is built.
    with FakeQStash() as fake:
        client = QStash(token(), retry=False)
        assert client.http._base_url == "https://qstash.internal.test:8443"

        client.message.publish(url=f"{APP}/x", body="via QSTASH_URL")

    assert [m.body for m in fake.messages] == ["via QSTASH_URL"]


@pytest.mark.qstash(base_urls=["http://localhost:8080"])
def test_extra_base_urls_from_the_marker(qstash: FakeQStash) -> None:
    # e.g. a suite whose clients point at the local QStash dev server
    local = QStash(token(), base_url="http://localhost:8080", retry=False)

    local.message.publish(url=f"{APP}/x", body="local")

    assert [m.body for m in qstash.messages] == ["local"]


@pytest.mark.parametrize(
    ("configured", "client_url"),
    [
        ("https://qstash.internal.test:443", "https://qstash.internal.test"),
        ("https://qstash.internal.test", "https://qstash.internal.test:443"),
        ("http://qstash.internal.test:80", "http://qstash.internal.test"),
    ],
)
def test_an_explicit_default_port_is_the_same_base(
    monkeypatch: pytest.MonkeyPatch, configured: str, client_url: str
) -> None:
    monkeypatch.setenv("QSTASH_URL", configured)
    with FakeQStash() as fake, respx.mock(assert_all_called=False) as network:
        escaped = network.route().respond(599)  # stands in for the real network
        QStash(token(), base_url=client_url, retry=False).message.publish(
            url=f"{APP}/x", body="default port"
        )

    assert not escaped.called
    assert [m.body for m in fake.messages] == ["default port"]


@pytest.mark.qstash(base_urls=["http://127.0.0.1"])
def test_a_base_url_without_port_does_not_claim_other_ports(qstash: FakeQStash) -> None:
    # http://127.0.0.1 is port 80: a loopback server of the test's on another port is not ours.
    with respx.mock() as router:
        server = router.get("http://127.0.0.1:8123/health").respond(200, text="up")
        assert httpx.get("http://127.0.0.1:8123/health").text == "up"
    assert server.called
    assert qstash.messages == []


@pytest.mark.qstash(base_urls=["https://gateway.test/qstash"])
def test_a_base_url_with_a_path_prefix(qstash: FakeQStash) -> None:
    gateway = QStash(token(), base_url="https://gateway.test/qstash", retry=False)

    gateway.message.publish(url=f"{APP}/x", body="through the gateway")
    [message] = qstash.messages
    assert gateway.message.get(message.message_id).body == "through the gateway"

    # Other paths on the gateway's host are not QStash's.
    with respx.mock() as router:
        other = router.get("https://gateway.test/other-service").respond(200, text="other")
        assert httpx.get("https://gateway.test/other-service").text == "other"
    assert other.called


@pytest.mark.parametrize("bad", ["ftp://qstash.test", "not a url", "https://"])
def test_a_bad_base_url_is_refused_at_once(bad: str) -> None:
    with pytest.raises(ValueError, match="not a QStash base URL"):
        FakeQStash(base_urls=[bad])


def test_lookalike_hosts_are_not_intercepted(qstash: FakeQStash) -> None:
    with respx.mock() as router:
        lookalike = router.post(host="qstash.upstash.io.evil.test").respond(200, json={})
        other_upstash = router.get(host="console.upstash.io").respond(200)
        httpx.post("https://qstash.upstash.io.evil.test/v2/publish/https://a.test/x")
        httpx.get("https://console.upstash.io/")

    assert lookalike.called
    assert other_upstash.called
    assert qstash.messages == []


# -- without pytest ----------------------------------------------------------------------------
def test_sync_context_manager() -> None:
    seen: list[bytes] = []
    with FakeQStash(start="2026-01-01T00:00:00Z") as fake:
        assert fake.active
        fake.mount(APP, lambda request: seen.append(request.content))
        QStash(token(), retry=False).message.publish(url=f"{APP}/x", body="ctx", delay="1m")
        assert time.time() == fake.now.timestamp()  # the app clock follows the fake
        assert [d.body for d in fake.advance("1m")] == ["ctx"]

    assert not fake.active
    assert seen == [b"ctx"]
    assert time.time() > fake.now.timestamp() + 86_400  # the real clock is back


@pytest.mark.asyncio
async def test_async_context_manager() -> None:
    seen: list[bytes] = []
    async with FakeQStash() as fake:
        fake.mount(APP, lambda request: seen.append(request.content))
        await AsyncQStash(token(), retry=False).message.publish(url=f"{APP}/x", body="actx")
        assert [d.status for d in await fake.atick()] == [200]

    assert not fake.active
    assert seen == [b"actx"]


def test_nothing_is_intercepted_after_exit() -> None:
    with FakeQStash() as fake:
        pass
    client = QStash(token(), retry=False)

    with respx.mock() as router:
        route = router.post(url__startswith="https://qstash.upstash.io/v2/publish/").respond(
            200, json={"messageId": "msg_from_my_own_route"}
        )
        response = client.message.publish(url=f"{APP}/x", body="after exit")

    assert route.called
    assert response.message_id == "msg_from_my_own_route"  # type: ignore[union-attr]
    assert fake.messages == []


def test_stop_is_idempotent_and_restartable() -> None:
    fake = FakeQStash()
    fake.stop()  # never started: nothing to undo
    with fake:
        QStash(token(), retry=False).message.publish(url=f"{APP}/x", body="1")
    fake.stop()
    with fake:
        QStash(token(), retry=False).message.publish(url=f"{APP}/x", body="2")

    assert [m.body for m in fake.messages] == ["1", "2"]


def test_an_unrouted_delivery_beside_pytest_httpx_is_only_the_fakes_error(
    qstash: FakeQStash, client: QStash, httpx_mock: HTTPXMock
) -> None:
    # pytest-httpx is asked whether it answers the delivery; it does not, so the test sees
    # UnroutedDeliveryError, and pytest-httpx has no "unexpected request" left for teardown.
    httpx_mock.add_response(url="https://partner.test/hook", text="received")
    client.message.publish(url="https://nobody.test/x", body="lost?")

    with pytest.raises(UnroutedDeliveryError, match="pytest-httpx has no response"):
        qstash.tick()

    assert qstash.messages[0].state == "CREATED"  # kept, still due
    client.message.publish(url="https://partner.test/hook", body="answered")
    qstash.mount("https://nobody.test", lambda request: None)
    assert sorted(d.url for d in qstash.tick()) == [
        "https://nobody.test/x",
        "https://partner.test/hook",
    ]


# -- between fakes: respx's httpx patch stays for the session, answering nothing -----------------
def test_without_a_fake_pytest_httpx_answers_as_ever(httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(url=f"{OTHER}/users/1", json={"by": "pytest-httpx"})

    assert httpx.get(f"{OTHER}/users/1").json() == {"by": "pytest-httpx"}


def test_without_a_fake_a_respx_route_answers_as_ever(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.get(f"{OTHER}/users/1").respond(json={"by": "respx"})

    assert httpx.get(f"{OTHER}/users/1").json() == {"by": "respx"}
    assert route.call_count == 1


def test_without_a_fake_an_unmocked_request_reaches_its_transport() -> None:
    seen: list[str] = []

    def app(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text="real transport")

    with httpx.Client(transport=httpx.MockTransport(app)) as client:
        assert client.get(f"{OTHER}/users/1").text == "real transport"
    assert seen == [f"{OTHER}/users/1"]


# -- routers reused from one fake to the next ---------------------------------------------------
def test_a_reused_router_answers_only_its_new_fake() -> None:
    # A stopped fake's router serves the next fake: it must carry nothing over (no calls, no
    # API of the fake before), and fakes active at once each have their own.
    client = QStash(token())
    first = FakeQStash(seed="first")
    with first:
        client.message.publish(url=f"{APP}/one", body="to the first")
        first_router = first.router
        assert len(first_router.calls) == 1
    second = FakeQStash(seed="second")
    with second:
        assert second.router is first_router  # built once, reused
        assert len(second.router.calls) == 0
        client.message.publish(url=f"{APP}/two", body="to the second")
        with FakeQStash(seed="inner") as inner:
            assert inner.router is not second.router
            client.message.publish(url=f"{APP}/three", body="to the inner")
        client.message.publish(url=f"{APP}/four", body="to the second again")

    assert [m.body for m in first.messages] == ["to the first"]
    assert [m.body for m in second.messages] == ["to the second", "to the second again"]
    assert [m.body for m in inner.messages] == ["to the inner"]
    assert not first.active
    assert not second.active
