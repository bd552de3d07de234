from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_qstash.server import NodeApp, NodeUnavailable, ServerProcess, install_node_packages

APP_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def qstash_server_options() -> dict[str, Any]:
    # The reminder example's options: `pytest examples` runs both examples in one session, and
    # the session's one server starts with the options of the first test that asks for it,
    # whichever example's that is (in random order, either).
    return {"start": "2027-01-04T09:00:00Z"}


@pytest.fixture(scope="session")
def orders(qstash_server: ServerProcess) -> Iterator[NodeApp]:
    """The order service under Node, in its own process, on a free port, talking to the
    server the ``qstash_server`` fixture started (``QSTASH_URL``, the session's token and
    signing keys). Its packages are installed from package-lock.json on first use; without
    Node or the npm registry, the tests are skipped and say why (in CI, where ``CI=true``, they
    fail: CI installs Node's packages, and a run must not go green by skipping)."""
    try:
        install_node_packages(APP_DIR)
    except NodeUnavailable as exc:
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(f"required in CI: the Node example needs Node: {exc}", pytrace=False)
        pytest.skip(f"the Node example needs Node: {exc}")
    with NodeApp.start_script(APP_DIR / "orders.mjs", cwd=APP_DIR) as app:
        yield app


@pytest.fixture(autouse=True)
def _fresh(qstash_server: ServerProcess) -> None:
    # One server for the session: forget what the last test left.
    qstash_server.reset()
