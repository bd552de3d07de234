"""The server's concurrent runner over the fake's delivery loop, in-process: a round at one
virtual instant starts its attempts together and records them in due order, and attempts cut
by a cancellation (a reset, a shutdown) did not happen, on either clock."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest

from pytest_qstash import FakeQStash
from pytest_qstash.server.runner.deliveries import ServerDeliveries

URL = "https://app.example.com"


class GatedApp:
    """An ASGI app that holds every request until the gate opens."""

    def __init__(self, expected: int) -> None:
        self.paths: list[str] = []
        self.expected = expected
        self.all_in = asyncio.Event()
        self.gate = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.paths.append(scope["path"])
        if len(self.paths) == self.expected:
            self.all_in.set()
        await self.gate.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def publish(fake: FakeQStash, path: str) -> str:
    with httpx.Client(transport=fake.transport) as client:
        answer = client.post(
            f"https://qstash.upstash.io/v2/publish/{URL}{path}",
            headers={"Authorization": f"Bearer {fake.token}"},
            content=b"{}",
        )
    answer.raise_for_status()
    return str(answer.json()["messageId"])


@pytest.mark.asyncio
async def test_a_round_starts_together_and_a_cancelled_one_did_not_happen() -> None:
    with FakeQStash() as fake:
        app = GatedApp(expected=2)
        fake.mount(URL, app)
        ServerDeliveries(fake, 5.0)  # the fake's async moves run through it now
        first, second = publish(fake, "/a"), publish(fake, "/b")

        tick = asyncio.ensure_future(fake.atick())
        await asyncio.wait_for(app.all_in.wait(), 5)  # both apps called before any answer
        tick.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tick
        assert [m.state for m in fake.messages] == ["CREATED", "CREATED"]
        assert fake.deliveries == []
        assert fake.dispatcher.cause is None

        app.gate.set()
        made = await fake.atick()  # put back in the order they were due
        assert [d.message_id for d in made] == [first, second]
        assert [m.state for m in fake.messages] == ["DELIVERED", "DELIVERED"]


@pytest.mark.asyncio
async def test_real_clock_attempts_cut_before_they_ran_are_due_again() -> None:
    with FakeQStash(freeze_time=False) as fake:
        app = GatedApp(expected=2)
        fake.mount(URL, app)
        runner = ServerDeliveries(fake, 5.0, catch_up=lambda: None)
        publish(fake, "/a"), publish(fake, "/b")

        started = runner.start_due()
        assert len(started) == 2
        assert [m.state for m in fake.messages] == ["ACTIVE", "ACTIVE"]
        await runner.cancel()  # before either task ran
        assert [m.state for m in fake.messages] == ["CREATED", "CREATED"]
        assert fake.dispatcher.cause is None

        app.gate.set()
        started = runner.start_due()
        made = await asyncio.gather(*started)
        assert [m.state for m in fake.messages] == ["DELIVERED", "DELIVERED"]
        assert len([d for d in made if d is not None]) == 2
