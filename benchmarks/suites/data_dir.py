"""Budgets 9 and 11: the server's state on disk: a journaled publish, a restart."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import httpx
from bench import (
    HOOK,
    START,
    Mode,
    Report,
    Step,
    interleaved,
    us,
)

# -- 9. the server's state on disk -------------------------------------------------------------
PERSISTED_PUBLISH_BUDGET = 1.3


def persisted_publish(report: Report, n: int, rounds: int) -> None:
    """A publish to a server with ``--data-dir`` (journaled in sqlite before it is answered)
    against one to a server in memory: the server's own work, through the same method its
    ASGI app calls for every QStash API request, without the HTTP round trip around it
    (``benchmarks/server.py`` times that too)."""
    from pytest_qstash.server.control.app import QStashServerApp, ServerSettings
    from pytest_qstash.server.datadir.persistence import DataDir

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
    from pytest_qstash.server.control.records import LISTS

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
            absolute=True,
        )


def steps(report: Report, mode: Mode) -> list[Step]:
    publishes = {"full": (100, 21), "ci": (50, 9), "smoke": (10, 2)}[mode]
    found: list[Step] = [
        ("9", f"<= {PERSISTED_PUBLISH_BUDGET:g}x", lambda: persisted_publish(report, *publishes))
    ]
    if mode != "ci":  # an absolute bound, and a minute of restarts
        messages = 20_000 if mode == "full" else 1_500
        found.append(("11", "<= 2 s", lambda: data_dir_restart(report, messages)))
    return found
