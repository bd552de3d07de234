from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_qstash import FakeQStash

with warnings.catch_warnings():
    # Recent Starlette asks TestClient users to move to the httpx2 package; not our concern here.
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

# The app is a plain module next to tests/, not an installed package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@pytest.fixture
def qstash_apps() -> dict[str, Any]:
    import signup_app

    # Deliveries to https://signup.example.com/... go straight into the ASGI app.
    return {signup_app.BASE_URL: signup_app.app}


@pytest.fixture(autouse=True)
def _fresh_app_state() -> Iterator[None]:
    import signup_app

    signup_app.reset()
    yield
    signup_app.reset()


@pytest.fixture
def client(qstash: FakeQStash) -> Iterator[TestClient]:
    # Depends on `qstash`: the fake must exist before the app starts (a `with TestClient`
    # block runs its lifespan, where an app may create schedules or publish).
    import signup_app

    with TestClient(signup_app.app, base_url=signup_app.BASE_URL) as client:
        yield client
