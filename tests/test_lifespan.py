"""ASGI lifespan for mounted apps: startup at mount (or when the fake starts), shutdown at stop."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from fastapi import FastAPI, Request
from qstash import AsyncQStash, QStash
from starlette.applications import Starlette
from starlette.requests import Request as StarletteRequest
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from pytest_qstash import FakeQStash, LifespanError, QStashFakeError, UnroutedDeliveryError

BASE = "https://life.test"


def make_app(events: list[str]) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        events.append("startup")
        app.state.db = {"jobs": []}
        yield {"greeting": "hello from lifespan"}
        events.append("shutdown")

    app = FastAPI(lifespan=lifespan)

    @app.post("/job")
    async def job(request: Request) -> dict[str, str]:
        # Both ways a lifespan hands resources to requests: app.state and the state dict.
        request.app.state.db["jobs"].append((await request.body()).decode())
        return {"greeting": request.state.greeting}

    return app


def test_lifespan_runs_once_around_deliveries() -> None:
    events: list[str] = []
    app = make_app(events)
    with FakeQStash() as qstash:
        qstash.mount(BASE, app, lifespan=True)
        client = QStash(os.environ["QSTASH_TOKEN"], retry=False)
        assert events == ["startup"]  # at mount, as a server starts the app before serving

        client.message.publish(url=f"{BASE}/job", body="one")
        client.message.publish(url=f"{BASE}/job", body="two")
        deliveries = qstash.tick()

        assert [d.status for d in deliveries] == [200, 200]
        assert deliveries[0].response_body == '{"greeting":"hello from lifespan"}'
        assert app.state.db == {"jobs": ["one", "two"]}
        assert events == ["startup"]
    assert events == ["startup", "shutdown"]


def test_without_lifespan_the_app_is_not_started(qstash: FakeQStash, client: QStash) -> None:
    events: list[str] = []
    qstash.mount(BASE, make_app(events))
    client.message.publish(url=f"{BASE}/job", body="x")
    with pytest.raises(AttributeError):
        qstash.tick()  # the handler reads app.state.db, which only the lifespan sets
    assert events == []


@pytest.mark.asyncio
async def test_lifespan_app_in_an_async_test() -> None:
    events: list[str] = []
    app = make_app(events)
    async with FakeQStash() as qstash:
        qstash.mount(BASE, app, lifespan=True)
        client = AsyncQStash(os.environ["QSTASH_TOKEN"], retry=False)
        await client.message.publish(url=f"{BASE}/job", body="async")
        [delivery] = await qstash.atick()
        assert delivery.status == 200
        assert app.state.db == {"jobs": ["async"]}
    assert events == ["startup", "shutdown"]


def test_failed_startup_is_raised_from_mount(qstash: FakeQStash, client: QStash) -> None:
    @asynccontextmanager
    async def broken(app: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("database unreachable")
        yield  # pragma: no cover

    with pytest.raises(LifespanError) as info:
        qstash.mount(BASE, Starlette(lifespan=broken), lifespan=True)

    # One line saying what failed; the app's own exception, with its traceback, is the cause.
    assert str(info.value) == (
        f"startup of the app at {BASE} failed: RuntimeError: database unreachable"
    )
    assert isinstance(info.value.__cause__, RuntimeError)
    assert isinstance(info.value, QStashFakeError)
    assert qstash.mounts.base_urls == []  # nothing half-mounted
    client.message.publish(url=f"{BASE}/job", body="x")
    with pytest.raises(UnroutedDeliveryError):
        qstash.tick()
    assert qstash.messages[0].state == "CREATED"  # not lost


def test_schedules_created_at_startup_exist_before_the_test_moves_time() -> None:
    # A common pattern: the app registers its crons when it starts.
    fired: list[str] = []

    @asynccontextmanager
    async def register(app: Starlette) -> AsyncIterator[None]:
        client = QStash(os.environ["QSTASH_TOKEN"], retry=False)
        client.schedule.create(destination=f"{BASE}/nightly", cron="0 3 * * *")
        yield

    async def nightly(request: StarletteRequest) -> PlainTextResponse:
        fired.append(request.url.path)
        return PlainTextResponse("ok")

    app = Starlette(lifespan=register, routes=[Route("/nightly", nightly, methods=["POST"])])
    fake = FakeQStash(start="2026-01-01T00:00:00Z")
    fake.mount(BASE, app, lifespan=True)  # before the fake starts: started with it
    with fake:
        assert len(fake.schedules) == 1
        fake.advance("2d")
    assert fired == ["/nightly", "/nightly"]


def test_lifespan_needs_an_asgi_app(qstash: FakeQStash) -> None:
    with pytest.raises(ValueError, match="lifespan=True needs an ASGI app"):
        qstash.mount(BASE, lambda request: None, lifespan=True)


def test_replacing_or_unmounting_a_lifespan_app_shuts_it_down() -> None:
    # An autouse fixture mounts the app; a test mounts a freshly built one at the same URL:
    # the first must shut down (its lifespan left waiting would hang the fake's stop).
    def make(name: str, events: list[str]) -> Starlette:
        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            events.append(f"startup {name}")
            yield
            events.append(f"shutdown {name}")

        return Starlette(lifespan=lifespan)

    events: list[str] = []
    with FakeQStash() as qstash:
        qstash.mount(BASE, make("A", events), lifespan=True)
        qstash.mount(BASE, make("B", events), lifespan=True)
        assert events == ["startup A", "shutdown A", "startup B"]
        qstash.unmount(BASE)
        assert events[-1] == "shutdown B"
        qstash.mount(BASE, make("C", events), lifespan=True)
    assert events[-2:] == ["startup C", "shutdown C"]


def test_the_lifespan_runs_on_the_fakes_loop_and_nothing_of_it_outlives_the_fake() -> None:
    # No thread of its own (the cost of one per test): the fake's loop, in a sync test the
    # test's thread; what the app left running on it is cancelled when the fake stops.
    seen: list[int] = []
    cancelled: list[str] = []

    def make(name: str) -> Starlette:
        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async def forgotten() -> None:  # started, never stopped by the app
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    cancelled.append(name)
                    raise

            asyncio.get_running_loop().create_task(forgotten())
            seen.append(threading.get_ident())
            yield

        return Starlette(lifespan=lifespan)

    with FakeQStash() as first:
        first.mount(BASE, make("first"), lifespan=True)
    assert cancelled == ["first"]
    with FakeQStash() as second:
        second.mount(BASE, make("second"), lifespan=True)
        assert cancelled == ["first"]
    assert cancelled == ["first", "second"]
    assert seen == [threading.get_ident()] * 2


@pytest.mark.asyncio
async def test_a_lifespan_mounted_and_stopped_inside_an_async_test() -> None:
    # mount() and stop() inside a running loop: the fake's own loop runs in a helper thread.
    events: list[str] = []
    app = make_app(events)
    async with FakeQStash() as qstash:
        qstash.mount(BASE, app, lifespan=True)
        assert events == ["startup"]
        await AsyncQStash(os.environ["QSTASH_TOKEN"], retry=False).message.publish(
            url=f"{BASE}/job", body="inside"
        )
        [delivery] = await qstash.atick()
        assert delivery.status == 200
        assert app.state.db == {"jobs": ["inside"]}
    assert events == ["startup", "shutdown"]


def test_a_job_handed_to_a_lifespan_worker_is_done_when_tick_returns(
    qstash: FakeQStash, client: QStash
) -> None:
    # The handler answers 202 at once; the lifespan's worker does the job on the fake's loop,
    # which gets a few passes after the delivery, as a server's loop would go on running.
    done: list[str] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        jobs: asyncio.Queue[str] = asyncio.Queue()

        async def worker() -> None:
            while True:
                done.append(await jobs.get())

        task = asyncio.create_task(worker())
        yield {"jobs": jobs}
        task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.post("/enqueue", status_code=202)
    async def enqueue(request: Request) -> None:
        request.state.jobs.put_nowait((await request.body()).decode())

    qstash.mount(BASE, app, lifespan=True)
    client.message.publish(url=f"{BASE}/enqueue", body="job-1")

    [delivery] = qstash.tick()

    assert delivery.status == 202
    assert done == ["job-1"]
