"""Modules that moved into a layer's folder stay importable under their old names, deprecated.

``import pytest_qstash.fake`` (or ``from pytest_qstash.state.models import Message``) gives the
module at its new place and warns once; the names users rely on are the package's own
(``pytest_qstash.FakeQStash``, ...), which never moved.
"""

from __future__ import annotations

import importlib
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

# Whole packages renamed, then single modules moved.
MOVED_PACKAGES = {
    "pytest_qstash.api": "pytest_qstash.wire",
    "pytest_qstash.state": "pytest_qstash.engine",
}
MOVED_MODULES = {
    "pytest_qstash.api": "pytest_qstash.wire.api",
    "pytest_qstash.appclock": "pytest_qstash.testing.appclock",
    "pytest_qstash.compat": "pytest_qstash.intercept.compat",
    "pytest_qstash.durations": "pytest_qstash.engine.durations",
    "pytest_qstash.fake": "pytest_qstash.testing.fake",
    "pytest_qstash.hosts": "pytest_qstash.wire.hosts",
    "pytest_qstash.httpx2_support": "pytest_qstash.intercept.httpx2_support",
    "pytest_qstash.import_hook": "pytest_qstash.intercept.import_hook",
    "pytest_qstash.intercept": "pytest_qstash.intercept.router",
    "pytest_qstash.query": "pytest_qstash.testing.query",
    "pytest_qstash.regions": "pytest_qstash.wire.regions",
    "pytest_qstash.report": "pytest_qstash.testing.report",
    "pytest_qstash.server.app": "pytest_qstash.server.control.app",
    "pytest_qstash.server.apps": "pytest_qstash.server.processes.apps",
    "pytest_qstash.server.client": "pytest_qstash.server.control.client",
    "pytest_qstash.server.dashboard": "pytest_qstash.server.dashboard.routes",
    "pytest_qstash.server.dashboard_links": "pytest_qstash.server.dashboard.links",
    "pytest_qstash.server.dashboard_views": "pytest_qstash.server.dashboard.views",
    "pytest_qstash.server.datadir_codec": "pytest_qstash.server.datadir.codec",
    "pytest_qstash.server.deliveries": "pytest_qstash.server.runner.deliveries",
    "pytest_qstash.server.errors": "pytest_qstash.server.control.errors",
    "pytest_qstash.server.fastjson": "pytest_qstash.server.control.fastjson",
    "pytest_qstash.server.journal": "pytest_qstash.server.datadir.journal",
    "pytest_qstash.server.node": "pytest_qstash.server.processes.node",
    "pytest_qstash.server.persistence": "pytest_qstash.server.datadir.persistence",
    "pytest_qstash.server.pools": "pytest_qstash.server.runner.pools",
    "pytest_qstash.server.process": "pytest_qstash.server.processes.server",
    "pytest_qstash.server.records": "pytest_qstash.server.control.records",
    "pytest_qstash.server.reports": "pytest_qstash.server.control.reports",
    "pytest_qstash.server.snapshot": "pytest_qstash.server.datadir.snapshot",
    "pytest_qstash.server.verbs": "pytest_qstash.server.control.verbs",
    "pytest_qstash.session_routers": "pytest_qstash.intercept.session_routers",
    "pytest_qstash.sslcache": "pytest_qstash.intercept.sslcache",
    "pytest_qstash.step_failures": "pytest_qstash.testing.step_failures",
}


def new_place(name: str) -> str | None:
    """Where a module that moved is now, or None. A module whose old name is now its folder's
    (``pytest_qstash.intercept``) is that folder: it is not aliased."""
    if name in MOVED_MODULES:
        new = MOVED_MODULES[name]
        return None if new.startswith(name + ".") else new
    for old, new in MOVED_PACKAGES.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return None


class _Alias:
    """Loads an old name as the module at its new place."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        import warnings

        warnings.warn(
            f"{spec.name} moved to {self.new}; import it from there (or use the names "
            "pytest_qstash itself exports)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module is the one at its new place, already run. The import system has just
        given it the old name's spec: it gets its own back, or its relative imports would
        resolve against the old package (and warn that ``__package__`` is not its parent)."""
        module.__spec__ = self.spec


class _MovedFinder:
    """Finds the old names of moved modules, after every other finder had its turn."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> ModuleSpec | None:
        if not fullname.startswith("pytest_qstash."):
            return None
        new = new_place(fullname)
        if new is None or new == fullname:
            return None
        return ModuleSpec(fullname, _Alias(new))  # type: ignore[arg-type]


def install() -> None:
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        # First: a moved package's submodule would otherwise be found again, as a copy, on the
        # package's new __path__.
        sys.meta_path.insert(0, _MovedFinder())
