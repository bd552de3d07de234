"""``pytest-qstash serve`` (and ``python -m pytest_qstash serve``): the fake behind uvicorn.

It binds the socket itself (port 0 picks a free one), and once uvicorn listens prints the
four ``NAME=value`` lines an app needs, on stdout, one per line, then serves until stopped.
Logs go to stderr, so the first four lines of stdout are all a script has to read. Dev mode
and a region add lines after those four (``QSTASH_DEV``, ``QSTASH_REGION``, ...).

Dev mode (``--dev``, or ``QSTASH_DEV=true`` in the environment) is what the TypeScript SDKs'
own dev mode looks for: 127.0.0.1 on 8080 or ``QSTASH_DEV_PORT``, Upstash's public dev token
and signing keys, which they probe with ``GET /v2/keys`` before they would download Upstash's
dev server binary.

``pytest-qstash export --to FILE`` reads a QStash account through its REST API into a JSON
file (``export.py``).
"""

from __future__ import annotations

import sys

# This process never runs httpx's own command line, whose import (rich, pygments, when
# installed) is a tenth of a second of every start: a None in sys.modules makes that import
# fail, and httpx defines its stand-in. Only when httpx is not loaded yet (an import of this
# module into a process that has httpx, a test's, changes nothing there).
if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

import argparse
import gc
import os
import secrets
import string
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..delivery.mounts import Redirect, check_redirect, merge_redirects
from ..engine.account import make_token
from ..engine.durations import parse_duration_ms
from ..engine.plans import DEFAULT_PLAN, PLANS
from ..wire.regions import ACCEPTED as ACCEPTED_REGIONS
from ..wire.regions import region_named
from . import check_deploy as checking
from . import export as exporting
from .control import loading
from .control.app import CLOCK_MODES, QStashServerApp, ServerSettings
from .datadir.persistence import DataDir, PersistenceError
from .datadir.readonly import ReadOnlyDataDir
from .runner.deliveries import DEFAULT_ATTEMPT_TIMEOUT_S
from .serving import DEFAULT_IDLE_TIMEOUT_S, run

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
_KEY_ALPHABET = string.ascii_letters + string.digits

#: Upstash's public dev credentials: what the TypeScript SDKs' dev mode sends and expects
#: (``DEV_CREDENTIALS`` in qstash-js's ``src/dev-server/constants.ts``). Not secrets.
DEV_TOKEN = "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0="
DEV_CURRENT_SIGNING_KEY = "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r"
DEV_NEXT_SIGNING_KEY = "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs"


class UsageError(ValueError):
    """A command line (or environment) the server cannot start with: the message says why."""


def dev_mode_from_env(env: Mapping[str, str]) -> bool:
    """``QSTASH_DEV`` as the SDKs read it: true/1 on, unset/empty/false/0 off, else refused."""
    value = env.get("QSTASH_DEV", "")
    if value in ("", "false", "0"):
        return False
    if value in ("true", "1"):
        return True
    raise UsageError(
        f"invalid QSTASH_DEV {value!r} in the environment: expected true or 1 (dev mode), "
        "false, 0 or empty (as the SDKs accept)"
    )


def dev_port_from_env(env: Mapping[str, str]) -> int:
    """The dev server's port: ``QSTASH_DEV_PORT``, else 8080."""
    value = env.get("QSTASH_DEV_PORT", "")
    if not value:
        return DEFAULT_PORT
    if not value.isdigit() or not 0 < int(value) <= 65535:
        raise UsageError(
            f"invalid QSTASH_DEV_PORT {value!r} in the environment: expected a port, 1-65535"
        )
    return int(value)


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
        "--port",
        type=int,
        help=f"default {DEFAULT_PORT} (in dev mode QSTASH_DEV_PORT, if set); 0: a free port",
    )
    serve.add_argument(
        "--dev",
        action="store_true",
        help="dev mode (also QSTASH_DEV=true or 1 in the environment): answer as Upstash's "
        "local dev server does, with its public dev token and signing keys, on port 8080 or "
        "QSTASH_DEV_PORT, so that an app with QSTASH_DEV=true finds it",
    )
    serve.add_argument(
        "--region",
        help="mark deliveries with Upstash-Region as a multi-region account's: "
        f"{ACCEPTED_REGIONS}; also prints QSTASH_REGION and the region's variables",
    )
    serve.add_argument(
        "--clock",
        choices=CLOCK_MODES,
        default="real",
        help="real (default): deliveries go out on their own at their time; virtual: time "
        "moves only through the control API (POST /_qstash/tick, advance, drain)",
    )
    serve.add_argument(
        "--start",
        help="where a virtual clock starts (ISO 8601; default now, or with --load the "
        "export's exported_at)",
    )
    serve.add_argument("--seed", default="0", help="seed of the generated ids (default 0)")
    serve.add_argument(
        "--simulate",
        metavar="SEED",
        help="inject the faults QStash's at-least-once contract allows (duplicates, lost "
        "acknowledgements, reordering) on the schedule of this integer seed; the same seed "
        "gives the same faults for the same sequence of requests",
    )
    serve.add_argument(
        "--faults",
        metavar="KIND[,KIND]",
        help="the fault kinds --simulate injects (default all): duplicate, lost_ack, reorder",
    )
    serve.add_argument(
        "--plan",
        default=DEFAULT_PLAN,
        help=f"the QStash plan whose limits apply: {', '.join(PLANS)} (default {DEFAULT_PLAN}); "
        "a reset may choose another",
    )
    serve.add_argument(
        "--retention",
        choices=("on", "off"),
        default="on",
        help="on (default): forget log entries, finished messages and runs after the plan's "
        "log retention and DLQ entries after its DLQ retention, as QStash does (a server left "
        "running stays bounded); off: keep everything",
    )
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
        "--data-dir",
        metavar="DIR",
        help="keep the state in DIR (sqlite) and restore it on the next start: messages, "
        "schedules, queues, URL groups, the DLQ, workflow runs, the credentials, the clock. "
        "Default: in memory, lost when the server stops",
    )
    serve.add_argument(
        "--stop-with-parent",
        action="store_true",
        help="stop when the process that started this one ends (what the fixture asks: no "
        "server outlives a test run that was killed)",
    )
    serve.add_argument(
        "--attempt-timeout",
        default=f"{DEFAULT_ATTEMPT_TIMEOUT_S:g}s",
        help="the longest one delivery attempt may take, in real time (a duration: 30s, 500ms, "
        f"2m; default {DEFAULT_ATTEMPT_TIMEOUT_S:g}s); past it the attempt fails and is retried. "
        "A message's shorter Upstash-Timeout still applies",
    )
    serve.add_argument(
        "--idle-timeout",
        default=f"{DEFAULT_IDLE_TIMEOUT_S:g}s",
        help="close a connection that has not sent a whole request's head within this long "
        f"(a duration; default {DEFAULT_IDLE_TIMEOUT_S:g}s), on connecting and after each answer",
    )
    serve.add_argument(
        "--mount",
        action="append",
        default=[],
        metavar="PREFIX=TO",
        help="send the server's outbound requests (deliveries, callbacks, a workflow's "
        "context.call and context.api.*) whose URL starts with PREFIX to TO instead, with the "
        "rest of the path and query; repeatable. E.g. "
        "--mount https://api.openai.com=http://127.0.0.1:9000",
    )
    serve.add_argument(
        "--load",
        metavar="FILE",
        help="load an export (pytest-qstash export's file) at start, all of it or nothing "
        "(not into a --data-dir that holds a state already). Deliveries to its URLs are then "
        "held back unless on this machine or mounted (--mount): GET /_qstash/held lists them",
    )
    serve.add_argument(
        "--allow-outbound",
        action="store_true",
        help="with a loaded export, deliver to its URLs as they are (production's, "
        "presumably) instead of holding back those that are neither on this machine nor "
        "mounted",
    )
    serve.add_argument(
        "--read-only",
        action="store_true",
        help="serve the state (a --load's, a --data-dir's) to be read only: the API's and "
        "the control API's reads and the dashboard; every request that would change it is "
        "refused (403) and nothing is delivered",
    )
    serve.add_argument(
        "--log-level",
        default="warning",
        choices=("critical", "error", "warning", "info", "debug"),
        help="log level (default warning; info logs every request)",
    )
    export = commands.add_parser(
        "export",
        help="write a QStash account's state, read through its REST API, to a JSON file",
        description=(
            "Read a QStash account through QStash's REST API (schedules, queues, URL groups, "
            "the DLQ, workflow runs in progress, the workflow DLQ, flow-control keys; every "
            "page) and write QStash's answers to one JSON file. Needs the account's token: "
            "QSTASH_TOKEN in the environment, or --token."
        ),
    )
    exporting.add_arguments(export)
    check_deploy = commands.add_parser(
        "check-deploy",
        help="tell, for each workflow run in progress in an export, whether an app's new code "
        "accepts its recorded steps",
        description=(
            "For each Upstash Workflow run in progress in an export file, send the app under "
            "check (--app) the delivery QStash would make on resuming it, signed with "
            "QSTASH_CURRENT_SIGNING_KEY, and print a table of verdicts: compatible, "
            "incompatible (the step the SDK refused) or error. Exit 1 if any run is not "
            "compatible."
        ),
    )
    checking.add_arguments(check_deploy)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "export":
        return exporting.main(args, os.environ)
    if args.command == "check-deploy":
        return checking.main(args, os.environ)
    try:
        dev, region = _modes(args, os.environ)
    except (UsageError, ValueError, TypeError) as exc:
        print(f"pytest-qstash serve: {exc}", file=sys.stderr)
        return 2
    if args.port is None:
        args.port = dev_port_from_env(os.environ) if dev else DEFAULT_PORT
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
    try:
        attempt_timeout_ms = parse_duration_ms(args.attempt_timeout, what="--attempt-timeout")
    except (ValueError, TypeError) as exc:
        print(f"pytest-qstash serve: {exc}", file=sys.stderr)
        return 2
    if attempt_timeout_ms <= 0:
        print(
            f"pytest-qstash serve: invalid --attempt-timeout {args.attempt_timeout!r}: "
            "expected a duration above zero, e.g. 30s or 500ms",
            file=sys.stderr,
        )
        return 2
    try:
        idle_timeout_ms = parse_duration_ms(args.idle_timeout, what="--idle-timeout")
    except (ValueError, TypeError) as exc:
        print(f"pytest-qstash serve: {exc}", file=sys.stderr)
        return 2
    if idle_timeout_ms <= 0:
        print(
            f"pytest-qstash serve: invalid --idle-timeout {args.idle_timeout!r}: "
            "expected a duration above zero, e.g. 15s",
            file=sys.stderr,
        )
        return 2
    try:
        mounts = tuple(_mount_option(option) for option in args.mount)
        simulate, faults = _simulation_options(args)
    except ValueError as exc:
        print(f"pytest-qstash serve: {exc}", file=sys.stderr)
        return 2
    start_given = args.start
    document = None
    if args.load is not None:
        try:
            document = loading.read_document(args.load)
            args.start = loading.start_of(document, args.clock, args.start)
        except ValueError as exc:  # LoadError: one sentence naming the file
            print(f"pytest-qstash serve: --load: {exc}", file=sys.stderr)
            return 2
    env: Mapping[str, str] = os.environ if args.credentials_from_env else {}
    if dev:
        args.token = DEV_TOKEN
        args.current_signing_key = DEV_CURRENT_SIGNING_KEY
        args.next_signing_key = DEV_NEXT_SIGNING_KEY
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
        plan=args.plan,
        attempt_timeout=attempt_timeout_ms / 1000,
        retention=args.retention == "on",
        mounts=merge_redirects((), mounts),
        region=region,
        simulate=simulate,
        faults=faults,
        loaded=document is not None,
        allow_outbound=args.allow_outbound,
        read_only=args.read_only,
    )
    given = {
        "token": args.token or env.get("QSTASH_TOKEN"),
        "current_signing_key": args.current_signing_key or env.get("QSTASH_CURRENT_SIGNING_KEY"),
        "next_signing_key": args.next_signing_key or env.get("QSTASH_NEXT_SIGNING_KEY"),
        "start": start_given,
    }
    explicit = frozenset(name for name, value in given.items() if value is not None)
    # No cyclic collection until a data dir's restored state is frozen below: the first
    # one after the load would walk every object it built.
    gc.disable()
    try:
        kept = ReadOnlyDataDir if args.read_only else DataDir
        persistence = kept(args.data_dir, explicit) if args.data_dir else None
        # Bad --start / --seed / --plan fail here, before binding, and a data dir's state is
        # read.
        app = QStashServerApp(settings, persistence)
        if document is not None and not app.restored:
            _load_at_start(app, document, args.load)
    except (ValueError, TypeError, PersistenceError) as exc:
        print(f"pytest-qstash serve: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.data_dir:
            # A data dir's restored state (and the modules) lives until a reset: out of the
            # cyclic collector's sight, a full collection (which serving's allocations
            # trigger) walks none of it, nor touches its pages while a snapshot child shares
            # them. No collection first: starting makes next to no cyclic garbage. A reset
            # unfreezes it.
            gc.freeze()
        gc.enable()
    return run(
        app,
        args.host,
        args.port,
        args.log_level,
        args.stop_with_parent,
        dev,
        idle_timeout_ms / 1000,
    )


def _load_at_start(app: QStashServerApp, document: Mapping[str, Any], path: str) -> None:
    clock = app.settings.clock
    start = app.settings.start if clock == "virtual" else None  # --start, or the export's
    try:
        loaded = loading.take_in(app.fake, clock, document, start)
    except ValueError as exc:  # LoadError: one sentence naming the entry
        raise ValueError(f"--load {path}: {exc}") from None
    counts = ", ".join(
        f"{name} {value}" for name, value in loaded.as_dict().items() if isinstance(value, int)
    )
    print(f"pytest-qstash: loaded {path} ({counts})", file=sys.stderr, flush=True)


def _mount_option(option: str) -> Redirect:
    prefix, equals, to = option.partition("=")
    if not equals:
        raise ValueError(
            f"invalid --mount {option!r}: expected PREFIX=TO, e.g. "
            "--mount https://api.openai.com=http://127.0.0.1:9000"
        )
    try:
        return check_redirect(prefix, to)
    except ValueError as exc:
        raise ValueError(f"invalid --mount {option!r}: {exc}") from None


def _modes(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[bool, str | None]:
    """Dev mode (the flag or the environment) and the region, checked against the rest."""
    dev = bool(args.dev) or dev_mode_from_env(env)
    if dev:
        given = [
            option
            for option, value in (
                ("--token", args.token),
                ("--current-signing-key", args.current_signing_key),
                ("--next-signing-key", args.next_signing_key),
                ("--credentials-from-env", args.credentials_from_env),
            )
            if value
        ]
        if given:
            why = "--dev" if args.dev else "QSTASH_DEV in the environment"
            raise UsageError(
                f"dev mode ({why}) answers with Upstash's public dev token and signing keys, "
                f"which the SDKs' dev mode expects: leave out {', '.join(given)}, or leave "
                "dev mode"
            )
    region = region_named(args.region).name if args.region is not None else None
    return dev, region


def _simulation_options(args: argparse.Namespace) -> tuple[int | None, tuple[str, ...] | None]:
    """``--simulate`` and ``--faults``, checked (``ValueError`` naming the bad one)."""
    if args.simulate is None and args.faults is None:
        return None, None
    from ..engine.simulation import check_seed, fault_kinds, over_http

    if args.simulate is None:
        raise ValueError("--faults picks the kinds --simulate injects: give --simulate SEED too")
    seed = check_seed(args.simulate, "--simulate")
    if args.faults is None:
        return seed, None
    try:
        return seed, over_http(fault_kinds(args.faults))
    except ValueError as exc:
        raise ValueError(f"invalid --faults={args.faults!r}: {exc}") from None
