"""A workflow app the deploy-check CLI tests run under uvicorn (``AppProcess``): its ``/flow``
route, on ``upstash_workflow``, runs the steps ``DEPLOY_PLAN`` names (comma-separated;
``"x"`` is ``context.run("x")``, ``"sleep:x"`` a one-hour sleep), publishing to the QStash
``QSTASH_URL`` names and verifying each delivery with the signing keys of its environment."""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI
from upstash_workflow import AsyncWorkflowContext
from upstash_workflow.fastapi import Serve

PLAN = os.environ.get("DEPLOY_PLAN", "a,sleep:b,c").split(",")

app = FastAPI()
serve = Serve(app)


@app.get("/")
def ready() -> dict[str, list[str]]:
    return {"plan": PLAN}


@serve.post("/flow")
async def flow(context: AsyncWorkflowContext[Any]) -> None:
    for item in PLAN:
        if item.startswith("sleep:"):
            await context.sleep(item.removeprefix("sleep:"), "1h")
        else:

            async def body(name: str = item) -> str:
                return f"{name}:done"

            await context.run(item, body)
