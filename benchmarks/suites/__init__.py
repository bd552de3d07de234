"""The benchmark suites ``run.py`` runs, in this order: one module per subject, each with
``steps(report, mode)`` returning its figures' steps at that mode's sizes (none where the mode
leaves the suite out). A new suite is a module here with that function, named below."""

from __future__ import annotations

from . import (
    clock,
    data_dir,
    deliver,
    fixture,
    memory,
    peers,
    scaling,
    server_mode,
    simulation,
    startup,
    workflows,
)

SUITES = (
    deliver,
    fixture,
    peers,
    clock,
    memory,
    workflows,
    server_mode,
    data_dir,
    scaling,
    startup,
    simulation,
)
