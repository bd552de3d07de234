"""A workflow app for the export-and-load round trip (``test_load_roundtrip.py``): built by
``make_app`` in the test's own process (mounted in a fake) and, as ``app``, under uvicorn in a
child process against ``pytest-qstash serve`` (``AppProcess``; ``APP_URL`` names it).

``/order``: run "validate" -> sleep "cool-down" 60 s -> call "reserve" (POST to this app's
``/stock``) -> sleep_until "ship" (payload["ship_at"]) -> run "confirm". ``GET /journal``:
the step functions executed, in order. ``/hooks/{name}``: answers 500 while ``failing``.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI, Request, Response
from upstash_workflow import AsyncWorkflowContext
from upstash_workflow.fastapi import Serve


def make_app(app_url: str) -> FastAPI:
    app = FastAPI()
    serve = Serve(app)
    executed: list[list[str]] = []
    hooks: list[dict[str, Any]] = []

    @serve.post("/order")
    async def order(context: AsyncWorkflowContext[dict[str, Any]]) -> None:
        run_id = context.workflow_run_id
        payload = context.request_payload

        async def validate() -> dict[str, Any]:
            executed.append(["validate", run_id])
            return {"order": payload["order"], "valid": True}

        checked = await context.run("validate", validate)
        await context.sleep("cool-down", 60)
        reply = await context.call(
            "reserve", url=f"{app_url}/stock", method="POST", body={"qty": payload["qty"]}
        )
        await context.sleep_until("ship", payload["ship_at"])

        async def confirm() -> dict[str, Any]:
            executed.append(["confirm", run_id])
            return {"order": checked["order"], "reserved": reply.body["reserved"]}

        await context.run("confirm", confirm)

    @app.post("/stock")
    async def stock(request: Request) -> dict[str, Any]:
        body = await request.json()
        return {"reserved": body["qty"]}

    @app.api_route("/hooks/{name}", methods=["GET", "POST", "PUT"])
    async def hook(name: str, request: Request) -> Response:
        hooks.append({"name": name, "body": (await request.body()).hex()})
        return Response(status_code=500 if name == "charge" else 200)

    @app.get("/journal")
    def journal() -> dict[str, Any]:
        return {"executed": executed, "hooks": hooks}

    @app.get("/")
    def ready() -> dict[str, str]:
        return {}

    return app


if "APP_URL" in os.environ:
    app = make_app(os.environ["APP_URL"])
