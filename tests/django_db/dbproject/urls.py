from __future__ import annotations

from django.urls import include, path

from . import views

urlpatterns = [
    path("notes/", views.notes),
    path("async-notes/", views.async_notes),
    path("qstash/webhook/", include("django_qstash.urls")),
]
