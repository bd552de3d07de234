"""The trivial app the server benchmarks deliver to (run under uvicorn by ``AppProcess``).

``/late`` also notes when each message arrived (wall-clock seconds, by
``Upstash-Message-Id``), which ``GET /arrivals`` answers: what the lateness figure reads."""

from __future__ import annotations

import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

arrivals: dict[str, float] = {}


async def hook(request: Request) -> Response:
    await request.body()
    return Response(status_code=200)


async def late(request: Request) -> Response:
    arrivals[request.headers.get("upstash-message-id", "")] = time.time()
    await request.body()
    return Response(status_code=200)


async def list_arrivals(request: Request) -> Response:
    return JSONResponse(arrivals)


async def clear_arrivals(request: Request) -> Response:
    arrivals.clear()
    return Response(status_code=204)


async def big(request: Request) -> Response:
    """A failing answer of ``?size=`` bytes: what an endpoint's error page can weigh."""
    await request.body()
    return Response(b"x" * int(request.query_params.get("size", "0")), status_code=500)


app = Starlette(
    routes=[
        Route("/", hook, methods=["GET"]),
        Route("/hook", hook, methods=["POST"]),
        Route("/big", big, methods=["POST"]),
        Route("/late", late, methods=["POST"]),
        Route("/arrivals", list_arrivals, methods=["GET"]),
        Route("/arrivals", clear_arrivals, methods=["DELETE"]),
    ]
)
