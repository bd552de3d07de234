"""The app outbound mounts send to in the server tests (``AppProcess``): it keeps every
request it receives (method, path with query, headers, body), listed at ``GET /_seen`` (``DELETE
/_seen`` lists and forgets them), and answers each with 200, or with the status a path
``.../status/<code>`` names."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

seen: list[dict[str, Any]] = []


async def record(request: Request) -> Response:
    body = await request.body()
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    seen.append(
        {
            "method": request.method,
            "path": path,
            "headers": dict(request.headers),
            "body": body.decode(),
        }
    )
    _, _, code = request.url.path.rpartition("/status/")
    status = int(code) if code.isdigit() else 200
    return JSONResponse({"answered": path}, status_code=status)


async def listing(request: Request) -> Response:
    answer = JSONResponse(seen)
    if request.method == "DELETE":
        seen.clear()
    return answer


app = Starlette(
    routes=[
        Route("/_seen", listing, methods=["GET", "DELETE"]),
        Route("/{path:path}", record, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ]
)
