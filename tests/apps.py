"""Small real apps that receive QStash deliveries the way production apps do.

Each factory builds a fresh app and the ``Inbox`` it records into. Every webhook verifies
``Upstash-Signature`` with the real ``qstash.Receiver`` (keys read from ``os.environ``, as
apps do), passing the URL the app was called at, so a wrong ``sub``, body hash or expiry
fails the request with 401 and the inbox shows why.

Routes, in every framework:
    /webhook         any method: verify, record, answer 200 "ok"
    /http-500        verify, then fail the way the framework does (HTTPException / abort)
    /crash           verify, then raise RuntimeError (an unhandled bug in the handler)
    /reject          verify, then 489 with ``Upstash-NonRetryable-Error: true``
    /republish?to=U  verify, then publish the same body to U through the SDK (a cascade)
    /loop            verify, then publish the same body to itself (a runaway cascade)
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import flask
from fastapi import FastAPI, HTTPException, Request, Response
from qstash import AsyncQStash, QStash, Receiver
from qstash.errors import SignatureError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request as StarletteRequest
from starlette.responses import PlainTextResponse
from starlette.responses import Response as StarletteResponse
from starlette.routing import Route


@dataclass
class Received:
    route: str
    method: str
    url: str
    headers: dict[str, str]
    body: str
    #: What the app's own clock read while handling the request.
    time: float
    now: datetime


@dataclass
class Inbox:
    received: list[Received] = field(default_factory=list)
    signature_errors: list[str] = field(default_factory=list)

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

    @property
    def routes(self) -> list[str]:
        return [r.route for r in self.received]


@dataclass
class WebApp:
    app: Any
    inbox: Inbox


NON_RETRYABLE = {"Upstash-NonRetryable-Error": "true"}
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


# One client each, as an app keeps a module-level one (building an httpx client costs ~40 ms).
@functools.cache
def _sync_client() -> QStash:
    return QStash(os.environ["QSTASH_TOKEN"], retry=False)


@functools.cache
def _async_client() -> AsyncQStash:
    return AsyncQStash(os.environ["QSTASH_TOKEN"], retry=False)


# -- FastAPI -----------------------------------------------------------------------------------
def make_fastapi_app() -> WebApp:
    app = FastAPI()
    inbox = Inbox()
    client = _async_client()

    async def verified(route: str, request: Request) -> str:
        body = (await request.body()).decode()
        if not inbox.record(route, request.method, str(request.url), request.headers, body):
            raise HTTPException(401, "invalid signature")
        return body

    @app.api_route("/webhook", methods=_METHODS)
    async def webhook(request: Request) -> Response:
        await verified("webhook", request)
        return Response("ok")

    @app.post("/http-500")
    async def http_500(request: Request) -> Response:
        await verified("http-500", request)
        raise HTTPException(500, "database unavailable")

    @app.post("/crash")
    async def crash(request: Request) -> Response:
        await verified("crash", request)
        raise RuntimeError("handler bug")

    @app.post("/reject")
    async def reject(request: Request) -> Response:
        await verified("reject", request)
        return Response("bad payload", status_code=489, headers=NON_RETRYABLE)

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
    client = _async_client()

    async def verified(route: str, request: StarletteRequest) -> str:
        body = (await request.body()).decode()
        if not inbox.record(route, request.method, str(request.url), request.headers, body):
            raise StarletteHTTPException(401, "invalid signature")
        return body

    async def webhook(request: StarletteRequest) -> StarletteResponse:
        await verified("webhook", request)
        return PlainTextResponse("ok")

    async def http_500(request: StarletteRequest) -> StarletteResponse:
        await verified("http-500", request)
        raise StarletteHTTPException(500, "database unavailable")

    async def crash(request: StarletteRequest) -> StarletteResponse:
        await verified("crash", request)
        raise RuntimeError("handler bug")

    async def reject(request: StarletteRequest) -> StarletteResponse:
        await verified("reject", request)
        return PlainTextResponse("bad payload", status_code=489, headers=NON_RETRYABLE)

    async def republish(request: StarletteRequest) -> StarletteResponse:
        body = await verified("republish", request)
        await client.message.publish(url=request.query_params["to"], body=body)
        return PlainTextResponse("ok")

    async def loop(request: StarletteRequest) -> StarletteResponse:
        body = await verified("loop", request)
        await client.message.publish(url=str(request.url), body=body)
        return PlainTextResponse("ok")

    app = Starlette(
        routes=[
            Route("/webhook", webhook, methods=_METHODS),
            Route("/http-500", http_500, methods=["POST"]),
            Route("/crash", crash, methods=["POST"]),
            Route("/reject", reject, methods=["POST"]),
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
    client = _sync_client()

    def verified(route: str) -> str:
        req = flask.request
        body = req.get_data(as_text=True)
        if not inbox.record(route, req.method, req.url, req.headers, body):
            flask.abort(401)
        return body

    @app.route("/webhook", methods=_METHODS)
    def webhook() -> flask.Response:
        verified("webhook")
        return flask.Response("ok")

    @app.post("/http-500")
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
