"""The project a documentation sample stands in: the names samples use without defining them.

``tests/test_docs_samples.py`` runs each sample as a test module of its own, in an inner pytest
session whose conftest star-imports this module; so a sample's ``app``, ``client`` or
``outbox`` are these. Samples show what a user writes; this module is the user's project.
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from qstash import QStash
from qstash.errors import RateLimitExceededError
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from upstash_workflow import AsyncWorkflowContext
from upstash_workflow.fastapi import Serve

from pytest_qstash import FakeQStash

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

__all__ = [
    "FakeQStash",
    "TestClient",
    "app",
    "billing_app",
    "card",
    "client",
    "flaky_app",
    "handler",
    "hooks_app",
    "httpx",
    "orders_app",
    "os",
    "outbox",
    "publish_to_partner",
    "pytest",
    "shop_app",
    "signup_app",
    "signup_client",
    "timedelta",
]


async def _ok(request: Any) -> PlainTextResponse:
    return PlainTextResponse("ok")


#: "Your app": an ASGI app (with a lifespan) answering 200 to everything.
app = Starlette(routes=[Route("/{path:path}", _ok, methods=["GET", "POST", "PUT", "DELETE"])])
hooks_app = Starlette(routes=[Route("/{path:path}", _ok, methods=["POST"])])


def handler(request: httpx.Request) -> int:
    return 200


def flaky_app() -> Any:
    """Answers 503 with ``Retry-After: 30`` once, then 200."""
    answers = [httpx.Response(503, headers={"Retry-After": "30"})]

    def answer(request: httpx.Request) -> httpx.Response:
        return answers.pop() if answers else httpx.Response(200)

    return answer


#: The SDK client, as the app builds it from its settings.
client = QStash(os.environ["QSTASH_TOKEN"])


def publish_to_partner() -> None:
    client.message.publish_json(url="https://partner.example.com/hook", body={"event": "paid"})


# -- a signup service: POST /signup publishes a welcome job ---------------------------------
SIGNUP_URL = "https://signup.example.com"
outbox: list[str] = []
signup_app = FastAPI()


@signup_app.post("/signup")
async def signup(request: Request) -> JSONResponse:
    email = (await request.json())["email"]
    try:
        client.message.publish_json(url=f"{SIGNUP_URL}/jobs/welcome", body={"email": email})
    except RateLimitExceededError:
        return JSONResponse({"error": "try again"}, status_code=503)
    return JSONResponse({"ok": True}, status_code=201)


@signup_app.post("/jobs/welcome")
async def welcome(request: Request) -> JSONResponse:
    outbox.append(f"Welcome, {(await request.json())['email']}")
    return JSONResponse({"sent": True})


@pytest.fixture(name="client")
def signup_client(qstash: FakeQStash) -> Iterator[TestClient]:
    """The test client of the signup service (a sample's ``client`` fixture)."""
    outbox.clear()
    qstash.mount(SIGNUP_URL, signup_app)
    with TestClient(signup_app, base_url=SIGNUP_URL) as test_client:
        yield test_client


# -- an order service: POST /orders publishes a job to its own /jobs/order --------------------
orders_app = FastAPI()


@orders_app.post("/orders")
async def place_order(request: Request) -> JSONResponse:
    body = await request.json()
    client.message.publish_json(url="https://app.example.com/jobs/order", body=body)
    return JSONResponse({"ok": True}, status_code=201)


@orders_app.post("/jobs/order")
async def order_job(request: Request) -> JSONResponse:
    return JSONResponse({"done": (await request.json())["id"]})


# -- a shop whose /order route is an Upstash Workflow ---------------------------------------
shop_app = FastAPI()
_serve = Serve(shop_app)


@shop_app.post("/stock/reserve")
async def reserve(request: Request) -> JSONResponse:  # the third party context.call reaches
    return JSONResponse({"reserved": (await request.json())["qty"]})


@_serve.post("/order")
async def order(context: AsyncWorkflowContext[dict[str, Any]]) -> None:
    payload = context.request_payload

    async def validate() -> bool:
        return payload["qty"] > 0

    await context.run("validate", validate)
    await context.sleep("cool-down", 30)
    reply = await context.call(
        "reserve", url="https://shop.example.com/stock/reserve", method="POST", body=payload
    )

    async def confirm() -> Any:
        return reply.body

    await context.run("confirm", confirm)


billing_app = FastAPI()
_billing = Serve(billing_app)
#: Whether the card is declined: the charge step fails while it is.
card = {"declined": True}


@_billing.post("/charge")
async def charge_flow(context: AsyncWorkflowContext[dict[str, Any]]) -> None:
    async def reserve() -> str:
        return "reserved"

    async def charge() -> str:
        if card["declined"]:
            raise RuntimeError("card declined")
        return "charged"

    await context.run("reserve", reserve)
    await context.run("charge", charge)


# `from myproject.main import app`, as a user's conftest writes it.
_myproject = types.ModuleType("myproject")
_myproject_main = types.ModuleType("myproject.main")
_myproject_main.app = app  # type: ignore[attr-defined]
_myproject.main = _myproject_main  # type: ignore[attr-defined]
sys.modules.setdefault("myproject", _myproject)
sys.modules.setdefault("myproject.main", _myproject_main)
