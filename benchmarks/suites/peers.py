"""Budgets 2 and 8 against their peers: the ``qstash`` fixture against pytest-httpx's
``httpx_mock`` (``fixture_cost.py``), and a publish over the server against a pooled POST to a
bare uvicorn app (``publish_cost.py``). Both scripts also run on their own."""

from __future__ import annotations

import fixture_cost
import publish_cost
from bench import Mode, Report, Step


def steps(report: Report, mode: Mode) -> list[Step]:
    # Neither in CI's short pass: httpx_mock's cost is a tenth of a millisecond, so a shared
    # machine's noise moves the fixture's ratio by half of itself (2.5x idle, 3.8-5.5x at a
    # load of 8); the publish runs over real sockets, informational and slow.
    if mode == "ci":
        return []
    tests, size = (30, (20, 2)) if mode == "smoke" else (400, (300, 7))
    return [
        ("2", "<= 3x", lambda: fixture_cost.check(report, tests)),
        ("8", "info", lambda: publish_cost.check(report, *size)),
    ]
