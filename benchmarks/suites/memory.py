"""Budget 4: memory held by undelivered messages, and copies of a delivered body."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import httpx
from bench import (
    APP_BASE,
    HOOK,
    PUBLISH_PREFIX,
    START,
    Mode,
    Report,
    Step,
)

from pytest_qstash import FakeQStash


# -- 4. memory -------------------------------------------------------------------------------
def _body(i: int, size: int) -> bytes:
    head = b'{"n":%08d,"pad":"' % i
    return head + b"x" * (size - len(head) - 2) + b'"}'


def undelivered_memory(report: Report, n: int) -> None:
    with FakeQStash(start=START) as fake:
        builder = httpx.Client()
        headers = {"Authorization": f"Bearer {fake.token}", "Content-Type": "application/json"}
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            # Built per message and dropped, as the SDK does; the fake keeps what it keeps.
            request = builder.build_request("POST", PUBLISH_PREFIX + HOOK, headers=headers)
            request = httpx.Request(
                "POST", request.url, headers=request.headers, content=_body(i, 1024)
            )
            response = fake.handle(request)
            assert response.status_code == 200, response.text
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert len(fake.messages) == n
        builder.close()
    report.check(
        f"4. {n:,} undelivered 1 KiB messages held (fake.handle, tracemalloc)",
        f"{held / 1e6:,.0f} MB",
        f"{n * 1024 / 1e6:,.0f} MB of bodies",
        held / (n * 1024),
        "< 300 MB" if n == 100_000 else "info (300 MB at 100k)",
        held < 300e6 if n == 100_000 else None,
        absolute=True,
    )
    report.check(
        "4. held per message beyond its body",
        f"{(held - n * 1024) / n:,.0f} B",
        "-",
        None,
        "info",
        None,
    )


def delivered_body_copies(report: Report, size: int) -> None:
    """How many copies of a body delivering it allocates (held after, and at peak), measured
    as multiples of the body's size; the app reads the body from ASGI and drops it."""
    received: list[int] = []

    async def raw_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        length = 0
        while True:
            event = await receive()
            length += len(event.get("body", b""))
            if not event.get("more_body"):
                break
        received.append(length)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    with FakeQStash(start=START) as fake:
        fake.mount(APP_BASE, raw_app, kind="asgi")
        headers = {"Authorization": f"Bearer {fake.token}", "Content-Type": "text/plain"}

        def publish(body: bytes) -> None:
            request = httpx.Request("POST", PUBLISH_PREFIX + HOOK, headers=headers, content=body)
            assert fake.handle(request).status_code == 200

        publish(b"warm-up")  # the first delivery creates the fake's event loop: not measured
        fake.tick()
        body = _body(0, size)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        publish(body)
        del body  # from here on only the fake holds it
        fake.tick()
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert received == [len(b"warm-up"), size]
        assert fake.deliveries[1].content is fake.messages[1].content
    extra_held = (held - before) / size
    extra_peak = (peak - before) / size
    report.check(
        f"4. body copies made, publish + deliver {size // 2**20} MiB (held / peak)",
        f"{extra_held:.2f} / {extra_peak:.2f}",
        "0 (one body, shared)",
        None,
        "held <= 0.05, peak <= 1.05",
        extra_held <= 0.05 and extra_peak <= 1.05,
        absolute=True,
    )


def steps(report: Report, mode: Mode) -> list[Step]:
    if mode == "ci":  # absolute bounds (bytes), judged in full runs
        return []
    messages, body = (100_000, 8 * 2**20) if mode == "full" else (1_000, 2**20)
    return [
        ("4", "< 300 MB", lambda: undelivered_memory(report, messages)),
        ("4", "copies", lambda: delivered_body_copies(report, body)),
    ]
