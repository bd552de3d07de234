"""An endpoint the concurrency tests deliver to (under uvicorn, by ``AppProcess``): it answers
at once, after a while, or never, and logs when each request started and ended.

A bare ASGI app: it starts in a fraction of the time a framework takes.

- ``POST /ok``: 200 at once;
- ``POST /slow/<ms>``: 200 after ``ms`` milliseconds;
- ``POST /hang``: never answers; it ends when the caller gives up (closes the connection);
- ``GET /log``: ``[{"path", "id", "start", "end"}]``, wall-clock seconds, ``id`` the
  ``Upstash-Message-Id``; ``GET /``: ready.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

log: list[dict[str, Any]] = []


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
    if path.startswith("/slow/"):
        await asyncio.sleep(int(path.rsplit("/", 1)[1]) / 1000)
    entry["end"] = time.time()
    log.append(entry)
    await _answer(send, 200, b"{}")


async def _answer(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
