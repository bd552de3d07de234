"""Modules that moved into a layer's folder still import at their old paths, with a warning
naming the new place, and give the very module (not a copy)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from pytest_qstash import _moved
from pytest_qstash.testing import fake as fake_module


def test_an_old_module_path_gives_the_module_at_its_new_place() -> None:
    sys.modules.pop("pytest_qstash.fake", None)
    with pytest.warns(
        DeprecationWarning, match=r"pytest_qstash\.fake moved to pytest_qstash\.testing\.fake"
    ):
        old = importlib.import_module("pytest_qstash.fake")
    assert old is fake_module
    assert old.FakeQStash is fake_module.FakeQStash


def test_a_module_of_a_renamed_package_imports_from_its_old_path() -> None:
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    from pytest_qstash.state.models import Message\n"
        "    from pytest_qstash.api import handle\n"
        "from pytest_qstash.engine.models import Message as Same\n"
        "from pytest_qstash.wire.api import handle as same_handle\n"
        "assert Message is Same and handle is same_handle\n"
        "for warning in seen:\n"
        "    print(warning.category.__name__, warning.message)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(
        "DeprecationWarning pytest_qstash.state moved to pytest_qstash.engine; import it from there"
    )
    assert any(line.startswith("DeprecationWarning pytest_qstash.api moved to") for line in lines)


def test_every_old_path_names_a_module_that_exists() -> None:
    for new in [*_moved.MOVED_MODULES.values(), *_moved.MOVED_PACKAGES.values()]:
        assert importlib.util.find_spec(new) is not None, new


def test_names_that_never_moved_are_left_to_the_ordinary_finders() -> None:
    assert _moved.new_place("pytest_qstash.engine.store") is None
    assert _moved.new_place("pytest_qstash.plugin") is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("pytest_qstash.no_such_module")


def test_the_module_keeps_its_own_spec_after_an_old_path_import() -> None:
    sys.modules.pop("pytest_qstash.query", None)
    with pytest.warns(DeprecationWarning, match="pytest_qstash.query moved"):
        importlib.import_module("pytest_qstash.query")
    from pytest_qstash.testing import query

    assert query.__spec__ is not None
    assert query.__spec__.name == "pytest_qstash.testing.query"
    assert query.__spec__.parent == query.__package__
