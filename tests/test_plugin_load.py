"""The plugin costs nothing until a test asks for it: loading it imports no engine, respx or
httpx, and the session's guard still starts the moment httpx is imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: What loading the plugins must not import (their first use does).
HEAVY = (
    "httpx",
    "httpx2",
    "httpcore",
    "respx",
    "anyio",
    "trio",
    "jwt",
    "time_machine",
    "freezegun",
    "cronsim",
    "pytest_qstash.testing.fake",
    "pytest_qstash.wire.api",
    "pytest_qstash.delivery",
    "pytest_qstash.intercept.router",
    "pytest_qstash.testing.report",
    "pytest_qstash.engine.models",
    "pytest_qstash.engine.store",
    "pytest_qstash.server.processes.server",
    "pytest_qstash.server.control.client",
)

LOADED = """
import json, sys
import pytest
before = set(sys.modules)
import pytest_qstash.plugin, pytest_qstash.server.fixture
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_loading_the_plugins_imports_none_of_the_engine() -> None:
    out = subprocess.run(
        [sys.executable, "-c", LOADED], check=True, capture_output=True, text=True
    ).stdout
    loaded = json.loads(out)
    heavy = [m for m in loaded if any(m == h or m.startswith(f"{h}.") for h in HEAVY)]
    assert heavy == [], f"loading the plugins imported {heavy}"


def test_the_guard_starts_when_httpx_is_first_imported(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    # Only our two plugins: nothing else imports httpx before the app fixture does.
    pytester.makepyfile(
        """
        import os
        import sys

        import pytest


        def test_nothing_loaded_yet():
            assert "httpx" not in sys.modules and "respx" not in sys.modules


        @pytest.fixture
        def app_started_before_qstash():
            from qstash import QStash  # the first import of httpx, in a fixture
            from qstash.errors import QStashError

            client = QStash(os.environ["QSTASH_TOKEN"], retry=False)
            with pytest.raises(QStashError, match="reached QStash while no fake was active"):
                client.message.publish(url="https://app.test/startup")
            return client


        def test_app_fixture_before_the_fake(app_started_before_qstash):
            from pytest_qstash.intercept.router import KeepHttpxPatched, NetworkGuard

            assert NetworkGuard.running() is not None
            assert KeepHttpxPatched.running() is not None
            # httpx itself is as it would be without the hook: its own loader.
            import httpx

            assert type(httpx.__loader__).__name__ == "SourceFileLoader"
            assert httpx.__spec__.loader is httpx.__loader__


        @pytest.mark.qstash(start="2026-01-01T00:00:00Z")
        def test_the_marker_loads_the_fake(request):
            from qstash import QStash

            QStash(os.environ["QSTASH_TOKEN"], retry=False).message.publish(url="https://a.test/x")
            assert len(request.getfixturevalue("qstash").messages) == 1
        """
    )
    result = pytester.runpytest_subprocess(
        "-p",
        "pytest_qstash.plugin",
        "-p",
        "pytest_qstash.server.fixture",
        "-p",
        "no:randomly",
        "-W",
        "ignore::UserWarning",
    )
    result.assert_outcomes(passed=3)


def test_httpx_loaded_past_the_hook_is_caught_before_the_next_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another tool's finder, ahead of ours on sys.meta_path, loads httpx: the guard starts
    # before the next test's fixtures at the latest.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(
        """
        import importlib.machinery
        import sys


        class Ahead:
            def find_spec(self, name, path, target=None):
                if name == "httpx":
                    return importlib.machinery.PathFinder.find_spec(name, path, target)
                return None


        def test_import_httpx_in_a_test():
            sys.meta_path.insert(0, Ahead())
            import httpx  # noqa: F401

            from pytest_qstash.intercept.router import NetworkGuard

            assert NetworkGuard.running() is None  # our finder never saw the import


        def test_the_next_test_is_guarded():
            from pytest_qstash.intercept.router import NetworkGuard

            assert NetworkGuard.running() is not None
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "pytest_qstash.plugin", "-p", "no:randomly", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2)
