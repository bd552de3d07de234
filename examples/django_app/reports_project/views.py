"""The reports API. It never builds a report itself: it queues django-qstash tasks and
answers 202 at once; QStash runs the tasks through the webhook."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from . import reporting, tasks

#: When the nightly digest goes out (UTC).
DIGEST_HOUR = 2


def _json_body(request: HttpRequest) -> dict[str, Any]:
    try:
        data = json.loads(request.body)
    except json.JSONDecodeError:
        data = None
    return data if isinstance(data, dict) else {}


# A JSON API for other services (they authenticate otherwise), not a browser form: no CSRF token.
@csrf_exempt
@require_POST
def create_report(request: HttpRequest) -> HttpResponse:
    month = _json_body(request).get("month")
    if not isinstance(month, str):
        return JsonResponse({"error": 'expected {"month": "YYYY-MM"}'}, status=400)
    report = reporting.new_report(month)
    # Publishes a message to QStash addressed to the webhook; nothing runs yet.
    report.task_id = tasks.build_report.delay(report.id).id
    return JsonResponse(report.as_json(), status=202)


@require_GET
def report_detail(request: HttpRequest, report_id: int) -> HttpResponse:
    report = reporting.reports.get(report_id)
    if report is None:
        raise Http404("no such report")
    return JsonResponse(report.as_json())


def next_digest_time(now: datetime) -> datetime:
    send_at = now.replace(hour=DIGEST_HOUR, minute=0, second=0, microsecond=0)
    return send_at if send_at > now else send_at + timedelta(days=1)


@csrf_exempt
@require_POST
def schedule_digest(request: HttpRequest) -> HttpResponse:
    to = _json_body(request).get("email")
    if not isinstance(to, str):
        return JsonResponse({"error": 'expected {"email": "..."}'}, status=400)
    now = timezone.now()
    send_at = next_digest_time(now)
    # countdown is in whole seconds: round up so the digest never leaves before DIGEST_HOUR.
    countdown = math.ceil((send_at - now).total_seconds())
    result = tasks.send_digest.apply_async(args=(to,), countdown=countdown)
    return JsonResponse(
        {"email": to, "send_at": send_at.isoformat(), "task_id": result.id}, status=202
    )
