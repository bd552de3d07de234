"""The pytest plugin (the ``pytest11`` entry point): the hooks, fixtures and marker of
``testing/pytest_layer.py``, named here.

pytest rewrites the assertions of the module an entry point names, at each start of a run
that cannot keep its cache (``PYTHONDONTWRITEBYTECODE``, a read-only checkout): so that module
is this one, a few lines, and the layer itself is loaded as plain Python.
"""

from __future__ import annotations

from .testing.pytest_layer import (
    MARKER_OPTIONS,
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_load_initial_conftests,
    pytest_report_header,
    pytest_runtest_makereport,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_unconfigure,
    qstash,
    qstash_apps,
    qstash_fake,
)

__all__ = [
    "MARKER_OPTIONS",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_load_initial_conftests",
    "pytest_report_header",
    "pytest_runtest_makereport",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
    "pytest_unconfigure",
    "qstash",
    "qstash_apps",
    "qstash_fake",
]
