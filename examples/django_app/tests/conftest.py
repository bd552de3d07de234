from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django
import pytest
from django.apps import apps
from django.conf import settings
from django.test import Client

# The project is a plain package next to tests/, not an installed one.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# What pytest-django would do: name the settings and set Django up once, before any test
# module imports the project. settings.py reads QSTASH_TOKEN and the signing keys, which the
# pytest-qstash plugin has put in the environment before this file is imported.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reports_project.settings")
if not apps.ready:
    django.setup()
if settings.SETTINGS_MODULE != "reports_project.settings":
    # Django's settings are per process: this session already set Django up for another
    # project (as `pytest tests examples` would).
    pytest.skip(
        f"Django is already set up with {settings.SETTINGS_MODULE}: "
        "run this example in a pytest session of its own",
        allow_module_level=True,
    )


@pytest.fixture
def qstash_apps() -> dict[str, Any]:
    from reports_project.wsgi import application

    # Deliveries to https://reports.example.com/... (the webhook) go into the WSGI app.
    return {settings.PUBLIC_URL: application}


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    from reports_project import reporting

    reporting.reset()
    yield
    reporting.reset()


@pytest.fixture
def client() -> Client:
    # Requests arrive under the public host name, the only one in ALLOWED_HOSTS.
    return Client(HTTP_HOST=settings.ALLOWED_HOSTS[0])
