"""An app the server tests run under uvicorn in a child process (``AppProcess``).

It publishes through the real SDKs (``QSTASH_URL`` points them at the server), verifies each
delivery's signature with the real ``Receiver`` (401 when it fails), and reports what it
received at ``GET /received``.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI, Request, Response
from qstash import AsyncQStash, QStash, Receiver

APP_URL = os.environ["APP_URL"]

app = FastAPI()
received: list[dict[str, Any]] = []
receiver = Receiver(
    current_signing_key=os.environ["QSTASH_CURRENT_SIGNING_KEY"],
    next_signing_key=os.environ["QSTASH_NEXT_SIGNING_KEY"],
)
client = QStash(os.environ["QSTASH_TOKEN"])
aclient = AsyncQStash(os.environ["QSTASH_TOKEN"])


@app.get("/")
def ready() -> dict[str, str]:
    return {"qstash_url": os.environ.get("QSTASH_URL", "")}


@app.post("/signup")
def signup(payload: dict[str, Any]) -> dict[str, str]:
    # A sync endpoint (a worker thread) with the sync SDK.
    result = client.message.publish_json(url=f"{APP_URL}/jobs/welcome", body=payload, delay="10m")
    return {"message_id": result.message_id}  # type: ignore[union-attr]


@app.post("/asignup")
async def asignup(payload: dict[str, Any]) -> dict[str, str]:
    result = await aclient.message.publish_json(url=f"{APP_URL}/jobs/welcome", body=payload)
    return {"message_id": result.message_id}  # type: ignore[union-attr]


@app.post("/jobs/{name}")
async def job(name: str, request: Request) -> Response:
    body = await request.body()
    try:
        receiver.verify(
            signature=request.headers.get("upstash-signature", ""),
            body=body.decode(),
            url=str(request.url),
        )
    except Exception as exc:
        return Response(f"bad signature: {exc}", status_code=401)
    received.append(
        {
            "name": name,
            "body": body.decode(),
            "message_id": request.headers.get("upstash-message-id"),
            "retried": request.headers.get("upstash-retried"),
        }
    )
    if name == "fail":
        return Response("failing on purpose", status_code=500)
    if name == "chain":
        # Publishes from inside a delivery: the server answers while it delivers.
        await aclient.message.publish_json(url=f"{APP_URL}/jobs/chained", body={"from": name})
    return Response('{"ok":true}', media_type="application/json")


@app.get("/received")
def list_received() -> list[dict[str, Any]]:
    return received
