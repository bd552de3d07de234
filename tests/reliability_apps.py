"""Apps that fail the way real apps fail, for the retry / DLQ / callback / cancel tests.

``make_app()`` builds a FastAPI app and ``make_flask_app()`` a Flask one with the same routes
but /plain-489 and /throttled. Each is a ``WebApp`` (see ``apps.py``) whose every route verifies
the signature, then records the call in its ``Inbox`` (``app.hits`` for short). Routes:

    /ok                  200 "ok" (any method)
    /http-500            the framework's 500 (FastAPI HTTPException / Flask abort)
    /crash               an unhandled RuntimeError
    /reject              489 with ``Upstash-NonRetryable-Error: true``
    /plain-489           489 without that header (an ordinary failure)
    /flaky?fail=N        503 for the first N calls to this exact URL, then 200 "done"
    /throttled?fail=N&retry_after=V[&header=H]
                         429 with header H (default Retry-After) = V for the first N calls to
                         this exact URL, then 200
    /cancel-self         cancels its own message through the SDK, then answers 500
"""

from __future__ import annotations

import itertools
import math
from datetime import datetime
from typing import Any

import flask
from apps import (
    METHODS,
    Inbox,
    WebApp,
    add_failing_flask_routes,
    asgi_verifier,
    async_client,
    failing_asgi_routes,
    flask_verifier,
    sync_client,
)
from fastapi import FastAPI, HTTPException, Request, Response
from qstash import AsyncQStash, QStash

BASE = "https://shop.example.com"
HOOKS = "https://hooks.example.com"  # where callbacks are sent


def make_app() -> WebApp:
    """The FastAPI flavour (ASGI)."""
    inbox = Inbox()
    verified = asgi_verifier(inbox)
    app = FastAPI(routes=failing_asgi_routes(verified))

    @app.api_route("/ok", methods=METHODS)
    async def ok(request: Request) -> Response:
        await verified("ok", request)
        return Response("ok")

    @app.post("/plain-489")
    async def plain_489(request: Request) -> Response:
        await verified("plain-489", request)
        return Response("not today", status_code=489)

    @app.post("/flaky")
    async def flaky(request: Request, fail: int) -> Response:
        await verified("flaky", request)
        if inbox.count_call(str(request.url)) <= fail:
            return Response("not yet", status_code=503)
        return Response("done")

    @app.post("/throttled")
    async def throttled(
        request: Request, fail: int, retry_after: str, header: str = "Retry-After"
    ) -> Response:
        await verified("throttled", request)
        if inbox.count_call(str(request.url)) <= fail:
            return Response("slow down", status_code=429, headers={header: retry_after})
        return Response("done")

    @app.post("/cancel-self")
    async def cancel_self(request: Request) -> Response:
        await verified("cancel-self", request)
        await async_client().message.cancel(request.headers["upstash-message-id"])
        return Response("cancelled myself", status_code=500)

    return WebApp(app, inbox)


def make_flask_app() -> WebApp:
    """The Flask flavour (WSGI), for the routes the retry tests run on both kinds."""
    app = flask.Flask(__name__)
    app.config["PROPAGATE_EXCEPTIONS"] = True  # an unhandled error reaches the server
    inbox = Inbox()
    verified = flask_verifier(inbox)
    add_failing_flask_routes(app, verified)

    @app.route("/ok", methods=METHODS)
    def ok() -> flask.Response:
        verified("ok")
        return flask.Response("ok")

    @app.post("/flaky")
    def flaky() -> flask.Response:
        verified("flaky")
        if inbox.count_call(flask.request.url) <= int(flask.request.args["fail"]):
            return flask.Response("not yet", status=503)
        return flask.Response("done")

    @app.post("/cancel-self")
    def cancel_self() -> flask.Response:
        verified("cancel-self")
        sync_client().message.cancel(flask.request.headers["upstash-message-id"])
        return flask.Response("cancelled myself", status=500)

    return WebApp(app, inbox)


def make_hooks_app() -> WebApp:
    """Where callbacks and failure callbacks land: /callback and /failure answer 200,
    /broken answers 500, all record (and verify) what they receive."""
    app = FastAPI()
    inbox = Inbox()
    verified = asgi_verifier(inbox)

    @app.api_route("/callback", methods=METHODS)
    async def callback(request: Request) -> Response:
        await verified("callback", request)
        return Response("thanks")

    @app.api_route("/failure", methods=METHODS)
    async def failure(request: Request) -> Response:
        await verified("failure", request)
        return Response("noted")

    @app.api_route("/broken", methods=METHODS)
    async def broken(request: Request) -> Response:
        await verified("broken", request)
        raise HTTPException(500, "callback handler down")

    return WebApp(app, inbox)


# -- helpers shared by the reliability tests ---------------------------------------------------
def backoff_ms(n: int) -> int:
    """QStash's documented default delay before retry n (1 = first retry):
    min(1 day, e^(2.5 n) seconds), to the nearest millisecond. Written out here rather than
    imported, so the tests check the engine against the documentation, not against itself."""
    return min(86_400_000, math.floor(math.exp(2.5 * n) * 1000 + 0.5))


def publish(client: QStash, url: str, body: str = "payload", **options: Any) -> str:
    """Publish through the real SDK; the new (or deduplicated-into) message id."""
    response = client.message.publish(url=url, body=body, **options)
    message_id: str = response.message_id  # type: ignore[union-attr]
    return message_id


async def apublish(client: AsyncQStash, url: str, body: str = "payload", **options: Any) -> str:
    response = await client.message.publish(url=url, body=body, **options)
    message_id: str = response.message_id  # type: ignore[union-attr]
    return message_id


def gaps_ms(times: list[datetime]) -> list[int]:
    """Milliseconds between consecutive moments."""
    return [round((b - a).total_seconds() * 1000) for a, b in itertools.pairwise(times)]
