"""An endpoint the concurrency tests deliver to (under uvicorn, by ``AppProcess``): it answers
at once, after a while, or never, and logs when each request started and ended.

A bare ASGI app: it starts in a fraction of the time a framework takes.

- ``POST /ok``: 200 at once;
- ``POST /slow/<ms>``: 200 after ``ms`` milliseconds;
- ``POST /hang``: never answers; it ends when the caller gives up (closes the connection);
- ``POST /gate/<n>/<name>``: 200 once ``n`` requests to that path are in at once (each waits
  for the others), 504 if they are not within ``GATE_WAIT_S``: proof that they were
  delivered concurrently, whatever the machine's speed;
- ``GET /log``: ``[{"path", "id", "start", "end"}]``, wall-clock seconds, ``id`` the
  ``Upstash-Message-Id``; ``GET /``: ready.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

log: list[dict[str, Any]] = []
#: A guard for a gate whose requests never all come: the test fails with 504s, not a hang.
GATE_WAIT_S = 20.0
_gates: dict[str, tuple[asyncio.Event, list[int]]] = {}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    start = time.time()
    while (await receive()).get("more_body"):
        pass
    path = scope["path"]
    if scope["method"] == "GET":
        body = json.dumps(log if path == "/log" else {}).encode()
        await _answer(send, 200, body)
        return
    headers = dict(scope["headers"])
    entry = {"path": path, "id": headers.get(b"upstash-message-id", b"").decode(), "start": start}
    if path == "/hang":
        await receive()  # http.disconnect: the caller cut the attempt
        entry["end"] = time.time()
        log.append(entry)
        return
    if path.startswith("/gate/"):
        wanted = int(path.split("/")[2])
        opened, arrived = _gates.setdefault(path, (asyncio.Event(), [0]))
        arrived[0] += 1
        if arrived[0] >= wanted:
            opened.set()
        try:
            await asyncio.wait_for(opened.wait(), GATE_WAIT_S)
        except asyncio.TimeoutError:
            entry["end"] = time.time()
            log.append(entry)
            await _answer(send, 504, b"{}")
            return
    if path.startswith("/slow/"):
        await asyncio.sleep(int(path.rsplit("/", 1)[1]) / 1000)
    entry["end"] = time.time()
    log.append(entry)
    await _answer(send, 200, b"{}")


async def _answer(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
