"""The trivial app the server benchmark delivers to (run under uvicorn by ``AppProcess``)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


async def hook(request: Request) -> Response:
    await request.body()
    return Response(status_code=200)


app = Starlette(routes=[Route("/", hook, methods=["GET"]), Route("/hook", hook, methods=["POST"])])
