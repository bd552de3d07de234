from __future__ import annotations

from django.conf import settings
from django.urls import include, path

from . import views

urlpatterns = [
    path("hook/", views.hook),
    path("async-hook/", views.async_hook),
    path("boom/", views.boom),
    # django-qstash's webhook, where every task message is delivered.
    path(settings.DJANGO_QSTASH_WEBHOOK_PATH.strip("/") + "/", include("django_qstash.urls")),
]
