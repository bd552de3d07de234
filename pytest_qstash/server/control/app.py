"""The server mode's ASGI app: the QStash API of one ``FakeQStash``, and its control API.

Requests under ``/_qstash/`` steer and inspect the fake (time, lists, faults, reset); every
other request is the QStash API, converted to an ``httpx.Request`` for ``FakeQStash.handle``
and its ``httpx.Response`` converted back. Both need the server's token.

Everything runs on the server's one event loop. Deliveries are tasks of it, many in flight at
once (``deliveries.py``), so the API and the control API keep answering while apps handle
deliveries and publish more, and a slow endpoint holds only its own attempts.

The clock has two modes. ``virtual``: it moves only when a control request says so.
``real``: a background task keeps the virtual clock on the wall clock and starts what falls
due, as the QStash dev server does. That task is the one place where the wall clock drives
the engine, and it lives here, outside it.

A request body is read up to ``MAX_BODY_BYTES`` and refused (413) beyond, before anything
else looks at the request: no one, with or without the token, makes the server hold more.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any, Literal

import httpx

from ...delivery.mounts import Redirect, check_redirect, merge_redirects, mount_url
from ...engine.models import Delivery
from ...engine.plans import DEFAULT_PLAN, PLANS, plan_named
from ...engine.provisioned import carry_over, keep_names
from ...engine.simulation import OVER_HTTP
from ...testing.fake import FakeQStash
from ...wire._http import request_path
from ...wire.api import same_token
from ..dashboard.routes import DASHBOARD_PATH, Dashboard
from ..datadir.persistence import InMemory, Persistence, PersistenceError
from ..runner.deliveries import DEFAULT_ATTEMPT_TIMEOUT_S, ServerDeliveries
from ..runner.holdback import Holdback
from ..runner.pools import OriginPools
from . import fastjson, loading, readonly, records, verbs
from .errors import ControlError

CONTROL_PREFIX = "/_qstash"
ClockMode = Literal["real", "virtual"]
CLOCK_MODES: tuple[ClockMode, ...] = ("real", "virtual")

_log = logging.getLogger("pytest_qstash.server")
#: The real clock's task looks at least this often (seconds), even when nothing is due.
_IDLE_WAIT = 1.0
_JSON = {"Content-Type": "application/json"}
#: QStash's largest message (the largest plan's limit).
_LARGEST_MESSAGE_BYTES = max(plan.max_message_bytes for plan in PLANS.values())
#: The largest request body the server reads: QStash's largest message (the plan's own limit
#: answers 413 below it, after authentication) plus room for a batch's JSON around it.
MAX_BODY_BYTES = _LARGEST_MESSAGE_BYTES + 1024 * 1024

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class ServerSettings:
    token: str
    current_signing_key: str
    next_signing_key: str
    clock: ClockMode = "real"
    start: str | None = None
    seed: int | str = 0
    #: The QStash plan whose limits apply (a reset may choose another until the next one).
    plan: str = DEFAULT_PLAN
    #: The real-time bound on one delivery attempt, in seconds.
    attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT_S
    #: Whether the plan's log and DLQ retention forget old records (on: a server left
    #: running stays bounded).
    retention: bool = True
    #: Outbound mounts (``--mount``, ``POST /_qstash/mounts``): (URL prefix, target) pairs.
    mounts: tuple[Redirect, ...] = ()
    #: The region deliveries are marked with (``us-east-1``), or None.
    region: str | None = None
    #: The seed of the fault schedule every fake of this server runs under (``--simulate``),
    #: and its fault kinds (None: all); None: QStash's happy path.
    simulate: int | None = None
    faults: tuple[str, ...] | None = None
    #: Whether it holds a loaded export (``--load``, ``POST /_qstash/load``): deliveries
    #: then go only to loopback and mounted URLs (``runner/holdback.py``) unless
    #: ``allow_outbound``.
    loaded: bool = False
    allow_outbound: bool = False
    #: ``--read-only``: reads only, nothing delivered (``readonly.py``).
    read_only: bool = False


def build_fake(
    settings: ServerSettings,
    start: str | float | None = None,
    generation: int = 0,
    plan: str | None = None,
) -> FakeQStash:
    """A fake for serving: the process's own clock is left alone (the apps it calls run on
    the real clock and verify signatures on it), and deliveries may go to any host.

    ``generation`` counts resets: each gets ids of its own (still seeded), since the apps a
    server delivers to outlive a reset, and one that remembers the message ids it processed
    (to be idempotent) must not take a new message for one it saw before the reset."""
    chosen = start is not None or settings.start is not None
    if start is None:
        start = settings.start if settings.start is not None else _wall_start(settings.clock)
    fake = FakeQStash(
        start=start,
        freeze_time=False,
        raise_app_exceptions=False,
        strict=False,
        seed=settings.seed if generation == 0 else f"{settings.seed}/reset-{generation}",
        token=settings.token,
        current_signing_key=settings.current_signing_key,
        next_signing_key=settings.next_signing_key,
        plan=plan if plan is not None else settings.plan,
        retention=settings.retention,
        region=settings.region,
    )
    fake.sender.network = True  # the user runs a server: unmounted URLs are real endpoints
    fake.start_given = chosen  # unchosen (now), a load starts the clock at the export's time
    if settings.simulate is not None:  # a reset's fresh fake runs under the same schedule
        fake.simulate(settings.simulate, settings.faults or OVER_HTTP)
    return fake


def _wall_start(clock: ClockMode) -> float:
    # The real clock follows the wall to the millisecond; a virtual one starts on a whole
    # second, as the fixture's does (workflow sleeps are rounded to seconds).
    now = time.time()
    return now if clock == "real" else float(int(now))


class QStashServerApp:
    """ASGI app serving one fake. ``settings.clock`` picks the clock mode; ``persistence``
    keeps its state on disk (a ``persistence.DataDir``), or not (the default)."""

    #: The control actions that move the clock (and deliver on the way).
    CLOCK_MOVES = verbs.CLOCK_MOVES

    def __init__(self, settings: ServerSettings, persistence: Persistence | None = None) -> None:
        self.settings = settings
        #: How many resets this server has had (each starts a fresh store).
        self.resets = 0
        self._lock: asyncio.Lock | None = None
        self._wake: asyncio.Event | None = None
        self._follower: asyncio.Task[None] | None = None
        #: What every delivery goes over: connections kept alive, per origin.
        self._pool: OriginPools | None = None
        self.holdback = Holdback(
            lambda: self.settings.loaded and not self.settings.allow_outbound,
            lambda: self.settings.mounts,
        )
        self._install(build_fake(settings))
        self.persistence = persistence if persistence is not None else InMemory()
        restored = self.persistence.load(self)  # a data dir's state, in place of the new fake's
        #: Whether a data dir's state was restored (``serve --load`` then loads nothing).
        self.restored = restored is not None
        if restored is not None:
            self.settings, self.resets = restored.settings, restored.resets
        self._install(self.fake)  # with the settings the data dir kept
        self.dashboard = Dashboard(self)

    # -- ASGI -------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            request = await _read_request(scope, receive)
        except BodyTooLarge as exc:
            await _write_response(send, httpx.Response(413, json={"error": str(exc)}))
            _log_request(scope, 413)
            return
        except (httpx.InvalidURL, ValueError) as exc:  # a target such as "*": not a path
            error = f"invalid request target: {exc}; expected a path such as /v2/publish/..."
            await _write_response(send, httpx.Response(400, json={"error": error}))
            _log_request(scope, 400)
            return
        path = request_path(request).partition("?")[0]
        refused = None
        if self.settings.read_only:  # decided here, for every request, before any handler
            refused = readonly.refusal(request.method, path, CONTROL_PREFIX)
        if refused is not None:
            response = refused
        elif path == DASHBOARD_PATH or path.startswith(f"{DASHBOARD_PATH}/"):
            response = await self.dashboard.handle(request, path[len(DASHBOARD_PATH) :])
        elif path == CONTROL_PREFIX or path.startswith(f"{CONTROL_PREFIX}/"):
            response = await self.control(request, path[len(CONTROL_PREFIX) :].strip("/"))
        else:
            try:
                response = self.api(request)
            except httpx.TransportError:  # a fault of kind "network": no answer
                await _break_connection(send)
                return
            # Dated on the server's clock, as QStash's answers are on its own: an export
            # reads from it when it read the account (a virtual clock's time, too).
            virtual = self.settings.clock == "virtual"
            at = self.fake.clock.now_ms / 1000 if virtual else time.time()
            response.headers["Date"] = formatdate(at, usegmt=True)
        await _write_response(send, response)
        _log_request(scope, response.status_code)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.startup()
                self.persistence.started(self)  # replays its journal before serving
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def startup(self) -> None:
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._pool = OriginPools()
        self._pool.mounts = self.settings.mounts
        self.fake.sender.pool = self._pool
        if self.settings.clock == "real" and not self.settings.read_only:
            self._follower = asyncio.get_running_loop().create_task(self._follow_wall_clock())

    async def shutdown(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
            self._follower = None
        await self._deliveries.cancel()  # cut attempts are due again after a restart
        await self.persistence.stopped(self)
        self.fake.stop()
        with contextlib.suppress(Exception):
            self.fake.sender.close()
        if self._pool is not None:
            await self._pool.aclose()
            self._pool = None

    def _install(self, fake: FakeQStash) -> None:
        """Serve ``fake`` from now on, delivering through the shared pool."""
        self.fake = fake
        fake.sender.pool = self._pool
        real = self.settings.clock == "real"
        self._deliveries = ServerDeliveries(
            fake,
            self.settings.attempt_timeout,
            catch_up=self._catch_up_clock if real else None,
            on_end=self.wake_up if real else None,
            holdback=self.holdback,
        )
        self.holdback.bind(fake.store)

    def mount(self, prefix: str, to: str) -> Redirect:
        """Send the outbound requests under ``prefix`` to ``to`` from now on (a prefix mounted
        already changes its target); ``ValueError`` saying what is accepted."""
        pair = check_redirect(prefix, to)
        self._set_mounts(merge_redirects(self.settings.mounts, [pair]))
        return pair

    def unmount(self, prefix: str) -> bool:
        """Forget the mount at ``prefix``; False when there was none."""
        prefix = mount_url(prefix)
        kept = tuple(m for m in self.settings.mounts if m[0] != prefix)
        removed = len(kept) != len(self.settings.mounts)
        self._set_mounts(kept)
        return removed

    def _set_mounts(self, mounts: tuple[Redirect, ...]) -> None:
        # On the settings: what a data dir keeps, and what a reset leaves alone.
        self.settings = dataclasses.replace(self.settings, mounts=mounts)
        if self._pool is not None:
            self._pool.mounts = mounts

    def wake_up(self) -> None:
        if self._wake is not None:
            self._wake.set()  # something may be due now: the real clock's task looks

    # -- the QStash API ---------------------------------------------------------------------
    def api(self, request: httpx.Request) -> httpx.Response:
        """Answer a QStash API request (the dashboard's buttons send theirs here too)."""
        if self.settings.clock == "real" and not self.settings.read_only:
            self._catch_up_clock()  # a publish is stamped with the wall clock's now
        try:
            with self.persistence.api_call(self, request):  # journaled before it is answered
                response = self.fake.handle(request)
        except PersistenceError as exc:  # not journaled: not acknowledged either
            return httpx.Response(503, json={"error": str(exc)})
        self.wake_up()
        return response

    def _catch_up_clock(self) -> None:
        now_ms = int(time.time() * 1000)
        if now_ms > self.fake.clock.now_ms:
            self.fake.clock.move_to(now_ms)

    async def _follow_wall_clock(self) -> None:
        """The real clock: start what is due by the wall clock, then sleep until the next
        due moment (at most a second), or until an API call or an attempt's end may have made
        something due. Attempts run on their own: this never waits for one."""
        assert self._wake is not None
        while True:
            self._wake.clear()
            try:
                self._catch_up_clock()
                self._deliveries.start_due()
            except Exception:
                _log.exception("delivering on the real clock failed; carrying on")
            due = self.fake.next_due()
            wait = _IDLE_WAIT
            if due is not None:
                wait = min(_IDLE_WAIT, max(0.0, due.timestamp() - time.time()))
            if wait > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)

    # -- the control API --------------------------------------------------------------------
    async def control(self, request: httpx.Request, action: str) -> httpx.Response:
        """Answer a control request (``/_qstash/<action>``): authenticated, journaled, and
        every refusal a 4xx ``{"error": ...}``."""
        try:
            self._authenticate(request)
        except ControlError as exc:
            return httpx.Response(exc.status, json={"error": exc.message})
        try:
            with self.persistence.control(self, request, action):
                return await self.answer(request, action)
        except PersistenceError as exc:
            return httpx.Response(503, json={"error": str(exc)})

    async def answer(self, request: httpx.Request, action: str) -> httpx.Response:
        """A control action answered, every refusal a 4xx ``{"error": ...}`` (without
        authentication or journaling: what a data dir's replay runs)."""
        try:
            return await self.act(request, action)
        except ControlError as exc:
            return httpx.Response(exc.status, json={"error": exc.message})
        except (ValueError, TypeError, OverflowError) as exc:
            return httpx.Response(400, json={"error": str(exc)})
        except RecursionError:  # a value nested deeper than anything reads back
            return httpx.Response(400, json={"error": "the body is nested too deeply"})
        except Exception as exc:  # a delivery loop error, say: tell the client, keep serving
            _log.exception("control request %s failed", action)
            return httpx.Response(500, json={"error": f"{type(exc).__name__}: {exc}"})

    def _authenticate(self, request: httpx.Request) -> None:
        auth = request.headers.get("authorization")
        token = request.url.params.get("qstash_token")
        if auth is not None:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer":
                raise ControlError(401, "authorization header must be 'Bearer <QSTASH_TOKEN>'")
        if token is None:
            raise ControlError(401, "authorization header is missing")
        if not same_token(token, self.fake.token):
            raise ControlError(401, "invalid token: it is not this server's QSTASH_TOKEN")

    async def act(self, request: httpx.Request, action: str) -> httpx.Response:
        """Answer an authenticated control request: a list (``records.MODELS``) or a verb
        (``verbs.VERBS``). What a data dir replays its journal through."""
        method = request.method
        if method == "GET" and action in records.MODELS:
            render = records.MODELS[action].render
            body = fastjson.dumps([render(item) for item in getattr(self.fake, action)])
            return httpx.Response(200, content=body, headers=_JSON)
        verb = verbs.ROUTES.get((method, action or "state"))
        if verb is None:
            known = [f"{m} {route}" for m, route in verbs.ROUTES] + [
                f"GET {name}" for name in records.MODELS
            ]
            raise ControlError(
                404,
                f"{method} {CONTROL_PREFIX}/{action} is no control endpoint; there are: "
                + ", ".join(known),
            )
        args = verb.arguments(_json_body(request) if method != "GET" else {})
        answer = await verb.run(self, args)
        # ``json=None`` would send no body at all: a verb answering null says so.
        body = json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()
        return httpx.Response(200, content=body, headers=_JSON)

    @property
    def mounts(self) -> list[dict[str, str]]:
        """The outbound mounts, as ``GET /_qstash/mounts`` answers them."""
        return [{"prefix": prefix, "to": to} for prefix, to in self.settings.mounts]

    def state(self) -> dict[str, Any]:
        """What ``GET /_qstash/state`` answers."""
        due = self.fake.next_due()
        return {
            "now": records.iso_time(self.fake.now),
            "clock": self.settings.clock,
            "next_due": records.iso_time(due),
            "plan": self.fake.store.plan.name,
            "data_dir": self.persistence.status(),
            "read_only": self.settings.read_only,
            "holding_back": self.holdback.holding,
            "held": len(self.holdback.held),
        }

    async def load(self, document: Any, start: Any) -> dict[str, Any]:
        """Take in an export (``POST /_qstash/load``; ``loading.take_in``), a virtual clock's
        under its lock; from then on deliveries to its URLs are held back."""
        if self.settings.clock == "virtual":
            async with self._require_lock():  # after a tick/advance/drain under way
                loaded = loading.take_in(self.fake, "virtual", document, start)
        else:
            self._catch_up_clock()
            loaded = loading.take_in(self.fake, "real", document, start)
        self.settings = dataclasses.replace(self.settings, loaded=True)
        self.wake_up()
        return loaded.as_dict()

    async def move(self, action: str, start: verbs.ClockMove) -> list[Delivery]:
        """A clock move (``verbs.CLOCK_MOVES``: the table says which fake method ``start``
        calls) and the deliveries it made."""
        if action != "tick" and self.settings.clock == "real":
            raise ControlError(
                409,
                f"{action} moves a virtual clock; this server's clock follows the wall clock "
                "(--clock real): start it with --clock virtual to move time yourself",
            )
        if self.settings.clock == "real":
            return await self._tick_real_clock()
        lock = self._require_lock()
        if lock.locked():
            # Waiting would deadlock an app that asks for time from inside a delivery.
            raise ControlError(409, "another tick/advance/drain is running: they do not nest")
        async with lock:
            return await start(self.fake)

    async def _tick_real_clock(self) -> list[Delivery]:
        """A tick on the real clock: start what is due now and wait for those attempts (each
        bounded by the attempt timeout). Attempts already under way are not waited for: one
        of them may be the very delivery whose handler asked for this tick."""
        self._catch_up_clock()
        started = self._deliveries.start_due()
        if started:
            await asyncio.wait(started)
        return [
            made
            for task in started
            if not task.cancelled() and task.exception() is None and (made := task.result())
        ]

    async def reset(self, args: dict[str, Any]) -> None:
        """Start a fresh store (``POST /_qstash/reset``)."""
        keep = keep_names(args.get("keep"))
        plan = args.get("plan")
        if plan is not None:
            plan = plan_named(plan).name  # refused before anything is forgotten
        if self.settings.clock == "virtual":
            async with self._require_lock():  # after a tick/advance/drain under way
                await self._replace_fake(args.get("start"), keep, plan)
        else:  # deliveries under way are cut: a reset never waits for an endpoint
            await self._replace_fake(args.get("start"), keep, plan)

    async def _replace_fake(self, start: Any, keep: Any, plan: str | None) -> None:
        old, old_deliveries = self.fake, self._deliveries
        # Without a start, a virtual clock starts where a fresh server's does (its --start, or
        # now), not where the last test left it: tests sharing a server must not lean on the
        # order they run in.
        fake = build_fake(self.settings, start, self.resets + 1, plan)
        carry_over(old.store, fake.store, keep)
        if not keep:  # nothing of a loaded export is left: its URLs are no longer held back
            self.settings = dataclasses.replace(self.settings, loaded=False)
        self.resets += 1
        self._install(fake)
        self.persistence.reset()
        await old_deliveries.cancel()
        old.stop()
        with contextlib.suppress(Exception):
            old.sender.close()

    def _require_lock(self) -> asyncio.Lock:
        if self._lock is None:  # served without a lifespan (a bare ASGI server): start here
            self.startup()
        assert self._lock is not None
        return self._lock


def _json_body(request: httpx.Request) -> dict[str, Any]:
    if not request.content.strip():
        return {}
    try:
        body = json.loads(request.content, parse_constant=_not_json)
    except (ValueError, RecursionError):
        raise ControlError(
            400, "the body is not JSON (NaN and Infinity are not): expected a JSON object"
        ) from None
    if not isinstance(body, dict):
        raise ControlError(400, "expected a JSON object as the body")
    return body


def _not_json(constant: str) -> Any:
    # Python's json reads NaN and Infinity; JSON has no such numbers.
    raise ValueError(f"{constant} is not JSON")


class BodyTooLarge(Exception):
    pass


def _too_large(size: int | str) -> BodyTooLarge:
    return BodyTooLarge(
        f"request body of {size} bytes is too large: this server reads at most "
        f"{MAX_BODY_BYTES} bytes (QStash's largest message, {_LARGEST_MESSAGE_BYTES} bytes, "
        "and room for a batch around it)"
    )


async def _read_request(
    scope: Scope, receive: Receive, limit: int = MAX_BODY_BYTES
) -> httpx.Request:
    """The request, its body read whole, up to ``limit`` bytes (``BodyTooLarge`` beyond: a
    declared ``Content-Length`` is refused before a byte of the body is read)."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.strip().isdigit() and int(value) > limit:
            raise _too_large(int(value))
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(f"more than {limit}")
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    server = scope.get("server") or ("127.0.0.1", 80)
    raw_path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string") or b""
    if query:
        raw_path += b"?" + query
    scheme = scope.get("scheme", "http")
    if len(raw_path) <= _CACHED_TARGET_BYTES:
        url = _url(scheme, server[0], server[1], raw_path)
    else:
        url = httpx.URL(scheme=scheme, host=server[0], port=server[1], raw_path=raw_path)
    return httpx.Request(
        scope["method"],
        url,
        headers=[(k, v) for k, v in scope["headers"]],
        content=b"".join(chunks),
    )


#: Targets up to this long are cached (512 of them at most: a bounded half megabyte).
_CACHED_TARGET_BYTES = 1024


@functools.lru_cache(maxsize=512)
def _url(scheme: str, host: str, port: int | None, raw_path: bytes) -> httpx.URL:
    # httpx checks every character of a URL it builds, a tenth of a publish's time in the
    # server; a URL is immutable, and clients ask for the same few targets again and again.
    return httpx.URL(scheme=scheme, host=host, port=port, raw_path=raw_path)


async def _break_connection(send: Send) -> None:
    """End the exchange as a network error does: an answer is begun and never finished, so
    the server closes the connection and the client sees it break (not an HTTP status)."""
    headers = [(b"content-length", b"1")]
    await send({"type": "http.response.start", "status": 503, "headers": headers})


def _log_request(scope: Scope, status: int) -> None:
    # The path without its query: a control call may carry the token there.
    _log.info("%s %s %d", scope["method"], scope["path"], status)


async def _write_response(send: Send, response: httpx.Response) -> None:
    content = response.content
    headers = [(k, v) for k, v in response.headers.raw if k.lower() not in (b"content-length",)]
    headers.append((b"content-length", str(len(content)).encode()))
    if "date" not in response.headers:
        headers.append((b"date", formatdate(time.time(), usegmt=True).encode()))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": content})
