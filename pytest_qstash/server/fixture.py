"""The ``qstash_server`` fixture: one server per test session (per pytest-xdist worker).

Registered as a pytest plugin of its own (entry point ``qstash_server``) so that the
in-process plugin does not grow with it; it imports nothing of the server until used.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from .process import ENV_NAMES, ServerProcess


@pytest.fixture(scope="session")
def qstash_server_options() -> dict[str, Any]:
    """Override (session scope) to start the server otherwise: ``clock`` ("virtual"),
    ``start`` (an ISO 8601 moment), ``seed``, ``args`` (more ``serve`` options)."""
    return {}


@pytest.fixture(scope="session")
def qstash_server(qstash_server_options: dict[str, Any]) -> Iterator[ServerProcess]:
    """A ``pytest-qstash serve`` on a free loopback port, on a virtual clock, for the whole
    session. It takes the session's ``QSTASH_TOKEN`` and signing keys (an app module imported
    earlier keeps working) and ``QSTASH_URL`` is set in ``os.environ`` meanwhile, so the app
    processes a test starts talk to it. It has the fixture's verbs
    and lists (``tick``, ``advance``, ``drain``, ``messages``, ``deliveries``, ...) and
    ``reset()`` to forget what earlier tests left."""
    options = {"clock": "virtual", **qstash_server_options}
    options["args"] = ["--credentials-from-env", "--stop-with-parent", *options.get("args", ())]
    server = ServerProcess.start(**options)
    saved = {name: os.environ.get(name) for name in ENV_NAMES}
    os.environ.update(server.env)
    try:
        yield server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.stop()
