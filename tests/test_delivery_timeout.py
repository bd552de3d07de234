"""Nothing hangs: every delivery is bounded in real time, and a stuck one is reported early.

Timeouts here are a fraction of a second (``delivery_timeout=0.2``), and the stall grace is
shortened where the test is not about it, so the suite stays fast.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import flask
import pytest
from fastapi import FastAPI, Request
from inner_pytest import run_inner
from qstash import AsyncQStash, QStash

from pytest_qstash import DeliveryTimeoutError, FakeQStash, QStashFakeError
from pytest_qstash.delivery import loop_watch

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

BASE = "https://slow.test"


def make_worker_app() -> FastAPI:
    """The pattern that used to hang: a lifespan worker on the lifespan's loop answers the
    handler through a future; called on any other loop, nothing ever answers."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        jobs: asyncio.Queue[asyncio.Future[str]] = asyncio.Queue()

        async def worker() -> None:
            while True:
                answer = await jobs.get()
                if not answer.done():  # a delivery given up on cancelled its future
                    answer.set_result("done")

        task = asyncio.create_task(worker())
        app.state.jobs = jobs
        yield
        task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.post("/job")
    async def job(request: Request) -> dict[str, str]:
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        await request.app.state.jobs.put(answer)
        return {"job": await answer}

    return app


def _asleep(loop: asyncio.AbstractEventLoop, ident: int) -> bool:
    """The loop's thread is in its selector with nothing ready and no timer: it waits for a
    wake-up, however long (a select with a timeout, or with callbacks left to run, would come
    back by itself and run whatever a foreign thread appended meanwhile)."""
    frame = sys._current_frames().get(ident)
    code = frame.f_code if frame is not None else None
    in_select = code is not None and code.co_name in ("select", "poll")
    if not (in_select and code is not None and code.co_filename.endswith("selectors.py")):
        return False
    # asyncio's own queues, read (never changed) to know the select blocks for good.
    return not loop._ready and not loop._scheduled  # type: ignore[attr-defined]


@contextmanager
def run_to_its_wait(app_client: TestClient) -> Iterator[None]:
    """Within: the TestClient's loop has run what was ready on it (its lifespan worker, up to
    its wait on the queue) and sleeps in its selector, where only a wake-up brings it back.

    A call through the client's portal runs after the callbacks queued before it; the loop may
    still be finishing that call's own bookkeeping when the call returns, and a callback put on
    its ready queue then (as a put from another loop does) would run without a wake-up, so the
    test also waits, bounded, until the loop's thread is inside ``select`` with nothing ready
    and no timer. The cyclic
    collector is paused within: an async generator of that loop collected in the test's thread
    has its ``aclose`` sent to the loop with a wake-up, which would run the worker."""
    gc.collect()
    gc.disable()
    try:
        ident = app_client.portal.call(threading.get_ident)
        loop = app_client.portal.call(asyncio.get_running_loop)
        deadline = time.monotonic() + 10
        while not _asleep(loop, ident):
            assert time.monotonic() < deadline, "the TestClient's loop never went to its wait"
            time.sleep(0.001)  # polls an observable state, bounded by the deadline
        yield
    finally:
        gc.enable()


def make_sleeping_app() -> FastAPI:
    app = FastAPI()

    @app.post("/sleep")
    async def sleep() -> None:
        await anyio.sleep(3600)  # a timer is pending: the loop is busy, not stuck

    @app.post("/thread")
    def in_a_thread() -> dict[str, str]:  # FastAPI runs a sync handler in AnyIO's threads
        time.sleep(0.3)
        return {"slept": "anyio"}

    @app.post("/executor")
    async def in_the_executor() -> dict[str, str]:
        await asyncio.to_thread(time.sleep, 0.3)
        return {"slept": "executor"}

    return app


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_watch, "STALL_GRACE_S", 0.1)


def test_the_app_mounted_beside_its_testclient_is_reported_stuck(
    qstash: FakeQStash, client: QStash
) -> None:
    app = make_worker_app()
    with TestClient(app) as app_client:
        qstash.mount(BASE, app)  # the app, on the fake's loop: its worker is on another
        published = client.message.publish(url=f"{BASE}/job", body="x")
        # The TestClient's loop waits, as it does by the time a real test publishes: a job
        # put from another loop then never wakes its worker.
        with run_to_its_wait(app_client), pytest.raises(DeliveryTimeoutError) as raised:
            qstash.tick()

        error = raised.value
        assert error.stalled  # reported as stuck (seen idle), not as past the 30 s timeout
        assert error.url == f"{BASE}/job"
        assert error.message_id == published.message_id  # type: ignore[union-attr]
        assert "is stuck" in str(error)
        assert "mount the test client instead, qstash.mount(url, client)" in str(error)
        assert isinstance(error, QStashFakeError)
        assert isinstance(error, TimeoutError)
        [message] = qstash.messages
        assert message.state == "CREATED"
        assert qstash.deliveries == []

        qstash.mount(BASE, app_client)  # the fix the error names
        [delivery] = qstash.tick()
        assert (delivery.status, delivery.response_body) == (200, '{"job":"done"}')


@pytest.mark.qstash(delivery_timeout=0.2)
@pytest.mark.parametrize("how", ["app", "lifespan", "testclient"])
def test_a_delivery_past_the_timeout_fails_the_test(
    qstash: FakeQStash, client: QStash, how: str
) -> None:
    app = make_sleeping_app()
    with TestClient(app) as app_client:
        if how == "app":
            qstash.mount(BASE, app)  # the fake's own loop, in the test's thread
        elif how == "lifespan":
            qstash.mount(BASE, app, lifespan=True)  # the fake's loop, beside its lifespan
        else:
            qstash.mount(BASE, app_client)  # the TestClient's portal
        client.message.publish(url=f"{BASE}/sleep", body="x")

        with pytest.raises(DeliveryTimeoutError, match=r"did not finish within 0\.2 s") as raised:
            qstash.tick()

        assert not raised.value.stalled
        assert qstash.messages[0].state == "CREATED"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.mark.anyio
@pytest.mark.qstash(delivery_timeout=0.2)
async def test_a_delivery_past_the_timeout_fails_an_async_test(
    qstash: FakeQStash, anyio_backend: str
) -> None:
    qstash.mount(BASE, make_sleeping_app())  # on the test's own loop
    aclient = AsyncQStash(os.environ["QSTASH_TOKEN"], retry=False)
    await aclient.message.publish(url=f"{BASE}/sleep", body="x")

    with pytest.raises(DeliveryTimeoutError, match=r"within 0\.2 s"):
        await qstash.atick()

    assert qstash.messages[0].state == "CREATED"


@pytest.mark.asyncio
async def test_an_async_test_sees_the_stuck_delivery_early(
    qstash: FakeQStash, aclient: AsyncQStash, short_grace: None
) -> None:
    app = make_worker_app()
    # Its lifespan on the TestClient's portal; the app mounted on the test's loop.
    with TestClient(app) as app_client:
        qstash.mount(BASE, app)
        await aclient.message.publish(url=f"{BASE}/job", body="x")
        with (
            run_to_its_wait(app_client),
            pytest.raises(DeliveryTimeoutError, match="is stuck") as raised,
        ):
            await qstash.atick()

        assert raised.value.stalled


@pytest.mark.asyncio
@pytest.mark.qstash(delivery_timeout=0.2)
async def test_a_wsgi_app_in_an_async_test_is_given_up_on(
    qstash: FakeQStash, aclient: AsyncQStash
) -> None:
    release = threading.Event()
    app = flask.Flask(__name__)

    @app.post("/block")
    def block() -> str:
        release.wait(10)  # a thread cannot be stopped: the test lets it go at the end
        return "late"

    qstash.mount(BASE, app)
    await aclient.message.publish(url=f"{BASE}/block", body="x")
    try:
        with pytest.raises(DeliveryTimeoutError, match="worker thread, which cannot be stopped"):
            await qstash.atick()
    finally:
        release.set()


@pytest.mark.parametrize("route", ["thread", "executor"])
def test_work_in_worker_threads_is_not_called_stuck(
    qstash: FakeQStash, client: QStash, short_grace: None, route: str
) -> None:
    # The loop waits on a thread for longer than the grace: busy, not stuck.
    qstash.mount(BASE, make_sleeping_app())
    client.message.publish(url=f"{BASE}/{route}", body="x")

    [delivery] = qstash.tick()

    assert delivery.status == 200
    assert delivery.response_body == '{"slept":"%s"}' % ("anyio" if route == "thread" else route)


@pytest.mark.parametrize("value", [0, "0ms", -1, "soon"])
def test_a_bad_delivery_timeout_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="delivery_timeout"):
        FakeQStash(delivery_timeout=value)


def test_delivery_timeout_takes_durations() -> None:
    assert FakeQStash().delivery_timeout == 30
    assert FakeQStash(delivery_timeout="500ms").delivery_timeout == 0.5
    assert FakeQStash(delivery_timeout=2).delivery_timeout == 2


def test_delivery_timeout_from_the_ini_and_the_marker(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nqstash_delivery_timeout = 1500ms\n")
    pytester.makepyfile(
        """
        import pytest

        def test_ini(qstash):
            assert qstash.delivery_timeout == 1.5

        @pytest.mark.qstash(delivery_timeout=0.25)
        def test_marker(qstash):
            assert qstash.delivery_timeout == 0.25

        @pytest.mark.qstash(delivery_timeout=0)
        def test_bad(qstash):
            pass
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*bad qstash setting: invalid delivery_timeout=0*"])


# -- refusing the sync forms inside any running async library ---------------------------------
@pytest.mark.anyio
async def test_sync_tick_is_refused_inside_any_event_loop(
    qstash: FakeQStash, anyio_backend: str
) -> None:
    from pytest_qstash import AsyncContextError

    with pytest.raises(AsyncContextError, match=r"use `await qstash.atick\(\)`"):
        qstash.tick()
    with pytest.raises(AsyncContextError, match="aadvance"):
        qstash.advance(1)
