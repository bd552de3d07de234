"""Deliveries through a mounted test client (a Starlette ``TestClient``, an httpx client on a
test transport, Werkzeug's and Django's test clients): each client's request in, an
``Outcome`` back."""

from __future__ import annotations

import importlib
from typing import Any

import httpx

from ..errors import QStashFakeError
from .mounts import Mount
from .outcome import Outcome


def test_client_app(client: Any) -> tuple[Any, str]:
    """A Starlette TestClient's app as its own requests reach it: with a copy of the
    lifespan's state in the scope, and its root path."""
    app, state = client.app, client.app_state

    async def with_state(scope: Any, receive: Any, send: Any) -> None:
        scope["state"] = state.copy()
        await app(scope, receive, send)

    return with_state, getattr(getattr(client, "_transport", None), "root_path", "") or ""


def through_sync_client(mount: Mount, request: httpx.Request) -> Outcome:
    __tracebackhide__ = True
    client = mount.app
    try:
        if mount.client == "httpx":
            response = client.send(request, auth=None, follow_redirects=False)
            return Outcome.of_response(response)
        if mount.client == "werkzeug":
            return _werkzeug_outcome(client.open(**_werkzeug_args(request)))
        return _django_outcome(client.generic(**_django_args(request)))
    except QStashFakeError:
        raise
    except httpx.TransportError as exc:  # the client's transport could not answer
        return Outcome(None, httpx.Headers(), b"", f"{type(exc).__name__}: {exc}")


async def through_async_client(mount: Mount, request: httpx.Request) -> Outcome:
    __tracebackhide__ = True
    client = mount.app
    try:
        if mount.client == "httpx-async":
            response = await client.send(request, auth=None, follow_redirects=False)
            await response.aread()
            return Outcome.of_response(response)
        # AsyncClient.generic() always adds `Host: testserver`: the scope is built here.
        return _django_outcome(await client.request(**_django_scope(request)))
    except httpx.TransportError as exc:
        return Outcome(None, httpx.Headers(), b"", f"{type(exc).__name__}: {exc}")


def _werkzeug_args(request: httpx.Request) -> dict[str, Any]:
    url = request.url
    return {
        "path": url.raw_path.decode("ascii"),  # path and query, as sent
        "base_url": f"{url.scheme}://{url.netloc.decode('ascii')}",
        "method": request.method,
        "headers": [
            (k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"
        ],
        "data": request.content,
    }


def _werkzeug_outcome(response: Any) -> Outcome:
    headers = httpx.Headers(list(response.headers.items()))
    return Outcome(response.status_code, headers, response.get_data())


def _django_args(request: httpx.Request) -> dict[str, Any]:
    url = request.url
    headers: dict[str, str] = {}
    for key, value in request.headers.multi_items():
        if key.lower() in ("content-type", "content-length"):
            continue
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return {
        "method": request.method,
        "path": url.raw_path.decode("ascii"),
        "data": request.content,
        "content_type": request.headers.get("content-type", "application/octet-stream"),
        "secure": url.scheme == "https",
        "headers": headers,
        "SERVER_PORT": str(url.port or (443 if url.scheme == "https" else 80)),
    }


def _django_scope(request: httpx.Request) -> dict[str, Any]:
    # Only ever called for a Django client, so Django is there; untyped, hence the lookup.
    fake_payload = importlib.import_module("django.test.client").FakePayload
    url = request.url
    return {
        "method": request.method,
        "path": url.path,
        "query_string": url.query.decode("ascii"),
        "scheme": url.scheme,
        "server": (url.host, str(url.port or (443 if url.scheme == "https" else 80))),
        "headers": [(k.lower(), v) for k, v in request.headers.raw],
        "_body_file": fake_payload(request.content),
    }


def _django_outcome(response: Any) -> Outcome:
    pairs = list(response.items())
    pairs += [("Set-Cookie", morsel.OutputString()) for morsel in response.cookies.values()]
    headers = httpx.Headers(pairs)
    if getattr(response, "streaming", False):
        content = b"".join(response.streaming_content)
    else:
        content = response.content
    return Outcome(response.status_code, headers, content)
