"""The ASGI entry point a server (uvicorn, daphne) imports: ``reports_project.asgi:application``."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reports_project.settings")

application = get_asgi_application()
