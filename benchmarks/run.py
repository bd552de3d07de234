"""pytest-qstash benchmarks: every figure beside its floor or baseline, measured in one run.

    python benchmarks/run.py            # full run: checks the budgets, exits 1 on a miss
    python benchmarks/run.py --smoke    # a few seconds: proves the benchmarks run, judges nothing
    python benchmarks/run.py --profile  # pyinstrument tree of publish_json + tick
    python benchmarks/run.py --profile workflow  # ... of 50-step workflow runs
    python benchmarks/run.py --only 5   # one budget's figures (repeatable)

Budget 7 (server mode) needs uvicorn (the ``server`` extra).

Machines are noisy, so no figure is judged on its own: each is timed side by side with what it
is compared to, in alternating rounds of the same process; ratios are medians of the per-round
ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gc
import hashlib
import importlib
import importlib.metadata
import importlib.util
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import unittest.mock
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fixture_cost  # suites beside this file (the script's directory is on sys.path)
import publish_cost

# The environment the pytest plugin sets before collection; apps (and the SDKs) read it.
from pytest_qstash.state.account import DEFAULT_ENV

for _name, _value in DEFAULT_ENV.items():
    os.environ.setdefault(_name, _value)

import anyio.from_thread  # noqa: E402
import httpx  # noqa: E402
import jwt  # noqa: E402
import qstash  # noqa: E402
import respx  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from qstash import AsyncQStash  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import PlainTextResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402
from upstash_workflow.asyncio.serve import authorization as sdk_authorization  # noqa: E402
from upstash_workflow.fastapi import Serve  # noqa: E402

from pytest_qstash import FakeQStash  # noqa: E402
from pytest_qstash.appclock import make_app_clock  # noqa: E402

# A realistic process for the fixture-cost budget: the web stacks and both SDKs loaded.
WEB_STACKS = ("django", "django.test", "fastapi", "flask", "upstash_workflow")
for _module in WEB_STACKS:
    importlib.import_module(_module)

APP_BASE = "https://app.bench"
HOOK = f"{APP_BASE}/hook"
PUBLISH_PREFIX = "https://qstash.upstash.io/v2/publish/"
START = "2026-01-01T00:00:00Z"
# The pytest plugin's defaults (no marker, no ini option).
FIXTURE_DEFAULTS: dict[str, Any] = {
    "freeze_time": True,
    "raise_app_exceptions": True,
    "strict": True,
    "time_library": "auto",
}


# -- results --------------------------------------------------------------------------------
@dataclass
class Row:
    figure: str
    ours: str
    baseline: str
    ratio: str
    budget: str
    status: str  # PASS, FAIL, INFO (no budget), SKIP (cannot be measured yet), ran (smoke)


class Report:
    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke
        self.rows: list[Row] = []

    def check(
        self,
        figure: str,
        ours: str,
        baseline: str,
        ratio: float | None,
        budget: str,
        ok: bool | None,
    ) -> None:
        """``ok`` None: informational. In smoke mode nothing is judged."""
        if self.smoke:
            status = "ran"
        elif ok is None:
            status = "INFO"
        else:
            status = "PASS" if ok else "FAIL"
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        self.rows.append(Row(figure, ours, baseline, shown, budget, status))

    def skip(self, figure: str, why: str, budget: str) -> None:
        self.rows.append(Row(figure, why, "-", "-", budget, "SKIP"))

    def error(self, figure: str, exc: BaseException, budget: str) -> None:
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:70]
        self.rows.append(Row(figure, text, "-", "-", budget, "ERROR"))

    def print(self) -> None:
        head = Row("figure", "ours", "floor / baseline", "ratio", "budget", "result")
        rows = [head, *self.rows]
        cells = [(r.figure, r.ours, r.baseline, r.ratio, r.budget, r.status) for r in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(6)]
        for index, row_cells in enumerate(cells):
            print("  ".join(c.ljust(w) for c, w in zip(row_cells, widths, strict=True)).rstrip())
            if index == 0:
                print("  ".join("-" * w for w in widths))

    @property
    def failed(self) -> bool:
        return any(r.status in ("FAIL", "ERROR") for r in self.rows)


class Samples(dict[str, list[float]]):
    """Per-round timings of cases measured side by side."""

    def median(self, name: str) -> float:
        return statistics.median(self[name])

    def ratio(self, name: str, reference: str) -> float:
        """Median of the per-round ratios: each round's pair ran back to back, so a slow spell
        of the machine lands on both, and the median drops the rounds it split."""
        return statistics.median(a / b for a, b in zip(self[name], self[reference], strict=True))


def interleaved(cases: dict[str, Callable[[], float]], rounds: int) -> Samples:
    """Run each case ``rounds`` times, alternating their order (ABBA...)."""
    samples = Samples({name: [] for name in cases})
    names = list(cases)
    for index in range(rounds):
        for name in names if index % 2 == 0 else reversed(names):
            gc.collect()
            samples[name].append(cases[name]())
    return samples


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} us"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


# -- the app every delivery goes to --------------------------------------------------------
async def _hook(request: Request) -> Response:
    await request.body()
    return PlainTextResponse("ok")


TRIVIAL_APP = Starlette(routes=[Route("/hook", _hook, methods=["POST"])])


# -- 1. publish + deliver --------------------------------------------------------------------
def publish_and_deliver(report: Report, n: int, rounds: int) -> float:
    """Returns our cost per message (the plain-delivery reference for the workflow budget)."""

    def ours() -> float:
        with FakeQStash(start=START) as fake:
            fake.mount(APP_BASE, TRIVIAL_APP)
            client = qstash.QStash(fake.token, retry=False)
            for i in range(min(n, 20)):  # warm-up
                client.message.publish_json(url=HOOK, body={"n": i})
                fake.tick()
            began = time.perf_counter()
            for i in range(n):
                client.message.publish_json(url=HOOK, body={"n": i})
                fake.tick()
            elapsed = time.perf_counter() - began
            assert len(fake.deliveries) == n + min(n, 20)
            assert all(d.status == 200 for d in fake.deliveries)
            return elapsed / n

    def floor(portal_hop: bool) -> Callable[[], float]:
        return lambda: _floor(n, portal_hop)

    # A sync tick runs ASGI apps on an event loop in the test's own thread: so does the floor.
    cases = {"ours": ours, "floor": floor(False), "portal floor": floor(True)}
    result = interleaved(cases, rounds)
    ratio = result.ratio("ours", "floor")
    report.check(
        f"1. publish_json + tick, per message ({rounds} x {n})",
        us(result.median("ours")),
        us(result.median("floor")) + " floor",
        ratio,
        "<= 1.5x",
        ratio <= 1.5,
    )
    report.check(
        "1. (floor through a blocking portal's thread, vs floor)",
        us(result.median("portal floor")),
        us(result.median("floor")) + " floor",
        result.ratio("portal floor", "floor"),
        "info",
        None,
    )
    return result.median("ours")


def _floor(n: int, portal_hop: bool) -> float:
    """What any in-process fake must spend per message: the SDK call answered by a static respx
    route (on the respx mocker our interception uses), one HS256 token over the body, and one
    ASGI call of the same app: on an event loop run in the calling thread, as a sync tick makes
    it, or (for comparison) through a blocking portal's thread, as Starlette's TestClient does."""
    key = os.environ["QSTASH_CURRENT_SIGNING_KEY"]
    transport = httpx.ASGITransport(app=TRIVIAL_APP)

    async def asgi_call(request: httpx.Request) -> int:
        response = await transport.handle_async_request(request)
        await response.aread()
        return response.status_code

    loop = asyncio.new_event_loop()
    with (
        respx.mock(using="httpx", assert_all_called=False) as router,
        anyio.from_thread.start_blocking_portal() as portal,
    ):
        router.post(url__startswith=PUBLISH_PREFIX).mock(
            return_value=httpx.Response(200, json={"messageId": "msg_floor"})
        )
        client = qstash.QStash(os.environ["QSTASH_TOKEN"], retry=False)

        def one(i: int) -> None:
            client.message.publish_json(url=HOOK, body={"n": i})
            content = json.dumps({"n": i}).encode()
            digest = hashlib.sha256(content).digest()
            claims = {
                "iss": "Upstash",
                "sub": HOOK,
                "iat": 1_767_225_600,
                "nbf": 1_767_225_600,
                "exp": 1_767_225_900,
                "jti": f"jwt_{i}",
                "body": base64.urlsafe_b64encode(digest).decode(),
            }
            token = jwt.encode(claims, key, algorithm="HS256")
            request = httpx.Request(
                "POST",
                HOOK,
                headers={"Content-Type": "application/json", "Upstash-Signature": token},
                content=content,
            )
            if portal_hop:
                status = portal.call(asgi_call, request)
            else:
                status = loop.run_until_complete(asgi_call(request))
            assert status == 200

        for i in range(min(n, 20)):
            one(i)
        began = time.perf_counter()
        for i in range(n):
            one(i)
        elapsed = time.perf_counter() - began
    loop.close()
    return elapsed / n


# -- 2. fixture cost -------------------------------------------------------------------------
def default_app_clock() -> str:
    """The backend ``"auto"`` picks (it decides as it starts)."""
    probe = make_app_clock("auto")
    probe.start(0)
    name: str = getattr(probe, "backend", probe.name)
    probe.stop()
    return name


def fixture_cost_in_process(report: Report, n: int, rounds: int) -> None:
    def empty() -> None:
        pass

    def bare() -> float:
        began = time.perf_counter()
        for _ in range(n):
            empty()
        return (time.perf_counter() - began) / n

    def fixture(library: str) -> Callable[[], float]:
        def run() -> float:
            began = time.perf_counter()
            for _ in range(n):
                fake = FakeQStash(**{**FIXTURE_DEFAULTS, "time_library": library})
                fake.__enter__()
                fake.__exit__(None, None, None)
            return (time.perf_counter() - began) / n

        return run

    default_library = default_app_clock()
    result = interleaved(
        {"bare": bare, "auto": fixture("auto"), "freezegun": fixture("freezegun")}, rounds
    )
    modules = len(sys.modules)
    for library, label in (("auto", f"default ({default_library})"), ("freezegun", "freezegun")):
        extra = result.median(library) - result.median("bare")
        is_default = library == "auto"
        report.check(
            f"2. fixture in-process, {label}, {modules} modules ({rounds} x {n})",
            f"{ms(result.median(library))} (+{ms(extra)})",
            ms(result.median("bare")) + " empty test",
            None,
            "+<= 3 ms" if is_default else "info",
            extra <= 0.003 if is_default else None,
        )


def lifespan_cost(report: Report, n: int, rounds: int) -> None:
    """What ``mount(..., lifespan=True)`` adds to a test: the fake started, a trivial
    Starlette app mounted with its lifespan (startup at mount), the fake stopped (shutdown),
    against the same with the app mounted without one. Wall time, and CPU time (the process's,
    all threads), which a loaded machine does not inflate."""
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield

    app = Starlette(lifespan=lifespan)

    def cycle(with_lifespan: bool, clock: Callable[[], float]) -> Callable[[], float]:
        def run() -> float:
            began = clock()
            for _ in range(n):
                fake = FakeQStash(**FIXTURE_DEFAULTS)
                fake.__enter__()
                fake.mount("https://life.example.com", app, lifespan=with_lifespan)
                fake.__exit__(None, None, None)
            return (clock() - began) / n

        return run

    result = interleaved(
        {
            "plain": cycle(False, time.perf_counter),
            "lifespan": cycle(True, time.perf_counter),
            "plain cpu": cycle(False, time.process_time),
            "lifespan cpu": cycle(True, time.process_time),
        },
        rounds,
    )
    extra = result.median("lifespan") - result.median("plain")
    extra_cpu = result.median("lifespan cpu") - result.median("plain cpu")
    report.check(
        f"2. mount(lifespan=True), per test ({rounds} x {n})",
        f"{ms(result.median('lifespan'))} (+{ms(extra)}; CPU +{ms(extra_cpu)})",
        ms(result.median("plain")) + " without",
        None,
        "info",
        None,
    )


_CONFTEST = """
import json, os, sys, time

import pytest

_CLOCK = (time.perf_counter,)  # a tuple: no time library rebinds what it holds
import django, django.test, fastapi, flask, qstash, upstash_workflow  # noqa: E401

_TIMES = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    began = _CLOCK[0]()
    yield
    _TIMES[item.name] = _CLOCK[0]() - began


def pytest_sessionfinish(session):
    with open(os.environ["BENCH_OUT"], "w") as out:
        json.dump({"times": _TIMES, "modules": len(sys.modules)}, out)
"""


#: Fixture overhead on the plain install: <= 0.5 ms on top of a bare test, which cost 0.37 ms
#: in the 2026-11-30 run of docs/performance.md, so a test using ``qstash`` may cost at most
#: (0.37 + 0.5) / 0.37 = 2.35 bare tests. A ratio, so a busy machine slows both alike.
PLAIN_FIXTURE_BUDGET = 2.35


def fixture_cost_through_pytest(
    report: Report, n: int, library: str, plain_install: bool = False
) -> None:
    """The cost users feel: ``n`` tests using the fixture interleaved with ``n`` bare tests in
    one pytest session; each test's whole protocol (set-up, call, tear-down, report) timed.
    ``plain_install``: no other plugin loaded (pytest-asyncio, pytest-httpx, hypothesis and
    xdist add their own per-test hooks in the dev install), as after ``pip install
    pytest-qstash``."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pytest.ini").write_text(f"[pytest]\nqstash_time_library = {library}\n")
        # The plain-install row times CPU (the test's thread): on a loaded machine a longer
        # test is more often preempted, which would skew a ratio of wall-time medians.
        clock = "time.thread_time," if plain_install else "time.perf_counter,"
        (root / "conftest.py").write_text(_CONFTEST.replace("time.perf_counter,", clock))
        tests = "".join(
            f"def test_bare_{i}():\n    pass\n\ndef test_fixture_{i}(qstash):\n    pass\n\n"
            for i in range(n)
        )
        (root / "test_fixture_cost.py").write_text(tests)
        out = root / "times.json"
        env = {**os.environ, "BENCH_OUT": str(out)}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root)]
        if plain_install:
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
            command[3:3] = ["-p", "pytest_qstash.plugin"]
        completed = subprocess.run(
            command, cwd=root, env=env, capture_output=True, text=True, check=False
        )
        if completed.returncode != 0:
            raise RuntimeError(f"pytest failed: {completed.stdout[-500:]}{completed.stderr[-500:]}")
        data = json.loads(out.read_text())
    times: dict[str, float] = data["times"]
    bare = statistics.median(t for name, t in times.items() if name.startswith("test_bare_"))
    used = statistics.median(t for name, t in times.items() if name.startswith("test_fixture_"))
    shown = default_app_clock() if library == "auto" else library
    if plain_install:
        report.check(
            f"2. per test via pytest, plain install, {shown}, CPU, {data['modules']} modules "
            f"({n}+{n} tests)",
            f"{ms(used)} (+{ms(used - bare)})",
            ms(bare) + " bare test",
            used / bare,
            f"<= {PLAIN_FIXTURE_BUDGET}x (+0.5 ms)",
            used / bare <= PLAIN_FIXTURE_BUDGET,
        )
        return
    is_default = library == "auto"
    report.check(
        f"2. per test via pytest, {shown}, {data['modules']} modules ({n}+{n} tests)",
        f"{ms(used)} (+{ms(used - bare)})",
        ms(bare) + " bare test",
        None,
        "+<= 3 ms" if is_default else "info",
        (used - bare) <= 0.003 if is_default else None,
    )


# -- 3. time skipping ------------------------------------------------------------------------
def idle_advance(report: Report, k: int) -> None:
    with FakeQStash(start="2000-01-01T00:00:00Z") as fake:
        fake.mount(APP_BASE, TRIVIAL_APP)
        samples = []
        for _ in range(k):
            began = time.perf_counter()
            fake.advance("3650d")
            samples.append(time.perf_counter() - began)
    cost = statistics.median(samples)
    report.check(
        f'3. advance("3650d"), nothing due (median of {k})',
        ms(cost),
        "-",
        None,
        "<= 5 ms",
        cost <= 0.005,
    )


def cron_firing(report: Report, n: int, rounds: int) -> None:
    figure = f'3. minutely cron firing, advance("1m") ({rounds} x {n})'
    budget = "<= 1.5x"
    # Probe: until the fake serves /v2/schedules it answers 501, which the SDK raises.
    with FakeQStash(start=START) as fake:
        fake.mount(APP_BASE, TRIVIAL_APP)
        client = qstash.QStash(fake.token, retry=False)
        try:
            client.schedule.create(destination=HOOK, cron="* * * * *")
        except qstash.errors.QStashError as exc:
            if "501" in str(exc):
                report.skip(figure, "not available yet (schedules answer 501)", budget)
                return
            raise

    def plain() -> float:
        with FakeQStash(start=START) as fake:
            fake.mount(APP_BASE, TRIVIAL_APP)
            client = qstash.QStash(fake.token, retry=False)
            for i in range(n):
                client.message.publish_json(url=HOOK, body={"n": i}, delay=f"{60 * (i + 1)}s")
            began = time.perf_counter()
            for _ in range(n):
                fake.advance("1m")
            elapsed = time.perf_counter() - began
            assert len(fake.deliveries) == n, len(fake.deliveries)
            return elapsed / n

    def cron() -> float:
        with FakeQStash(start=START) as fake:
            fake.mount(APP_BASE, TRIVIAL_APP)
            client = qstash.QStash(fake.token, retry=False)
            client.schedule.create(destination=HOOK, cron="* * * * *", body='{"n":0}')
            began = time.perf_counter()
            for _ in range(n):
                fake.advance("1m")
            elapsed = time.perf_counter() - began
            assert len(fake.deliveries) == n, len(fake.deliveries)
            return elapsed / n

    result = interleaved({"plain": plain, "cron": cron}, rounds)
    ratio = result.ratio("cron", "plain")
    report.check(
        figure,
        us(result.median("cron")),
        us(result.median("plain")) + " delayed message",
        ratio,
        budget,
        ratio <= 1.5,
    )


def linear_growth(report: Report, small: int, factor: int, rounds: int) -> None:
    def per_event(n: int) -> Callable[[], float]:
        def run() -> float:
            with FakeQStash(start=START) as fake:
                fake.mount(APP_BASE, TRIVIAL_APP)
                client = qstash.QStash(fake.token, retry=False)
                for i in range(n):
                    client.message.publish_json(url=HOOK, body={"n": i}, delay=f"{i + 1}s")
                began = time.perf_counter()
                fake.advance("1d")
                elapsed = time.perf_counter() - began
                assert len(fake.deliveries) == n
                return elapsed / n

        return run

    big = small * factor
    result = interleaved({"small": per_event(small), "big": per_event(big)}, rounds)
    ratio = result.ratio("big", "small")
    report.check(
        f"3. one advance over {big} due messages, per event ({rounds} rounds)",
        us(result.median("big")),
        us(result.median("small")) + f" with {small}",
        ratio,
        "<= 1.5x",
        ratio <= 1.5,
    )


# -- 4. memory -------------------------------------------------------------------------------
def _body(i: int, size: int) -> bytes:
    head = b'{"n":%08d,"pad":"' % i
    return head + b"x" * (size - len(head) - 2) + b'"}'


def undelivered_memory(report: Report, n: int) -> None:
    with FakeQStash(start=START) as fake:
        builder = httpx.Client()
        headers = {"Authorization": f"Bearer {fake.token}", "Content-Type": "application/json"}
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            # Built per message and dropped, as the SDK does; the fake keeps what it keeps.
            request = builder.build_request("POST", PUBLISH_PREFIX + HOOK, headers=headers)
            request = httpx.Request(
                "POST", request.url, headers=request.headers, content=_body(i, 1024)
            )
            response = fake.handle(request)
            assert response.status_code == 200, response.text
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert len(fake.messages) == n
        builder.close()
    report.check(
        f"4. {n:,} undelivered 1 KiB messages held (fake.handle, tracemalloc)",
        f"{held / 1e6:,.0f} MB",
        f"{n * 1024 / 1e6:,.0f} MB of bodies",
        held / (n * 1024),
        "< 300 MB" if n == 100_000 else "info (300 MB at 100k)",
        held < 300e6 if n == 100_000 else None,
    )
    report.check(
        "4. held per message beyond its body",
        f"{(held - n * 1024) / n:,.0f} B",
        "-",
        None,
        "info",
        None,
    )


def delivered_body_copies(report: Report, size: int) -> None:
    """How many copies of a body delivering it allocates (held after, and at peak), measured
    as multiples of the body's size; the app reads the body from ASGI and drops it."""
    received: list[int] = []

    async def raw_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        length = 0
        while True:
            event = await receive()
            length += len(event.get("body", b""))
            if not event.get("more_body"):
                break
        received.append(length)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    with FakeQStash(start=START) as fake:
        fake.mount(APP_BASE, raw_app, kind="asgi")
        headers = {"Authorization": f"Bearer {fake.token}", "Content-Type": "text/plain"}

        def publish(body: bytes) -> None:
            request = httpx.Request("POST", PUBLISH_PREFIX + HOOK, headers=headers, content=body)
            assert fake.handle(request).status_code == 200

        publish(b"warm-up")  # the first delivery creates the fake's event loop: not measured
        fake.tick()
        body = _body(0, size)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        publish(body)
        del body  # from here on only the fake holds it
        fake.tick()
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert received == [len(b"warm-up"), size]
        assert fake.deliveries[1].content is fake.messages[1].content
    extra_held = (held - before) / size
    extra_peak = (peak - before) / size
    report.check(
        f"4. body copies made, publish + deliver {size // 2**20} MiB (held / peak)",
        f"{extra_held:.2f} / {extra_peak:.2f}",
        "0 (one body, shared)",
        None,
        "held <= 0.05, peak <= 1.05",
        extra_held <= 0.05 and extra_peak <= 1.05,
    )


# -- 5. workflows ----------------------------------------------------------------------------
FLOW_BASE = "https://flow.bench"
FLOW_URL = f"{FLOW_BASE}/workflow"
# What upstash-workflow 2.0.0 sends with every step it publishes.
FLOW_FEATURES = "LazyFetch,InitialBody,WF_DetectTrigger"
FLOW_PAYLOAD = {"order": 1}


def _read_steps(content: bytes) -> int:
    """What ``serve()`` does with a delivered steps array before it runs the route: decode
    every entry, and each step's JSON and its ``out``. Returns how many entries it held (the
    initial payload is entry 0)."""
    entries = json.loads(content)
    base64.b64decode(entries[0]["body"])
    for entry in entries[1:]:
        if entry["callType"] == "step":
            step = json.loads(base64.b64decode(entry["body"]))
            json.loads(step["out"])
    return len(entries)


class ProtocolApp:
    """A workflow endpoint speaking the protocol as upstash-workflow's ``serve()`` does,
    without the SDK's own per-request cost: a route of ``steps`` runs of "step-<k>", each
    returning k * k. Each delivery's steps array is decoded; the next step goes out as the
    SDK sends it (one ``/v2/batch`` entry with the run headers and every delivered header
    forwarded), through one ``qstash.QStash`` client; after the last step the run is ended
    with the SDK's ``DELETE /v2/workflows/runs/{id}?cancel=false``. Its deliveries are
    checked byte for byte against the real SDK's."""

    def __init__(self, client: qstash.QStash, steps: int, stamps: list[float]) -> None:
        self.client = client
        self.steps = steps
        self.stamps = stamps  # when each delivery arrived: the per-step costs

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.stamps.append(time.perf_counter())
        step_id = _read_steps(request.content)  # the init entry, then steps 1 .. step_id - 1
        run_id = request.headers["upstash-workflow-runid"]
        if step_id > self.steps:
            self.client.http.request(
                path=f"/v2/workflows/runs/{run_id}?cancel=false",
                method="DELETE",
                parse_response=False,
            )
            return httpx.Response(200)
        headers = {
            "Content-Type": "application/json",
            "Upstash-Workflow-Init": "false",
            "Upstash-Workflow-RunId": run_id,
            "Upstash-Workflow-Url": FLOW_URL,
            "Upstash-Feature-Set": FLOW_FEATURES,
            "Upstash-Forward-Upstash-Workflow-Sdk-Version": "1",
        }
        for name, value in request.headers.items():  # the SDK's "user headers"
            if not name.startswith("upstash-workflow-"):
                headers[f"Upstash-Forward-{name}"] = value
                headers[f"Upstash-Failure-Callback-Forward-{name}"] = value
        step = {
            "method": "POST",
            "stepId": step_id,
            "stepName": f"step-{step_id}",
            "stepType": "Run",
            "out": json.dumps(step_id * step_id),
            "sleepFor": None,
            "sleepUntil": None,
            "concurrent": 1,
            "targetStep": None,
            "callUrl": None,
            "callMethod": None,
            "callBody": None,
            "callHeaders": None,
        }
        batch = [
            {"destination": FLOW_URL, "headers": headers, "body": json.dumps(step), "queue": None}
        ]
        self.client.http.request(
            path="/v2/batch",
            body=json.dumps(batch),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        return httpx.Response(200)


class PlainChainApp:
    """The same deliveries made as plain messages: the app decodes each body as
    ``ProtocolApp`` does, and publishes the next body (precomputed bytes, so no serialising
    is added) with one ``message.publish``."""

    def __init__(self, client: qstash.QStash, bodies: list[bytes], stamps: list[float]) -> None:
        self.client = client
        self.bodies = bodies
        self.stamps = stamps

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.stamps.append(time.perf_counter())
        delivered = _read_steps(request.content)
        if delivered < len(self.bodies):
            self.client.message.publish(
                url=FLOW_URL, body=self.bodies[delivered], content_type="application/json"
            )
        return httpx.Response(200)


def _sdk_workflow_app(steps: int) -> Any:
    """The same route written with the real SDK (FastAPI ``Serve``, async context); the SDK
    verifies every delivery with its ``Receiver``."""
    app = FastAPI()
    serve = Serve(app)

    @serve.post("/workflow")
    async def route(context: Any) -> None:
        for k in range(1, steps + 1):

            async def square(k: int = k) -> int:
                return k * k

            await context.run(f"step-{k}", square)

    return app


@dataclass
class FlowRuns:
    """Runs made in one sample: seconds per step of each, and each run's per-step costs."""

    per_step: float
    step_costs: list[list[float]]
    #: The first run's deliveries (body, headers), to hold against the SDK's.
    deliveries: list[tuple[bytes, list[tuple[str, str]]]]


def _protocol_runs(steps: int, runs: int) -> FlowRuns:
    """``runs`` timed runs (after one warm-up) of ``steps`` steps, each started with
    ``trigger`` and driven to its end by one ``tick()``."""
    with FakeQStash(start=START) as fake:
        stamps: list[float] = []
        fake.mount(FLOW_BASE, ProtocolApp(qstash.QStash(fake.token, retry=False), steps, stamps))
        elapsed = 0.0
        costs: list[list[float]] = []
        for index in range(runs + 1):
            stamps.clear()
            fake.trigger(FLOW_URL, FLOW_PAYLOAD)
            began = time.perf_counter()
            fake.tick()
            if index:  # the first run warms up
                elapsed += time.perf_counter() - began
                costs.append([b - a for a, b in itertools.pairwise(stamps)])
        assert [run.state for run in fake.runs] == ["RUN_SUCCESS"] * (runs + 1)
        assert len(fake.runs[-1].steps) == steps
        assert len(fake.deliveries) == (runs + 1) * (steps + 1)
        first = fake.deliveries[: steps + 1]  # a fresh fake's first run, as the SDK run is
        return FlowRuns(elapsed / (runs * steps), costs, _as_delivered(first))


def _plain_runs(bodies: list[bytes], runs: int) -> FlowRuns:
    """The same: each chain started with one ``publish`` of the first body."""
    steps = len(bodies) - 1
    with FakeQStash(start=START) as fake:
        stamps: list[float] = []
        client = qstash.QStash(fake.token, retry=False)
        fake.mount(FLOW_BASE, PlainChainApp(client, bodies, stamps))
        elapsed = 0.0
        costs: list[list[float]] = []
        for index in range(runs + 1):
            stamps.clear()
            client.message.publish(url=FLOW_URL, body=bodies[0], content_type="application/json")
            began = time.perf_counter()
            fake.tick()
            if index:
                elapsed += time.perf_counter() - began
                costs.append([b - a for a, b in itertools.pairwise(stamps)])
        assert [d.content for d in fake.deliveries] == bodies * (runs + 1)
        return FlowRuns(elapsed / (runs * steps), costs, [])


def _sdk_run(steps: int, reuse_client: bool = False) -> FlowRuns:
    """One run of the real SDK app. ``reuse_client``: serve() builds a throwaway
    ``AsyncQStash`` (an httpx client, so an SSL context loading the CA bundle) on every
    request; patched to hand out one built beforehand, to show what that costs."""
    with contextlib.ExitStack() as stack:
        if reuse_client:
            shared = AsyncQStash(base_url="disabled-client", token="disabled-client")
            stack.enter_context(
                unittest.mock.patch.object(sdk_authorization, "AsyncQStash", return_value=shared)
            )
        fake = stack.enter_context(FakeQStash(start=START))
        fake.mount(FLOW_BASE, _sdk_workflow_app(steps))
        fake.trigger(FLOW_URL, FLOW_PAYLOAD)
        began = time.perf_counter()
        fake.tick()
        elapsed = time.perf_counter() - began
        (run,) = fake.runs
        assert run.state == "RUN_SUCCESS", run
        assert len(run.steps) == steps
        return FlowRuns(elapsed / steps, [], _as_delivered(fake.deliveries))


def _as_delivered(deliveries: list[Any]) -> list[tuple[bytes, list[tuple[str, str]]]]:
    return [(d.content, d.headers.multi_items()) for d in deliveries]


#: A real upstash-workflow step <= 2 ms, where the protocol app's step costs 0.58 ms on the
#: reference machine (docs/performance.md): 2 / 0.58 = 3.4 protocol-app steps.
SDK_STEP_BUDGET = 3.4


def workflows(report: Report, steps: int, rounds: int, runs: int, sdk_rounds: int) -> None:
    sdk = f"upstash-workflow {importlib.metadata.version('upstash-workflow')}"
    # The budget row's workflow app must be what the SDK does: same deliveries, byte for byte
    # (bodies and headers, signatures included: ids are seeded, the clock is virtual).
    reference = _sdk_run(steps).deliveries
    if _protocol_runs(steps, 1).deliveries != reference:
        raise AssertionError(f"the protocol app's deliveries differ from {sdk}'s")
    bodies = [content for content, _ in reference]

    flow_costs: list[list[list[float]]] = []
    plain_costs: list[list[list[float]]] = []

    def flow() -> float:
        made = _protocol_runs(steps, runs)
        flow_costs.append(made.step_costs)
        return made.per_step

    def plain() -> float:
        made = _plain_runs(bodies, runs)
        plain_costs.append(made.step_costs)
        return made.per_step

    result = interleaved({"workflow": flow, "plain": plain}, rounds)
    ratio = result.ratio("workflow", "plain")
    report.check(
        f"5. {steps}-step workflow run, per step ({rounds} x {runs} runs)",
        us(result.median("workflow")),
        us(result.median("plain")) + " same bodies, plain",
        ratio,
        "<= 2x",
        ratio <= 2,
    )

    # Growth: each delivery carries every earlier step, so a step's cost grows with its body;
    # per KiB of body that growth should match the plain deliveries' (no quadratic term).
    window = max(1, min(10, steps // 5))
    kib = [len(body) / 1024 for body in bodies[1:]]  # step k is delivered bodies[k]
    kib_added = statistics.fmean(kib[-window:]) - statistics.fmean(kib[:window])

    def growth(per_run: list[list[float]]) -> tuple[float, float, float]:
        """Mean cost of the first and the last ``window`` steps, and the cost per KiB."""
        first = statistics.fmean(statistics.fmean(costs[:window]) for costs in per_run)
        last = statistics.fmean(statistics.fmean(costs[-window:]) for costs in per_run)
        return first, last, (last - first) / kib_added

    flow_growth = [growth(sample) for sample in flow_costs]
    plain_growth = [growth(sample) for sample in plain_costs]

    def shown(figures: list[tuple[float, float, float]]) -> str:
        first, last, per_kib = (statistics.median(f[i] for f in figures) for i in range(3))
        return f"{first * 1e6:,.0f} -> {last * 1e6:,.0f} us, {per_kib * 1e6:+.1f} us/KiB"

    report.check(
        f"5. step cost, steps {steps - window + 1}-{steps} vs 1-{window} "
        f"({kib[-window]:.1f}-{kib[-1]:.1f} vs {kib[0]:.1f}-{kib[window - 1]:.1f} KiB bodies)",
        shown(flow_growth),
        shown(plain_growth) + " plain",
        statistics.median(f[2] / p[2] for f, p in zip(flow_growth, plain_growth, strict=True)),
        "info",
        None,
    )

    # The real SDK app for the same run, against the protocol app: what the SDK costs, and
    # how much of that is the client serve() builds on every request and throws away.
    def sdk_step(reuse_client: bool) -> Callable[[], float]:
        return lambda: _sdk_run(steps, reuse_client).per_step

    def protocol_step() -> float:
        return _protocol_runs(steps, 1).per_step

    real = interleaved(
        {"sdk": sdk_step(False), "sdk, client once": sdk_step(True), "protocol": protocol_step},
        sdk_rounds,
    )
    sdk_ratio = real.ratio("sdk", "protocol")
    report.check(
        f"5. same run, real {sdk} (FastAPI Serve), per step ({sdk_rounds} rounds)",
        ms(real.median("sdk")),
        ms(real.median("protocol")) + " protocol app",
        sdk_ratio,
        f"<= {SDK_STEP_BUDGET}x (2 ms)",
        sdk_ratio <= SDK_STEP_BUDGET,
    )
    throwaway = real.median("sdk") - real.median("sdk, client once")
    report.check(
        "5. of which the SDK's throwaway AsyncQStash per request",
        f"{ms(throwaway)} ({throwaway / real.median('sdk'):.0%} of a step)",
        ms(real.median("sdk, client once")) + " with it built once",
        None,
        "info",
        None,
    )


# -- 6. a suite across cores ----------------------------------------------------------------
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: (example, its test module, tests in it): the kind of tests users write, repeated.
SUITE_MODULES = (("fastapi_app", "test_signup", 6), ("flask_app", "test_orders", 5))

_SPIN_CONFTEST = """
import time

import django, django.test, fastapi, flask, qstash, upstash_workflow  # noqa: E401

SPIN = {spin!r}


def spin():
    began = time.thread_time()  # CPU time: a busy machine stretches it, never shortens it
    while time.thread_time() - began < SPIN:
        pass
"""


def _write_example_suite(root: Path, tests: int) -> int:
    """The FastAPI and Flask examples, their test modules copied until ``tests`` tests."""
    (root / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
    )
    for example, _, _ in SUITE_MODULES:
        shutil.copytree(
            EXAMPLES / example,
            root / example,
            ignore=shutil.ignore_patterns("__pycache__", "test_*.py", "pytest.ini"),
        )
    made = 0
    for copy in itertools.count():
        for example, module, count in SUITE_MODULES:
            if made >= tests:
                return made
            source = EXAMPLES / example / "tests" / f"{module}.py"
            shutil.copy(source, root / example / "tests" / f"{module}_{copy}.py")
            made += count
    raise AssertionError("unreachable")


def _write_spin_suite(root: Path, tests: int, spin: float) -> None:
    """The control: as many tests, each burning ``spin`` seconds of CPU, no plugin work."""
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(_SPIN_CONFTEST.format(spin=spin))
    per_module = 50
    for first in range(0, tests, per_module):
        body = "from conftest import spin\n\n" + "".join(
            f"def test_spin_{i}():\n    spin()\n\n"
            for i in range(first, min(tests, first + per_module))
        )
        (root / f"test_spin_{first}.py").write_text(body)


def _pytest_run(root: Path, *args: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds (all processes) of one pytest run in ``root``."""
    before = os.times()
    began = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=root,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - began
    after = os.times()
    if completed.returncode != 0:
        raise RuntimeError(f"pytest {' '.join(args)} failed: {completed.stdout[-500:]}")
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu


def suite_scaling(report: Report, tests: int, workers: int, rounds: int) -> None:
    """A suite of the examples' tests, serial and with ``pytest -n workers``, against a control
    suite of as many tests burning the same CPU each with no plugin at all: the control's
    speedup is what xdist gets on this machine at this moment (worker start-up, the cores
    other jobs leave free), so the ratio of the two speedups is what the plugin adds or
    loses (a lock, a fixed port or shared state would serialise its workers)."""
    if importlib.util.find_spec("xdist") is None:
        report.skip("6. suite across cores", "pytest-xdist is not installed", ">= 0.8x")
        return
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if cores - load < min(workers, cores) - 0.5:
        # Scaling needs idle cores: on a saturated machine both speedups are below 1x and
        # their ratio is noise (two runs at load 6 to 9 on 2 cores gave 1.09x and 0.59x).
        why = f"needs {min(workers, cores)} idle cores; load {load:.1f} on {cores}"
        report.skip("6. suite across cores", why, ">= 0.8x")
        return
    with tempfile.TemporaryDirectory() as tmp:
        suite, control = Path(tmp, "suite"), Path(tmp, "control")
        suite.mkdir()
        control.mkdir()
        made = _write_example_suite(suite, tests)
        # CPU per test, to give the control's tests the same: a serial run less collection.
        run_cpu = _pytest_run(suite)[1]
        collect_cpu = _pytest_run(suite, "--collect-only")[1]
        spin = max(0.001, (run_cpu - collect_cpu) / made)
        _write_spin_suite(control, made, spin)
        n = ("-n", str(workers))
        cases = {
            "serial": lambda: _pytest_run(suite)[0],
            "parallel": lambda: _pytest_run(suite, *n)[0],
            "control serial": lambda: _pytest_run(control)[0],
            "control parallel": lambda: _pytest_run(control, *n)[0],
        }
        result = interleaved(cases, rounds)
    ideal = min(workers, cores)
    speedup = result.median("serial") / result.median("parallel")
    control_speedup = result.median("control serial") / result.median("control parallel")
    ratio = statistics.median(
        (s / p) / (cs / cp)
        for s, p, cs, cp in zip(
            result["serial"],
            result["parallel"],
            result["control serial"],
            result["control parallel"],
            strict=True,
        )
    )
    report.check(
        f"6. {made} example tests, pytest -n {workers} vs serial ({rounds} rounds, {cores} cores)",
        f"{result.median('parallel'):.1f} s, {speedup:.2f}x faster",
        f"{result.median('serial'):.1f} s serial; ideal {ideal}x",
        speedup / ideal,
        "info (of ideal)",
        None,
    )
    report.check(
        f"6. speedup vs a control suite, no plugin, {spin * 1e3:.0f} ms CPU per test",
        f"{speedup:.2f}x",
        f"{control_speedup:.2f}x control",
        ratio,
        ">= 0.8x",
        ratio >= 0.8,
    )


# -- 7. pytest start-up ----------------------------------------------------------------------
#: The plugins each start-up case loads (plugin autoloading off, each named with -p).
STARTUP_PLUGINS = {
    "bare": (),
    "pytest-httpx": ("pytest_httpx",),
    "pytest-qstash": ("pytest_qstash.plugin", "pytest_qstash.server.fixture"),
}


def pytest_startup(report: Report, rounds: int) -> None:
    """A pytest run of one trivial test: bare, with pytest-httpx (which imports httpx), with
    pytest-qstash (its two entry points), in alternating rounds. What a run that never uses
    QStash pays for having the plugin installed."""
    if importlib.util.find_spec("pytest_httpx") is None:
        report.skip("7. pytest start-up", "pytest-httpx is not installed", "<= 0.5x")
        return
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}

    def run(plugins: tuple[str, ...], root: Path) -> float:
        args = [arg for plugin in plugins for arg in ("-p", plugin)]
        began = time.perf_counter()
        completed = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - began
        if completed.returncode != 0:
            raise RuntimeError(f"pytest {' '.join(args)} failed: {completed.stdout[-300:]}")
        return elapsed

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pytest.ini").write_text("[pytest]\n")
        (root / "test_one.py").write_text("def test_one():\n    pass\n")
        cases = {
            name: (lambda plugins=plugins: run(plugins, root))
            for name, plugins in STARTUP_PLUGINS.items()
        }
        result = interleaved(cases, rounds)
    bare = result.median("bare")
    added = {name: result.median(name) - bare for name in ("pytest-httpx", "pytest-qstash")}
    ratio = added["pytest-qstash"] / added["pytest-httpx"] if added["pytest-httpx"] > 0 else None
    report.check(
        f"7. pytest start-up + pytest-httpx, one test ({rounds} rounds)",
        f"{ms(result.median('pytest-httpx'))} (+{ms(added['pytest-httpx'])})",
        ms(bare) + " bare",
        None,
        "info",
        None,
    )
    report.check(
        f"7. pytest start-up + pytest-qstash, one test ({rounds} rounds)",
        f"{ms(result.median('pytest-qstash'))} (+{ms(added['pytest-qstash'])})",
        f"+{ms(added['pytest-httpx'])} pytest-httpx adds",
        ratio,
        "<= 0.5x",
        ratio is not None and ratio <= 0.5,
    )


# -- 8. server mode -------------------------------------------------------------------------
#: Real-clock lateness budget: the p95 of how late a due message reaches the app.
LATENESS_P95_BUDGET_MS = 100.0


def dashboard_cost(report: Report, sizes: tuple[int, int, int, int, int]) -> None:
    """A dashboard left open on ``pytest-qstash serve``: one poll's size with large bodies
    pending, the growth three large answers cause, and a publish's p95 while three tabs poll
    (benchmarks/dashboard.py measures them)."""
    if importlib.util.find_spec("uvicorn") is None or not Path("/proc/self/status").exists():
        report.skip("10. dashboard", "needs uvicorn and Linux's /proc", "< 2 MB")
        return
    import dashboard as dashboard_bench  # benchmarks/dashboard.py, beside this file

    pending, body, big, bigs, publishes = sizes
    found = dashboard_bench.measure(pending, body, big, bigs, publishes)
    stored = pending * body
    report.check(
        f"10. one dashboard poll, {pending} pending bodies of {body / 2**20:g} MiB",
        f"{found['poll_bytes'] / 1e3:,.0f} kB",
        f"{stored / 1e6:,.0f} MB stored",
        found["poll_bytes"] / stored,
        "< 2 MB",
        found["poll_bytes"] < dashboard_bench.POLL_BUDGET_BYTES,
    )
    report.check(
        f"10. server growth, {bigs} answers of {big / 2**20:g} MiB into the DLQ",
        f"{found['growth_mb']:.1f} MB",
        f"{bigs * big / 1e6:,.0f} MB answered",
        found["growth_mb"] * 1e6 / (bigs * big),
        f"< {dashboard_bench.GROWTH_BUDGET_MB:.0f} MB",
        found["growth_mb"] < dashboard_bench.GROWTH_BUDGET_MB,
    )
    report.check(
        f"10. publish p95 with 3 dashboard tabs polling ({publishes} publishes)",
        ms(found["p95_watched"]),
        f"{ms(found['p95_alone'])} without tabs",
        found["p95_watched"] / found["p95_alone"],
        "< 200 ms",
        found["p95_watched"] < dashboard_bench.PUBLISH_P95_BUDGET_S,
    )


def server_mode(report: Report, n: int, rounds: int, rate: float, seconds: float) -> None:
    """``pytest-qstash serve`` delivering into a trivial app under uvicorn in its own process:
    one tick of ``n`` messages against ``n`` pooled sequential POSTs of the same bodies from
    one client (the server delivers concurrently, so it should beat them), and how late due
    messages reach the app on a real clock while ``rate`` publishes a second come in. See
    benchmarks/server.py, which measures them.

    Both need a core to spare (three processes work at once: the server, the app, the load),
    so on a machine without one idle core they are shown, not judged: there the sequential
    client and the server share what is left, and lateness is the machine's."""
    if importlib.util.find_spec("uvicorn") is None:
        report.skip("8. server mode", "uvicorn is not installed", ">= 1x")
        return
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    judged = cores - load >= 1.0
    unjudged = f" (not judged: load {load:.1f} on {cores} cores)"
    import server as server_bench  # benchmarks/server.py, beside this file

    from pytest_qstash.server import AppProcess

    with AppProcess.start("server_app:app", cwd=Path(__file__).resolve().parent) as app:
        samples = Samples(server_bench.concurrent_deliveries(app, n, rounds))
        late = server_bench.lateness_under_load(app, rate, seconds)
    ratio = samples.ratio("sequential", "server")
    report.check(
        f"8. server deliveries into a uvicorn app, per second ({rounds} x {n})",
        f"{n / samples.median('server'):,.0f}/s",
        f"{n / samples.median('sequential'):,.0f}/s pooled sequential POSTs",
        ratio,
        ">= 1x" if judged else ">= 1x" + unjudged,
        ratio >= 1.0 if judged else None,
    )
    p50, p95 = server_bench.percentile(late, 0.5), server_bench.percentile(late, 0.95)
    report.check(
        f"8. real-clock lateness at {rate:g} messages/s for {seconds:g} s, p50 / p95",
        f"{p50:.0f} / {p95:.0f} ms",
        f"each message's due time ({len(late)})",
        None,
        f"p95 <= {LATENESS_P95_BUDGET_MS:.0f} ms" + ("" if judged else unjudged),
        p95 <= LATENESS_P95_BUDGET_MS if judged else None,
    )


# -- 9. the server's state on disk -------------------------------------------------------------
PERSISTED_PUBLISH_BUDGET = 1.3


def persisted_publish(report: Report, n: int, rounds: int) -> None:
    """A publish to a server with ``--data-dir`` (journaled in sqlite before it is answered)
    against one to a server in memory: the server's own work, through the same method its
    ASGI app calls for every QStash API request, without the HTTP round trip around it
    (``benchmarks/server.py`` times that too)."""
    from pytest_qstash.server.app import QStashServerApp, ServerSettings
    from pytest_qstash.server.persistence import DataDir

    settings = ServerSettings("bench-token", "sig_a", "sig_b", clock="virtual", start=START)
    headers = {"Authorization": "Bearer bench-token", "Content-Type": "application/json"}
    requests = [
        httpx.Request("POST", f"http://127.0.0.1/v2/publish/{HOOK}", headers=headers, content=b)
        for b in (json.dumps({"i": i}).encode() for i in range(n))
    ]

    def publish(on_disk: bool) -> Callable[[], float]:
        async def run() -> float:
            with tempfile.TemporaryDirectory() as data_dir:
                app = QStashServerApp(settings, DataDir(data_dir) if on_disk else None)
                app.startup()
                app.persistence.started(app)
                began = time.perf_counter()
                for request in requests:
                    app.api(request)
                took = time.perf_counter() - began
                await app.shutdown()
            return took

        return lambda: asyncio.run(run())

    result = interleaved({"disk": publish(True), "memory": publish(False)}, rounds)
    ratio = result.ratio("disk", "memory")
    report.check(
        f"9. server publish, --data-dir vs in memory ({n} per round, no HTTP)",
        us(result.median("disk") / n),
        us(result.median("memory") / n),
        ratio,
        f"<= {PERSISTED_PUBLISH_BUDGET:g}x",
        ratio <= PERSISTED_PUBLISH_BUDGET,
    )


#: A restart of a server whose data dir holds this many messages, and the lists read after it.
RESTART_BUDGET_S = 2.0
#: Restarts per figure (its median): one start on a shared machine varies by a third.
RESTARTS = 3


def data_dir_restart(report: Report, n: int) -> None:
    """A ``serve --data-dir`` process holding ``n`` messages (published through
    ``/v2/batch``, due in a day): the time from starting it again until every control-API
    list has been read whole, after a clean stop and after a ``kill -9`` (when the journal
    holds the last thousand publishes). Each is the median of ``RESTARTS`` restarts, each
    of its own copy of the same stopped data dir (a restart writes to its data dir). An
    absolute budget, so judged only on a machine with a core to spare."""
    import compileall
    import signal

    import pytest_qstash
    from pytest_qstash.server import ServerProcess
    from pytest_qstash.server.records import LISTS

    # A server starts from the package's bytecode, as pip leaves an install: compiled here
    # once, so an editable checkout run with PYTHONDONTWRITEBYTECODE does not compile the
    # package again at every start (a third of a second, counted as a restart's otherwise).
    compileall.compile_dir(os.path.dirname(pytest_qstash.__file__), quiet=1)
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    judged = cores - load >= 1.0
    budget = f"<= {RESTART_BUDGET_S:g} s" + ("" if judged else f" (not judged: load {load:.1f})")
    chunk = min(1000, n)

    def publish(server: ServerProcess, count: int, first: int) -> None:
        auth = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=300) as http:
            for start in range(first, first + count, chunk):
                batch = [
                    {
                        "destination": f"{HOOK}?i={i}",
                        "body": json.dumps({"i": i}),
                        "headers": {"Upstash-Delay": "1d"},
                    }
                    for i in range(start, min(start + chunk, first + count))
                ]
                http.post("/v2/batch", json=batch).raise_for_status()

    def restart(data_dir: str) -> tuple[ServerProcess, float, int]:
        began = time.perf_counter()
        server = ServerProcess.start(args=["--data-dir", data_dir], timeout=120)
        auth = {"Authorization": f"Bearer {server.token}"}
        held = 0
        with httpx.Client(base_url=server.url, headers=auth, timeout=300) as http:
            for name in LISTS:  # every list read once, the messages counted on the way
                answer = http.get(f"/_qstash/{name}")
                answer.raise_for_status()
                if name == "messages":
                    held = len(answer.json())
        return server, time.perf_counter() - began, held

    def restarts(data_dir: str, expected: int, after: str) -> float:
        """The median restart of copies of ``data_dir`` (left as it is)."""
        took = []
        for i in range(RESTARTS):
            copy = f"{data_dir}-{i}"
            shutil.copytree(data_dir, copy)
            try:
                server, seconds, held = restart(copy)
                server.stop()
            finally:
                shutil.rmtree(copy)
            if held != expected:
                raise RuntimeError(f"{held} messages after {after}, expected {expected}")
            took.append(seconds)
        return statistics.median(took)

    with tempfile.TemporaryDirectory() as parent:
        data_dir = os.path.join(parent, "data")
        server = ServerProcess.start(args=["--data-dir", data_dir], timeout=120)
        publish(server, n - chunk, 0)
        server.stop()  # SIGTERM: a clean stop, the last snapshot
        clean = restarts(data_dir, n - chunk, "a clean stop")
        server, _, _ = restart(data_dir)
        publish(server, chunk, n - chunk)  # journaled; a snapshot may not have them yet
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=30)
        server.stop()
        killed = restarts(data_dir, n, "kill -9")
        os.mkdir(os.path.join(parent, "empty"), 0o700)
        empty = restarts(os.path.join(parent, "empty"), 0, "no state")  # a start by itself
    for how, took, count in (("a clean stop", clean, n - chunk), ("kill -9", killed, n)):
        report.check(
            f"11. data dir of {count:,} messages: restart + list everything, after {how}"
            f" (median of {RESTARTS})",
            f"{took:.2f} s",
            f"{empty:.2f} s with an empty one",
            took / empty,
            budget,
            took <= RESTART_BUDGET_S if judged else None,
        )


# -- main ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    deliver: tuple[int, int]  # messages per round, rounds
    fixture: tuple[int, int]  # fixture cycles per round, rounds
    pytest_tests: int  # tests of each kind in the pytest session
    pytest_freezegun: bool
    idle_advances: int
    cron: tuple[int, int]  # firings per round, rounds
    linear: tuple[int, int, int]  # smaller count, factor, rounds
    memory_messages: int
    copies_body: int
    workflow: tuple[int, int, int, int]  # steps, rounds, timed runs per round, real-SDK rounds
    scaling: tuple[int, int, int] | None  # tests, xdist workers, rounds
    startup_rounds: int
    server: tuple[int, int, float, float]  # messages per tick, rounds, publishes/s, seconds
    dashboard: tuple[int, int, int, int, int]  # pending, body, big answer, answers, publishes
    restart_messages: int  # messages in the data dir a server restarts with


FULL = Sizes(
    (100, 21),
    (40, 15),
    300,
    True,
    50,
    (50, 11),
    (100, 8, 7),
    100_000,
    8 * 2**20,
    (50, 21, 3, 5),
    (400, 4, 2),
    9,
    (200, 7, 300, 5.0),
    (100, 2**20, 20 * 2**20, 3, 300),
    20_000,
)
# No suite-scaling run: a dozen pytest processes, each importing the web stacks, take longer
# than the whole smoke run may.
SMOKE = Sizes(
    (10, 2),
    (5, 2),
    3,
    False,
    5,
    (3, 2),
    (5, 4, 2),
    1_000,
    2**20,
    (3, 2, 1, 1),
    None,
    1,
    (20, 2, 50, 1.0),
    (5, 2**16, 2**21, 1, 20),
    1_500,
)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = f", load {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return (
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs ({cpu}){load}; app clock: {default_app_clock()}"
    )


def profile(target: str, n: int = 2000) -> None:
    """Where the time goes (how the hot spots were found): publish_json + tick, or twenty
    50-step workflow runs of the protocol app."""
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0002)
    if target == "workflow":
        _protocol_runs(50, 1)  # warm-up
        with profiler:
            _protocol_runs(50, 20)
        print(profiler.output_text(color=False, show_all=False))
        return
    with FakeQStash(start=START, max_deliveries_per_instant=n) as fake:
        fake.mount(APP_BASE, TRIVIAL_APP)
        client = qstash.QStash(fake.token, retry=False)
        with profiler:
            for i in range(n):
                client.message.publish_json(url=HOOK, body={"n": i})
                fake.tick()
    print(profiler.output_text(color=False, show_all=False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, no budget checks (CI)")
    parser.add_argument(
        "--profile",
        nargs="?",
        const="deliver",
        choices=("deliver", "workflow"),
        help="profile publish + deliver (default) or a 50-step workflow run, judge nothing",
    )
    parser.add_argument(
        "--only", metavar="N", action="append", help="run only budget N (1-11; repeatable)"
    )
    args = parser.parse_args()
    if args.profile:
        profile(args.profile)
        return 0
    smoke: bool = args.smoke
    size = SMOKE if smoke else FULL
    report = Report(smoke)
    print(machine())
    print("smoke run: nothing is judged" if smoke else "full run: budgets are checked")
    print()
    steps: list[tuple[str, str, Callable[[], object]]] = [
        ("1", "<= 1.5x", lambda: publish_and_deliver(report, *size.deliver)),
        ("2", "+<= 3 ms", lambda: fixture_cost_in_process(report, *size.fixture)),
        ("2", "+<= 3 ms", lambda: fixture_cost_through_pytest(report, size.pytest_tests, "auto")),
        ("2", "info", lambda: lifespan_cost(report, *size.fixture)),
        ("2", "<= 1x", lambda: fixture_cost.check(report, 30 if smoke else 400)),
        (
            "2",
            f"<= {PLAIN_FIXTURE_BUDGET}x",
            lambda: fixture_cost_through_pytest(
                report, size.pytest_tests, "time-machine", plain_install=True
            ),
        ),
    ]
    if size.pytest_freezegun:
        tests = size.pytest_tests
        steps.append(("2", "info", lambda: fixture_cost_through_pytest(report, tests, "freezegun")))
    steps += [
        ("3", "<= 5 ms", lambda: idle_advance(report, size.idle_advances)),
        ("3", "<= 1.5x", lambda: cron_firing(report, *size.cron)),
        ("3", "<= 1.5x", lambda: linear_growth(report, *size.linear)),
        ("4", "< 300 MB", lambda: undelivered_memory(report, size.memory_messages)),
        ("4", "copies", lambda: delivered_body_copies(report, size.copies_body)),
        ("5", "<= 2x", lambda: workflows(report, *size.workflow)),
        ("8", ">= 1x", lambda: server_mode(report, *size.server)),
        ("8", "info", lambda: publish_cost.check(report, *((20, 2) if smoke else (300, 7)))),
        ("9", "<= 1.3x", lambda: persisted_publish(report, *size.deliver)),
        ("10", "< 2 MB", lambda: dashboard_cost(report, size.dashboard)),
        ("11", "<= 2 s", lambda: data_dir_restart(report, size.restart_messages)),
    ]
    if size.scaling is not None:
        scaling = size.scaling
        steps.append(("6", ">= 0.8x", lambda: suite_scaling(report, *scaling)))
    steps.append(("7", "<= 0.5x", lambda: pytest_startup(report, size.startup_rounds)))
    if args.only:
        steps = [step for step in steps if step[0] in args.only]
    for number, budget, step in steps:
        try:
            step()
        except Exception as exc:
            report.error(f"{number}. (failed to run)", exc, budget)
    report.print()
    if report.failed:
        print("\nA figure failed to run." if smoke else "\nA figure missed its budget or failed.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
