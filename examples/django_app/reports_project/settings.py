"""Settings of the reporting service; what differs between deployments comes from the
environment, read once at import, as a deployed Django project does."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

#: Where the service is reachable from the internet; QStash calls the webhook under it.
PUBLIC_URL = os.environ.get("REPORTS_PUBLIC_URL", "https://reports.example.com")

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "reports-example-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = [urlsplit(PUBLIC_URL).hostname or ""]
ROOT_URLCONF = "reports_project.urls"
WSGI_APPLICATION = "reports_project.wsgi.application"

# django_qstash only: its optional results app (django_qstash.results) would store every
# task's result in the database, and this service keeps no database at all.
INSTALLED_APPS = ["django_qstash"]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
]

USE_TZ = True
# Django's own default, as in a project started with `startproject` and never changed: Django
# then sets the process's TZ to it, and the fake's signatures must verify all the same.
TIME_ZONE = "America/Chicago"

# docs/how-to/django.md shows the lines below.
# --8<-- [start:docs]
# django-qstash publishes with QSTASH_TOKEN and verifies the webhook's Upstash-Signature with
# the signing keys.
QSTASH_TOKEN = os.environ["QSTASH_TOKEN"]
QSTASH_CURRENT_SIGNING_KEY = os.environ["QSTASH_CURRENT_SIGNING_KEY"]
QSTASH_NEXT_SIGNING_KEY = os.environ["QSTASH_NEXT_SIGNING_KEY"]
# Every task message is addressed to DJANGO_QSTASH_DOMAIN + DJANGO_QSTASH_WEBHOOK_PATH.
DJANGO_QSTASH_DOMAIN = PUBLIC_URL
DJANGO_QSTASH_WEBHOOK_PATH = "/qstash/webhook/"
# --8<-- [end:docs]
