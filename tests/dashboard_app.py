"""An app the dashboard and control-verb tests run under uvicorn (``AppProcess``): plain job
endpoints (one failing), one that counts what it processed by ``Upstash-Message-Id`` (an
idempotent handler), a third-party service (``/stock``), and two Upstash Workflow routes: one
with a step, a sleep, a call and another step, one whose second step fails.
The workflow SDK and ``Receiver`` read ``QSTASH_*`` from the environment the server's fixture
set."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from fastapi import FastAPI, Request, Response
from qstash import Receiver
from upstash_workflow import AsyncWorkflowContext
from upstash_workflow.fastapi import Serve

APP_URL = os.environ["APP_URL"]
app = FastAPI()
serve = Serve(app)
receiver = Receiver(
    current_signing_key=os.environ["QSTASH_CURRENT_SIGNING_KEY"],
    next_signing_key=os.environ["QSTASH_NEXT_SIGNING_KEY"],
)
#: How often each message id reached /jobs/once, and how often its work was done.
seen: Counter[str] = Counter()
done: Counter[str] = Counter()


@app.get("/")
def ready() -> dict[str, bool]:
    return {"ok": True}


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
    if name == "fail":
        return Response("card declined", status_code=500)
    if name == "once":
        message_id = request.headers["upstash-message-id"]
        seen[message_id] += 1
        if seen[message_id] == 1:  # idempotent: a redelivery does the work no second time
            done[message_id] += 1
    return Response('{"ok":true}', media_type="application/json")


@app.post("/stock")
async def stock(payload: dict[str, Any]) -> dict[str, Any]:
    return {"reserved": payload["qty"]}


@app.get("/once")
def once() -> dict[str, Any]:
    return {"seen": dict(seen), "done": dict(done)}


@serve.post("/workflow/order")
async def order(context: AsyncWorkflowContext[dict[str, Any]]) -> None:
    payload = context.request_payload

    async def validate() -> dict[str, Any]:
        return {"order": payload["order"], "valid": True}

    await context.run("validate", validate)
    await context.sleep("cool-down", 30)
    reply = await context.call(
        "reserve", url=f"{APP_URL}/stock", method="POST", body={"qty": payload["qty"]}
    )

    async def confirm() -> str:
        return f"order {payload['order']} confirmed, {reply.body['reserved']} reserved"

    await context.run("confirm", confirm)


@serve.post("/workflow/declined", retries=0)
async def declined(context: AsyncWorkflowContext[dict[str, Any]]) -> None:
    async def validate() -> bool:
        return True

    await context.run("validate", validate)

    async def charge() -> None:
        raise RuntimeError("card declined by the bank")

    await context.run("charge", charge)
