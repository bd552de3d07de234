"""Property: whatever the interleaving of publishes, failing endpoints, cancels and time steps,
no message is lost, none is delivered more often than allowed, and each ends DELIVERED, FAILED
(and in the DLQ) or CANCELED, with every attempt at the virtual time the documented retry rules
give.

A small independent model predicts each message's attempts from its publish options and the
answers its endpoint will give; the fake (driven through the real SDK) must agree exactly.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qstash import QStash
from qstash.errors import QStashError
from reliability_apps import backoff_ms

from pytest_qstash import FakeQStash

START = "2026-01-01T00:00:00Z"
SITE = "https://prop.example.com"
DEDUP_WINDOW_MS = 10 * 60 * 1000
MAX_RETRIES = 4
THROTTLE_MS = 7000  # what a "throttle" answer asks for with Retry-After

# What an endpoint answers on a given attempt.
ANSWERS: dict[str, tuple[int, dict[str, str]]] = {
    "ok": (200, {}),
    "created": (201, {}),
    "no-content": (204, {}),
    "error": (500, {}),
    "unavailable": (503, {}),
    "not-found": (404, {}),
    "reject": (489, {"Upstash-NonRetryable-Error": "true"}),
    "plain-489": (489, {}),
    "throttle": (429, {"Retry-After": str(THROTTLE_MS // 1000)}),
}


@dataclass(frozen=True)
class Publish:
    delay_s: int
    retries: int | None
    dedup_id: str | None
    linear_delay: bool  # Upstash-Retry-Delay: 1000 * (1 + retried)
    answers: tuple[str, ...]  # by attempt number (Upstash-Retried)


@dataclass(frozen=True)
class Cancel:
    pick: int


@dataclass(frozen=True)
class Advance:
    seconds: int


Step = Publish | Cancel | Advance

publishes = st.builds(
    Publish,
    delay_s=st.sampled_from([0, 0, 5, 60, 600, 3600]),
    retries=st.one_of(st.none(), st.integers(0, MAX_RETRIES)),
    dedup_id=st.sampled_from([None, None, "a", "b"]),
    linear_delay=st.booleans(),
    answers=st.lists(
        st.sampled_from(sorted(ANSWERS)), min_size=MAX_RETRIES + 1, max_size=MAX_RETRIES + 1
    ).map(tuple),
)
steps = st.lists(
    st.one_of(
        publishes,
        st.builds(Cancel, pick=st.integers(0, 50)),
        st.builds(Advance, seconds=st.sampled_from([0, 1, 7, 12, 60, 150, 599, 601, 3600, 86_400])),
    ),
    min_size=1,
    max_size=14,
)


@dataclass
class Expected:
    """The model's view of one message."""

    message_id: str
    path: str
    published_ms: int
    attempts_ms: list[int]
    final_state: str
    final_ms: int
    statuses: list[int] = field(default_factory=list)
    #: Whether a time step has run since the publish (only then can an attempt due "now" have
    #: been made: publishing never delivers by itself).
    advanced: bool = False


def plan(step: Publish, now_ms: int) -> tuple[list[int], list[int], str]:
    """Attempt times, their statuses and the final state, were nothing cancelled."""
    retries = 3 if step.retries is None else step.retries
    at = now_ms + step.delay_s * 1000
    times: list[int] = []
    statuses: list[int] = []
    for attempt in range(retries + 1):
        status, headers = ANSWERS[step.answers[attempt]]
        times.append(at)
        statuses.append(status)
        if 200 <= status < 300:
            return times, statuses, "DELIVERED"
        if "Upstash-NonRetryable-Error" in headers or attempt == retries:
            return times, statuses, "FAILED"
        if "Retry-After" in headers:
            at += THROTTLE_MS
        elif step.linear_delay:
            at += 1000 * (1 + attempt)
        else:
            at += backoff_ms(attempt + 1)
    raise AssertionError("unreachable")


@functools.cache
def sdk() -> QStash:
    return QStash(os.environ["QSTASH_TOKEN"], retry=False)


def endpoint(plans: dict[str, Publish]) -> object:
    """A plain callable app: each message's path picks its plan, Upstash-Retried the answer."""

    def answer(request: httpx.Request) -> httpx.Response:
        attempt = int(request.headers["upstash-retried"])
        status, headers = ANSWERS[plans[request.url.path].answers[attempt]]
        return httpx.Response(status, headers=headers, text=f"{status} for attempt {attempt}")

    return answer


@settings(max_examples=100, deadline=None)
@given(steps=steps)
def test_no_message_is_lost_or_over_delivered_and_each_ends_on_time(steps: list[Step]) -> None:
    client = sdk()
    plans: dict[str, Publish] = {}
    expected: list[Expected] = []
    dedup: dict[str, tuple[Expected, int]] = {}

    with FakeQStash(start=START, freeze_time=False) as fake:
        fake.mount(SITE, endpoint(plans))
        for step in steps:
            now_ms = fake.clock.now_ms
            if isinstance(step, Publish):
                path = f"/m/{len(plans)}"
                plans[path] = step
                options: dict[str, object] = {"delay": step.delay_s}
                if step.retries is not None:
                    options["retries"] = step.retries
                if step.dedup_id is not None:
                    options["deduplication_id"] = step.dedup_id
                if step.linear_delay:
                    options["retry_delay"] = "1000 * (1 + retried)"
                response = client.message.publish(url=SITE + path, body=path, **options)  # type: ignore[arg-type]

                hit = dedup.get(step.dedup_id) if step.dedup_id else None
                if hit is not None and now_ms < hit[1]:
                    assert response.deduplicated  # type: ignore[union-attr]
                    assert response.message_id == hit[0].message_id  # type: ignore[union-attr]
                    continue
                assert not response.deduplicated  # type: ignore[union-attr]
                times, statuses, final = plan(step, now_ms)
                model = Expected(
                    response.message_id,  # type: ignore[union-attr]
                    path,
                    now_ms,
                    times,
                    final,
                    times[-1],
                    statuses,
                )
                expected.append(model)
                if step.dedup_id is not None:
                    dedup[step.dedup_id] = (model, now_ms + DEDUP_WINDOW_MS)
            elif isinstance(step, Cancel):
                if not expected:
                    continue
                model = expected[step.pick % len(expected)]
                made = [t for t in model.attempts_ms if model.advanced and t <= now_ms]
                finished = model.final_state == "CANCELED" or (
                    made and made[-1] == model.attempts_ms[-1]
                )
                if finished:
                    with pytest.raises(QStashError, match="status: 404"):
                        client.message.cancel(model.message_id)
                    continue
                client.message.cancel(model.message_id)
                model.attempts_ms = made
                model.statuses = model.statuses[: len(made)]
                model.final_state, model.final_ms = "CANCELED", now_ms
            else:
                fake.advance(step.seconds)
                for model in expected:
                    model.advanced = True
        # Long enough for everything to end: at most 5 attempts, at most a day apart.
        fake.advance("40d")
        assert fake.next_due() is None

        messages = {m.message_id: m for m in fake.messages}
        # No message lost, none invented.
        assert set(messages) == {model.message_id for model in expected}
        dlq_ids = [entry.message_id for entry in fake.dlq]
        assert len(dlq_ids) == len(set(dlq_ids))
        for model in expected:
            message = messages[model.message_id]
            attempts = message.deliveries
            assert len(attempts) <= 1 + message.max_retries
            ok = [d for d in attempts if d.ok]
            assert len(ok) <= 1
            assert not ok or ok[0] is attempts[-1]
            # Every attempt at the virtual time the retry rules give, answered as planned.
            assert [d.at_ms for d in attempts] == model.attempts_ms, model
            assert [d.status for d in attempts] == model.statuses
            assert [d.retried for d in attempts] == list(range(len(attempts)))
            assert all(d.url == SITE + model.path for d in attempts)
            assert message.state == model.final_state, model
            assert (model.message_id in dlq_ids) == (model.final_state == "FAILED")
            events = [e for e in fake.events if e.message_id == model.message_id]
            assert events[0].state == "CREATED"
            assert events[0].time_ms == model.published_ms
            assert (events[-1].state, events[-1].time_ms) == (model.final_state, model.final_ms)
            assert sum(e.state == "ACTIVE" for e in events) == len(attempts)
            assert sum(e.state == "DELIVERED" for e in events) == len(ok)


# -- handlers that take time: durations, timeouts, parallelism, cancels in flight ---------------
KEY = "prop-key"
RETRY_DELAY_MS = 5000  # Upstash-Retry-Delay: a constant 5 s


@dataclass(frozen=True)
class SlowPublish:
    duration_s: int  # how long the handler takes on every attempt
    timeout_s: int | None
    retries: int
    answers: tuple[str, ...]  # "ok" or "error", by attempt number


slow_steps = st.lists(
    st.one_of(
        st.builds(
            SlowPublish,
            duration_s=st.sampled_from([0, 0, 5, 30]),
            timeout_s=st.sampled_from([None, None, 10]),
            retries=st.integers(0, 2),
            answers=st.lists(st.sampled_from(["ok", "error"]), min_size=3, max_size=3).map(tuple),
        ),
        st.builds(Cancel, pick=st.integers(0, 50)),
        st.builds(Advance, seconds=st.sampled_from([0, 1, 4, 10, 29, 60])),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=60, deadline=None)
@given(steps=slow_steps, parallelism=st.integers(1, 2))
def test_attempts_in_flight_respect_parallelism_timeouts_and_cancels(
    steps: list[SlowPublish | Cancel | Advance], parallelism: int
) -> None:
    client = sdk()
    plans: dict[str, SlowPublish] = {}
    ids: list[str] = []
    cancelled_at: dict[str, int] = {}

    def answer(request: httpx.Request) -> httpx.Response:
        attempt = int(request.headers["upstash-retried"])
        return httpx.Response(200 if plans[request.url.path].answers[attempt] == "ok" else 500)

    def takes(request: httpx.Request) -> int:
        return plans[request.url.path].duration_s

    with FakeQStash(start=START, freeze_time=False) as fake:
        fake.mount(SITE, answer, duration=takes)
        for step in steps:
            if isinstance(step, SlowPublish):
                path = f"/s/{len(plans)}"
                plans[path] = step
                options: dict[str, object] = {
                    "retries": step.retries,
                    "retry_delay": str(RETRY_DELAY_MS),
                    "flow_control": {"key": KEY, "parallelism": parallelism},
                }
                if step.timeout_s is not None:
                    options["timeout"] = step.timeout_s
                response = client.message.publish(url=SITE + path, body=path, **options)  # type: ignore[arg-type]
                ids.append(response.message_id)  # type: ignore[union-attr]
            elif isinstance(step, Cancel):
                if not ids:
                    continue
                message_id = ids[step.pick % len(ids)]
                if fake.messages.one(message_id=message_id).done:
                    with pytest.raises(QStashError, match="status: 404"):
                        client.message.cancel(message_id)
                    continue
                client.message.cancel(message_id)
                cancelled_at[message_id] = fake.clock.now_ms
            else:
                fake.advance(step.seconds)
            # parallelismCount is truthful at every moment and, once time has moved (nothing
            # starts in between), no slot stays idle while a message waits for one.
            info = client.flow_control.get(KEY) if ids else None
            if info is not None:
                active = [m for m in fake.messages if m.state == "ACTIVE"]
                assert info.parallelism_count == len(active) <= parallelism
                if isinstance(step, Advance):
                    assert info.wait_list_size == 0 or info.parallelism_count == parallelism
        fake.advance("1d")
        assert fake.next_due() is None

        # Never more attempts in flight at once than the key's parallelism, read from the log
        # in order: an ACTIVE starts an attempt; DELIVERED, ERROR or CANCELED ends it.
        in_flight: set[str] = set()
        for event in fake.events:
            if event.state == "ACTIVE":
                in_flight.add(event.message_id)
                assert len(in_flight) <= parallelism
            elif event.state in ("DELIVERED", "ERROR", "CANCELED"):
                in_flight.discard(event.message_id)
        dlq_ids = {entry.message_id for entry in fake.dlq}
        for message_id in ids:
            message = fake.messages.one(message_id=message_id)
            step = plans[message.url[len(SITE) :]]
            assert message.done
            attempts = message.deliveries
            assert len(attempts) <= 1 + step.retries
            for number, attempt in enumerate(attempts):
                assert attempt.retried == number
                took = (attempt.ended_ms or attempt.at_ms) - attempt.at_ms
                if attempt.error and "cancelled" in attempt.error:
                    # Cut by the cancel: the last attempt, ended at the cancel.
                    assert attempt is attempts[-1]
                    assert attempt.ended_ms == cancelled_at[message_id]
                elif step.timeout_s is not None and step.duration_s > step.timeout_s:
                    assert took == step.timeout_s * 1000
                    assert attempt.status is None
                    assert "context deadline exceeded" in (attempt.error or "")
                else:
                    assert took == step.duration_s * 1000
                    ok = step.answers[number] == "ok"
                    assert attempt.status == (200 if ok else 500)
                if number:
                    previous = attempts[number - 1]
                    assert attempt.at_ms >= (previous.ended_ms or 0) + RETRY_DELAY_MS
            if message_id in cancelled_at:
                assert message.state == "CANCELED"
                assert all(a.at_ms <= cancelled_at[message_id] for a in attempts)
            assert (message.state == "FAILED") == (message_id in dlq_ids)
            if message.state == "DELIVERED":
                assert attempts[-1].ok
