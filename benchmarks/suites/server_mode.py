"""Budgets 8 and 10: the server delivering into an app, lateness, a dashboard left open."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
from pathlib import Path

from bench import (
    HERE,
    Mode,
    Report,
    Samples,
    Step,
    ms,
)

# -- 8. server mode -------------------------------------------------------------------------
#: Real-clock lateness budget: the p95 of how late a due message reaches the app. Absolute:
#: lateness is measured against each message's due time itself, which is its own baseline
#: (no other process could be late "less"); 100 ms is what a user of a real-clock server
#: notices, and it is judged only with a core to spare.
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
        absolute=True,
    )
    report.check(
        f"10. server growth, {bigs} answers of {big / 2**20:g} MiB into the DLQ",
        f"{found['growth_mb']:.1f} MB",
        f"{bigs * big / 1e6:,.0f} MB answered",
        found["growth_mb"] * 1e6 / (bigs * big),
        f"< {dashboard_bench.GROWTH_BUDGET_MB:.0f} MB",
        found["growth_mb"] < dashboard_bench.GROWTH_BUDGET_MB,
        absolute=True,
    )
    watched = found["p95_watched"] / found["p95_alone"]
    report.check(
        f"10. publish p95 with 3 dashboard tabs polling ({publishes} publishes)",
        ms(found["p95_watched"]),
        f"{ms(found['p95_alone'])} without tabs",
        watched,
        f"<= {dashboard_bench.PUBLISH_P95_BUDGET:g}x",
        watched <= dashboard_bench.PUBLISH_P95_BUDGET,
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

    with AppProcess.start("server_app:app", cwd=HERE) as app:
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
        absolute=True,
    )


def steps(report: Report, mode: Mode) -> list[Step]:
    # Not in CI: three processes at once, judged only with a core to spare.
    if mode == "ci":
        return []
    full = mode == "full"
    server = (200, 7, 300, 5.0) if full else (20, 2, 50, 1.0)
    # pending, body, big answer, answers, publishes
    dashboard = (100, 2**20, 20 * 2**20, 3, 300) if full else (5, 2**16, 2**21, 1, 20)
    return [
        ("8", ">= 1x", lambda: server_mode(report, *server)),
        ("10", "< 2 MB", lambda: dashboard_cost(report, dashboard)),
    ]
