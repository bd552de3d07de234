"""``FakeQStash``: the in-process QStash a test talks to, with or without pytest."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from ..delivery.dispatcher import Dispatcher, DispatchSettings
from ..delivery.handler_time import HandlerDuration, HandlerTimes
from ..delivery.mounts import MountTable
from ..delivery.transports import DEFAULT_DELIVERY_TIMEOUT_S, Sender
from ..engine.account import Account
from ..engine.clock import VirtualClock
from ..engine.dedup import DEFAULT_DEDUP_WINDOW_MS
from ..engine.durations import Duration, parse_duration_ms
from ..engine.ids import IdGenerator
from ..engine.plans import DEFAULT_PLAN, Plan, plan_named
from ..engine.retry import DEFAULT_RETRIES
from ..engine.scheduler import Scheduler
from ..engine.simulation import Simulation
from ..engine.store import Store
from ..errors import SettingError
from ..intercept import sslcache
from ..wire import hosts
from ..wire.regions import Region, region_named
from .appclock import AppClock, NoAppClock, make_app_clock
from .gateway import ApiGateway
from .inspection import Inspection
from .moments import start_ms
from .moves import ClockMoves
from .verbs import PythonVerbs

if TYPE_CHECKING:
    from ..intercept.router import QStashRouter


class FakeQStash(ClockMoves, Inspection, PythonVerbs):
    """An in-memory QStash with a virtual clock.

    Use it as the ``qstash`` fixture, or directly: ``with FakeQStash() as qstash:`` (or
    ``async with``). While active it answers the QStash SDKs' HTTP calls, delivers messages
    into mounted apps when told to (``tick``/``advance``), and keeps the app's clock on
    ``qstash.now``.

    This module builds it, starts and stops it (the interception, the app's clock, mounted
    apps' lifespans) and answers its API (``gateway.py``); its clock moves (``moves.py``),
    lists (``inspection.py``) and verbs (``verbs.py``) are mixed in from their own modules.

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
        self._retention = retention
        self._delivery_timeout_s = timeout_ms / 1000
        self.clock = VirtualClock(start_ms(start))
        #: Whether the test chose where the clock starts (``load`` then keeps it there).
        self.start_given = start is not None
        # QStash's own hosts and QSTASH_URL's are always intercepted (``hosts`` decides).
        self._base_urls = list(base_urls or [])
        hosts.declare(hosts.parse_bases(self._base_urls))  # the network guard stops them, too
        self._router: QStashRouter | None = None
        self._app_clock: AppClock = make_app_clock(time_library) if freeze_time else NoAppClock()
        self._active = False
        # Every setting is checked above; the engine is built from them on first use (see
        # ``__getattr__``): a test that never reaches QStash pays for none of it.
        self._unbuilt: _EngineSettings | None = _EngineSettings(
            seed=seed,
            token=token,
            current_signing_key=current_signing_key,
            next_signing_key=next_signing_key,
            default_retries=default_retries,
            dedup_window_ms=parse_duration_ms(dedup_window, what="dedup_window"),
            plan=plan_named(plan),
            max_deliveries_per_instant=max_deliveries_per_instant,
            max_deliveries_per_call=max_deliveries_per_call,
        )

    # -- the engine, built on first use -------------------------------------------------------
    account: Account
    store: Store
    mounts: MountTable
    _handler_times: HandlerTimes
    _sender: Sender
    _scheduler: Scheduler
    _dispatcher: Dispatcher
    _gateway: ApiGateway

    def _build_engine(self, wanted: _EngineSettings) -> None:
        self._unbuilt = None
        self.account = Account(wanted.token, wanted.current_signing_key, wanted.next_signing_key)
        self.store = Store(
            self.clock,
            IdGenerator(wanted.seed),
            self.account,
            default_retries=wanted.default_retries,
            dedup_window_ms=wanted.dedup_window_ms,
            plan=wanted.plan,
            retention=self._retention,
        )
        self.mounts = MountTable()
        self._handler_times = HandlerTimes()
        self._sender = Sender(self.mounts, self._delivery_timeout_s)
        self._scheduler = Scheduler(self.store)
        # The closure below holds the account, not the fake: a fake no one holds any more is
        # freed at once rather than left to the cycle collector.
        account = self.account
        self._dispatcher = Dispatcher(
            self.store,
            self.mounts,
            self._sender,
            DispatchSettings(
                signing_key=lambda: account.current_signing_key,
                raise_app_exceptions=self._raise_app_exceptions,
                strict_routing=self._strict,
                max_same_instant=wanted.max_deliveries_per_instant,
                max_per_call=wanted.max_deliveries_per_call,
                region=self._region.header if self._region is not None else None,
            ),
            on_time=self._app_clock.move_to,
            handler_times=self._handler_times,
            scheduler=self._scheduler,
        )
        if "async_runner" not in self.__dict__:  # a server's runner may have set its own
            self.async_runner = self._dispatcher  # see ``ClockMoves.async_runner``
        self._gateway = ApiGateway(self.store, self._dispatcher, self.clock)

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
        return self._retention

    @retention.setter
    def retention(self, value: object) -> None:
        raise SettingError("retention")

    @property
    def delivery_timeout(self) -> float:
        """The bound on one delivery, in real seconds."""
        return self._delivery_timeout_s

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

    # -- simulation: the faults QStash's contract allows, on a seed ---------------------------
    def simulate(self, seed: int, faults: Iterable[str] | None = None) -> Simulation:
        """From now on, do what QStash's at-least-once contract allows, on the schedule of
        ``seed``: deliver an acknowledged message once more (``duplicate``), lose an app's
        2xx so the attempt is retried (``lost_ack``), deliver a message due at the same
        moment as earlier ones before them (``reorder``), run a workflow step again as if its
        result had not reached QStash (``step_retry``), store a publish but lose its answer
        where the SDK will send it again (``publish_lost_answer``). ``faults`` picks kinds
        (default all). The same seed and the same test inject the same faults. What
        ``@pytest.mark.qstash(simulate=N)`` does for a test; ``ValueError`` for an unknown
        kind or a seed that is not an integer."""
        simulation = Simulation(seed, faults)
        self.store.simulate(simulation)
        return simulation

    @property
    def simulation(self) -> Simulation | None:
        """The schedule this fake runs under (its ``seed`` and the faults ``injected`` so
        far), or None outside simulation."""
        return self.store.simulation if self._unbuilt is None else None

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
            if self._unbuilt is None:  # an unbuilt engine has no apps mounted
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
                if self._unbuilt is None:
                    self._sender.close()
                    self._gateway.close()

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

    def saved_extras(self) -> dict[str, Any]:
        """What the fake holds beside its store, clock and account (a server's data dir
        keeps it): the API-call log, the DLQ entries read, the faults armed."""
        return self._gateway.saved()

    def restore_extras(self, extras: Mapping[str, Any]) -> None:
        """Put back what ``saved_extras`` gave (``ValueError`` for anything else)."""
        self._gateway.restore(extras)

    def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer one QStash API request (what the interception calls); each is kept in
        ``api_calls``, a refused one without its body (refused bodies must not pile up)."""
        return self._gateway.handle(request)

    @property
    def transport(self) -> httpx.MockTransport:
        """A transport answering QStash API requests, for clients built without patching."""
        return httpx.MockTransport(self.handle)

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
            # Only called for a name that is not there: a part of the engine not built yet,
            # or a mistake (said why, when we can tell).
            unbuilt = self.__dict__.get("_unbuilt")
            if unbuilt is not None and name in _ENGINE_PARTS:
                self._build_engine(unbuilt)
                return getattr(self, name)
            raise AttributeError(_missing_attribute(self, name))

    def __repr__(self) -> str:
        pending = sum(1 for _ in self.store.pending())
        return (
            f"<FakeQStash now={self.now.isoformat()} messages={len(self.store.messages)} "
            f"pending={pending} deliveries={len(self._dispatcher.deliveries)} "
            f"dlq={len(self.store.dlq)}>"
        )


@dataclass(frozen=True, slots=True)
class _EngineSettings:
    """What building the engine takes, checked when the fake was built."""

    seed: int | str
    token: str | None
    current_signing_key: str | None
    next_signing_key: str | None
    default_retries: int
    dedup_window_ms: int
    plan: Plan
    max_deliveries_per_instant: int
    max_deliveries_per_call: int


#: The attributes ``_build_engine`` sets.
_ENGINE_PARTS = frozenset(
    {
        "account",
        "store",
        "mounts",
        "async_runner",
        "_handler_times",
        "_sender",
        "_scheduler",
        "_dispatcher",
        "_gateway",
    }
)

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


def _check_settings(flags: dict[str, object], counts: dict[str, tuple[object, int]]) -> None:
    """Refuse settings of the wrong kind at once: a marker's ``strict="no"`` is truthy, and
    ``default_retries=-1`` would make messages nobody could deliver as QStash does."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"invalid {name}={value!r}: expected True or False")
    for name, (value, least) in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"invalid {name}={value!r}: expected an integer >= {least}")
