"""Budgets 2 and 8 against their peers: the ``qstash`` fixture against pytest-httpx's
``httpx_mock`` (``fixture_cost.py``), and a publish over the server against a pooled POST to a
bare uvicorn app (``publish_cost.py``). Both scripts also run on their own."""

from __future__ import annotations

import fixture_cost
import publish_cost
from bench import Mode, Report, Step


def steps(report: Report, mode: Mode) -> list[Step]:
    tests = {"smoke": 30, "ci": 200, "full": 400}[mode]
    found: list[Step] = [("2", "<= 3x", lambda: fixture_cost.check(report, tests))]
    if mode != "ci":  # over real sockets: informational, and too slow for the short pass
        size = (20, 2) if mode == "smoke" else (300, 7)
        found.append(("8", "info", lambda: publish_cost.check(report, *size)))
    return found
