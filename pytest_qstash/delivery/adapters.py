"""Adapters from one delivery's request to an app's own interface, an ``Outcome`` back: ASGI,
WSGI and plain callables (test clients are ``test_clients``; Django's handlers,
``django_apps``).

Functions on the delivery path set ``__tracebackhide__``: pytest then shows a failed delivery
from the test's call straight to the app's frame.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import httpx

from .mounts import Mount
from .outcome import Outcome


async def asgi(app: Any, root_path: str, request: httpx.Request) -> Outcome:
    """One request into an ASGI app. An exception after the app sent its whole response (a
    background task's, say) does not undo the answer: QStash got it, so the attempt keeps its
    status and only carries the exception; before that, the attempt is a 500."""
    __tracebackhide__ = True
    sent_all = False
    raised: Exception | None = None

    async def watched(scope: Any, receive: Any, send: Any) -> None:
        nonlocal sent_all, raised

        async def watched_send(message: Any) -> None:
            nonlocal sent_all
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                sent_all = True

        try:
            await app(scope, receive, watched_send)
        except Exception as exc:
            raised = exc
            raise

    transport = httpx.ASGITransport(app=watched, raise_app_exceptions=False, root_path=root_path)
    response = await transport.handle_async_request(request)
    content = await response.aread()
    if raised is None:
        return Outcome(response.status_code, response.headers, content)
    if not sent_all:
        return Outcome.of_exception(raised)
    # Sent, then raised: Starlette's error middleware answers 500 and re-raises; a background
    # task fails after the app's own answer, which stands.
    error = f"{type(raised).__name__}: {raised}"
    if response.status_code < 500:
        error += " (raised after the response was sent)"
    return Outcome(response.status_code, response.headers, content, error, raised)


def wsgi(mount: Mount, request: httpx.Request) -> Outcome:
    __tracebackhide__ = True
    app, request = _latin1_environ(mount.app, request)
    transport = httpx.WSGITransport(app=app, raise_app_exceptions=True)
    response = transport.handle_request(request)
    # Read whole, and closed: where a Django request ends (request_finished).
    return Outcome(response.status_code, response.headers, response.read())


def _latin1_environ(app: Any, request: httpx.Request) -> tuple[Any, httpx.Request]:
    """httpx's WSGI transport takes header values for ASCII; a value beyond it (UTF-8, as
    QStash forwards it) reaches the app as PEP 3333 says, its bytes read as latin-1."""
    wide = {_environ_key(k): v.decode("latin-1") for k, v in request.headers.raw if not v.isascii()}
    if not wide:
        return app, request
    headers = [(k, v if v.isascii() else b"") for k, v in request.headers.raw]
    stripped = httpx.Request(request.method, request.url, headers=headers, content=request.content)

    def restored(environ: dict[str, Any], start_response: Any) -> Any:
        environ.update(wide)
        return app(environ, start_response)

    return restored, stripped


def _environ_key(name: bytes) -> str:
    key = name.decode("ascii").upper().replace("-", "_")
    return key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + key


async def awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def callable_outcome(result: Any) -> Outcome:
    """A plain callable may answer an ``httpx.Response``, a status code, or None (200)."""
    if result is None:
        return Outcome(200, httpx.Headers(), b"")
    if isinstance(result, httpx.Response):
        result.read()
        return Outcome.of_response(result)
    if isinstance(result, int) and not isinstance(result, bool):
        return Outcome(result, httpx.Headers(), b"")
    raise TypeError(
        f"a mounted callable returned {result!r}: expected an httpx.Response, an int status or None"
    )
