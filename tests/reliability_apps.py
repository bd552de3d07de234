"""Apps that fail the way real apps fail, for the retry / DLQ / callback / cancel tests.

``make_app()`` builds a FastAPI app and ``make_flask_app()`` a Flask one with the same routes.
Every route verifies ``Upstash-Signature`` with the real ``qstash.Receiver`` against the URL it
was called at (a wrong ``sub`` or body hash answers 401 and is recorded as a signature error),
then records the call in ``app.hits``:

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

import functools
import itertools
import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import flask
from fastapi import FastAPI, HTTPException, Request, Response
from qstash import AsyncQStash, QStash, Receiver
from qstash.errors import SignatureError

BASE = "https://shop.example.com"
HOOKS = "https://hooks.example.com"  # where callbacks are sent
NON_RETRYABLE = {"Upstash-NonRetryable-Error": "true"}
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


@dataclass
class Hit:
    route: str
    method: str
    url: str
    headers: dict[str, str]
    body: str
    #: The app's own clock while handling the request (the fake moves it).
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
class Recorder:
    hits: list[Hit] = field(default_factory=list)
    signature_errors: list[str] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)

    def record(self, route: str, method: str, url: str, headers: Any, body: str) -> bool:
        receiver = Receiver(
            os.environ["QSTASH_CURRENT_SIGNING_KEY"], os.environ["QSTASH_NEXT_SIGNING_KEY"]
        )
        try:
            receiver.verify(signature=headers.get("upstash-signature", ""), body=body, url=url)
        except SignatureError as exc:
            self.signature_errors.append(f"{url}: {exc}")
            return False
        lowered = {k.lower(): v for k, v in headers.items()}
        self.hits.append(Hit(route, method, url, lowered, body, datetime.now(timezone.utc)))
        return True

    def count_call(self, url: str) -> int:
        """How many times this exact URL has now been called (1 = first): an endpoint that
        is down for a while, whichever message calls it."""
        self.calls[url] += 1
        return self.calls[url]

    def routes(self) -> list[str]:
        return [hit.route for hit in self.hits]

    def on(self, route: str) -> list[Hit]:
        return [hit for hit in self.hits if hit.route == route]


@dataclass
class App:
    app: Any
    recorder: Recorder

    @property
    def hits(self) -> list[Hit]:
        return self.recorder.hits

    def on(self, route: str) -> list[Hit]:
        return self.recorder.on(route)


@functools.cache
def _async_client() -> AsyncQStash:
    return AsyncQStash(os.environ["QSTASH_TOKEN"], retry=False)


@functools.cache
def _sync_client() -> QStash:
    return QStash(os.environ["QSTASH_TOKEN"], retry=False)


def make_app() -> App:
    """The FastAPI flavour (ASGI)."""
    app = FastAPI()
    recorder = Recorder()

    async def verified(route: str, request: Request) -> str:
        body = (await request.body()).decode()
        if not recorder.record(route, request.method, str(request.url), request.headers, body):
            raise HTTPException(401, "invalid signature")
        return body

    @app.api_route("/ok", methods=METHODS)
    async def ok(request: Request) -> Response:
        await verified("ok", request)
        return Response("ok")

    @app.api_route("/http-500", methods=METHODS)
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

    @app.post("/plain-489")
    async def plain_489(request: Request) -> Response:
        await verified("plain-489", request)
        return Response("not today", status_code=489)

    @app.post("/flaky")
    async def flaky(request: Request, fail: int) -> Response:
        await verified("flaky", request)
        if recorder.count_call(str(request.url)) <= fail:
            return Response("not yet", status_code=503)
        return Response("done")

    @app.post("/throttled")
    async def throttled(
        request: Request, fail: int, retry_after: str, header: str = "Retry-After"
    ) -> Response:
        await verified("throttled", request)
        if recorder.count_call(str(request.url)) <= fail:
            return Response("slow down", status_code=429, headers={header: retry_after})
        return Response("done")

    @app.post("/cancel-self")
    async def cancel_self(request: Request) -> Response:
        await verified("cancel-self", request)
        await _async_client().message.cancel(request.headers["upstash-message-id"])
        return Response("cancelled myself", status_code=500)

    return App(app, recorder)


def make_flask_app() -> App:
    """The Flask flavour (WSGI), for the routes the retry tests run on both kinds."""
    app = flask.Flask(__name__)
    app.config["PROPAGATE_EXCEPTIONS"] = True  # an unhandled error reaches the server
    recorder = Recorder()

    def verified(route: str) -> str:
        req = flask.request
        body = req.get_data(as_text=True)
        if not recorder.record(route, req.method, req.url, req.headers, body):
            flask.abort(401)
        return body

    @app.route("/ok", methods=METHODS)
    def ok() -> flask.Response:
        verified("ok")
        return flask.Response("ok")

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

    @app.post("/flaky")
    def flaky() -> flask.Response:
        verified("flaky")
        if recorder.count_call(flask.request.url) <= int(flask.request.args["fail"]):
            return flask.Response("not yet", status=503)
        return flask.Response("done")

    @app.post("/cancel-self")
    def cancel_self() -> flask.Response:
        verified("cancel-self")
        _sync_client().message.cancel(flask.request.headers["upstash-message-id"])
        return flask.Response("cancelled myself", status=500)

    return App(app, recorder)


def make_hooks_app() -> App:
    """Where callbacks and failure callbacks land: /callback and /failure answer 200,
    /broken answers 500, all record (and verify) what they receive."""
    app = FastAPI()
    recorder = Recorder()

    async def verified(route: str, request: Request) -> None:
        body = (await request.body()).decode()
        if not recorder.record(route, request.method, str(request.url), request.headers, body):
            raise HTTPException(401, "invalid signature")

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

    return App(app, recorder)


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
