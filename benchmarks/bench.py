"""What every benchmark suite shares: the environment, the results table, timing side by side.

A suite (``suites/<name>.py``) measures its figures into a ``Report``; ``run.py`` runs them.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

# The environment the pytest plugin sets before collection; apps (and the SDKs) read it.
from pytest_qstash.engine.account import DEFAULT_ENV

for _name, _value in DEFAULT_ENV.items():
    os.environ.setdefault(_name, _value)

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import PlainTextResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from pytest_qstash.testing.appclock import make_app_clock  # noqa: E402

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


HERE = Path(__file__).resolve().parent


# -- results --------------------------------------------------------------------------------
@dataclass
class Row:
    figure: str
    ours: str
    baseline: str
    ratio: str
    budget: str
    status: str  # PASS, FAIL, INFO (no budget), SKIP (cannot be measured yet), ran (smoke)


#: How a run judges: ``full`` every budget, ``ci`` only the ratio budgets (a short pass, on a
#: shared machine: a ratio is timed side by side with its baseline, so a busy machine slows
#: both alike, while an absolute bound is the machine's as much as ours), ``smoke`` nothing.
Mode = Literal["full", "ci", "smoke"]
#: A suite's figures: (budget number, budget as shown, what measures them into the report).
Step = tuple[str, str, Callable[[], object]]


class Report:
    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.rows: list[Row] = []

    def check(
        self,
        figure: str,
        ours: str,
        baseline: str,
        ratio: float | None,
        budget: str,
        ok: bool | None,
        *,
        absolute: bool = False,
    ) -> None:
        """``ok`` None: informational. ``absolute``: a bound in time (or bytes) rather than a
        ratio to a baseline measured beside it; judged in full runs only. In smoke runs
        nothing is judged."""
        if self.mode == "smoke":
            status = "ran"
        elif ok is None or (absolute and self.mode == "ci"):
            status = "INFO"
        else:
            status = "PASS" if ok else "FAIL"
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        self.rows.append(Row(figure, ours, baseline, shown, budget, status))

    def note_attempts(self, first: int, attempts: int) -> None:
        """The rows from ``first`` on were measured on the last of ``attempts`` tries."""
        for index in range(first, len(self.rows)):
            row = self.rows[index]
            self.rows[index] = replace(row, status=f"{row.status} ({attempts} tries)")

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
        return any(r.status.split()[0] in ("FAIL", "ERROR") for r in self.rows)


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


def default_app_clock() -> str:
    """The backend ``"auto"`` picks (it decides as it starts)."""
    probe = make_app_clock("auto")
    probe.start(0)
    name: str = getattr(probe, "backend", probe.name)
    probe.stop()
    return name


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
