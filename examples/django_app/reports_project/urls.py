from __future__ import annotations

from django.urls import include, path

from . import views

urlpatterns = [
    path("reports/", views.create_report),
    path("reports/<int:report_id>/", views.report_detail),
    path("reports/digest/", views.schedule_digest),
    # django-qstash's webhook: QStash delivers every task message here.
    path("qstash/webhook/", include("django_qstash.urls")),
]
