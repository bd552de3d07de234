"""Settings for the test project: no database use, no logging setup, no process-wide effects."""

from __future__ import annotations

import os

# Whether this package is imported as "django_project" or "tests.django_project" depends on
# pytest's import mode, so module paths are derived rather than spelled out.
PACKAGE = __name__.rpartition(".")[0]

SECRET_KEY = "pytest-qstash-django-tests-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["django.test"]
ROOT_URLCONF = f"{PACKAGE}.urls"

# django_qstash.results is left out on purpose: the webhook then stores no result rows, so
# nothing here needs a database (the in-memory one is only there because Django expects one).
INSTALLED_APPS = ["django_qstash"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
]

USE_TZ = True
TIME_ZONE = "UTC"
# Django's default logging setup would reroute warnings for the whole test session.
LOGGING_CONFIG = None

# The pytest-qstash plugin puts these in the environment before collection; the fake signs
# with the current key, so the app verifies exactly as it would in production.
QSTASH_TOKEN = os.environ["QSTASH_TOKEN"]
QSTASH_CURRENT_SIGNING_KEY = os.environ["QSTASH_CURRENT_SIGNING_KEY"]
QSTASH_NEXT_SIGNING_KEY = os.environ["QSTASH_NEXT_SIGNING_KEY"]

# django-qstash builds each task's callback URL from these: the tests mount the app here.
DJANGO_QSTASH_DOMAIN = "https://django.test"
DJANGO_QSTASH_WEBHOOK_PATH = "/qstash/webhook/"
