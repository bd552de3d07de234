"""``pytest-qstash serve`` (and ``python -m pytest_qstash serve``): the fake behind uvicorn.

It binds the socket itself (port 0 picks a free one), and once uvicorn listens prints the
four ``NAME=value`` lines an app needs, on stdout, one per line, then serves until stopped.
Logs go to stderr, so the first four lines of stdout are all a script has to read.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import socket
import string
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..state.account import make_token
from .app import CLOCK_MODES, QStashServerApp, ServerSettings

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
_KEY_ALPHABET = string.ascii_letters + string.digits


def _new_token() -> str:
    """A fresh token shaped as QStash's (base64 JSON with a ``UserID``), so that SDKs that
    decode it (the TypeScript Workflow SDK's webhooks) find a user id."""
    return make_token(
        str(uuid.UUID(bytes=secrets.token_bytes(16), version=4)), secrets.token_hex(16)
    )


def new_signing_key() -> str:
    """Shaped like QStash's keys: ``sig_`` and 28 letters and digits."""
    return "sig_" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(28))


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="pytest-qstash",
        description="pytest-qstash's fake QStash, served over HTTP for apps in other processes.",
    )
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve the QStash API (and a control API) on a local port",
        description=(
            "Serve the fake QStash over HTTP. Prints QSTASH_URL, QSTASH_TOKEN and the two "
            "signing keys as NAME=value lines on stdout, then serves until interrupted."
        ),
    )
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"default {DEFAULT_HOST}")
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: a free port"
    )
    serve.add_argument(
        "--clock",
        choices=CLOCK_MODES,
        default="real",
        help="real (default): deliveries go out on their own at their time; virtual: time "
        "moves only through the control API (POST /_qstash/tick, advance, drain)",
    )
    serve.add_argument("--start", help="where the clock starts (ISO 8601; default now)")
    serve.add_argument("--seed", default="0", help="seed of the generated ids (default 0)")
    serve.add_argument("--token", help="the QSTASH_TOKEN to accept (default: a new random one)")
    serve.add_argument("--current-signing-key", help="default: a new random key")
    serve.add_argument("--next-signing-key", help="default: a new random key")
    serve.add_argument(
        "--credentials-from-env",
        action="store_true",
        help="take the token and keys not given above from QSTASH_TOKEN, "
        "QSTASH_CURRENT_SIGNING_KEY and QSTASH_NEXT_SIGNING_KEY (kept off the command line)",
    )
    serve.add_argument(
        "--stop-with-parent",
        action="store_true",
        help="stop when the process that started this one ends (what the fixture asks: no "
        "server outlives a test run that was killed)",
    )
    serve.add_argument(
        "--log-level",
        default="warning",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn's log level (default warning; info logs every request)",
    )
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        print(
            "pytest-qstash serve needs uvicorn: pip install 'pytest-qstash[server]'",
            file=sys.stderr,
        )
        return 2
    if args.start is not None and args.clock == "real":
        print(
            "pytest-qstash serve: --start sets where a virtual clock starts; with --clock real "
            "the clock is the wall clock (add --clock virtual)",
            file=sys.stderr,
        )
        return 2
    if not 0 <= args.port <= 65535:
        print(f"invalid --port {args.port}: expected 0-65535 (0: a free port)", file=sys.stderr)
        return 2
    env: Mapping[str, str] = os.environ if args.credentials_from_env else {}
    settings = ServerSettings(
        token=args.token or env.get("QSTASH_TOKEN") or _new_token(),
        current_signing_key=args.current_signing_key
        or env.get("QSTASH_CURRENT_SIGNING_KEY")
        or new_signing_key(),
        next_signing_key=args.next_signing_key
        or env.get("QSTASH_NEXT_SIGNING_KEY")
        or new_signing_key(),
        clock=args.clock,
        start=args.start,
        seed=int(args.seed) if args.seed.isdigit() else args.seed,
    )
    try:
        app = QStashServerApp(settings)  # bad --start / --seed fail here, before binding
    except (ValueError, TypeError) as exc:
        print(f"pytest-qstash serve: {exc}", file=sys.stderr)
        return 2
    try:
        sock = _bind(args.host, args.port)
    except OSError as exc:
        print(
            f"pytest-qstash serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr
        )
        return 1
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(app, sock, args.log_level, args.stop_with_parent))
    return 0


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio turns Nagle off only on sockets whose proto says TCP,
    # and with Nagle on, a response's body waits 40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def _serve(
    app: QStashServerApp, sock: socket.socket, log_level: str, stop_with_parent: bool
) -> None:
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(_announce(server, app, sock))]
    if stop_with_parent:
        tasks.append(loop.create_task(_watch_parent(server)))
    try:
        await server.serve(sockets=[sock])
    finally:
        for task in tasks:
            task.cancel()


async def _watch_parent(server: Any) -> None:
    parent = os.getppid()
    while os.getppid() == parent:  # a parent that ends hands its children to another
        await asyncio.sleep(0.5)
    server.should_exit = True


async def _announce(server: object, app: QStashServerApp, sock: socket.socket) -> None:
    while not getattr(server, "started", False):
        await asyncio.sleep(0.01)
    url = base_url(sock)
    settings = app.settings
    lines = [
        f"QSTASH_URL={url}",
        f"QSTASH_TOKEN={settings.token}",
        f"QSTASH_CURRENT_SIGNING_KEY={settings.current_signing_key}",
        f"QSTASH_NEXT_SIGNING_KEY={settings.next_signing_key}",
    ]
    print("\n".join(lines), flush=True)
    print(
        f"pytest-qstash: QStash API on {url} ({settings.clock} clock, now "
        f"{app.fake.now.isoformat()}); control API under {url}/_qstash/. Ctrl-C stops it.",
        file=sys.stderr,
        flush=True,
    )
