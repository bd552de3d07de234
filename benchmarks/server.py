"""Server mode beside in-process: what going over real HTTP costs.

    python benchmarks/server.py            # a few rounds, prints the table (about a minute)
    python benchmarks/server.py --smoke    # tiny sizes: proves it runs

Figures, each timed in alternating rounds with what it is compared to, medians shown:

- publishes per second with the real sync SDK (``QStash.message.publish_json``): to
  ``pytest-qstash serve`` on loopback, beside the same calls answered by an active
  ``FakeQStash`` in the process, and beside a server keeping its state on disk
  (``--data-dir``: each publish journaled in sqlite before it is answered);
- deliveries per second into a trivial Starlette app: the server delivering over HTTP to the
  app under uvicorn in its own process (``tick()`` through the control API), beside a
  ``FakeQStash`` delivering in-process to the same app mounted, and beside a ``FakeQStash``
  delivering over HTTP to the uvicorn app (an unmounted loopback URL): the last isolates the
  cost of the HTTP hop from the server's own;
- the same server deliveries beside pooled sequential POSTs of the same bodies from one
  ``httpx.Client`` to the same app: the server delivers concurrently, so it should beat them
  (``benchmarks/run.py`` judges this one, budget 8);
- real-clock lateness under load: messages published at a steady rate, each due one second
  after its publish, and how late each reached the app (its arrival by the wall clock beside
  the message's due time), p50 and p95 (``benchmarks/run.py`` judges the p95, budget 8).

One budget: a publish to a server with ``--data-dir`` costs at most 1.3 times one to a server in
memory (the median of the per-round ratios; exit 1 when missed, ``--smoke`` judges nothing).
The servers and the app are child processes on this machine, competing for its cores with this
one. The other figures are informational here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_qstash.engine.account import DEFAULT_ENV

for _name, _value in DEFAULT_ENV.items():
    os.environ.setdefault(_name, _value)

import httpx  # noqa: E402
from qstash import QStash  # noqa: E402

from pytest_qstash import FakeQStash  # noqa: E402
from pytest_qstash.server import AppProcess, ServerProcess  # noqa: E402
from pytest_qstash.server.runner.pools import OriginPools  # noqa: E402

HERE = Path(__file__).resolve().parent
#: A publish journaled on disk against one in memory.
PERSISTED_PUBLISH_BUDGET = 1.3


def timed(run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def _check(made: list[Any], n: int) -> None:
    if len(made) != n or not all(d.status == 200 for d in made):
        raise RuntimeError(f"expected {n} deliveries answered 200, got {made[:3]}...")


def rounds_of(cases: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(rounds):
        order = list(cases) if r % 2 == 0 else list(reversed(cases))
        for name in order:
            samples[name].append(cases[name]())
    return samples


def concurrent_deliveries(app: AppProcess, n: int, rounds: int) -> dict[str, list[float]]:
    """Seconds per round: ``server``, one tick of ``n`` messages from a virtual-clock server
    into the app under uvicorn; ``sequential``, ``n`` POSTs of the same bodies, one after the
    other, from one ``httpx.Client`` keeping its connection alive."""
    server = ServerProcess.start(clock="virtual", args=["--credentials-from-env"])
    try:
        publisher = QStash(server.token, base_url=server.url, retry=False)
        hook = f"{app.url}/hook"

        def deliver() -> float:
            server.reset()
            for i in range(n):
                publisher.message.publish_json(url=hook, body={"i": i})
            started = time.perf_counter()
            made = server.tick()
            took = time.perf_counter() - started
            _check(made, n)
            return took

        with httpx.Client() as client:

            def sequential() -> float:
                started = time.perf_counter()
                for i in range(n):
                    answer = client.post(hook, json={"i": i})
                    answer.raise_for_status()
                return time.perf_counter() - started

            sequential()  # warm-up: the connection opened, the app's first request served
            return rounds_of({"server": deliver, "sequential": sequential}, rounds)
    finally:
        server.stop()


def lateness_under_load(app: AppProcess, rate: float, seconds: float) -> list[float]:
    """Milliseconds each message reached the app after its due time, on a real-clock server
    taking ``rate`` publishes a second for ``seconds``, each message due one second after its
    publish (so deliveries fall due while the publishes keep coming)."""
    server = ServerProcess.start(clock="real", args=["--credentials-from-env"])
    try:
        httpx.delete(f"{app.url}/arrivals")
        n = max(1, round(rate * seconds))
        asyncio.run(_publish_at(rate, n, server, f"{app.url}/late"))
        deadline = time.monotonic() + 30 + seconds
        while True:
            arrivals: dict[str, float] = httpx.get(f"{app.url}/arrivals").json()
            if len(arrivals) >= n:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(arrivals)} of {n} messages arrived within the wait")
            time.sleep(0.2)
        due = {m.message_id: m.not_before.timestamp() for m in server.messages}
        return sorted((arrivals[mid] - due[mid]) * 1000 for mid in arrivals)
    finally:
        server.stop()


async def _publish_at(rate: float, n: int, server: ServerProcess, url: str) -> None:
    """Publish ``n`` messages at ``rate`` a second, each on its own schedule (a slow answer
    does not hold the next publish back). Over the server's own HTTP/1.1 connection pool: an
    ``httpx.AsyncClient`` costs this process more CPU time than the server spends on a
    publish, and the figure is the server's."""
    publish_url = f"{server.url}/v2/publish/{url}"
    headers = {
        "Authorization": f"Bearer {server.token}",
        "Upstash-Delay": "1s",
        "Content-Type": "application/json",
    }
    pools = OriginPools()

    async def publish(i: int) -> None:
        request = httpx.Request("POST", publish_url, headers=headers, content=b'{"i":%d}' % i)
        answer = await pools.send(request)
        answer.raise_for_status()

    loop = asyncio.get_running_loop()
    began = loop.time()
    tasks = []
    try:
        for i in range(n):
            wait = began + i / rate - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(loop.create_task(publish(i)))
        await asyncio.gather(*tasks)
    finally:
        await pools.aclose()


def percentile(values: list[float], fraction: float) -> float:
    """The value below which ``fraction`` of the sorted ``values`` fall (nearest rank)."""
    return values[min(len(values) - 1, max(0, round(fraction * len(values)) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; judges nothing")
    args = parser.parse_args()
    n, rounds = (20, 2) if args.smoke else (200, 5)
    rate, seconds = (50, 1.0) if args.smoke else (300, 5.0)

    os.environ.pop("QSTASH_URL", None)
    server = ServerProcess.start(clock="virtual", args=["--credentials-from-env"])
    data_dir = tempfile.TemporaryDirectory()
    persisted = ServerProcess.start(
        clock="virtual", args=["--credentials-from-env", "--data-dir", data_dir.name]
    )
    os.environ["QSTASH_URL"] = server.url  # the app's SDK publishes nowhere here; harmless
    app = AppProcess.start("server_app:app", cwd=HERE)
    del os.environ["QSTASH_URL"]
    try:
        remote = QStash(server.token, base_url=server.url, retry=False)
        on_disk = QStash(persisted.token, base_url=persisted.url, retry=False)
        local = QStash(os.environ["QSTASH_TOKEN"], retry=False)
        hook = f"{app.url}/hook"
        import server_app

        def publish_remote() -> float:
            server.reset()
            return timed(
                lambda: [remote.message.publish_json(url=hook, body={"i": i}) for i in range(n)]
            )

        def publish_persisted() -> float:
            persisted.reset()
            return timed(
                lambda: [on_disk.message.publish_json(url=hook, body={"i": i}) for i in range(n)]
            )

        def publish_local() -> float:
            with FakeQStash(freeze_time=False):
                return timed(
                    lambda: [local.message.publish_json(url=hook, body={"i": i}) for i in range(n)]
                )

        def deliver_remote() -> float:
            server.reset()
            for i in range(n):
                remote.message.publish_json(url=hook, body={"i": i})
            started = time.perf_counter()
            made = server.tick()
            took = time.perf_counter() - started
            _check(made, n)
            return took

        def deliver_local(mounted: bool) -> Callable[[], float]:
            def run() -> float:
                with FakeQStash(freeze_time=False) as fake:
                    if mounted:
                        fake.mount(app.url, server_app.app)
                    for i in range(n):
                        local.message.publish_json(url=hook, body={"i": i})
                    started = time.perf_counter()
                    made = fake.tick()
                    took = time.perf_counter() - started
                _check(made, n)
                return took

            return run

        sys.path.insert(0, str(HERE))
        publishes = rounds_of(
            {
                "server": publish_remote,
                "server, --data-dir": publish_persisted,
                "in-process": publish_local,
            },
            rounds,
        )
        deliveries = rounds_of(
            {
                "server (HTTP to the app's process)": deliver_remote,
                "in-process, app mounted": deliver_local(mounted=True),
                "in-process, HTTP to the app's process": deliver_local(mounted=False),
            },
            rounds,
        )
        against_sequential = concurrent_deliveries(app, n, rounds)
        late = lateness_under_load(app, rate, seconds)
    finally:
        app.stop()
        server.stop()
        persisted.stop()
        data_dir.cleanup()

    print(f"{n} messages per round, {rounds} rounds, medians; Python {sys.version.split()[0]}")
    print(f"{'figure':<58} {'per second':>12} {'per call':>10}")
    for title, samples in (("publish_json", publishes), ("deliveries", deliveries)):
        for name, times in samples.items():
            median = statistics.median(times)
            print(f"{title + ', ' + name:<58} {n / median:>12,.0f} {median / n * 1e3:>8.2f}ms")
    for name, times in against_sequential.items():
        median = statistics.median(times)
        title = f"deliveries, {name} (HTTP to the app's process)"
        print(f"{title:<58} {n / median:>12,.0f} {median / n * 1e3:>8.2f}ms")
    print(
        f"real-clock lateness at {rate}/s for {seconds:g} s: p50 {percentile(late, 0.5):.0f} ms, "
        f"p95 {percentile(late, 0.95):.0f} ms, max {late[-1]:.0f} ms ({len(late)} messages)"
    )
    ratio = statistics.median(
        disk / memory
        for disk, memory in zip(publishes["server, --data-dir"], publishes["server"], strict=True)
    )
    verdict = "ran" if args.smoke else ("PASS" if ratio <= PERSISTED_PUBLISH_BUDGET else "FAIL")
    print(
        f"publish_json, --data-dir vs in memory: {ratio:.2f}x "
        f"(budget <= {PERSISTED_PUBLISH_BUDGET:g}x): {verdict}"
    )
    return 1 if verdict == "FAIL" else 0


if __name__ == "__main__":
    sys.exit(main())
