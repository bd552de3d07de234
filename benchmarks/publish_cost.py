"""A publish over the server against the HTTP round trip it cannot avoid.

    python benchmarks/publish_cost.py           # 300 publishes a round, 7 rounds
    python benchmarks/publish_cost.py --smoke   # tiny sizes: proves it runs

One pooled ``httpx.Client`` sends, in alternating rounds, ``n`` publishes (what the SDK's
``publish_json`` sends: ``POST /v2/publish/<url>`` with a JSON body and a bearer token) to
``pytest-qstash serve --clock virtual`` on loopback, and ``n`` POSTs of the same bodies to a
trivial Starlette app under uvicorn (``server_app:app``), the floor: an HTTP server in its own
process that reads the body and answers. The figure is the median of the per-round ratios,
per request; the goal is at most 1.3x (what the server adds to the round trip: authentication,
the engine, the journal-less answer). Informational: shown, not judged, as both sides need a
core to spare.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Protocol

from pytest_qstash.engine.account import DEFAULT_ENV

for _name, _value in DEFAULT_ENV.items():
    os.environ.setdefault(_name, _value)

import httpx  # noqa: E402

from pytest_qstash.server import AppProcess, ServerProcess  # noqa: E402

HERE = Path(__file__).resolve().parent
GOAL = 1.3


class Report(Protocol):
    def check(
        self,
        figure: str,
        ours: str,
        baseline: str,
        ratio: float | None,
        budget: str,
        ok: bool | None,
    ) -> None: ...

    def skip(self, figure: str, why: str, budget: str) -> None: ...


def measure(n: int, rounds: int) -> tuple[float, float, float]:
    """Per request: the median publish to the server, the median POST to the bare app, and
    the median of the per-round ratios."""
    os.environ.pop("QSTASH_URL", None)
    server = ServerProcess.start(clock="virtual", args=["--credentials-from-env"])
    app = AppProcess.start("server_app:app", cwd=HERE)
    body = b'{"order": 7, "items": ["a", "b"]}'
    try:
        hook = f"{app.url}/hook"
        publish_url = f"{server.url}/v2/publish/{hook}"
        headers = {
            "Authorization": f"Bearer {server.token}",
            "Content-Type": "application/json",
            "Upstash-Method": "POST",
        }
        with httpx.Client() as client:

            def publishes() -> float:
                server.reset()
                began = time.perf_counter()
                for _ in range(n):
                    client.post(publish_url, content=body, headers=headers).raise_for_status()
                return (time.perf_counter() - began) / n

            def floor() -> float:
                began = time.perf_counter()
                for _ in range(n):
                    client.post(hook, content=body, headers=headers).raise_for_status()
                return (time.perf_counter() - began) / n

            publishes(), floor()  # connections open, code warm
            ours: list[float] = []
            bare: list[float] = []
            for index in range(rounds):
                pair = (publishes, floor) if index % 2 == 0 else (floor, publishes)
                timed = {case: case() for case in pair}
                ours.append(timed[publishes])
                bare.append(timed[floor])
    finally:
        app.stop()
        server.stop()
    ratios = [o / b for o, b in zip(ours, bare, strict=True)]
    return statistics.median(ours), statistics.median(bare), statistics.median(ratios)


def check(report: Report, n: int, rounds: int) -> None:
    """The figure as a row of ``benchmarks/run.py``'s table (informational)."""
    figure = f"8. publish over the server vs a bare uvicorn round trip ({rounds} x {n})"
    if importlib.util.find_spec("uvicorn") is None:
        report.skip(figure, "uvicorn is not installed", f"goal <= {GOAL:g}x")
        return
    ours, bare, ratio = measure(n, rounds)
    report.check(
        figure,
        f"{ours * 1e6:.0f} us",
        f"{bare * 1e6:.0f} us bare POST",
        ratio,
        f"goal <= {GOAL:g}x",
        None,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    args = parser.parse_args()
    n, rounds = (20, 2) if args.smoke else (300, 7)
    ours, bare, ratio = measure(n, rounds)
    print(
        f"publish over the server {ours * 1e6:.0f} us, bare uvicorn POST {bare * 1e6:.0f} us: "
        f"{ratio:.2f}x (goal <= {GOAL:g}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
