"""A reminder service, run as its own process (``uvicorn reminders_app:app``).

``POST /reminders`` schedules a reminder through QStash with a delay; QStash calls back
``POST /send`` when it is due, signed; ``GET /sent`` lists what was sent. At start-up it
provisions a cron schedule for its daily digest (``POST /digest`` at 08:00 UTC), as apps do.
It reads the QStash settings from the environment, as a deployed app does, and knows nothing
of tests: pointed at ``pytest-qstash serve`` through ``QSTASH_URL``, it is tested end to end.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from qstash import QStash, Receiver

#: Where QStash reaches this service (its public URL in production).
PUBLIC_URL = os.environ.get("APP_URL", "http://127.0.0.1:8000")

qstash = QStash(os.environ["QSTASH_TOKEN"])  # QSTASH_URL, when set, is where QStash is
receiver = Receiver(
    current_signing_key=os.environ["QSTASH_CURRENT_SIGNING_KEY"],
    next_signing_key=os.environ["QSTASH_NEXT_SIGNING_KEY"],
)
sent: list[dict[str, Any]] = []
#: Texts whose sending fails once (an SMS provider's hiccup), to show QStash's retries.
flaky: set[str] = set()
DIGEST_SCHEDULE = "daily-digest"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Provisioned once, at start-up; the fixed id makes a restart overwrite it, not add one.
    qstash.schedule.create(
        destination=f"{PUBLIC_URL}/digest", cron="0 8 * * *", schedule_id=DIGEST_SCHEDULE
    )
    yield


app = FastAPI(lifespan=lifespan)


@app.get("/")
def health() -> dict[str, bool]:
    return {"ok": True}


@app.post("/reminders")
def create_reminder(reminder: dict[str, Any]) -> dict[str, str]:
    if reminder.get("flaky"):
        flaky.add(reminder["text"])
    result = qstash.message.publish_json(
        url=f"{PUBLIC_URL}/send", body={"text": reminder["text"]}, delay=reminder["in"]
    )
    return {"message_id": result.message_id}  # type: ignore[union-attr]


def signed(request: Request, body: bytes, path: str) -> bool:
    try:
        receiver.verify(
            signature=request.headers.get("upstash-signature", ""),
            body=body.decode(),
            url=f"{PUBLIC_URL}{path}",
        )
    except Exception:
        return False
    return True


@app.post("/send")
async def send(request: Request) -> Response:
    body = await request.body()
    if not signed(request, body, "/send"):
        return Response("invalid signature", status_code=401)
    text = (await request.json())["text"]
    if text in flaky:
        flaky.discard(text)
        return Response("SMS provider unavailable", status_code=503)
    sent.append({"text": text, "message_id": request.headers["upstash-message-id"]})
    return Response(status_code=204)


@app.post("/digest")
async def digest(request: Request) -> Response:
    if not signed(request, await request.body(), "/digest"):
        return Response("invalid signature", status_code=401)
    sent.append({"text": "daily digest", "message_id": request.headers["upstash-message-id"]})
    return Response(status_code=204)


@app.get("/sent")
def list_sent() -> list[dict[str, Any]]:
    return sent


@app.delete("/sent")
def clear_sent() -> None:
    sent.clear()
    flaky.clear()
