"""What a dashboard left open costs the server it watches (budget 10 of ``run.py``).

Three figures, on a ``pytest-qstash serve`` delivering into ``server_app`` under uvicorn:

- the size of one dashboard poll with 100 messages of 1 MiB pending (the bodies stay on the
  server; the list carries their first few KiB): under 2 MB;
- how much the server grows (resident memory) when three attempts are answered with 20 MiB
  each and fail into the DLQ: under 40 MB, since each keeps the first MiB of its answer;
- the p95 of a publish while three tabs poll the dashboard, each as the page does (one poll,
  then the next a second after it answered), on that same store: at most 10 times the p95
  without tabs, measured beside it.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

import requests
from qstash import QStash

from pytest_qstash.server import AppProcess, ServerProcess
from pytest_qstash.server.dashboard.routes import DASHBOARD_PATH, dashboard_link

HERE = Path(__file__).resolve().parent
MIB = 1024 * 1024
POLL_BUDGET_BYTES = 2_000_000
GROWTH_BUDGET_MB = 40.0
#: A publish's p95 with three tabs polling, at most so many times the p95 without them (4.4x
#: measured on a loaded 2-core machine, load 6): each poll holds the server's loop while it
#: renders, so a publish arriving then waits for it, never for much more.
PUBLISH_P95_BUDGET = 10.0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _signed_in(server: ServerProcess) -> requests.Session:
    session = requests.Session()
    session.get(dashboard_link(server.url, server.token), timeout=30).raise_for_status()
    return session


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * len(ordered)) - 1)]


def measure(
    pending: int, body_bytes: int, big_bytes: int, bigs: int, publishes: int
) -> dict[str, float]:
    """The three figures (and the p95 without tabs), at these sizes."""
    with ServerProcess.start(clock="real") as server:
        saved = dict(os.environ)
        os.environ.update(server.env)  # the app's process takes the server's keys
        try:
            app = AppProcess.start("server_app:app", cwd=HERE)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        with app:
            sdk = QStash(server.token, base_url=server.url, retry=False)
            body = "x" * body_bytes
            for _ in range(pending):
                sdk.message.publish(url=f"{app.url}/hook", body=body, delay="1h")
            poll = _signed_in(server).get(f"{server.url}{DASHBOARD_PATH}/data", timeout=60)
            poll.raise_for_status()
            poll_bytes = len(poll.content)

            before = _rss_mb(server.process.pid)
            for _ in range(bigs):
                sdk.message.publish(url=f"{app.url}/big?size={big_bytes}", body="{}", retries=0)
            deadline = time.monotonic() + 120
            while len(sdk.dlq.list().messages) < bigs:
                if time.monotonic() > deadline:
                    raise RuntimeError("the large answers did not reach the DLQ")
                time.sleep(0.1)
            time.sleep(0.5)
            growth = _rss_mb(server.process.pid) - before

            def publish_times() -> list[float]:
                took = []
                for i in range(publishes):
                    started = time.perf_counter()
                    sdk.message.publish_json(url=f"{app.url}/hook", body={"i": i}, delay="1h")
                    took.append(time.perf_counter() - started)
                return took

            alone = publish_times()
            stop = threading.Event()

            def tab() -> None:
                session = _signed_in(server)
                since = ""
                while not stop.is_set():
                    answer = session.get(
                        f"{server.url}{DASHBOARD_PATH}/data", params={"since": since}, timeout=60
                    )
                    since = answer.json()["version"]
                    stop.wait(1.0)

            tabs = [threading.Thread(target=tab) for _ in range(3)]
            for thread in tabs:
                thread.start()
            try:
                time.sleep(1.0)
                watched = publish_times()
            finally:
                stop.set()
                for thread in tabs:
                    thread.join()
    return {
        "poll_bytes": poll_bytes,
        "growth_mb": growth,
        "p95_alone": _p95(alone),
        "p95_watched": _p95(watched),
        "median_watched": statistics.median(watched),
    }
