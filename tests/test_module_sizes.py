"""The package reads like its folders: the root holds its entry points only, and no module (of
the package or of the benchmarks) is so long that a newcomer cannot hold it in mind. A module
that grows past the bound is split along a seam, not exempted here."""

from __future__ import annotations

from pathlib import Path

import pytest_qstash

PACKAGE = Path(pytest_qstash.__file__).parent
BENCHMARKS = PACKAGE.parent / "benchmarks"
#: The package root's modules: the public names, the errors, the pytest plugin, ``python -m``
#: and the old module paths. Everything else lives in a layer's folder.
ROOT_MODULES = {"__init__.py", "__main__.py", "_moved.py", "errors.py", "plugin.py"}
MOST_LINES = 600


def test_the_package_root_holds_its_entry_points_only() -> None:
    assert {path.name for path in PACKAGE.glob("*.py")} == ROOT_MODULES


def test_no_module_is_over_the_bound() -> None:
    paths = [*PACKAGE.rglob("*.py"), *BENCHMARKS.rglob("*.py")]
    assert len(paths) > 100  # the package and the benchmarks, found where they are
    long = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in paths
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MOST_LINES
    }
    assert long == {}, f"over {MOST_LINES} lines (split each along a seam): {long}"
