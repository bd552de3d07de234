"""``FakeQStash``: the in-process QStash a test talks to, with or without pytest."""

from __future__ import annotations

import asyncio
import difflib
import json
import math
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from ..delivery.dispatcher import AsyncRunner, Dispatcher, DispatchSettings
from ..delivery.handler_time import HandlerDuration, HandlerTimes
from ..delivery.mounts import MountTable
from ..delivery.transports import DEFAULT_DELIVERY_TIMEOUT_S, Sender
from ..engine import workflow_dlq
from ..engine.account import Account
from ..engine.clock import VirtualClock
from ..engine.dedup import DEFAULT_DEDUP_WINDOW_MS
from ..engine.durations import DRAIN_WITHIN, Duration, parse_duration_ms
from ..engine.flow_control import FlowKey
from ..engine.ids import IdGenerator
from ..engine.models import ApiCall, Delivery, DlqEntry, Event, Message, ms_to_datetime
from ..engine.options import LATEST_MS, InvalidOption
from ..engine.plans import DEFAULT_PLAN, plan_named
from ..engine.queues import Queue
from ..engine.retry import DEFAULT_RETRIES
from ..engine.scheduler import Scheduler
from ..engine.schedules import Schedule
from ..engine.store import Store
from ..engine.url_groups import UrlGroup
from ..engine.verb_specs import ContinueRun, FailNext, Notify, Trigger, verb
from ..engine.waiters import Waiter
from ..engine.workflow_dlq import WorkflowDlqEntry
from ..engine.workflows import WorkflowRun
from ..errors import AsyncContextError, SettingError
from ..intercept import sslcache
from ..wire import api, hosts
from ..wire._http import request_path
from ..wire.faults import Fault, FaultTable
from ..wire.publish_headers import read_overrides
from ..wire.regions import Region, region_named
from ..wire.waiters import notify_answer
from .appclock import AppClock, NoAppClock, make_app_clock
from .query import Found

if TYPE_CHECKING:
    from ..intercept.router import QStashRouter

#: How many API calls ``qstash.api_calls`` keeps (the newest).
API_CALLS_KEPT = 1_000


class FakeQStash:
    """An in-memory QStash with a virtual clock.

    Use it as the ``qstash`` fixture, or directly: ``with FakeQStash() as qstash:`` (or
    ``async with``). While active it answers the QStash SDKs' HTTP calls, delivers messages
    into mounted apps when told to (``tick``/``advance``), and keeps the app's clock on
    ``qstash.now``.

    Options (the ``@pytest.mark.qstash(...)`` keywords are the same):

    - ``start``: where the virtual clock starts (datetime, ISO string, unix seconds); now.
    - ``freeze_time``: keep the app's wall clock on ``qstash.now`` (default True);
      ``time_library``: ``"auto"`` (time-machine; freezegun when a freezegun freezer of the
      test's own is active as the fake starts), ``"time-machine"``, ``"freezegun"`` or
      ``"none"``.
    - ``raise_app_exceptions``: re-raise an exception out of the app from ``tick()``
      (default True; the attempt is a failed 500 either way).
    - ``strict``: a delivery nothing answers raises ``UnroutedDeliveryError`` (default True);
      otherwise it is a failed attempt.
    - ``seed``: seed of the generated ids; ``default_retries`` (3); ``dedup_window`` (10 min).
    - ``max_deliveries_per_instant`` / ``max_deliveries_per_call``: the loop guard's limits.
    - ``delivery_timeout``: how long one delivery may take, in real time (default 30 s),
      before ``DeliveryTimeoutError`` fails the test (a duration: seconds, ``"500ms"``).
    - ``base_urls``: more QStash API base URLs to intercept (QStash's own hosts and
      ``QSTASH_URL`` always are): ``http(s)://host[:port][/path prefix]``.
    - ``token``, ``current_signing_key``, ``next_signing_key``: override the environment's.
    - ``plan``: the QStash plan whose limits apply: ``"free"``, ``"pay_as_you_go"``,
      ``"fixed_1m"`` or ``"fixed_10m"`` (the default, the most permissive).
    - ``retention``: forget log entries, finished messages, deliveries and runs after the
      plan's log retention, and DLQ entries after its DLQ retention, as QStash does
      (default False: a test's records stay whole however far it advances).
    - ``region``: ``"us-east-1"`` or ``"eu-central-1"``: deliveries carry ``Upstash-Region``
      (``US-EAST-1``), as a multi-region account's do (default None: no header).
    """

    def __init__(
        self,
        *,
        start: datetime | str | float | None = None,
        freeze_time: bool = True,
        time_library: str = "auto",
        raise_app_exceptions: bool = True,
        strict: bool = True,
        seed: int | str = 0,
        default_retries: int = DEFAULT_RETRIES,
        dedup_window: Duration = DEFAULT_DEDUP_WINDOW_MS / 1000,
        max_deliveries_per_instant: int = 5000,
        max_deliveries_per_call: int = 100_000,
        delivery_timeout: Duration = DEFAULT_DELIVERY_TIMEOUT_S,
        base_urls: list[str] | None = None,
        token: str | None = None,
        current_signing_key: str | None = None,
        next_signing_key: str | None = None,
        plan: str = DEFAULT_PLAN,
        region: str | None = None,
        retention: bool = False,
    ) -> None:
        _check_settings(
            flags={
                "freeze_time": freeze_time,
                "raise_app_exceptions": raise_app_exceptions,
                "strict": strict,
                "retention": retention,
            },
            counts={
                "default_retries": (default_retries, 0),
                "max_deliveries_per_instant": (max_deliveries_per_instant, 1),
                "max_deliveries_per_call": (max_deliveries_per_call, 1),
            },
        )
        if base_urls is not None and (
            isinstance(base_urls, str) or not all(isinstance(u, str) for u in base_urls)
        ):
            raise TypeError(f"invalid base_urls {base_urls!r}: expected a list of URL strings")
        timeout_ms = parse_duration_ms(delivery_timeout, what="delivery_timeout")
        self._region = region_named(region) if region is not None else None
        if timeout_ms <= 0:
            raise ValueError(
                f"invalid delivery_timeout={delivery_timeout!r}: expected a duration above "
                'zero, e.g. 30, "500ms" or "2m"'
            )
        self._freeze_time = freeze_time
        self._raise_app_exceptions = raise_app_exceptions
        self._strict = strict
        self.clock = VirtualClock(_start_ms(start))
        self.account = Account(token, current_signing_key, next_signing_key)
        self.store = Store(
            self.clock,
            IdGenerator(seed),
            self.account,
            default_retries=default_retries,
            dedup_window_ms=parse_duration_ms(dedup_window, what="dedup_window"),
            plan=plan_named(plan),
            retention=retention,
        )
        self.mounts = MountTable()
        self._handler_times = HandlerTimes()
        # The closures below hold the clock and the account, not the fake: a fake no one holds
        # any more is freed at once rather than left to the cycle collector.
        clock, account = self.clock, self.account
        self._faults = FaultTable(lambda: clock.now_ms)
        # QStash's own hosts and QSTASH_URL's are always intercepted (``hosts`` decides).
        self._base_urls = list(base_urls or [])
        hosts.declare(hosts.parse_bases(self._base_urls))  # the network guard stops them, too
        self._router: QStashRouter | None = None
        self._sender = Sender(self.mounts, timeout_ms / 1000)
        self._app_clock: AppClock = make_app_clock(time_library) if freeze_time else NoAppClock()
        self._scheduler = Scheduler(self.store)
        self._dispatcher = Dispatcher(
            self.store,
            self.mounts,
            self._sender,
            DispatchSettings(
                signing_key=lambda: account.current_signing_key,
                raise_app_exceptions=raise_app_exceptions,
                strict_routing=strict,
                max_same_instant=max_deliveries_per_instant,
                max_per_call=max_deliveries_per_call,
                region=self._region.header if self._region is not None else None,
            ),
            on_time=self._app_clock.move_to,
            handler_times=self._handler_times,
            scheduler=self._scheduler,
        )
        #: What the async moves (``atick``, ``aadvance``, ``aadvance_to``, ``adrain``)
        #: deliver through: the dispatcher's loop, one attempt at a time; a server sets its
        #: concurrent runner over the same loop (``server.deliveries.ServerDeliveries``).
        self.async_runner: AsyncRunner = self._dispatcher
        self._active = False
        # Bounded: a call holds its headers and answer (about 2.6 KB), and a suite that
        # publishes 100k messages in one test must not hold them all.
        self._api_calls: deque[ApiCall] = deque(maxlen=API_CALLS_KEPT)
        #: DLQ entries the test has read (``qstash.dlq``, or the DLQ through the API).
        self._dlq_read: set[str] = set()

    # -- settings, as given (read-only: they shape the fake when it is built) ---------------
    # Setting one is refused (``SettingError``): each is read once, where the fake is built.
    @property
    def freeze_time(self) -> bool:
        return self._freeze_time

    @freeze_time.setter
    def freeze_time(self, value: object) -> None:
        raise SettingError("freeze_time")

    @property
    def raise_app_exceptions(self) -> bool:
        return self._raise_app_exceptions

    @raise_app_exceptions.setter
    def raise_app_exceptions(self, value: object) -> None:
        raise SettingError("raise_app_exceptions")

    @property
    def strict(self) -> bool:
        return self._strict

    @strict.setter
    def strict(self, value: object) -> None:
        raise SettingError("strict")

    @property
    def retention(self) -> bool:
        """Whether the plan's retention forgets old records (see the ``retention`` option)."""
        return self.store.retention is not None

    @retention.setter
    def retention(self, value: object) -> None:
        raise SettingError("retention")

    @property
    def delivery_timeout(self) -> float:
        """The bound on one delivery, in real seconds."""
        return self._sender.delivery_timeout_s

    @delivery_timeout.setter
    def delivery_timeout(self, value: object) -> None:
        raise SettingError("delivery_timeout")

    @property
    def region(self) -> Region | None:
        """The region deliveries come from (``regions.Region``), or None."""
        return self._region

    @region.setter
    def region(self, value: object) -> None:
        raise SettingError("region")

    # -- for the server mode: its own delivery loop over this fake --------------------------
    @property
    def sender(self) -> Sender:
        """What sends a delivery's request (into a mounted app, or over the network); the
        server sets its connection pool and lets it reach any host."""
        return self._sender

    @property
    def dispatcher(self) -> Dispatcher:
        """What turns due messages into delivery jobs and applies their answers: the server's
        concurrent runner drives its ``DeliveryLoop``."""
        return self._dispatcher

    @property
    def router(self) -> QStashRouter:
        """The respx router that answers the QStash API while the fake is active. Taken on
        first use (a server never intercepts, and so never loads respx: a third of its
        start-up) from the routers stopped fakes left (``intercept.lend_router``), and given
        back when the fake stops."""
        if self._router is None:
            from ..intercept.router import lend_router

            self._router = lend_router(self.handle, self._base_urls)
        return self._router

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> FakeQStash:
        if not self._active:
            hosts.check_env()  # a QSTASH_URL that is no base would go unintercepted
            self._app_clock.start(self.clock.now_ms)
            from ..intercept import httpx2_support

            self.router.start()
            httpx2_support.attach(self.router)  # httpx2 clients too, when installed
            sslcache.acquire()  # default httpx clients share one TLS context meanwhile
            self._active = True
            try:
                self._sender.start_lifespans()
            except BaseException:
                self.stop()  # a failed startup must not leave interception behind
                raise
        return self

    def stop(self) -> None:
        if self._active:
            self._active = False
            from ..intercept import httpx2_support

            router = self.router
            try:
                httpx2_support.detach(router)
                router.stop(quiet=True)
                from ..intercept.router import return_router

                self._router = None
                return_router(router)
            finally:
                sslcache.release()
                self._app_clock.stop()
                self._sender.close()

    def __enter__(self) -> FakeQStash:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> FakeQStash:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def active(self) -> bool:
        return self._active

    # -- wiring -----------------------------------------------------------------------------
    def mount(
        self,
        base_url: str,
        app: Any,
        *,
        kind: str | None = None,
        lifespan: bool = False,
        duration: HandlerDuration | None = None,
    ) -> Any:
        """Deliver messages whose URL starts with ``base_url`` into ``app`` (ASGI, WSGI, a
        callable taking an ``httpx.Request``, or a test client; ``kind`` overrides
        detection). The longest matching base URL wins. Returns ``app``.

        A test client (Starlette's ``TestClient``, an ``httpx.Client``/``AsyncClient`` with a
        transport, Flask's ``app.test_client()``, Django's ``Client``/``AsyncClient``) sends
        each delivery through itself; a ``TestClient`` inside its ``with`` block runs it on
        its own portal's loop, next to the lifespan it started: the first choice for an app
        with a lifespan.

        ``lifespan=True`` (ASGI apps) runs the app's lifespan: startup at once (or when the
        fake starts, if it has not yet), shutdown when the fake stops, as a task of the fake's
        own event loop; its requests run on that loop too, in async tests as well, next to
        the resources the lifespan opened. A failed startup raises ``LifespanError`` from
        here.

        ``duration``: the virtual time each attempt to this app takes (``"30s"``, seconds, a
        timedelta), or a function of the signed ``httpx.Request`` returning one (or None).
        The app is called when the attempt starts; its answer counts when the attempt ends,
        and an ``Upstash-Timeout`` (or the plan's maximum) shorter than that cuts it.
        """
        mount = self.mounts.add(base_url, app, kind, lifespan=lifespan)
        try:
            self._handler_times.set_mount(mount.base_url, duration)
        except BaseException:
            self.mounts.remove(mount.base_url)
            raise
        if self._active:  # also shuts down the lifespan of an app this one replaced
            try:
                self._sender.start_lifespans()
            except BaseException:
                self.mounts.remove(mount.base_url)  # nothing half-mounted stays behind
                raise
        return app

    def unmount(self, base_url: str) -> None:
        """Stop delivering to the app at ``base_url``; ``ValueError`` if none is mounted
        there (a mistyped URL would otherwise leave the app mounted without a word)."""
        if not self.mounts.remove(base_url):
            mounted = ", ".join(self.mounts.base_urls) or "nothing"
            raise ValueError(f"nothing is mounted at {base_url!r}; mounted: {mounted}")
        self._handler_times.set_mount(base_url, None)
        if self._active:
            self._sender.start_lifespans()  # shuts down the unmounted app's lifespan

    def handler_takes(
        self,
        url_or_pattern: str | re.Pattern[str],
        duration: HandlerDuration,
        *,
        times: int | None = None,
    ) -> None:
        """Make attempts to URLs starting with ``url_or_pattern`` (or matching a compiled
        ``re.Pattern``) take ``duration`` of virtual time: the next ``times`` attempts, or all
        of them. The newest rule that matches wins over older ones and over a mount's
        ``duration``. The app is called when the attempt starts; until its end the message is
        ACTIVE, and ``advance()`` can stop inside the interval."""
        self._handler_times.add(url_or_pattern, duration, times)

    def redeliver(self, message_id: str) -> Message:
        """Deliver a DELIVERED message once more, as QStash's at-least-once delivery
        sometimes does: the same ``Upstash-Message-Id``, body and headers, a fresh signature.
        It is due now: the next ``tick()``/``advance()`` delivers it (and its callback, if it
        has one). Tests an idempotent handler. ``ValueError`` for an unknown id or a message
        not DELIVERED."""
        message = self.store.messages.get(message_id)
        if message is None:
            raise ValueError(f"cannot redeliver {message_id!r}: no message has this id")
        self.store.redeliver(message)
        return message

    def saved_extras(self) -> dict[str, Any]:
        """What the fake holds beside its store, clock and account (a server's data dir
        keeps it): the API-call log, the DLQ entries read, the faults armed."""
        return {
            "api_calls": self._api_calls,
            "dlq_read": self._dlq_read,
            "faults": self._faults.faults,
        }

    def restore_extras(self, extras: Mapping[str, Any]) -> None:
        """Put back what ``saved_extras`` gave (``ValueError`` for anything else)."""
        calls, read, faults = extras.get("api_calls"), extras.get("dlq_read"), extras.get("faults")
        if (
            not isinstance(calls, deque)
            or not all(isinstance(call, ApiCall) for call in calls)
            or not isinstance(read, set)
            or not all(isinstance(dlq_id, str) for dlq_id in read)
            or not isinstance(faults, list)
            or not all(isinstance(fault, Fault) for fault in faults)
        ):
            raise ValueError("not the fake's saved API calls, DLQ entries read and faults")
        self._api_calls = deque(calls, maxlen=API_CALLS_KEPT)
        self._dlq_read = read
        self._faults.faults = faults

    def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer one QStash API request (what the interception calls); each is kept in
        ``api_calls``, a refused one without its body (refused bodies must not pile up)."""
        path = request_path(request).partition("?")[0]
        at_ms = self.clock.now_ms

        def sent(content: bytes) -> tuple[str, str, httpx.URL, httpx.Headers, bytes]:
            return (request.method, path, request.url, request.headers, content)

        try:
            response = api.handle(self.store, request, self._faults, self._dispatcher.cause)
        except Exception as exc:  # an injected network error: the client gets no answer
            self._api_calls.append(
                ApiCall(*sent(request.content), at_ms, None, error=f"{type(exc).__name__}: {exc}")
            )
            raise
        kept = request.content if response.status_code < 400 else b""
        self._api_calls.append(
            ApiCall(*sent(kept), at_ms, response.status_code, response.headers, response.content)
        )
        if (
            request.method == "GET"
            and response.status_code == 200
            and path.startswith(("/v2/dlq", "/v2/workflows/dlq"))
        ):
            self._mark_dlq_read(self.store.dlq)  # listed (or fetched) through the API
        return response

    @verb(FailNext)
    def fail_next(self, call: FailNext) -> Fault:
        """Make the next ``times`` QStash API calls matching ``endpoint`` fail; nothing is
        stored for a failed call. Returns the ``Fault`` (``.failed`` lists the requests it
        failed, ``.remaining`` how many are still to fail).

        ``endpoint``: ``"publish"``, ``"enqueue"``, ``"batch"``, ``"any"`` (every API call), a
        path prefix (``"/v2/messages"``, any method) or a method and a path prefix
        (``"DELETE /v2/messages"``).

        ``kind``:

        - ``"error"``: answer ``status`` (400-599, default 500) with ``{"error": ...}``; the
          SDK raises ``QStashError``;
        - ``"burst"``: 429 with ``Burst-RateLimit-Limit/-Remaining/-Reset``; the SDK raises
          ``RateLimitExceededError``. ``status=429`` alone means this;
        - ``"daily"``: 429 with ``RateLimit-Limit/-Remaining/-Reset`` (reset at the next
          midnight UTC); the SDK raises ``DailyMessageLimitExceededError``;
        - ``"network"``: raise ``httpx.ConnectError``. The SDK retries network errors (5
          times by default, sleeping for real in between): build the client with
          ``retry=False``, or a zero backoff, in tests.

        Faults are matched in the order they were armed, by calls with the right token only.
        Bad arguments raise ``ValueError`` listing the accepted values.
        """
        return self._faults.add(call.endpoint, status=call.status, kind=call.kind, times=call.times)

    def clear_faults(self) -> None:
        """Disarm every fault ``fail_next`` armed that has not fired yet."""
        self._faults.clear()

    @property
    def transport(self) -> httpx.MockTransport:
        """A transport answering QStash API requests, for clients built without patching."""
        return httpx.MockTransport(self.handle)

    # -- time -------------------------------------------------------------------------------
    @property
    def now(self) -> datetime:
        return self.clock.now

    def tick(self) -> Found[Delivery]:
        """Deliver everything due now (and whatever that publishes for now), in order.
        Returns the deliveries made, callbacks included (``.filter(kind="message")`` leaves
        them out)."""
        __tracebackhide__ = True
        self._dispatcher.refuse_reentry()
        _refuse_inside_loop("tick()", "atick()")
        return _made(self._dispatcher.run(self.clock.now_ms))

    def advance(self, duration: Duration) -> Found[Delivery]:
        """Move time forward by ``duration``, delivering each due message at its own time.
        Returns the deliveries made, as ``tick()``."""
        __tracebackhide__ = True
        self._dispatcher.refuse_reentry()
        _refuse_inside_loop("advance(...)", "aadvance(...)")
        return _made(self._dispatcher.run(self._target(duration)))

    def advance_to(self, moment: datetime | str) -> Found[Delivery]:
        """Move time forward to ``moment``, delivering each due message at its own time.
        Returns the deliveries made, as ``tick()``."""
        __tracebackhide__ = True
        self._dispatcher.refuse_reentry()
        _refuse_inside_loop("advance_to(...)", "aadvance_to(...)")
        return _made(self._dispatcher.run(self._moment(moment)))

    def drain(self, within: Duration = DRAIN_WITHIN) -> Found[Delivery]:
        """Deliver everything pending, each at its own due time, until nothing more is due
        before ``within`` from now, the moment of the call (default 30 days). Unlike
        ``advance(within)``, the clock stops at the last thing delivered, not at the limit:
        "run this workflow to its end". Schedules do not keep it going: their firings, and
        what they lead to, happen on the way when they fall before the last pending delivery."""
        __tracebackhide__ = True
        self._dispatcher.refuse_reentry()
        _refuse_inside_loop("drain()", "adrain()")
        limit = self._target(within)
        made = self._dispatcher.run(self.clock.now_ms)
        while (step := self._dispatcher.drain_step(limit, len(made))) is not None:
            target, stuck = step
            delivered = self._dispatcher.run(target)
            if stuck and not delivered:
                break  # due, yet nothing could be delivered: never spin on it
            made += delivered
        return _made(made)

    async def adrain(self, within: Duration = DRAIN_WITHIN) -> Found[Delivery]:
        __tracebackhide__ = True
        limit = self._target(within)
        made = await self.async_runner.arun(self.clock.now_ms)
        while (step := self._dispatcher.drain_step(limit, len(made))) is not None:
            target, stuck = step
            delivered = await self.async_runner.arun(target)
            if stuck and not delivered:
                break
            made += delivered
        return _made(made)

    async def atick(self) -> Found[Delivery]:
        __tracebackhide__ = True
        return _made(await self.async_runner.arun(self.clock.now_ms))

    async def aadvance(self, duration: Duration) -> Found[Delivery]:
        __tracebackhide__ = True
        return _made(await self.async_runner.arun(self._target(duration)))

    async def aadvance_to(self, moment: datetime | str) -> Found[Delivery]:
        __tracebackhide__ = True
        return _made(await self.async_runner.arun(self._moment(moment)))

    def next_due(self) -> datetime | None:
        """When the next delivery, end of an attempt in flight, or cron firing is due, or None
        when nothing is pending.

        What cannot happen until the test acts is not due: a paused schedule's firings, and
        the messages held by a paused queue or a paused flow-control key."""
        due = self._scheduler.next_due_ms()
        return None if due is None else ms_to_datetime(due)

    def _target(self, duration: Duration) -> int:
        target = self.clock.now_ms + parse_duration_ms(duration)
        if target > LATEST_MS:
            raise ValueError(
                f"cannot advance by {duration!r}: it would take the clock past the year 9999"
            )
        return target

    def _moment(self, moment: datetime | str) -> int:
        ms = _moment_ms(moment)
        if ms < self.clock.now_ms:
            raise ValueError(
                f"cannot advance_to {moment!r}: it is before now ({self.now.isoformat()}); "
                "time never goes backwards"
            )
        return ms

    # -- what the test reads ----------------------------------------------------------------
    @property
    def messages(self) -> Found[Message]:
        return Found(self.store.messages.values(), "message")

    @property
    def deliveries(self) -> Found[Delivery]:
        return Found(self._dispatcher.deliveries, "delivery")

    @property
    def dlq(self) -> Found[DlqEntry]:
        self._mark_dlq_read(self.store.dlq)  # read: strict_teardown does not ask for it
        return Found(self.store.dlq.values(), "DLQ entry")

    def _mark_dlq_read(self, dlq_ids: Iterable[str]) -> None:
        read = self._dlq_read
        read.update(dlq_ids)
        if len(read) > 2 * len(self.store.dlq) + 64:
            # Entries deleted, retried or expired since: forget them too (amortized).
            read.intersection_update(self.store.dlq)

    @property
    def api_calls(self) -> Found[ApiCall]:
        """The QStash API calls made while the fake was active (by the app, the SDK, the
        test), in order, each with the fake's answer: rejected ones too. The newest 1,000
        are kept."""
        return Found(self._api_calls, "API call")

    def left_behind(self) -> tuple[list[Message], list[DlqEntry]]:
        """What ``strict_teardown`` fails a test for: the messages due at or before
        ``qstash.now`` that nothing has delivered yet, and the DLQ entries the test never
        read (not through ``qstash.dlq``, nor listed or fetched through the API) since they
        were dead-lettered. Reading them here does not mark them read."""
        unread = [e for e in self.store.dlq.values() if e.dlq_id not in self._dlq_read]
        return self._scheduler.due_now(), unread

    @property
    def events(self) -> Found[Event]:
        return Found(self.store.events, "event")

    @property
    def queues(self) -> Found[Queue]:
        return Found(self.store.queues.values(), "queue")

    @property
    def schedules(self) -> Found[Schedule]:
        return Found(self.store.schedules.values(), "schedule")

    @property
    def url_groups(self) -> Found[UrlGroup]:
        return Found(self.store.url_groups.values(), "URL group")

    @property
    def flow_keys(self) -> Found[FlowKey]:
        """Flow-control keys, in the order publishes first named them."""
        return Found(self.store.flow_keys.values(), "flow-control key")

    @property
    def runs(self) -> Found[WorkflowRun]:
        """Upstash Workflow runs, in the order they started."""
        return Found(self.store.workflows.runs.values(), "workflow run")

    @property
    def workflow_dlq(self) -> Found[WorkflowDlqEntry]:
        """The workflow DLQ: the runs that failed, by the DLQ entry of the message that
        failed each (what ``GET /v2/workflows/dlq`` lists), in the order they failed. Each
        entry is in ``qstash.dlq`` too."""
        found = list(workflow_dlq.entries(self.store))
        self._mark_dlq_read(item.dlq_id for item in found)
        return Found(found, "workflow DLQ entry")

    @verb(ContinueRun)
    def resume_run(self, call: ContinueRun) -> WorkflowRun:
        """What ``POST /v2/workflows/dlq/resume/{dlq_id}`` does: a new run (a new run id)
        that goes on from the step that failed, the steps that succeeded kept. ``retries``
        and ``headers`` (``Upstash-*`` overrides: ``Upstash-Retry-Delay``, ``Upstash-Label``,
        ``Upstash-Flow-Control-Key``, ...) replace the run's settings. Its first delivery is
        due now."""
        return self._continue_run(self.store.resume_run, call)

    @verb(ContinueRun)
    def restart_run(self, call: ContinueRun) -> WorkflowRun:
        """What ``POST /v2/workflows/dlq/restart/{dlq_id}`` does: a new run from the start,
        with the failed run's initial payload and headers."""
        return self._continue_run(self.store.restart_run, call)

    def retry_failure_function(self, dlq_id: str) -> WorkflowRun:
        """What ``POST /v2/workflows/dlq/callback/{dlq_id}`` does: call the failed run's
        failure function (or failure URL) again, once its call has failed
        (``failure_function_state == "CALLBACK_FAIL"``; a ``ValueError`` otherwise)."""
        return self.store.retry_failure_function(_dlq_id(dlq_id), cause=self._dispatcher.cause)

    def _continue_run(
        self,
        action: Callable[..., WorkflowRun],
        call: ContinueRun,
    ) -> WorkflowRun:
        dlq_id, retries, headers = call.dlq_id, call.retries, call.headers
        named = {k: v for k, v in (headers or {}).items() if k.lower().startswith("upstash-")}
        if retries is not None:
            if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
                raise ValueError(f"invalid retries {retries!r}: expected an int >= 0")
            named["Upstash-Retries"] = str(retries)
        try:
            overrides = read_overrides(named, self.store.clock.now_ms)
            return action(_dlq_id(dlq_id), overrides, cause=self._dispatcher.cause)
        except InvalidOption as exc:
            raise ValueError(str(exc)) from None

    # -- the outside world ------------------------------------------------------------------
    @verb(Trigger)
    def trigger(self, call: Trigger) -> str:
        """Start an Upstash Workflow run at ``url`` as a workflow client would; returns its
        run id. The run exists at once (``qstash.runs``); its first delivery is due now.

        ``body``: the initial payload (``str``/``bytes`` as is, anything else as JSON);
        ``headers`` reach the route function as request headers; ``run_id`` chooses the id.
        As ``@upstash/workflow``'s ``client.trigger`` does, ``retries`` (default 3), a
        ``failure_url`` given and ``label`` (``"a,b"``: the labels ``a`` and ``b``) hold for
        every step of the run that the app's ``serve()`` options do not set itself. By
        default the failure URL is the workflow URL itself (where ``serve()``'s
        ``failure_function`` answers), for the first delivery only: a ``serve()`` with a
        failure function sends its own with every step. ``failure_url=False`` sets none.
        """
        return self.store.trigger_run(call, cause=self._dispatcher.cause)

    @verb(Notify)
    def notify(self, call: Notify) -> list[dict[str, Any]]:
        """What ``POST /v2/notify/{event_id}`` does: every run waiting for the event (a
        TypeScript SDK ``context.waitForEvent``) resumes with ``data`` as the event's data;
        the event is lost when none waits. With ``run_id``, what ``POST
        /v2/notify/{run_id}/{event_id}`` does: that run resumes if it waits for the event,
        else the event is kept for its next wait of it.

        ``data``: ``str``/``bytes`` as is, anything else as JSON. Returns the API's answers
        (``NotifyResponse``), one per run reached; the resumed steps are due now (``tick()``
        delivers them). ``ValueError`` for an empty id, or a ``run_id`` that names no run in
        progress."""
        event_id, data, run_id = call.event_id, call.data, call.run_id
        for name, value in (("event id", event_id), ("run id", run_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"invalid {name} {value!r}: expected a non-empty string")
        if data is None:
            content = b""
        elif isinstance(data, bytes):
            content = data
        elif isinstance(data, str):
            content = data.encode()
        else:
            content = json.dumps(data).encode()
        try:
            reached = self.store.notify(
                event_id, content, run_id=run_id, cause=self._dispatcher.cause
            )
        except KeyError:
            runs = ", ".join(r.run_id for r in self.store.workflows if r.active) or "none"
            raise ValueError(
                f"cannot notify run {run_id!r}: it is not a workflow run in progress "
                f"(runs in progress: {runs})"
            ) from None
        return [notify_answer(*item) for item in reached]

    @property
    def waiters(self) -> Found[Waiter]:
        """The workflow runs waiting for an event (``context.waitForEvent``, a webhook's
        ``waitForWebhook``), oldest first: ``event_id``, ``run_id``, ``step_name``,
        ``deadline``."""
        return Found(self.store.waiters, "waiter")

    @property
    def token(self) -> str:
        return self.account.token

    @property
    def current_signing_key(self) -> str:
        return self.account.current_signing_key

    @property
    def next_signing_key(self) -> str:
        return self.account.next_signing_key

    if not TYPE_CHECKING:  # type checkers keep flagging unknown attributes themselves

        def __getattr__(self, name: str) -> Any:
            # Only called for a name that is not there: say why, when we can tell.
            raise AttributeError(_missing_attribute(self, name))

    def __repr__(self) -> str:
        pending = sum(1 for _ in self.store.pending())
        return (
            f"<FakeQStash now={self.now.isoformat()} messages={len(self.store.messages)} "
            f"pending={pending} deliveries={len(self._dispatcher.deliveries)} "
            f"dlq={len(self.store.dlq)}>"
        )


def _dlq_id(dlq_id: object) -> str:
    if not isinstance(dlq_id, str) or not dlq_id:
        raise ValueError(f"invalid DLQ id {dlq_id!r}: expected the dlq_id of a DLQ entry")
    return dlq_id


def _made(deliveries: list[Delivery]) -> Found[Delivery]:
    return Found(deliveries, "delivery")


#: Public names of the ``qstash`` SDK module, should it not be importable here.
_SDK_NAMES = frozenset({"QStash", "AsyncQStash", "Receiver", "errors"})


def _sdk_names() -> frozenset[str]:
    try:
        import qstash
    except ImportError:
        return _SDK_NAMES
    return _SDK_NAMES | frozenset(getattr(qstash, "__all__", ()))


def _missing_attribute(obj: object, name: str) -> str:
    cls = type(obj)
    said = f"{cls.__name__!r} object has no attribute {name!r}"
    if name.startswith("_"):
        return said  # probes (pytest, mock, copy, pickle) ask for these: keep them cheap
    if hasattr(cls, name):
        # A property that raised AttributeError inside: do not pretend it is missing.
        return f"{said} (reading {cls.__name__}.{name} raised AttributeError)"
    if name in _sdk_names():
        return (
            f"{said}: `qstash` here is pytest-qstash's fixture (a FakeQStash), not the "
            f"qstash SDK module, which the test's `qstash` argument hides. Either import "
            f"the name (`from qstash import {name}`), or request the fixture as "
            f"`qstash_fake` (def test_x(qstash_fake): ...) so that `qstash` stays the module."
        )
    public = [n for n in dir(obj) if not n.startswith("_")]
    close = difflib.get_close_matches(name, public, n=1)
    return f"{said}. Did you mean: {close[0]!r}?" if close else said


def _refuse_inside_loop(name: str, async_name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        if not _other_async_library_running():
            return
    raise AsyncContextError(
        f"qstash.{name} blocks, and this code runs inside an event loop: "
        f"use `await qstash.{async_name}` here instead"
    )


def _other_async_library_running() -> bool:
    """Whether trio (or another library sniffio knows) runs in this thread. Trio imports
    sniffio, so when sniffio was never imported, nothing it knows can be running."""
    sniffio = sys.modules.get("sniffio")
    if sniffio is None:
        return False
    try:
        sniffio.current_async_library()
    except Exception:  # AsyncLibraryNotFoundError: plain sync code
        return False
    return True


def _check_settings(flags: dict[str, object], counts: dict[str, tuple[object, int]]) -> None:
    """Refuse settings of the wrong kind at once: a marker's ``strict="no"`` is truthy, and
    ``default_retries=-1`` would make messages nobody could deliver as QStash does."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"invalid {name}={value!r}: expected True or False")
    for name, (value, least) in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"invalid {name}={value!r}: expected an integer >= {least}")


def _start_ms(value: datetime | str | float | None) -> int:
    if value is None:
        # The real time, to the whole second: the workflow SDK rounds sleep_until targets to
        # seconds, so a start with milliseconds made `advance("1d")` after a one-day
        # sleep_until fall short or not depending on the moment the test ran.
        return int(time.time()) * 1000
    return _moment_ms(value)


_NUMBER = re.compile(r"\d+(\.\d+)?")
_MOMENT_FORMS = 'an ISO 8601 date-time such as "2026-01-01T00:00:00Z", a datetime, or unix seconds'


def _moment_ms(value: datetime | str | float) -> int:
    """A moment as unix milliseconds, between 1970 and the end of 9999 (what QStash's times
    and a datetime can both hold); naive datetimes are read as UTC."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # In milliseconds: 1e308 seconds is a float, but not as milliseconds.
        if isinstance(value, float) and not math.isfinite(value * 1000):
            raise ValueError(f"invalid moment {value!r}: expected {_MOMENT_FORMS}")
        ms = round(value * 1000)
    else:
        if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            return _moment_ms(float(value))  # unix seconds, as an ini file spells them
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"invalid moment {value!r}: expected {_MOMENT_FORMS}") from None
        if not isinstance(value, datetime):
            raise TypeError(f"invalid moment {value!r}: expected {_MOMENT_FORMS}")
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)  # naive moments are read as UTC
        ms = round(value.timestamp() * 1000)
    if not 0 <= ms <= LATEST_MS:
        raise ValueError(
            f"invalid moment {value!r}: it is outside 1970-01-01 to 9999-12-31 (did you pass "
            "milliseconds where unix seconds are taken?)"
        )
    return ms
