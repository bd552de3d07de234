"""The connections the server delivers over: HTTP/1.1 kept alive per origin, with a bounded
number of requests on each origin at once.

Per origin, so that an endpoint that hangs ties up only its own connections: the attempts to
it wait for one of them (within their real-time bound) while every other origin's go on. A
bound per origin because an app under uvicorn answers a few connections kept busy faster than
hundreds opened at once.

The requests are written and the answers read here, with h11 (httpx's own HTTP/1.1 engine)
over asyncio streams: a delivery costs a fifth of the CPU time an ``httpx.AsyncClient`` request
takes (its pool walks every connection on each change, and its socket layer rebuilds a dict
of attributes per look), and CPU time is what bounds how many deliveries a second one server
process makes. Failures surface as httpx's exceptions, as from a client. With a proxy set in
the environment (``HTTP_PROXY`` and friends), deliveries go through an ``httpx.AsyncClient``
instead, which honours it.

Outbound mounts (``serve --mount PREFIX=TO``) apply here, on the wire only: a request whose URL
starts with a mounted prefix goes to its target, method, headers (``Host`` too) and body as
they are, while whatever recorded or signed the request keeps its own URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import urllib.request
from dataclasses import dataclass, field

import h11
import httpx

from ...delivery.mounts import Redirect, redirect

#: Requests in flight at once to one origin (each on its own connection).
CONNECTIONS_PER_ORIGIN = 16
#: How long an idle connection is kept (seconds): under the five seconds uvicorn keeps one,
#: so the app never closes a connection as it is being reused.
KEEPALIVE_EXPIRY_S = 4.0
_READ_SIZE = 65536
_NO_ANSWER = "Server disconnected without sending a response."

Origin = tuple[str, str, int]


class _Connection:
    """One HTTP/1.1 connection, one exchange at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.http = h11.Connection(h11.CLIENT)
        self.idle_since = time.monotonic()
        #: Whether an exchange was made on it already (a kept-alive one may have been closed).
        self.reused = False
        #: Whether the current exchange got any of its answer.
        self.answered = False

    def usable(self, now: float) -> bool:
        return (
            not self.reader.at_eof()
            and not self.writer.is_closing()
            and now - self.idle_since < KEEPALIVE_EXPIRY_S
        )

    async def exchange(self, request: httpx.Request) -> httpx.Response:
        http = self.http
        self.answered = False
        try:
            data = http.send(
                h11.Request(
                    method=request.method,
                    target=request.url.raw_path,
                    headers=list(request.headers.raw),
                )
            )
            assert data is not None
            if request.content:
                data += http.send(h11.Data(data=request.content)) or b""
            data += http.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc)) from exc
        try:
            self.writer.write(data)
            await self.writer.drain()
            status, headers, body = await self._read_response()
        except h11.RemoteProtocolError as exc:
            raise httpx.RemoteProtocolError(str(exc)) from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
        return httpx.Response(status, headers=headers, content=bytes(body), request=request)

    async def _read_response(self) -> tuple[int, list[tuple[bytes, bytes]], bytearray]:
        http = self.http
        status: int | None = None
        headers: list[tuple[bytes, bytes]] = []
        # One buffer, not a list of chunks: a large answer is one allocation, which goes back
        # to the system when freed (thousands of small ones leave the heap fragmented).
        body = bytearray()
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                data = await self.reader.read(_READ_SIZE)
                if not data and not self.answered:
                    raise httpx.RemoteProtocolError(_NO_ANSWER)
                self.answered = True
                http.receive_data(data)  # b"": the peer closed (ends a body read to the end)
            elif isinstance(event, h11.Response):
                status, headers = event.status_code, list(event.headers)
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert status is not None
                return status, headers, body
            elif isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError(_NO_ANSWER)
            # An informational (1xx) response: the real one follows.

    def keep(self) -> bool:
        """Ready for the next exchange, if both sides allow it."""
        http = self.http
        if http.our_state is h11.DONE and http.their_state is h11.DONE:
            http.start_next_cycle()
            self.idle_since = time.monotonic()
            self.reused = True
            return True
        return False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


@dataclass(eq=False)
class _OriginPool:
    slots: asyncio.Semaphore
    idle: list[_Connection] = field(default_factory=list)
    #: Requests on it now, or waiting for a slot.
    busy: int = 0


class OriginPools:
    """``send(request)`` over a connection kept alive for the request's origin."""

    def __init__(self, connections_per_origin: int = CONNECTIONS_PER_ORIGIN) -> None:
        self.connections_per_origin = connections_per_origin
        self._pools: dict[Origin, _OriginPool] = {}
        self._ssl: ssl.SSLContext | None = None
        self._proxied: httpx.AsyncClient | None = None
        self._swept = time.monotonic()
        #: The server's outbound mounts, (prefix, target) pairs.
        self.mounts: tuple[Redirect, ...] = ()
        if any(scheme != "no" for scheme in urllib.request.getproxies()):  # NO_PROXY alone: none
            self._proxied = httpx.AsyncClient()  # trust_env: the environment's proxies

    async def send(self, request: httpx.Request) -> httpx.Response:
        if self.mounts and (target := redirect(str(request.url), self.mounts)) is not None:
            request = httpx.Request(
                request.method,
                target,
                headers=request.headers,  # its Host stays the original's
                content=request.content,
                extensions=request.extensions,
            )
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        origin = (url.scheme, url.host, port)
        self._sweep()
        pool = self._pools.get(origin)
        if pool is None:
            pool = self._pools[origin] = _OriginPool(asyncio.Semaphore(self.connections_per_origin))
        pool.busy += 1
        try:
            return await self._send(pool, origin, request)
        finally:
            pool.busy -= 1

    async def _send(
        self, pool: _OriginPool, origin: Origin, request: httpx.Request
    ) -> httpx.Response:
        async with pool.slots:
            if self._proxied is not None:
                return await self._proxied.send(request)
            connection = self._idle(pool) or await self._connect(origin)
            try:
                try:
                    response = await connection.exchange(request)
                except (httpx.ReadError, httpx.RemoteProtocolError):
                    if not connection.reused or connection.answered:
                        raise
                    # A kept-alive connection the app closed as the request went out: once
                    # more, on a new one, as a browser does.
                    connection.close()
                    connection = await self._connect(origin)
                    response = await connection.exchange(request)
            except BaseException:
                connection.close()
                raise
            if connection.keep():
                pool.idle.append(connection)
            else:
                connection.close()
            return response

    def _sweep(self) -> None:
        """Close the connections idle past their expiry, and forget the origins left with
        none (looked at once a second at most): an origin delivered to once holds nothing
        for long."""
        now = time.monotonic()
        if now - self._swept < 1.0:
            return
        self._swept = now
        for origin, pool in list(self._pools.items()):
            kept = [c for c in pool.idle if c.usable(now)]
            for connection in pool.idle:
                if connection not in kept:
                    connection.close()
            pool.idle = kept
            if not kept and not pool.busy:
                del self._pools[origin]

    def _idle(self, pool: _OriginPool) -> _Connection | None:
        now = time.monotonic()
        while pool.idle:
            connection = pool.idle.pop()
            if connection.usable(now):
                return connection
            connection.close()
        return None

    async def _connect(self, origin: Origin) -> _Connection:
        scheme, host, port = origin
        context: ssl.SSLContext | None = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = httpx.create_ssl_context()  # loaded once: it costs ~20 ms
            context = self._ssl
        try:
            reader, writer = await asyncio.open_connection(
                host, port, ssl=context, server_hostname=host if context else None
            )
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        return _Connection(reader, writer)

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            for connection in pool.idle:
                connection.close()
        if self._proxied is not None:
            await self._proxied.aclose()
