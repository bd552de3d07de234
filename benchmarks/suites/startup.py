"""Budget 7: what pytest start-up pays for pytest-qstash being installed."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import (
    Mode,
    Report,
    Step,
    interleaved,
    ms,
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


def steps(report: Report, mode: Mode) -> list[Step]:
    # Not in CI: a difference of differences of process start-ups, too noisy in a few rounds.
    if mode == "ci":
        return []
    rounds = 9 if mode == "full" else 1
    return [("7", "<= 0.5x", lambda: pytest_startup(report, rounds))]
