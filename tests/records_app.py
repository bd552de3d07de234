"""One Upstash Workflow route, served both in-process (mounted on a ``FakeQStash``) and in a
child process against a ``pytest-qstash serve`` (``AppProcess``), so the server's records
can be compared with the in-process ones for the same run.

``/workflow/charge`` (``retries=0``, a failure function): run "validate" -> sleep
"cool-down" 30 s -> run "charge", which raises. ``/flow`` answers as a workflow route with
nothing to do yet. The SDK and its ``Receiver`` read
``QSTASH_*`` from the environment (the session's: the server's fixture takes the same).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Response
from upstash_workflow import AsyncWorkflowContext
from upstash_workflow.fastapi import Serve

app = FastAPI()
serve = Serve(app)
#: The failure function's calls: (status, message).
failures: list[tuple[int, str]] = []


@app.get("/")
def ready() -> dict[str, bool]:
    return {"ok": True}


@app.post("/flow")
def flow() -> Response:
    """A workflow route that has nothing to do yet: its run stays in progress."""
    return Response(status_code=200, headers={"Upstash-Workflow-Sdk-Version": "1"})


async def on_failure(
    context: AsyncWorkflowContext[Any], status: int, message: str, headers: dict[str, str]
) -> None:
    failures.append((status, message))


@serve.post("/workflow/charge", retries=0, failure_function=on_failure)
async def charge(context: AsyncWorkflowContext[dict[str, Any]]) -> None:
    payload = context.request_payload

    async def validate() -> dict[str, Any]:
        return {"order": payload["order"], "valid": True}

    await context.run("validate", validate)
    await context.sleep("cool-down", 30)

    async def pay() -> None:
        raise RuntimeError("card declined by the bank")

    await context.run("charge", pay)
