"""Budget 12: seeded fault simulation, what a simulated test costs and how small its failure
shrinks (``simulation_cost.py``, which also runs on its own)."""

from __future__ import annotations

import simulation_cost
from bench import Mode, Report, Step


def steps(report: Report, mode: Mode) -> list[Step]:
    # Both in CI's short pass: the cost is a ratio of two kinds of item taking turns in one
    # session (a busy machine slows both alike; 1.26-1.32x from one session to the next, at
    # its bound, so a try misses now and then and is measured again), and the shrink is a
    # count, the same on every machine. About 10 s together: three pytest sessions.
    tests, sessions, seeds = {
        "full": (50, 3, simulation_cost.SEARCHED),
        "ci": (50, 1, simulation_cost.SEARCHED),
        "smoke": (5, 1, 10),
    }[mode]
    cost = f"<= {simulation_cost.COST_BUDGET:g}x"
    shrink = f"<= {simulation_cost.MAX_RERUNS} re-runs, {simulation_cost.SMALLEST} fault"
    return [
        ("12", cost, lambda: simulation_cost.check_cost(report, tests, sessions)),
        ("12", shrink, lambda: simulation_cost.check_shrink(report, seeds)),
    ]
