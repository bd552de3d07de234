"""Seeded fault schedules (``FakeQStash.simulate``): each fault is one QStash's at-least-once
contract allows, decided by the seed, the same every run; and never one it does not allow."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import datetime

import httpx
import jwt
import pytest
import qstash.http as sdk_http
from fastapi import FastAPI
from fastapi.testclient import TestClient
from qstash import QStash

from pytest_qstash import FakeQStash
from pytest_qstash.engine.simulation import Simulation

APP = "https://app.test"


def _client() -> QStash:
    return QStash(os.environ["QSTASH_TOKEN"], retry=False)


class Inbox:
    """What the app saw: each delivery's message id, path and headers."""

    def __init__(self) -> None:
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        return httpx.Response(200, text="ok")

    @property
    def ids(self) -> list[str]:
        return [r.headers["Upstash-Message-Id"] for r in self.seen]


def _run(
    seed: int, faults: list[str], body: Callable[[FakeQStash, QStash], None]
) -> tuple[FakeQStash, Inbox]:
    inbox = Inbox()
    with FakeQStash(seed="simulation", start="2026-01-01T00:00:00Z") as qstash:
        qstash.simulate(seed, faults)
        qstash.mount(APP, inbox)
        body(qstash, _client())
    return qstash, inbox


def _one_message(qstash: FakeQStash, client: QStash) -> None:
    client.message.publish(url=f"{APP}/charge", body="order 7")
    qstash.drain()


def _seed_with(kind: str, body: Callable[[FakeQStash, QStash], None]) -> int:
    for seed in range(200):
        qstash, _ = _run(seed, [kind], body)
        assert qstash.simulation is not None
        if any(f.kind == kind for f in qstash.simulation.injected):
            return seed
    raise AssertionError(f"no seed in 200 injects {kind}")


def test_duplicate_delivers_an_acknowledged_message_again_with_a_fresh_signature() -> None:
    seed = _seed_with("duplicate", _one_message)
    qstash, inbox = _run(seed, ["duplicate"], _one_message)

    [message] = qstash.messages
    assert inbox.ids == [message.message_id, message.message_id]
    first, again = inbox.seen
    assert first.content == again.content == b"order 7"
    assert first.headers["Upstash-Retried"] == again.headers["Upstash-Retried"] == "0"
    signatures = [r.headers["Upstash-Signature"] for r in inbox.seen]
    assert signatures[0] != signatures[1]  # each delivery is signed afresh (its own jti)
    key = os.environ["QSTASH_CURRENT_SIGNING_KEY"]
    for signature in signatures:
        claims = jwt.decode(
            signature, key, algorithms=["HS256"], options={"verify_exp": False, "verify_nbf": False}
        )
        assert claims["sub"] == f"{APP}/charge"
    assert message.state == "DELIVERED"
    [fault] = qstash.simulation.injected if qstash.simulation else []
    assert (fault.kind, fault.message_id) == ("duplicate", message.message_id)


def test_lost_ack_retries_after_the_backoff_with_upstash_retried_counting_up() -> None:
    seed = _seed_with("lost_ack", _one_message)
    qstash, inbox = _run(seed, ["lost_ack"], _one_message)

    [message] = qstash.messages
    assert message.state == "DELIVERED"
    assert [r.headers["Upstash-Retried"] for r in inbox.seen] == [
        str(n) for n in range(len(inbox.seen))
    ]
    assert len(inbox.seen) >= 2
    first, second = message.deliveries[:2]
    assert first.status is None
    assert "simulated lost acknowledgement" in (first.error or "")
    assert second.at > first.at  # after the message's backoff, on the virtual clock
    assert qstash.dlq == []


def test_lost_ack_never_takes_the_last_attempt() -> None:
    # A lost answer on the last attempt would dead-letter a message the app handled: no
    # correct app could prevent that, so it is never simulated.
    def no_retries(qstash: FakeQStash, client: QStash) -> None:
        client.message.publish(url=f"{APP}/charge", body="x", retries=0)
        qstash.drain()

    for seed in range(60):
        qstash, inbox = _run(seed, ["lost_ack"], no_retries)
        assert len(inbox.seen) == 1
        assert qstash.dlq == []
        assert qstash.simulation is not None
        assert qstash.simulation.injected == []


def _two_at_once(qstash: FakeQStash, client: QStash) -> None:
    client.message.publish(url=f"{APP}/first", body="1")
    client.message.publish(url=f"{APP}/second", body="2")
    qstash.tick()


def test_reorder_delivers_a_later_message_due_at_the_same_moment_first() -> None:
    seed = _seed_with("reorder", _two_at_once)
    qstash, inbox = _run(seed, ["reorder"], _two_at_once)

    first, second = qstash.messages
    assert inbox.ids == [second.message_id, first.message_id]
    [fault] = qstash.simulation.injected if qstash.simulation else []
    assert fault.kind == "reorder"
    assert first.message_id in fault.description


def test_a_queue_of_parallelism_one_keeps_its_order_under_every_seed() -> None:
    def queued(qstash: FakeQStash, client: QStash) -> None:
        client.queue.upsert("orders", parallelism=1)
        for n in range(4):
            client.message.enqueue(queue="orders", url=f"{APP}/{n}", body=str(n))
        qstash.drain()

    for seed in range(40):
        _qstash, inbox = _run(seed, ["reorder", "lost_ack"], queued)
        firsts = list(dict.fromkeys(r.url.path for r in inbox.seen))
        assert firsts == ["/0", "/1", "/2", "/3"], seed


def test_never_early_never_lost_never_unpublished() -> None:
    due: dict[str, datetime] = {}

    def delayed(qstash: FakeQStash, client: QStash) -> None:
        for n in range(3):
            client.message.publish(url=f"{APP}/{n}", body=str(n), delay=f"{n + 1}m")
        due.update({m.message_id: m.not_before for m in qstash.messages})
        qstash.drain()

    for seed in range(40):
        due.clear()
        qstash, inbox = _run(seed, ["duplicate", "lost_ack", "reorder"], delayed)
        assert set(inbox.ids) == set(due)  # each delivered, nothing else
        for message in qstash.messages:
            assert message.state == "DELIVERED"
            assert all(d.at >= due[message.message_id] for d in message.deliveries)


def test_the_same_seed_injects_the_same_faults() -> None:
    def busy(qstash: FakeQStash, client: QStash) -> None:
        for n in range(6):
            client.message.publish(url=f"{APP}/{n}", body=str(n))
        qstash.drain()

    runs = [_run(11, ["duplicate", "lost_ack", "reorder"], busy) for _ in range(2)]
    (one, inbox_one), (two, inbox_two) = runs
    assert one.simulation is not None
    assert two.simulation is not None
    assert one.simulation.injected == two.simulation.injected
    assert one.simulation.injected  # seed 11 injects something here
    assert inbox_one.ids == inbox_two.ids


def test_only_keeps_just_the_decisions_named() -> None:
    def busy(qstash: FakeQStash, client: QStash) -> None:
        for n in range(6):
            client.message.publish(url=f"{APP}/{n}", body=str(n))
        qstash.drain()

    full, _ = _run(11, ["duplicate", "lost_ack", "reorder"], busy)
    assert full.simulation is not None
    kept = full.simulation.injected[0]  # the first depends on no other fault
    inbox = Inbox()
    with FakeQStash(seed="simulation", start="2026-01-01T00:00:00Z") as qstash:
        simulation = Simulation(11, only=[kept.key])
        qstash.store.simulate(simulation)
        qstash.mount(APP, inbox)
        busy(qstash, _client())
    assert [(f.kind, f.key) for f in simulation.injected] == [(kept.kind, kept.key)]


def test_outside_simulation_there_is_none_and_bad_arguments_say_what_is_accepted(
    qstash: FakeQStash,
) -> None:
    assert qstash.simulation is None
    with pytest.raises(ValueError, match=r"unknown fault kind.*'dup'.*duplicate, lost_ack"):
        qstash.simulate(1, ["dup"])
    with pytest.raises(ValueError, match=r"invalid simulate_seed='x': expected an integer"):
        qstash.simulate("x")  # type: ignore[arg-type]
    assert qstash.simulation is None
    simulation = qstash.simulate(3, "duplicate,reorder")
    assert qstash.simulation is simulation
    assert simulation.kinds == ("duplicate", "reorder")


# -- publish_lost_answer: the SDK sends a stored publish again ------------------------------
def _signup_app(dedup: bool) -> FastAPI:
    app = FastAPI()
    # The SDK retries network errors; a minute between tries, so that a real sleep shows.
    client = QStash(os.environ["QSTASH_TOKEN"], retry={"retries": 3, "backoff": lambda n: 60_000})

    @app.post("/signup/{user}")
    def signup(user: str) -> dict[str, str]:
        extra = {"deduplication_id": f"welcome-{user}"} if dedup else {}
        client.message.publish(url=f"{APP}/welcome", body=user, **extra)  # type: ignore[arg-type]
        return {"ok": user}

    return app


@pytest.mark.parametrize("dedup", [False, True])
def test_a_lost_publish_answer_is_sent_again_by_the_sdk(dedup: bool) -> None:
    found = []
    for seed in range(40):
        with FakeQStash(seed="lost answers", start="2026-01-01T00:00:00Z") as qstash:
            simulation = qstash.simulate(seed, ["publish_lost_answer"])
            started = time.monotonic()
            answer = TestClient(_signup_app(dedup)).post("/signup/7")
            took = time.monotonic() - started
            assert answer.status_code == 200
            lost = len(simulation.injected)
            if lost:
                found.append(seed)
                assert {f.kind for f in simulation.injected} == {"publish_lost_answer"}
                assert took < 30  # the SDK's minute-long retry sleeps are instant meanwhile
            # Without a deduplication id each retry is one more message; with one, QStash's
            # deduplication answers them and there is one.
            expected = 1 if dedup else 1 + lost
            assert len(qstash.messages) == expected, seed
        assert vars(sdk_http)["time"] is time  # the SDK's own sleep is back after the fake
    assert found  # some of 40 seeds lose an answer


def test_no_answer_is_lost_where_the_sdk_would_not_send_again() -> None:
    for seed in range(40):
        with FakeQStash(seed="lost answers") as qstash:
            simulation = qstash.simulate(seed, ["publish_lost_answer"])
            _client().message.publish(url=f"{APP}/welcome", body="x")  # retry=False
            assert simulation.injected == []
            assert len(qstash.messages) == 1


# -- step_retry: a workflow step runs again ---------------------------------------------------
def _welcome_workflow(sent: list[str], *, idempotent: bool) -> FastAPI:
    from upstash_workflow import AsyncWorkflowContext
    from upstash_workflow.fastapi import Serve

    app = FastAPI()
    serve = Serve(app)
    done: set[str] = set()

    @serve.post("/signup")
    async def signup(context: AsyncWorkflowContext[dict[str, str]]) -> None:
        user = context.request_payload["user"]

        async def send_welcome() -> str:
            key = f"{context.workflow_run_id}:welcome"  # the step's idempotency key
            if idempotent and key in done:
                return "already sent"
            done.add(key)
            sent.append(user)
            return "sent"

        await context.run("send welcome email", send_welcome)

        async def finish() -> str:
            return "ok"

        await context.run("finish", finish)

    return app


@pytest.mark.parametrize("idempotent", [False, True])
def test_step_retry_runs_a_step_again_and_the_run_still_succeeds(idempotent: bool) -> None:
    found, twice = [], []
    for seed in range(40):
        sent: list[str] = []
        with FakeQStash(seed="steps", start="2026-01-01T00:00:00Z") as qstash:
            simulation = qstash.simulate(seed, ["step_retry"])
            qstash.mount(APP, _welcome_workflow(sent, idempotent=idempotent))
            qstash.trigger(f"{APP}/signup", {"user": "ann"})
            qstash.drain()
            assert [run.state for run in qstash.runs] == ["RUN_SUCCESS"]
            [run] = qstash.runs
            assert [s.name for s in run.steps][-2:] == ["send welcome email", "finish"]
            if simulation.injected:
                found.append(seed)
                assert {f.kind for f in simulation.injected} == {"step_retry"}
                failed = [c for c in qstash.api_calls if c.error is not None]
                assert failed  # the step results the SDK tried to publish, refused
            if idempotent or not simulation.injected:
                assert sent == ["ann"]
            else:  # each fault re-runs the step its delivery ran: the email's, or "finish"
                assert set(sent) == {"ann"}
                assert 1 <= len(sent) <= 1 + len(simulation.injected)
                if len(sent) > 1:
                    twice.append(seed)
    assert found
    assert bool(twice) != idempotent  # the email sent twice, unless keyed on the run


def test_a_schedule_does_not_depend_on_when_the_test_runs() -> None:
    # A replay runs on another day: bodies holding times (a callback's createdAt, the app's
    # own timestamps) differ, and the faults must not.
    def with_times(qstash: FakeQStash, client: QStash) -> None:
        for n in range(6):
            client.message.publish(
                url=f"{APP}/{n % 2}",
                body=f'{{"n": {n}, "at": "{qstash.now.isoformat()}"}}',
                callback=f"{APP}/callback",
            )
            qstash.drain()

    runs = []
    for start in ("2026-01-01T00:00:00Z", "2031-07-15T12:34:56Z"):
        inbox = Inbox()
        with FakeQStash(seed="when", start=start) as qstash:
            simulation = qstash.simulate(21)
            qstash.mount(APP, inbox)
            with_times(qstash, _client())
        runs.append([(f.kind, f.key) for f in simulation.injected])
    assert runs[0] == runs[1]
    assert runs[0]  # seed 21 injects something here


def test_a_schedule_does_not_depend_on_the_app_s_port() -> None:
    # An app served on a free port has another port at each run; the faults stay the same.
    runs = []
    for base in ("http://127.0.0.1:41001", "http://127.0.0.1:52002"):
        with FakeQStash(seed="ports", start="2026-01-01T00:00:00Z") as qstash:
            simulation = qstash.simulate(4)
            qstash.mount(base, Inbox())
            client = _client()
            for n in range(6):
                client.message.publish(url=f"{base}/jobs/{n % 3}", body=str(n))
                qstash.drain()
        runs.append([(f.kind, f.key) for f in simulation.injected])
    assert runs[0] == runs[1]
    assert runs[0]  # seed 4 injects something here


def test_lost_publish_answers_do_not_depend_on_when_or_where_the_app_runs() -> None:
    # A replay publishes bodies holding another time, to an app on another port: the same
    # publishes must lose their answers.
    runs = []
    for start, base in (
        ("2026-01-01T00:00:00Z", "http://127.0.0.1:41001"),
        ("2031-07-15T12:34:56Z", "http://127.0.0.1:52002"),
    ):
        with FakeQStash(seed="lost answers", start=start) as qstash:
            simulation = qstash.simulate(0, ["publish_lost_answer"])
            client = QStash(
                os.environ["QSTASH_TOKEN"], retry={"retries": 3, "backoff": lambda n: 0}
            )
            for n in range(8):
                body = f'{{"n": {n % 2}, "at": "{qstash.now.isoformat()}"}}'
                client.message.publish(url=f"{base}/jobs/{n % 3}", body=body)
        runs.append([(f.kind, f.key) for f in simulation.injected])
    assert runs[0] == runs[1]
    assert runs[0]  # seed 0 loses some answer here
