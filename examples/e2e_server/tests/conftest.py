from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from pytest_qstash.server import AppProcess, ServerProcess

APP_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def qstash_server_options() -> dict[str, Any]:
    # A fixed start for the server's virtual clock: the digest's 08:00 firing falls where the
    # tests expect it, whatever the hour they run at.
    return {"start": "2027-01-04T09:00:00Z"}


@pytest.fixture(scope="session")
def reminders(qstash_server: ServerProcess) -> Iterator[AppProcess]:
    """The service under uvicorn in its own process, on a free port. The ``qstash_server``
    fixture started pytest-qstash's server first and set ``QSTASH_URL`` (the token and signing
    keys are the session's), so the app's SDK and ``Receiver`` talk to that server."""
    with AppProcess.start("reminders_app:app", cwd=APP_DIR) as app:
        yield app


@pytest.fixture(autouse=True)
def _fresh(qstash_server: ServerProcess, reminders: AppProcess) -> None:
    # One server and one app for the session: forget the messages the last test left, and
    # keep what the app provisioned at start-up (its digest schedule), as a restart would not.
    qstash_server.reset(keep=["schedules"])
    requests.delete(f"{reminders.url}/sent", timeout=10).raise_for_status()
