"""The server's delivery connections (``OriginPools``) against loopback HTTP servers that
answer in the ways real apps do: kept alive, chunked, closed after an answer, or down."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
import pytest_asyncio
from ports import closed_port

from pytest_qstash.server.runner.pools import OriginPools

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _request_head(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return head


@pytest_asyncio.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


def post(url: str, body: bytes = b'{"n":1}') -> httpx.Request:
    return httpx.Request("POST", url, headers={"Content-Type": "application/json"}, content=body)


@pytest.mark.asyncio
async def test_connections_are_kept_alive_and_chunked_answers_read(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while not reader.at_eof():
            try:
                await _request_head(reader)
            except asyncio.IncompleteReadError:
                break
            writer.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
            )
            await writer.drain()
        writer.close()

    url = await serve(handler)
    pools = OriginPools()
    try:
        answers = [await pools.send(post(f"{url}/hook")) for _ in range(3)]
    finally:
        await pools.aclose()
    assert [(a.status_code, a.content) for a in answers] == [(200, b"abcde")] * 3
    assert connections == 1


@pytest.mark.asyncio
async def test_a_connection_the_app_closed_is_not_reused(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    # The app answers, then closes without saying so (no "Connection: close"): the next
    # request goes out on a new connection, once more if the old one looked open.
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await _request_head(reader)
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    url = await serve(handler)
    pools = OriginPools()
    try:
        answers = [await pools.send(post(f"{url}/hook")) for _ in range(3)]
    finally:
        await pools.aclose()
    assert [(a.status_code, a.text) for a in answers] == [(201, "ok")] * 3
    assert connections == 3


@pytest.mark.asyncio
async def test_failures_are_httpx_errors(serve: Callable[[Handler], Awaitable[str]]) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        writer.close()  # no answer at all, on a fresh connection

    url = await serve(hang_up)
    pools = OriginPools()
    try:
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            await pools.send(post(f"{url}/hook"))
        with closed_port() as down, pytest.raises(httpx.ConnectError):
            await pools.send(post(f"http://127.0.0.1:{down}/down"))
    finally:
        await pools.aclose()


@pytest.mark.asyncio
async def test_at_most_so_many_requests_at_once_to_one_origin(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    running = peak = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal running, peak
        while True:
            try:
                await _request_head(reader)
            except asyncio.IncompleteReadError:
                break
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        writer.close()

    url = await serve(handler)
    pools = OriginPools(connections_per_origin=3)
    try:
        answers = await asyncio.gather(*(pools.send(post(f"{url}/hook")) for _ in range(10)))
    finally:
        await pools.aclose()
    assert all(a.status_code == 200 for a in answers)
    assert peak == 3
