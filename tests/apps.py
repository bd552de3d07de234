"""Small real apps that receive QStash deliveries the way production apps do.

Every route of every app here (and in ``reliability_apps.py``) verifies ``Upstash-Signature``
with the real ``qstash.Receiver`` (keys read from ``os.environ``, as apps do), passing the URL
the app was called at, so a wrong ``sub``, body hash or expiry fails the request with 401 and
``Inbox.signature_errors`` shows why; a verified request is recorded in ``Inbox.received``.

This module holds what those apps share (the ``Inbox``, the SDK clients they publish with, the
signature check and the routes that fail) and the delivery apps. Each factory builds a fresh
app and the inbox it records into. Routes, in every framework:
    /webhook         any method: verify, record, answer 200 "ok"
    /http-500        any method: verify, then fail the way the framework does
                     (HTTPException / abort)
    /crash           verify, then raise RuntimeError (an unhandled bug in the handler)
    /reject          verify, then 489 with ``Upstash-NonRetryable-Error: true``
    /republish?to=U  verify, then publish the same body to U through the SDK (a cascade)
    /loop            verify, then publish the same body to itself (a runaway cascade)
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import flask
from fastapi import FastAPI, Request, Response
from qstash import AsyncQStash, QStash, Receiver
from qstash.errors import SignatureError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Route

NON_RETRYABLE = {"Upstash-NonRetryable-Error": "true"}
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


# -- what an app records -----------------------------------------------------------------------
@dataclass
class Received:
    """One request whose signature verified."""

    route: str
    method: str
    url: str
    headers: dict[str, str]
    body: str
    #: What the app's own clock read while handling the request (the fake moves it).
    time: float
    now: datetime

    @property
    def retried(self) -> int:
        return int(self.headers["upstash-retried"])

    @property
    def message_id(self) -> str:
        return self.headers["upstash-message-id"]

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Inbox:
    received: list[Received] = field(default_factory=list)
    signature_errors: list[str] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)

    def record(self, route: str, method: str, url: str, headers: Any, body: str) -> bool:
        """Verify the signature (as the app would) and record the request; False if refused."""
        receiver = Receiver(
            os.environ["QSTASH_CURRENT_SIGNING_KEY"], os.environ["QSTASH_NEXT_SIGNING_KEY"]
        )
        try:
            receiver.verify(signature=headers.get("upstash-signature", ""), body=body, url=url)
        except SignatureError as exc:
            self.signature_errors.append(f"{url}: {exc}")
            return False
        self.received.append(
            Received(
                route=route,
                method=method,
                url=url,
                headers={k.lower(): v for k, v in headers.items()},
                body=body,
                time=time.time(),
                now=datetime.now(timezone.utc),
            )
        )
        return True

    def count_call(self, url: str) -> int:
        """How many times this exact URL has now been called (1 = first): an endpoint that
        is down for a while, whichever message calls it."""
        self.calls[url] += 1
        return self.calls[url]

    @property
    def routes(self) -> list[str]:
        return [r.route for r in self.received]

    def on(self, route: str) -> list[Received]:
        return [r for r in self.received if r.route == route]


@dataclass
class WebApp:
    app: Any
    inbox: Inbox

    @property
    def hits(self) -> list[Received]:
        """Shortcut for ``inbox.received``."""
        return self.inbox.received

    def on(self, route: str) -> list[Received]:
        return self.inbox.on(route)


# -- what every app shares ---------------------------------------------------------------------
# One client each, as an app keeps a module-level one (building an httpx client costs ~40 ms).
@functools.cache
def sync_client() -> QStash:
    return QStash(os.environ["QSTASH_TOKEN"], retry=False)


@functools.cache
def async_client() -> AsyncQStash:
    return AsyncQStash(os.environ["QSTASH_TOKEN"], retry=False)


AsgiVerify = Callable[[str, Request], Awaitable[str]]
FlaskVerify = Callable[[str], str]


def asgi_verifier(inbox: Inbox) -> AsgiVerify:
    """The check an ASGI (FastAPI or Starlette) handler starts with: the body if the signature
    verifies, else a 401 (each framework renders the HTTPException its own way)."""

    async def verified(route: str, request: Request) -> str:
        body = (await request.body()).decode()
        if not inbox.record(route, request.method, str(request.url), request.headers, body):
            raise HTTPException(401, "invalid signature")
        return body

    return verified


def flask_verifier(inbox: Inbox) -> FlaskVerify:
    def verified(route: str) -> str:
        req = flask.request
        body = req.get_data(as_text=True)
        if not inbox.record(route, req.method, req.url, req.headers, body):
            flask.abort(401)
        return body

    return verified


def failing_asgi_routes(verified: AsgiVerify) -> list[BaseRoute]:
    """/http-500, /crash and /reject, for a Starlette app or a FastAPI one."""

    async def http_500(request: Request) -> Response:
        await verified("http-500", request)
        raise HTTPException(500, "database unavailable")

    async def crash(request: Request) -> Response:
        await verified("crash", request)
        raise RuntimeError("handler bug")

    async def reject(request: Request) -> Response:
        await verified("reject", request)
        return PlainTextResponse("bad payload", status_code=489, headers=NON_RETRYABLE)

    return [
        Route("/http-500", http_500, methods=METHODS),
        Route("/crash", crash, methods=["POST"]),
        Route("/reject", reject, methods=["POST"]),
    ]


def add_failing_flask_routes(app: flask.Flask, verified: FlaskVerify) -> None:
    """/http-500, /crash and /reject."""

    @app.route("/http-500", methods=METHODS)
    def http_500() -> flask.Response:
        verified("http-500")
        flask.abort(500)

    @app.post("/crash")
    def crash() -> flask.Response:
        verified("crash")
        raise RuntimeError("handler bug")

    @app.post("/reject")
    def reject() -> flask.Response:
        verified("reject")
        return flask.Response("bad payload", status=489, headers=NON_RETRYABLE)


# -- FastAPI -----------------------------------------------------------------------------------
def make_fastapi_app() -> WebApp:
    inbox = Inbox()
    verified = asgi_verifier(inbox)
    app = FastAPI(routes=failing_asgi_routes(verified))
    client = async_client()

    @app.api_route("/webhook", methods=METHODS)
    async def webhook(request: Request) -> Response:
        await verified("webhook", request)
        return Response("ok")

    @app.post("/republish")
    async def republish(request: Request, to: str) -> Response:
        body = await verified("republish", request)
        await client.message.publish(url=to, body=body)
        return Response("ok")

    @app.post("/loop")
    async def loop(request: Request) -> Response:
        body = await verified("loop", request)
        await client.message.publish(url=str(request.url), body=body)
        return Response("ok")

    return WebApp(app, inbox)


# -- Starlette ---------------------------------------------------------------------------------
def make_starlette_app() -> WebApp:
    inbox = Inbox()
    verified = asgi_verifier(inbox)
    client = async_client()

    async def webhook(request: Request) -> Response:
        await verified("webhook", request)
        return PlainTextResponse("ok")

    async def republish(request: Request) -> Response:
        body = await verified("republish", request)
        await client.message.publish(url=request.query_params["to"], body=body)
        return PlainTextResponse("ok")

    async def loop(request: Request) -> Response:
        body = await verified("loop", request)
        await client.message.publish(url=str(request.url), body=body)
        return PlainTextResponse("ok")

    app = Starlette(
        routes=[
            Route("/webhook", webhook, methods=METHODS),
            *failing_asgi_routes(verified),
            Route("/republish", republish, methods=["POST"]),
            Route("/loop", loop, methods=["POST"]),
        ]
    )
    return WebApp(app, inbox)


# -- Flask -------------------------------------------------------------------------------------
def make_flask_app() -> WebApp:
    app = flask.Flask(__name__)
    # As in a Flask test setup: an unhandled error propagates instead of becoming a 500 page.
    app.config["PROPAGATE_EXCEPTIONS"] = True
    inbox = Inbox()
    verified = flask_verifier(inbox)
    add_failing_flask_routes(app, verified)
    client = sync_client()

    @app.route("/webhook", methods=METHODS)
    def webhook() -> flask.Response:
        verified("webhook")
        return flask.Response("ok")

    @app.post("/republish")
    def republish() -> flask.Response:
        body = verified("republish")
        client.message.publish(url=flask.request.args["to"], body=body)
        return flask.Response("ok")

    @app.post("/loop")
    def loop() -> flask.Response:
        body = verified("loop")
        client.message.publish(url=flask.request.url, body=body)
        return flask.Response("ok")

    return WebApp(app, inbox)


FACTORIES = {
    "fastapi": make_fastapi_app,
    "starlette": make_starlette_app,
    "flask": make_flask_app,
}
