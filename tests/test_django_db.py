"""Django with a database: deliveries inside the test's transaction, through the mounts the docs
show (the WSGI and ASGI handlers themselves), with pytest-django.

Django's settings are per process, and pytest-django sets Django up for its whole session: the
checks in ``tests/django_db`` run in a pytest session of their own, once per database (a sqlite
file, and Postgres where one is given) and ``ATOMIC_REQUESTS`` setting. Postgres is the one at
the DSN in ``PYTEST_QSTASH_POSTGRES`` (``.ci/run`` starts a throwaway cluster and sets it); each
session creates and drops a test database of its own name, so sessions can run side by side.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import psycopg  # noqa: F401  # required test dependencies: a broken install fails here
import pytest
import pytest_django  # noqa: F401
from ci_requirements import POSTGRES as POSTGRES_CLUSTER
from ci_requirements import missing

CHECKS = Path(__file__).parent / "django_db"
POSTGRES = os.environ.get("PYTEST_QSTASH_POSTGRES", "")
DATABASES = ["sqlite", "postgres"]


def run_checks(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    module: str,
    database: str,
    *,
    atomic_requests: bool = False,
) -> pytest.RunResult:
    if database == "postgres" and not POSTGRES:
        missing(POSTGRES_CLUSTER, "PYTEST_QSTASH_POSTGRES names no cluster")
    shutil.copytree(CHECKS, pytester.path, dirs_exist_ok=True)
    pytester.makeini("[pytest]\nDJANGO_SETTINGS_MODULE = dbproject.settings\n")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    monkeypatch.setenv("DBPROJECT_DATABASE", database)
    monkeypatch.setenv("DBPROJECT_ATOMIC_REQUESTS", "1" if atomic_requests else "0")
    monkeypatch.setenv("DBPROJECT_DIR", str(pytester.path))
    monkeypatch.setenv("DBPROJECT_RUN", uuid.uuid4().hex[:12])
    # The outer run's options (workers, a random order) are not the inner one's.
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    return pytester.runpytest_subprocess(
        module,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:random_order",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
    )


@pytest.mark.parametrize("atomic_requests", [False, True], ids=["autocommit", "atomic-requests"])
@pytest.mark.parametrize("database", DATABASES)
def test_deliveries_inside_the_tests_transaction(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    database: str,
    atomic_requests: bool,
) -> None:
    """WSGI and ASGI mounts; plain views and django-qstash tasks, sync and async; in
    ``django_db``, ``django_db(transaction=True)``, ``transactional_db``, Django's ``TestCase``
    and ``TransactionTestCase``; everything gone at the end."""
    result = run_checks(
        pytester, monkeypatch, "checks_in_process.py", database, atomic_requests=atomic_requests
    )
    result.assert_outcomes(passed=36, warnings=0)  # a test database left behind warns


@pytest.mark.parametrize("database", DATABASES)
def test_a_live_server_behind_the_qstash_server(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, database: str
) -> None:
    result = run_checks(pytester, monkeypatch, "checks_server.py", database)
    result.assert_outcomes(passed=1, warnings=0)


@pytest.mark.parametrize("database", DATABASES)
def test_the_celery_guide(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, database: str
) -> None:
    """docs/how-to/celery.md's samples: ``.delay()``, ``apply_async(countdown=, eta=)``,
    retries (QStash's and ``self.retry``), a beat schedule in the project's time zone, the
    result where django-qstash keeps it."""
    result = run_checks(pytester, monkeypatch, "checks_celery.py", database)
    result.assert_outcomes(passed=5, warnings=0)
