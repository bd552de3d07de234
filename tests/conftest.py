"""Generic fixtures shared by the test modules (specific helpers live next to their tests)."""

from __future__ import annotations

import os

import pytest

# A plugin of the suite (below) that test helpers import too: rewritten before they do.
pytest.register_assert_rewrite("ci_requirements")

from apps import WebApp  # noqa: E402
from qstash import AsyncQStash, QStash  # noqa: E402
from reliability_apps import BASE, make_app  # noqa: E402

from pytest_qstash import FakeQStash  # noqa: E402

# node_support: the TypeScript SDK fixtures (node_app, node), for the tests that ask for them;
# replay_order: a failing test's report names the tests that ran before it, to replay them;
# ci_requirements: in CI, a skip that is not by design fails.
pytest_plugins = ["pytester", "node_support", "replay_order", "ci_requirements"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# Session-wide, as apps keep module-level clients; building an httpx client costs ~40 ms.
# retry=False: a request that escaped the fake must fail at once, not sleep and retry.
@pytest.fixture(scope="session")
def client() -> QStash:
    """The sync SDK as an app builds it (token from the environment the plugin set)."""
    return QStash(os.environ["QSTASH_TOKEN"], retry=False)


@pytest.fixture(scope="session")
def aclient() -> AsyncQStash:
    return AsyncQStash(os.environ["QSTASH_TOKEN"], retry=False)


@pytest.fixture
def shop(qstash: FakeQStash) -> WebApp:
    """The reliability tests' FastAPI app (``reliability_apps.make_app``), mounted at BASE."""
    app = make_app()
    qstash.mount(BASE, app.app)
    return app


@pytest.fixture(autouse=True)
def _no_django_settings_for_inner_sessions(request: pytest.FixtureRequest) -> None:
    """tests/test_django.py names its Django project in the environment (django-qstash finds
    its tasks there): a pytest session a test starts, pytest-django among its plugins, must
    not take that project for its own."""
    if "pytester" in request.fixturenames and "DJANGO_SETTINGS_MODULE" in os.environ:
        request.getfixturevalue("monkeypatch").delenv("DJANGO_SETTINGS_MODULE")
