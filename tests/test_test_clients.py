"""Mounting a test client: deliveries go through it, to where the test's own requests go.

The lifespan tests are the point: an app whose lifespan starts a worker on its loop only
answers requests made on that loop, which a ``TestClient`` inside its ``with`` block gives.
"""

from __future__ import annotations

import asyncio
import json
import os
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import flask
import httpx
import pytest
from apps import FACTORIES, WebApp
from fastapi import FastAPI, Request
from qstash import AsyncQStash, QStash

with warnings.catch_warnings():
    # Recent Starlette asks TestClient users to move to the httpx2 package; not our concern.
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

from pytest_qstash import FakeQStash

BASE = "https://clients.test"
URL = f"{BASE}/webhook?order=42&note=a%20b"


# -- how a test reaches the app: each builds the client and yields what to mount ----------------
def _starlette_with(app: Any) -> Iterator[Any]:
    with TestClient(app) as client:
        yield client


def _starlette_without(app: Any) -> Iterator[Any]:
    yield TestClient(app)  # outside `with`: no lifespan, as for its own requests


def _httpx_async(app: Any) -> Iterator[Any]:
    yield httpx.AsyncClient(transport=httpx.ASGITransport(app=app))


def _httpx_wsgi(app: Any) -> Iterator[Any]:
    with httpx.Client(transport=httpx.WSGITransport(app=app)) as client:
        yield client


def _flask_client(app: Any) -> Iterator[Any]:
    yield app.test_client()


CLIENTS: dict[str, tuple[str, Callable[[Any], Iterator[Any]]]] = {
    "fastapi-testclient": ("fastapi", _starlette_with),
    "starlette-testclient": ("starlette", _starlette_with),
    "starlette-testclient-outside-with": ("starlette", _starlette_without),
    "fastapi-httpx-asyncclient": ("fastapi", _httpx_async),
    "flask-test-client": ("flask", _flask_client),
    "flask-httpx-client": ("flask", _httpx_wsgi),
}


@pytest.fixture(params=sorted(CLIENTS))
def mounted(request: pytest.FixtureRequest, qstash: FakeQStash) -> Iterator[WebApp]:
    framework, build = CLIENTS[request.param]
    web = FACTORIES[framework]()
    clients = build(web.app)
    qstash.mount(BASE, next(clients))
    yield web
    for _ in clients:  # leave the client's `with` block
        pass


def _check_received(web: WebApp, message_id: str) -> None:
    assert web.inbox.signature_errors == []
    [got] = web.hits
    assert got.url == URL  # the whole URL, query included: what the signature covers
    assert got.method == "PUT"
    assert got.body == "the body"
    assert got.headers["x-custom"] == "forwarded"
    assert got.headers["upstash-message-id"] == message_id
    assert got.headers["user-agent"] == "Upstash-QStash"


def test_a_delivery_goes_through_the_mounted_client(
    qstash: FakeQStash, client: QStash, mounted: WebApp
) -> None:
    assert qstash.mounts.resolve(URL).kind == "client"  # type: ignore[union-attr]
    published = client.message.publish(
        url=URL, body="the body", method="PUT", headers={"X-Custom": "forwarded"}
    )

    [delivery] = qstash.tick()

    assert (delivery.status, delivery.response_body) == (200, "ok")
    _check_received(mounted, published.message_id)  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_a_delivery_goes_through_the_mounted_client_in_async_tests(
    qstash: FakeQStash, aclient: AsyncQStash, mounted: WebApp
) -> None:
    published = await aclient.message.publish(
        url=URL, body="the body", method="PUT", headers={"X-Custom": "forwarded"}
    )

    [delivery] = await qstash.atick()

    assert (delivery.status, delivery.response_body) == (200, "ok")
    _check_received(mounted, published.message_id)  # type: ignore[union-attr]


def test_failures_through_a_client_are_attempts_as_for_an_app(
    qstash: FakeQStash, client: QStash, mounted: WebApp
) -> None:
    client.message.publish(url=f"{BASE}/http-500", body="x")
    client.message.publish(url=f"{BASE}/crash", body="x")

    with pytest.raises(RuntimeError):  # the handler's exception, raised through the client
        qstash.tick()
    qstash.tick()  # what was left after the exception

    statuses = {d.url.rsplit("/", 1)[1]: d.status for d in qstash.deliveries}
    assert statuses == {"http-500": 500, "crash": 500}
    assert [m.state for m in qstash.messages] == ["RETRY", "RETRY"]


# -- an app with a lifespan: the TestClient pattern ---------------------------------------------
def make_worker_app(started: list[str]) -> FastAPI:
    """A lifespan that starts a worker task on its loop; the handler hands it a job and awaits
    the answer: only requests on the lifespan's own loop are ever answered."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        jobs: asyncio.Queue[tuple[str, asyncio.Future[str]]] = asyncio.Queue()

        async def worker() -> None:
            while True:
                body, answer = await jobs.get()
                answer.set_result(body.upper())

        task = asyncio.create_task(worker())
        started.append("startup")
        yield {"jobs": jobs}
        task.cancel()
        started.append("shutdown")

    app = FastAPI(lifespan=lifespan)

    @app.post("/job")
    async def job(request: Request) -> dict[str, str]:
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        await request.state.jobs.put(((await request.body()).decode(), answer))
        return {"done": await answer}

    return app


def test_testclient_with_a_lifespan_worker(qstash: FakeQStash, client: QStash) -> None:
    started: list[str] = []
    with TestClient(make_worker_app(started)) as app_client:
        qstash.mount(BASE, app_client)
        assert app_client.post("/job", content="own").json() == {"done": "OWN"}
        client.message.publish(url=f"{BASE}/job", body="one")
        client.message.publish(url=f"{BASE}/job", body="two")

        deliveries = qstash.tick()

        assert [(d.status, json.loads(d.response_body)) for d in deliveries] == [
            (200, {"done": "ONE"}),
            (200, {"done": "TWO"}),
        ]
        assert started == ["startup"]  # the TestClient's lifespan: the fake started none
    assert started == ["startup", "shutdown"]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.mark.anyio
async def test_testclient_with_a_lifespan_worker_in_async_tests(
    qstash: FakeQStash, anyio_backend: str
) -> None:
    # A sync TestClient in an async test: deliveries go to its portal from a worker thread,
    # so the test's loop (asyncio or trio) stays free.
    aclient = AsyncQStash(os.environ["QSTASH_TOKEN"], retry=False)
    with TestClient(make_worker_app([])) as app_client:
        qstash.mount(BASE, app_client)
        await aclient.message.publish(url=f"{BASE}/job", body="async")

        [delivery] = await qstash.atick()

        assert (delivery.status, json.loads(delivery.response_body)) == (200, {"done": "ASYNC"})


def test_an_httpx_asyncclient_in_a_sync_test_runs_on_the_fakes_loop(
    qstash: FakeQStash, client: QStash
) -> None:
    # An AsyncClient in a sync test: its deliveries run on the fake's own loop.
    app = make_worker_app([])
    qstash.mount(BASE, httpx.AsyncClient(transport=httpx.ASGITransport(app=app)))
    client.message.publish(url=f"{BASE}/job", body="x")

    with pytest.raises(AttributeError):  # ASGITransport runs no lifespan: no state.jobs
        qstash.tick()


def test_an_httpx_transport_error_is_a_failed_attempt(qstash: FakeQStash, client: QStash) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    qstash.mount(BASE, httpx.Client(transport=httpx.MockTransport(refuse)))
    client.message.publish(url=f"{BASE}/hook", body="x")

    [delivery] = qstash.tick()

    assert delivery.status is None
    assert delivery.error == "ConnectError: refused"
    assert qstash.messages[0].state == "RETRY"


# -- what cannot be mounted --------------------------------------------------------------------
def test_an_httpx_client_without_a_transport_is_refused(qstash: FakeQStash) -> None:
    with (
        httpx.Client() as network_client,
        pytest.raises(ValueError, match="no transport of its own"),
    ):
        qstash.mount(BASE, network_client)
    assert qstash.mounts.base_urls == []


def test_a_testclient_with_lifespan_true_says_the_client_runs_it(qstash: FakeQStash) -> None:
    with pytest.raises(ValueError, match="a TestClient runs the app's lifespan itself"):
        qstash.mount(BASE, TestClient(FastAPI()), lifespan=True)


@pytest.mark.parametrize(
    ("app", "kind", "looks_like"),
    [
        (FastAPI(), "wsgi", "ASGI"),
        (flask.Flask(__name__), "asgi", "WSGI"),
        (flask.Flask(__name__).test_client(), "wsgi", "a test client"),
    ],
    ids=["fastapi-as-wsgi", "flask-as-asgi", "client-as-wsgi"],
)
def test_a_kind_the_app_contradicts_is_refused_at_mount(
    qstash: FakeQStash, app: Any, kind: str, looks_like: str
) -> None:
    with pytest.raises(ValueError, match=f"with kind={kind!r}: it looks like {looks_like}"):
        qstash.mount(BASE, app, kind=kind)
    assert qstash.mounts.base_urls == []


def test_kind_client_for_what_is_no_client_is_refused(qstash: FakeQStash) -> None:
    with pytest.raises(ValueError, match="it is no test client"):
        qstash.mount(BASE, lambda request: 200, kind="client")
