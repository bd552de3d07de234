from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

# The app is a plain module next to tests/, not an installed package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@pytest.fixture
def qstash_apps() -> dict[str, Any]:
    import orders_app

    # Deliveries to https://orders.example.com/... go straight into the WSGI app. In testing
    # mode Flask lets a worker's bug raise out of tick(), instead of hiding it as a 500.
    orders_app.app.testing = True
    return {orders_app.BASE_URL: orders_app.app}


@pytest.fixture(autouse=True)
def _fresh_app_state() -> Iterator[None]:
    import orders_app

    orders_app.reset()
    yield
    orders_app.reset()


@pytest.fixture
def client() -> FlaskClient:
    import orders_app

    return orders_app.app.test_client()
