"""Running ``pytest-qstash serve`` once its options are checked: the listening socket, uvicorn
with an HTTP protocol that closes idle connections, the event loop's exception handler, and the
``NAME=value`` lines announced once it listens (``cli.py`` reads the command line)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ipaddress
import logging
import os
import socket
import sys
from typing import Any

from ..engine.account import Account
from ..wire.regions import region_named
from .control.app import QStashServerApp
from .dashboard.routes import dashboard_link

#: How long a connection may stay open without sending a request (seconds).
DEFAULT_IDLE_TIMEOUT_S = 15.0
_log = logging.getLogger("pytest_qstash.server")


def run(
    app: QStashServerApp,
    host: str,
    port: int,
    log_level: str,
    stop_with_parent: bool,
    dev: bool,
    idle_timeout: float,
) -> int:
    """Listen on ``host:port`` and serve ``app`` until stopped (Ctrl-C, or the parent gone
    with ``stop_with_parent``); the exit status: 1 when the port cannot be bound."""
    try:
        sock = _bind(host, port)
    except OSError as exc:
        print(f"pytest-qstash serve: {_bind_error(host, port, exc)}", file=sys.stderr)
        return 1
    warning = beyond_loopback_warning(sock.getsockname()[0])
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    _large_blocks_go_back()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(app, sock, log_level, stop_with_parent, dev, idle_timeout))
    return 0


def _large_blocks_go_back() -> None:
    """glibc maps blocks from 128 KiB up and unmaps them when freed, but raises that bound
    to the largest block freed so far (up to 32 MiB): after one 20 MiB answer, the next ones
    land in the heap and the process keeps their memory. A fixed bound keeps every large body
    (a request's, an endpoint's answer) returned to the system once it is let go."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt(-3, 1024 * 1024)  # M_MMAP_THRESHOLD: 1 MiB, no longer moving
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): its own policy
        pass


def _bind_error(host: str, port: int, exc: OSError) -> str:
    import errno

    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} is already in use on {host} (another server is listening there): "
            "stop it, or choose another port with --port (in dev mode also QSTASH_DEV_PORT)"
        )
    return f"cannot listen on {host}:{port}: {exc}"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio turns Nagle off only on sockets whose proto says TCP,
    # and with Nagle on, a response's body waits 40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def beyond_loopback_warning(address: str) -> str | None:
    """The warning to print when the server listens on an address other machines reach."""
    try:
        if ipaddress.ip_address(address.partition("%")[0]).is_loopback:
            return None
    except ValueError:
        pass
    return (
        f"pytest-qstash serve: warning: listening on {address}, beyond loopback. Whoever "
        "reaches it with the token can make this server send HTTP requests to any URL it can "
        "reach (every message is one). Use --host 127.0.0.1 unless that is what you want."
    )


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def _serve(
    app: QStashServerApp,
    sock: socket.socket,
    log_level: str,
    stop_with_parent: bool,
    dev: bool,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S,
) -> None:
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level=log_level,
        log_config=_log_config(log_level),
        lifespan="on",
        ws="none",  # no WebSocket route: wsproto or websockets need not be imported
        access_log=False,
        # The app dates its answers itself: the QStash API's with the server's clock.
        date_header=False,
        http=_idle_closing_protocol(idle_timeout),
    )
    server = uvicorn.Server(config)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_QuietOnExhaustion())
    tasks = [loop.create_task(_announce(server, app, sock, dev))]
    if stop_with_parent:
        tasks.append(loop.create_task(_watch_parent(server)))
    try:
        await server.serve(sockets=[sock])
    finally:
        for task in tasks:
            task.cancel()


def _idle_closing_protocol(idle_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol (h11), which also closes connections that send no request.

    uvicorn's own keep-alive timer starts only after an answer, and any byte received stops
    it: a connection opened and left silent (or sending a request's head a byte at a time)
    stayed open for good, and a few hundred of them used up the process's descriptors."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class IdleClosing(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _armed_for: object = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._armed_for = self.cycle  # a new request replaces it
            self._head_timer = self.loop.call_later(idle_timeout, self._close_if_idle)

        def _close_if_idle(self) -> None:
            self._head_timer = None
            waiting = self.cycle is self._armed_for and (
                self.cycle is None or self.cycle.response_complete
            )
            if waiting and not self.transport.is_closing():
                self.transport.close()

    return IdleClosing


class _QuietOnExhaustion:
    """The event loop's exception handler: when accepting fails for want of descriptors (or
    memory), one warning line, and no more than one a minute while it lasts, instead of
    asyncio's traceback at every retry; everything else as asyncio reports it."""

    _EVERY_S = 60.0

    def __init__(self) -> None:
        self._last: float | None = None
        self._skipped = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if "._start_serving(" in message and isinstance(context.get("exception"), ValueError):
            # asyncio schedules a retry per failed accept (thousands a second); those still
            # pending when the server stops find the listening socket closed. Nothing to do.
            return
        if "out of system resource" not in message:
            loop.default_exception_handler(context)
            return
        now = loop.time()
        if self._last is not None and now - self._last < self._EVERY_S:
            self._skipped += 1
            return
        skipped = f" ({self._skipped} more since the last warning)" if self._skipped else ""
        self._last, self._skipped = now, 0
        _log.warning(
            "cannot accept connections: %s; new ones wait until some close (idle ones close "
            "after --idle-timeout)%s",
            context.get("exception"),
            skipped,
        )


def _log_config(log_level: str) -> dict[str, Any]:
    """uvicorn's logging, and the server's own logger (one line per request at info) through
    the same handler. uvicorn's access log stays off: its lines carry the query string, where
    a control call may put the token."""
    from uvicorn.config import LOGGING_CONFIG

    config: dict[str, Any] = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["pytest_qstash"] = {
        "handlers": ["default"],
        "level": log_level.upper(),
        "propagate": False,
    }
    return config


async def _watch_parent(server: Any) -> None:
    parent = os.getppid()
    while os.getppid() == parent:  # a parent that ends hands its children to another
        await asyncio.sleep(0.5)
    server.should_exit = True


def announced_env(
    url: str, port: int, account: Account, dev: bool, region: str | None
) -> dict[str, str]:
    """The ``NAME=value`` lines the server prints, in order: the four an app needs, then dev
    mode's and the region's."""
    env = {
        "QSTASH_URL": url,
        "QSTASH_TOKEN": account.token,
        "QSTASH_CURRENT_SIGNING_KEY": account.current_signing_key,
        "QSTASH_NEXT_SIGNING_KEY": account.next_signing_key,
    }
    if dev:
        env["QSTASH_DEV"] = "true"
        env["QSTASH_DEV_PORT"] = str(port)
    if region is not None:
        env.update(
            region_named(region).env(
                url, account.token, account.current_signing_key, account.next_signing_key
            )
        )
    return env


async def _announce(server: object, app: QStashServerApp, sock: socket.socket, dev: bool) -> None:
    while not getattr(server, "started", False):
        await asyncio.sleep(0.01)
    url = base_url(sock)
    settings = app.settings
    account = app.fake.account  # the keys now: a restored data dir's may have been rotated
    env = announced_env(url, sock.getsockname()[1], account, dev, settings.region)
    print("\n".join(f"{name}={value}" for name, value in env.items()), flush=True)
    modes = "".join(
        [
            "; dev mode: apps with QSTASH_DEV=true find it" if dev else "",
            f"; deliveries from region {settings.region}" if settings.region else "",
        ]
    )
    print(
        f"pytest-qstash: QStash API on {url} ({settings.clock} clock, now "
        f"{app.fake.now.isoformat()}){modes}; control API under {url}/_qstash/; "
        f"{app.persistence.describe(app)}. Ctrl-C stops it.",
        file=sys.stderr,
        flush=True,
    )
    for prefix, to in settings.mounts:
        print(f"pytest-qstash: mount {prefix} -> {to}", file=sys.stderr, flush=True)
    if settings.read_only:
        print(
            "pytest-qstash: read-only (--read-only): it answers reads only, refuses every "
            "change (403) and delivers nothing",
            file=sys.stderr,
            flush=True,
        )
    if app.holdback.holding and not settings.read_only:  # read-only: nothing goes out
        print(
            "pytest-qstash: it holds a loaded export: deliveries go only to this machine and "
            "to mounted URLs, the others are held back (GET /_qstash/held lists them; "
            "--allow-outbound sends them)",
            file=sys.stderr,
            flush=True,
        )
    # The link carries the token once: the page it opens keeps it in a cookie.
    print(
        f"pytest-qstash: dashboard at {dashboard_link(url, settings.token)}",
        file=sys.stderr,
        flush=True,
    )
