"""The server mode's ASGI app: the QStash API of one ``FakeQStash``, and its control API.

Requests under ``/_qstash/`` steer and inspect the fake (time, lists, faults, reset); every
other request is the QStash API, converted to an ``httpx.Request`` for ``FakeQStash.handle``
and its ``httpx.Response`` converted back. Both need the server's token.

Everything runs on the server's one event loop: deliveries are awaited (``aadvance`` and
friends), so the API keeps answering while an app handles a delivery and publishes more.

The clock has two modes. ``virtual``: it moves only when a control request says so.
``real``: a background task keeps the virtual clock on the wall clock and delivers what falls
due, as the QStash dev server does. That task is the one place where the wall clock drives
the engine, and it lives here, outside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from ..fake import FakeQStash
from ..state.models import Delivery
from . import records

CONTROL_PREFIX = "/_qstash"
ClockMode = Literal["real", "virtual"]
CLOCK_MODES: tuple[ClockMode, ...] = ("real", "virtual")

_log = logging.getLogger("pytest_qstash.server")
#: The real clock's task looks at least this often (seconds), even when nothing is due.
_IDLE_WAIT = 1.0

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class ControlError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ServerSettings:
    token: str
    current_signing_key: str
    next_signing_key: str
    clock: ClockMode = "real"
    start: str | None = None
    seed: int | str = 0


def build_fake(
    settings: ServerSettings, start: str | float | None = None, generation: int = 0
) -> FakeQStash:
    """A fake for serving: the process's own clock is left alone (the apps it calls run on
    the real clock and verify signatures on it), and deliveries may go to any host.

    ``generation`` counts resets: each gets ids of its own (still seeded), since the apps a
    server delivers to outlive a reset, and one that remembers the message ids it processed
    (to be idempotent) must not take a new message for one it saw before the reset."""
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
    )
    fake._sender.network = True  # the user runs a server: unmounted URLs are real endpoints
    return fake


def _wall_start(clock: ClockMode) -> float:
    # The real clock follows the wall to the millisecond; a virtual one starts on a whole
    # second, as the fixture's does (workflow sleeps are rounded to seconds).
    now = time.time()
    return now if clock == "real" else float(int(now))


class QStashServerApp:
    """ASGI app serving one fake. ``settings.clock`` picks the clock mode."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.fake = build_fake(settings)
        self._resets = 0
        self._lock: asyncio.Lock | None = None
        self._wake: asyncio.Event | None = None
        self._follower: asyncio.Task[None] | None = None

    # -- ASGI -------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        request = await _read_request(scope, receive)
        path = request.url.raw_path.decode("ascii").partition("?")[0]
        if path == CONTROL_PREFIX or path.startswith(f"{CONTROL_PREFIX}/"):
            response = await self._control(request, path[len(CONTROL_PREFIX) :].strip("/"))
        else:
            response = self._api(request)
        await _write_response(send, response)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def startup(self) -> None:
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        if self.settings.clock == "real":
            self._follower = asyncio.get_running_loop().create_task(self._follow_wall_clock())

    async def shutdown(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
            self._follower = None
        self.fake.stop()
        with contextlib.suppress(Exception):
            self.fake._sender.close()

    # -- the QStash API ---------------------------------------------------------------------
    def _api(self, request: httpx.Request) -> httpx.Response:
        if self.settings.clock == "real":
            self._catch_up_clock()  # a publish is stamped with the wall clock's now
        response = self.fake.handle(request)
        if self._wake is not None:
            self._wake.set()  # something may be due now: the real clock's task looks
        return response

    def _catch_up_clock(self) -> None:
        now_ms = int(time.time() * 1000)
        if now_ms > self.fake.clock.now_ms:
            self.fake.clock.move_to(now_ms)

    async def _follow_wall_clock(self) -> None:
        """The real clock: deliver what is due by the wall clock, then sleep until the next
        due moment (at most a second), or until an API call may have made something due."""
        assert self._lock is not None
        assert self._wake is not None
        while True:
            self._wake.clear()
            try:
                async with self._lock:
                    self._catch_up_clock()
                    await self.fake.atick()
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
    async def _control(self, request: httpx.Request, action: str) -> httpx.Response:
        try:
            self._authenticate(request)
            return await self._act(request, action)
        except ControlError as exc:
            return httpx.Response(exc.status, json={"error": exc.message})
        except (ValueError, TypeError) as exc:
            return httpx.Response(400, json={"error": str(exc)})
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
        if token != self.fake.token:
            raise ControlError(401, "invalid token: it is not this server's QSTASH_TOKEN")

    async def _act(self, request: httpx.Request, action: str) -> httpx.Response:
        method = request.method
        if method == "GET" and action in records.LISTS:
            write, _ = records.LISTS[action]
            return httpx.Response(200, json=[write(item) for item in getattr(self.fake, action)])
        if method == "GET" and action in ("", "state"):
            return httpx.Response(200, json=self._state())
        if method != "POST":
            raise ControlError(404, f"{method} {CONTROL_PREFIX}/{action} is no control endpoint")
        body = _json_body(request)
        if action in ("tick", "advance", "advance_to", "drain"):
            return httpx.Response(200, json=await self._move(action, body))
        if action == "reset":
            return httpx.Response(200, json=await self._reset(body))
        if action == "fail_next":
            fault = self.fake.fail_next(
                body.get("endpoint", "publish"),
                status=body.get("status"),
                kind=body.get("kind"),
                times=body.get("times", 1),
            )
            return httpx.Response(
                200,
                json={
                    "endpoint": fault.endpoint,
                    "kind": fault.kind,
                    "status": fault.status,
                    "times": fault.times,
                },
            )
        if action == "clear_faults":
            self.fake.clear_faults()
            return httpx.Response(200, json={})
        if action == "trigger":
            run_id = self.fake.trigger(
                _required(body, "url"),
                body.get("body"),
                body.get("headers"),
                run_id=body.get("run_id"),
                retries=body.get("retries"),
                failure_url=body.get("failure_url"),
                label=body.get("label"),
            )
            if self._wake is not None:
                self._wake.set()
            return httpx.Response(200, json={"run_id": run_id})
        if action == "notify":
            try:
                answers = self.fake.notify(
                    _required(body, "event_id"), body.get("data"), run_id=body.get("run_id")
                )
            except ValueError as exc:
                raise ControlError(400, str(exc)) from None
            if self._wake is not None:
                self._wake.set()
            return httpx.Response(200, json=answers)
        raise ControlError(404, f"POST {CONTROL_PREFIX}/{action} is no control endpoint")

    def _state(self) -> dict[str, Any]:
        due = self.fake.next_due()
        return {
            "now": records.iso_time(self.fake.now),
            "clock": self.settings.clock,
            "next_due": records.iso_time(due),
        }

    async def _move(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        if action != "tick" and self.settings.clock == "real":
            raise ControlError(
                409,
                f"{action} moves a virtual clock; this server's clock follows the wall clock "
                "(--clock real): start it with --clock virtual to move time yourself",
            )
        lock = self._require_lock()
        if self.settings.clock == "virtual" and lock.locked():
            # Waiting would deadlock an app that asks for time from inside a delivery.
            raise ControlError(409, "another tick/advance/drain is running: they do not nest")
        async with lock:
            made: list[Delivery]
            if action == "tick":
                if self.settings.clock == "real":
                    self._catch_up_clock()
                made = await self.fake.atick()
            elif action == "advance":
                made = await self.fake.aadvance(_required(body, "by"))
            elif action == "advance_to":
                made = await self.fake.aadvance_to(_required(body, "to"))
            else:
                made = await self.fake.adrain(body.get("within", "30d"))
        return {
            "deliveries": [records.delivery(d) for d in made],
            **self._state(),
        }

    async def _reset(self, body: dict[str, Any]) -> dict[str, Any]:
        async with self._require_lock():
            old = self.fake
            start = body.get("start")
            if start is None and self.settings.clock == "virtual":
                start = max(_wall_start("virtual"), old.clock.now_ms / 1000)
            self._resets += 1
            self.fake = build_fake(self.settings, start, self._resets)
            old.stop()
            with contextlib.suppress(Exception):
                old._sender.close()
        return self._state()

    def _require_lock(self) -> asyncio.Lock:
        if self._lock is None:  # served without a lifespan (a bare ASGI server): start here
            self.startup()
        assert self._lock is not None
        return self._lock


def _required(body: dict[str, Any], name: str) -> Any:
    if name not in body:
        raise ControlError(400, f"missing {name!r} in the JSON body")
    return body[name]


def _json_body(request: httpx.Request) -> dict[str, Any]:
    if not request.content.strip():
        return {}
    try:
        body = json.loads(request.content)
    except ValueError:
        raise ControlError(400, "the body is not JSON: expected a JSON object") from None
    if not isinstance(body, dict):
        raise ControlError(400, "expected a JSON object as the body")
    return body


async def _read_request(scope: Scope, receive: Receive) -> httpx.Request:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    server = scope.get("server") or ("127.0.0.1", 80)
    raw_path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string") or b""
    if query:
        raw_path += b"?" + query
    host, port = server[0], server[1]
    url = httpx.URL(scheme=scope.get("scheme", "http"), host=host, port=port, raw_path=raw_path)
    return httpx.Request(
        scope["method"],
        url,
        headers=[(k, v) for k, v in scope["headers"]],
        content=b"".join(chunks),
    )


async def _write_response(send: Send, response: httpx.Response) -> None:
    content = response.content
    headers = [(k, v) for k, v in response.headers.raw if k.lower() not in (b"content-length",)]
    headers.append((b"content-length", str(len(content)).encode()))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": content})
