"""A Django project whose deliveries read and write the database, for the tests run by
tests/test_django_db.py in pytest sessions of their own (Django's settings are per process).

What varies comes from the environment: DBPROJECT_DATABASE (``sqlite``, a file, or
``postgres``, at the DSN in PYTEST_QSTASH_POSTGRES) and DBPROJECT_ATOMIC_REQUESTS (``1``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

SECRET_KEY = "pytest-qstash-django-db-tests-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["django.test", "localhost", "127.0.0.1", "testserver"]
ROOT_URLCONF = "dbproject.urls"
INSTALLED_APPS = [
    "django_qstash",
    "django_qstash.results",
    "django_qstash.schedules",
    "dbproject",
    "invoices",
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# No CSRF middleware: csrf_exempt wraps async views only from Django 5.0, and these views are
# webhooks (django-qstash's own is exempt).
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
]
# live_server serves static files under it (it fails without one).
STATIC_URL = "/static/"
USE_TZ = True
# Not UTC: schedules run on the project's local time (CRON_TZ), as on QStash.
TIME_ZONE = "America/Chicago"
LOGGING_CONFIG = None


def _database() -> dict[str, Any]:
    run = os.environ["DBPROJECT_RUN"]  # unique per session: sessions may run side by side
    if os.environ.get("DBPROJECT_DATABASE") == "postgres":
        dsn = urlsplit(os.environ["PYTEST_QSTASH_POSTGRES"])
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": dsn.path.lstrip("/") or "postgres",
            "USER": unquote(dsn.username or ""),
            "PASSWORD": unquote(dsn.password or ""),
            "HOST": dsn.hostname or "",
            "PORT": str(dsn.port or ""),
            "TEST": {"NAME": f"test_qstash_{run}"},
        }
    directory = Path(os.environ["DBPROJECT_DIR"])
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(directory / "db.sqlite3"),
        "TEST": {"NAME": str(directory / "test-db.sqlite3")},  # a file, not memory
    }


DATABASES = {
    "default": {
        **_database(),
        "ATOMIC_REQUESTS": os.environ.get("DBPROJECT_ATOMIC_REQUESTS") == "1",
    }
}

QSTASH_TOKEN = os.environ["QSTASH_TOKEN"]
QSTASH_CURRENT_SIGNING_KEY = os.environ["QSTASH_CURRENT_SIGNING_KEY"]
QSTASH_NEXT_SIGNING_KEY = os.environ["QSTASH_NEXT_SIGNING_KEY"]
DJANGO_QSTASH_DOMAIN = os.environ.get("DBPROJECT_DOMAIN", "https://django.test")
DJANGO_QSTASH_WEBHOOK_PATH = "/qstash/webhook/"
