"""Real Upstash Workflow apps (``upstash_workflow`` 2.0.0) for the workflow tests.

Each factory builds a fresh app around a ``Journal`` it records into. ``serve()`` reads
QSTASH_TOKEN and the signing keys when the route is declared (the plugin set them before
collection), so every delivery is verified by the SDK's own ``Receiver``: a bad signature
answers 500 and the run cannot move on.

Routes (FastAPI, async context; Flask, sync context):
    /order     run "validate" -> sleep "cool-down" 30s -> call "reserve" (POST to the stock
               service) -> sleep_until "ship" (payload["ship_at"]) -> run "confirm"
    /fails     run "prepare" (raises if payload["fail_first"]) -> run "charge", which
               raises; retries=1, failure_function
    /many      payload["steps"] runs of "step-<i>", each returning i * i
    /flaky     call "lookup" to a stock route that answers 503 (call retries=1) -> run
               "after" returning the status the call saw

Bare handlers (``serve`` / ``async_serve``), mounted as plain callables taking an
``httpx.Request``: run "add" -> sleep "nap" "1m" -> run "double".

The stock service (the third party ``context.call`` reaches) is a Starlette app:
    POST /reserve  echoes the reservation and the X-Api-Key header it got
    GET  /down     503
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import flask
import httpx
from fastapi import FastAPI
from qstash import Receiver
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from upstash_workflow import AsyncWorkflowContext, WorkflowContext, async_serve, serve
from upstash_workflow.fastapi import Serve as FastAPIServe
from upstash_workflow.flask import Serve as FlaskServe

STOCK_URL = "https://stock.test"


@dataclass
class Journal:
    """What the app's step functions saw; each entry is written once per real execution."""

    #: (step name, run id) for each step function the SDK executed.
    executed: list[tuple[str, str]] = field(default_factory=list)
    #: The initial payload and user headers each run's first step saw, by run id.
    payloads: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, dict[str, str]] = field(default_factory=dict)
    #: What the call step returned (status, body), by run id.
    call_results: dict[str, tuple[int, Any]] = field(default_factory=dict)
    #: failure_function invocations: (run id, status, message, payload).
    failures: list[tuple[str, int, str | None, Any]] = field(default_factory=list)
    #: Whether /fails' charge step fails (a test may fix the card and retry from the DLQ).
    card_declined: bool = True
    #: The user headers each failure_function saw, by run id.
    failure_headers: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Requests the stock service received: (method, path, headers, body).
    stock_requests: list[tuple[str, str, dict[str, str], str]] = field(default_factory=list)

    def names(self, run_id: str) -> list[str]:
        return [name for name, rid in self.executed if rid == run_id]


# -- the third party ------------------------------------------------------------------------
def stock_app(journal: Journal) -> Starlette:
    async def reserve(request: Request) -> JSONResponse:
        body = (await request.body()).decode()
        journal.stock_requests.append(("POST", "/reserve", dict(request.headers), body))
        order = json.loads(body)
        return JSONResponse(
            {"reserved": order["qty"], "sku": order["sku"], "key": request.headers["x-api-key"]}
        )

    async def down(request: Request) -> JSONResponse:
        journal.stock_requests.append(("GET", "/down", dict(request.headers), ""))
        return JSONResponse({"error": "maintenance"}, status_code=503)

    return Starlette(routes=[Route("/reserve", reserve, methods=["POST"]), Route("/down", down)])


# -- FastAPI (async SDK) --------------------------------------------------------------------
def fastapi_workflow_app(journal: Journal, *, receiver: Receiver | None = None) -> FastAPI:
    app = FastAPI()
    serve = FastAPIServe(app)

    @serve.post("/order", receiver=receiver)
    async def order(context: AsyncWorkflowContext[dict[str, Any]]) -> None:
        run_id = context.workflow_run_id
        payload = context.request_payload

        async def validate() -> dict[str, Any]:
            journal.executed.append(("validate", run_id))
            journal.payloads[run_id] = payload
            journal.headers[run_id] = dict(context.headers)
            return {"order": payload["order"], "valid": True}

        checked = await context.run("validate", validate)
        await context.sleep("cool-down", 30)
        reply = await context.call(
            "reserve",
            url=f"{STOCK_URL}/reserve",
            method="POST",
            body={"sku": payload["sku"], "qty": payload["qty"]},
            headers={"X-Api-Key": "stock-secret"},
        )
        journal.call_results[run_id] = (reply.status, reply.body)
        await context.sleep_until("ship", payload["ship_at"])

        async def confirm() -> dict[str, Any]:
            journal.executed.append(("confirm", run_id))
            return {"order": checked["order"], "reserved": reply.body["reserved"]}

        await context.run("confirm", confirm)

    async def on_failure(
        context: AsyncWorkflowContext[Any], status: int, message: str, headers: dict[str, str]
    ) -> None:
        journal.failures.append((context.workflow_run_id, status, message, context.request_payload))
        journal.failure_headers[context.workflow_run_id] = dict(context.headers)

    @serve.post("/fails", retries=1, failure_function=on_failure)
    async def fails(context: AsyncWorkflowContext[Any]) -> None:
        run_id = context.workflow_run_id

        async def prepare() -> str:
            journal.executed.append(("prepare", run_id))
            if context.request_payload.get("fail_first"):
                raise RuntimeError("no stock")
            return "prepared"

        async def charge() -> None:
            journal.executed.append(("charge", run_id))
            if journal.card_declined:
                raise RuntimeError("card declined")

        await context.run("prepare", prepare)
        await context.run("charge", charge)

    @serve.post("/many")
    async def many(context: AsyncWorkflowContext[dict[str, int]]) -> None:
        run_id = context.workflow_run_id
        for i in range(context.request_payload["steps"]):

            async def square(i: int = i) -> int:
                journal.executed.append((f"step-{i}", run_id))
                return i * i

            await context.run(f"step-{i}", square)

    @serve.post("/flaky")
    async def flaky(context: AsyncWorkflowContext[Any]) -> None:
        run_id = context.workflow_run_id
        reply = await context.call("lookup", url=f"{STOCK_URL}/down", retries=1)
        journal.call_results[run_id] = (reply.status, reply.body)

        async def after() -> int:
            journal.executed.append(("after", run_id))
            return reply.status

        await context.run("after", after)

    return app


# -- Flask (sync SDK) -----------------------------------------------------------------------
def flask_workflow_app(journal: Journal) -> flask.Flask:
    app = flask.Flask(__name__)
    serve = FlaskServe(app)

    @serve.route("/order")
    def order(context: WorkflowContext[dict[str, Any]]) -> None:
        run_id = context.workflow_run_id
        payload = context.request_payload

        def validate() -> dict[str, Any]:
            journal.executed.append(("validate", run_id))
            journal.payloads[run_id] = payload
            journal.headers[run_id] = dict(context.headers)
            return {"order": payload["order"], "valid": True}

        checked = context.run("validate", validate)
        context.sleep("cool-down", 30)
        reply = context.call(
            "reserve",
            url=f"{STOCK_URL}/reserve",
            method="POST",
            body={"sku": payload["sku"], "qty": payload["qty"]},
            headers={"X-Api-Key": "stock-secret"},
        )
        journal.call_results[run_id] = (reply.status, reply.body)
        context.sleep_until("ship", payload["ship_at"])

        def confirm() -> dict[str, Any]:
            journal.executed.append(("confirm", run_id))
            return {"order": checked["order"], "reserved": reply.body["reserved"]}

        context.run("confirm", confirm)

    def on_failure(
        context: WorkflowContext[Any], status: int, message: str, headers: dict[str, str]
    ) -> None:
        journal.failures.append((context.workflow_run_id, status, message, context.request_payload))
        journal.failure_headers[context.workflow_run_id] = dict(context.headers)

    @serve.route("/fails", retries=1, failure_function=on_failure)
    def fails(context: WorkflowContext[Any]) -> None:
        run_id = context.workflow_run_id

        def prepare() -> str:
            journal.executed.append(("prepare", run_id))
            if context.request_payload.get("fail_first"):
                raise RuntimeError("no stock")
            return "prepared"

        def charge() -> None:
            journal.executed.append(("charge", run_id))
            if journal.card_declined:
                raise RuntimeError("card declined")

        context.run("prepare", prepare)
        context.run("charge", charge)

    return app


# -- bare serve() / async_serve() -----------------------------------------------------------
@dataclass
class BareRequest:
    """What ``serve()``'s handler reads from a request. ``headers`` must look names up
    case-insensitively (the SDK asks for ``Upstash-Workflow-Sdk-Version`` as spelled)."""

    body: str
    headers: Mapping[str, str]
    url: str
    method: str = "POST"


@dataclass
class AsyncBareRequest:
    """``async_serve()``'s handler awaits the body."""

    content: bytes
    headers: Mapping[str, str]
    url: str
    method: str = "POST"

    async def body(self) -> bytes:
        return self.content


def bare_workflow_handler(journal: Journal) -> Callable[[httpx.Request], httpx.Response]:
    def route(context: WorkflowContext[dict[str, int]]) -> None:
        run_id = context.workflow_run_id

        def add() -> int:
            journal.executed.append(("add", run_id))
            return context.request_payload["a"] + context.request_payload["b"]

        total = context.run("add", add)
        context.sleep("nap", "1m")

        def double() -> int:
            journal.executed.append(("double", run_id))
            return total * 2

        context.run("double", double)

    handler = serve(route)["handler"]

    def app(request: httpx.Request) -> httpx.Response:
        reply = handler(BareRequest(request.content.decode(), request.headers, str(request.url)))
        return httpx.Response(reply.status, content=reply.body.encode(), headers=reply.headers)

    return app


def async_bare_workflow_handler(
    journal: Journal,
) -> Callable[[httpx.Request], Awaitable[httpx.Response]]:
    async def route(context: AsyncWorkflowContext[dict[str, int]]) -> None:
        run_id = context.workflow_run_id

        async def add() -> int:
            journal.executed.append(("add", run_id))
            return context.request_payload["a"] + context.request_payload["b"]

        total = await context.run("add", add)
        await context.sleep("nap", "1m")

        async def double() -> int:
            journal.executed.append(("double", run_id))
            return total * 2

        await context.run("double", double)

    handler = async_serve(route)["handler"]

    async def app(request: httpx.Request) -> httpx.Response:
        reply = await handler(AsyncBareRequest(request.content, request.headers, str(request.url)))
        return httpx.Response(reply.status, content=reply.body.encode(), headers=reply.headers)

    return app
