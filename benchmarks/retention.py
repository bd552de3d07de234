"""Retention: a QStash left running on an every-minute schedule stays flat once past the
plan's retention window, and moving its clock costs per event, not per day skipped.

    python benchmarks/retention.py            # in-process and a real server (a few minutes)
    python benchmarks/retention.py --smoke    # tiny sizes: proves it runs
    python benchmarks/retention.py --in-process   # the engine only (about half a minute)

Figures:

- in-process (``FakeQStash(retention=True)``, the engine a server runs): a ``* * * * *``
  schedule delivering into a trivial app, the clock advanced a day at a time for 30 days;
  memory held (blocks the allocator holds, after a collection: tracemalloc would slow each
  firing tenfold) at day 10 and day 30, for the default plan (14 days of logs) and the free
  one (3 days). Budget: day 30 at most 1.5x day 10. Also the oldest entry ``/v2/logs``
  answers (``order=earliestFirst``), which must be within the retention;
- the cost per firing of ``advance("1h")`` 20 days into the schedule (past the window:
  forgetting as much as it records) against one day in, in alternating rounds (at most
  1.5x); one ``advance("10d")`` against one ``advance("2d")``, per firing (events, not time:
  at most 1.5x); the ``advance("3650d")`` that expires days of a minutely log, per record
  forgotten (info), and the next one, with nothing left (at most 5 ms, an idle advance);
- a real ``pytest-qstash serve --clock virtual --data-dir DIR`` (retention on, its default)
  delivering the schedule over HTTP to a loopback endpoint, an hour per control call: its
  RSS and the size of its data dir at day 10 and day 30 (budget 1.5x each), and
  ``/v2/logs``' oldest entry.

Exit 1 when a budget is missed (``--smoke`` judges nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pytest_qstash.engine.account import DEFAULT_ENV

for _name, _value in DEFAULT_ENV.items():
    os.environ.setdefault(_name, _value)

import httpx  # noqa: E402
import qstash  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from pytest_qstash import FakeQStash  # noqa: E402
from pytest_qstash.engine.plans import plan_named  # noqa: E402

APP_BASE = "https://app.bench"
HOOK = f"{APP_BASE}/hook"
START = "2026-01-01T00:00:00Z"
DAY_MS = 86_400_000
#: Day 30 against day 10: at most this much more held (memory, RSS) or spent per firing.
FLAT_BUDGET = 1.5


async def _hook(request: Request) -> Response:
    await request.body()
    return Response("ok")


APP = Starlette(routes=[Route("/hook", _hook, methods=["POST"])])


def _held() -> int:
    """Memory blocks the allocator holds (objects and their buffers), after a collection."""
    gc.collect()
    return sys.getallocatedblocks()


def _oldest_log_ms(fake_or_url: FakeQStash | str, token: str) -> int | None:
    """The time of the oldest entry ``GET /v2/logs`` answers."""
    params = {"order": "earliestFirst", "count": "1"}
    headers = {"Authorization": f"Bearer {token}"}
    if isinstance(fake_or_url, FakeQStash):
        request = httpx.Request(
            "GET", "https://qstash.upstash.io/v2/logs", params=params, headers=headers
        )
        body = fake_or_url.handle(request).json()
    else:
        body = httpx.get(f"{fake_or_url}/v2/logs", params=params, headers=headers).json()
    logs = body["logs"]
    return int(logs[0]["time"]) if logs else None


def in_process(plan: str, days: int) -> dict[str, Any]:
    """Memory held by a minutely schedule over ``days`` virtual days, and the oldest log."""
    out: dict[str, Any] = {"plan": plan, "held": {}}
    retention_ms = plan_named(plan).log_retention_ms
    with FakeQStash(start=START, plan=plan, retention=True) as fake:
        fake.mount(APP_BASE, APP)
        client = qstash.QStash(fake.token, retry=False)
        client.schedule.create(destination=HOOK, cron="* * * * *", body='{"n":0}')
        base = _held()
        for day in range(1, days + 1):
            fake.advance("1d")
            if day in (days // 3, days):
                out["held"][day] = _held() - base
        oldest = _oldest_log_ms(fake, fake.token)
        out["oldest_age_ms"] = None if oldest is None else fake.clock.now_ms - oldest
        out["retention_ms"] = retention_ms
        out["kept"] = (len(fake.store.events), len(fake.store.deliveries))
    return out


def _scheduled(plan: str) -> FakeQStash:
    """An active fake (retention on) with a ``* * * * *`` schedule into the trivial app. The
    schedule is created through ``handle``: two fakes may be active at once here, and the
    SDK's calls would go to either."""
    fake = FakeQStash(start=START, plan=plan, retention=True, freeze_time=False).start()
    fake.mount(APP_BASE, APP)
    request = httpx.Request(
        "POST",
        f"https://qstash.upstash.io/v2/schedules/{HOOK}",
        headers={"Authorization": f"Bearer {fake.token}", "Upstash-Cron": "* * * * *"},
        content=b"{}",
    )
    assert fake.handle(request).status_code in (200, 201)
    return fake


def _per_firing(fake: FakeQStash, duration: str) -> float:
    began = time.perf_counter()
    made = fake.advance(duration)
    return (time.perf_counter() - began) / len(made)


def old_against_young(plan: str, old_days: int, rounds: int) -> list[float]:
    """Per-round ratios of the cost per firing of ``advance("1h")``: a fake ``old_days`` into
    the schedule (past its retention window: forgetting as much as it records) against one a
    day in, in alternating rounds (a slow spell of the machine lands on both)."""
    young, old = _scheduled(plan), _scheduled(plan)
    try:
        young.advance("1d")
        old.advance(f"{old_days}d")
        ratios = []
        for _ in range(rounds):
            a = _per_firing(young, "1h")
            b = _per_firing(old, "1h")
            ratios.append(b / a)
        return ratios
    finally:
        young.stop()
        old.stop()


def long_against_short(plan: str, long_days: int, short_days: int, rounds: int) -> list[float]:
    """Per-round ratios of the cost per firing of one ``advance(f"{long_days}d")`` against one
    ``advance(f"{short_days}d")``, each from a fresh fake, in alternating rounds."""
    ratios = []
    for _ in range(rounds):
        fake = _scheduled(plan)
        try:
            short = _per_firing(fake, f"{short_days}d")
        finally:
            fake.stop()
        fake = _scheduled(plan)
        try:
            long = _per_firing(fake, f"{long_days}d")
        finally:
            fake.stop()
        ratios.append(long / short)
    return ratios


def idle_decades(days_of_log: int) -> tuple[float, int, float]:
    """After ``days_of_log`` days of a minutely schedule (then paused): seconds of the
    ``advance("3650d")`` that expires its log, deliveries and messages, how many records
    that was, and seconds of the next ``advance("3650d")`` (nothing left)."""
    with FakeQStash(start=START, plan="free", retention=True) as fake:
        fake.mount(APP_BASE, APP)
        client = qstash.QStash(fake.token, retry=False)
        schedule_id = client.schedule.create(destination=HOOK, cron="* * * * *", body="{}")
        fake.advance(f"{days_of_log}d")
        client.schedule.pause(schedule_id)
        store = fake.store
        records = len(store.events) + len(store.deliveries) + len(store.messages)
        began = time.perf_counter()
        fake.advance("3650d")
        expiring = time.perf_counter() - began
        assert len(store.events) == len(store.deliveries) == len(store.messages) == 0
        began = time.perf_counter()
        fake.advance("3650d")
        return expiring, records, time.perf_counter() - began


# -- a real server --------------------------------------------------------------------------
class _Sink:
    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@contextmanager
def _sink() -> Iterator[_Sink]:
    sink = _Sink()
    try:
        yield sink
    finally:
        sink.close()


def _size(directory: str) -> int:
    """Bytes of the files in a data dir (the snapshot, the journals not yet retired); not a
    snapshot being written (``snapshot.sqlite.tmp``), which replaces the old one when done."""
    total = 0
    for entry in os.scandir(directory):
        if entry.name.endswith(".tmp"):
            continue
        with contextlib.suppress(FileNotFoundError):  # a journal retired meanwhile
            total += entry.stat().st_size
    return total


def _settled_size(
    directory: str, since: float, quiet_s: float = 5.0, timeout_s: float = 180.0
) -> int:
    """The data dir's size once a snapshot holds the state as it was at ``since`` (the end
    of the last change, wall-clock seconds): one written after it, and nothing written for
    ``quiet_s`` since (a snapshot follows every change within a second or two, or as long as
    the last one took, and retires the journals it covers). An older snapshot beside its
    journal would measure the state as it was a step before."""
    snapshot = os.path.join(directory, "snapshot.sqlite")
    deadline = time.monotonic() + timeout_s
    seen: tuple[float, int] | None = None
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        try:
            now = (os.stat(snapshot).st_mtime, _size(directory))
        except FileNotFoundError:
            continue
        if now != seen:
            seen, quiet_since = now, time.monotonic()
        elif now[0] > since and time.monotonic() - quiet_since >= quiet_s:
            return now[1]
    raise RuntimeError(f"the data dir {directory} did not settle within {timeout_s:g} s")


def server(days: int, plan: str) -> dict[str, Any]:
    """RSS of a ``serve --data-dir`` process on a minutely schedule, a day at a time, and
    the size of its data dir."""
    from pytest_qstash.server import ServerProcess

    out: dict[str, Any] = {"plan": plan, "rss": {}, "disk": {}}
    with (
        tempfile.TemporaryDirectory() as data_dir,
        _sink() as sink,
        ServerProcess.start(
            clock="virtual", start=START, args=[f"--plan={plan}", "--data-dir", data_dir]
        ) as served,
    ):
        client = qstash.QStash(served.token, base_url=served.url)
        client.schedule.create(destination=f"{sink.url}/hook", cron="* * * * *", body="{}")
        for day in range(1, days + 1):
            for _ in range(24):  # an hour a call: each control call answers well within its timeout
                served.advance("1h")
            if day in (days // 3, days):
                changed = time.time()
                out["rss"][day] = _rss(served.process.pid)
                out["disk"][day] = _settled_size(data_dir, changed)
        oldest = _oldest_log_ms(served.url, served.token)
        now_ms = int(served.now.timestamp() * 1000)
        out["oldest_age_ms"] = None if oldest is None else now_ms - oldest
        out["retention_ms"] = plan_named(plan).log_retention_ms
        client.http._client.close()
    return out


# -- the table ------------------------------------------------------------------------------
class Table:
    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke
        self.rows: list[tuple[str, str, str, str]] = []
        self.failed = False

    def row(self, figure: str, value: str, budget: str, ok: bool | None) -> None:
        if self.smoke:
            status = "ran"
        elif ok is None:
            status = "INFO"
        else:
            status = "PASS" if ok else "FAIL"
            self.failed |= not ok
        self.rows.append((figure, value, budget, status))
        print(f"{status:5} {figure}: {value} (budget {budget})", flush=True)  # as it comes

    def print(self) -> None:
        head = ("figure", "measured", "budget", "result")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(4)]
        for index, row in enumerate([head, *self.rows]):
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
            if index == 0:
                print("  ".join("-" * w for w in widths))


def _days(ms: int | None) -> str:
    return "none" if ms is None else f"{ms / DAY_MS:.2f} d"


def judge_in_process(
    table: Table, days: int, plans: tuple[str, ...] = ("fixed_10m", "free")
) -> None:
    for plan in plans:
        result = in_process(plan, days)
        _flat_row(
            table,
            f"{plan}: memory held",
            result["held"],
            days,
            lambda n: f"{n / 1e3:,.0f}k",
            "blocks",
        )
        _oldest_log_row(
            table,
            f"{plan}: oldest /v2/logs entry, age (events, deliveries kept {result['kept']})",
            result,
        )


def judge_costs(table: Table, smoke: bool) -> None:
    plan = "fixed_10m"
    old_days = 3 if smoke else 20
    ratio = statistics.median(old_against_young(plan, old_days, 3 if smoke else 15))
    table.row(
        f'{plan}: cost per firing of advance("1h") at day {old_days} / day 1 (interleaved)',
        f"{ratio:.2f}x",
        f"<= {FLAT_BUDGET}x",
        ratio <= FLAT_BUDGET,
    )
    long_days, short_days = (2, 1) if smoke else (10, 2)
    ratio = statistics.median(long_against_short("free", long_days, short_days, 1 if smoke else 3))
    table.row(
        f'free: advance("{long_days}d") / advance("{short_days}d") in one call, per firing',
        f"{ratio:.2f}x",
        f"<= {FLAT_BUDGET}x",
        ratio <= FLAT_BUDGET,
    )
    expiring, records, idle = idle_decades(4)
    table.row(
        'free: the advance("3650d") that expires a minutely log, per record forgotten',
        f"{expiring * 1e6 / records:.2f} us ({records:,} records, {expiring * 1e3:.0f} ms)",
        "info",
        None,
    )
    table.row(
        'free: the next advance("3650d"), nothing left',
        f"{idle * 1e3:.2f} ms",
        "<= 5 ms",
        idle <= 0.005,
    )


def judge_server(table: Table, days: int, plan: str = "fixed_10m") -> None:
    result = server(days, plan)
    _flat_row(
        table,
        f"serve --data-dir ({plan}): RSS",
        result["rss"],
        days,
        lambda n: f"{n / 1e6:.0f}",
        "MB",
    )
    _flat_row(
        table,
        f"serve --data-dir ({plan}): data dir size",
        result["disk"],
        days,
        lambda n: f"{n / 1e6:.1f}",
        "MB",
    )
    _oldest_log_row(table, f"serve ({plan}): oldest /v2/logs entry, age", result)


def _flat_row(
    table: Table,
    what: str,
    by_day: dict[int, float],
    days: int,
    shown: Callable[[float], str],
    unit: str,
) -> None:
    """``what`` on the last day against a third of the way in: flat once past the retention
    window (at most ``FLAT_BUDGET`` times as much)."""
    first, last = days // 3, days
    ratio = by_day[last] / by_day[first]
    table.row(
        f"{what} at day {last} / day {first}",
        f"{shown(by_day[last])} / {shown(by_day[first])} {unit} = {ratio:.2f}x",
        f"<= {FLAT_BUDGET}x",
        ratio <= FLAT_BUDGET,
    )


def _oldest_log_row(table: Table, figure: str, result: dict[str, Any]) -> None:
    """The oldest entry ``/v2/logs`` answers: within the plan's log retention."""
    age, keep = result["oldest_age_ms"], result["retention_ms"]
    table.row(figure, _days(age), f"<= {_days(keep)}", age is not None and age <= keep)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, judges nothing")
    parser.add_argument("--in-process", action="store_true", help="leave the server out")
    parser.add_argument(
        "--server-days", type=int, default=30, help="virtual days the server runs (default 30)"
    )
    args = parser.parse_args()
    days = 3 if args.smoke else 30
    table = Table(args.smoke)
    judge_in_process(table, days)
    judge_costs(table, args.smoke)
    if not args.in_process:
        judge_server(table, 3 if args.smoke else args.server_days)
    print()
    table.print()
    return 1 if table.failed else 0


if __name__ == "__main__":
    sys.exit(main())
