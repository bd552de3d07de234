"""A plain Django endpoint that verifies QStash's signature itself and records what it got."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from qstash import Receiver
from qstash.errors import SignatureError

receiver = Receiver(
    current_signing_key=settings.QSTASH_CURRENT_SIGNING_KEY,
    next_signing_key=settings.QSTASH_NEXT_SIGNING_KEY,
)


@dataclass
class Received:
    view: str
    url: str
    body: Any
    message_id: str
    retried: int
    #: The app's own clock when the request arrived (the fake keeps it on qstash.now).
    at: datetime


#: Every verified request, in arrival order; tests clear it.
received: list[Received] = []
#: Statuses to answer before going back to 200, so a test can script failed attempts.
scripted_statuses: list[int] = []


def _verify_and_record(request: HttpRequest, view: str) -> HttpResponse:
    url = request.build_absolute_uri()
    try:
        receiver.verify(
            signature=request.headers.get("Upstash-Signature", ""),
            body=request.body.decode(),
            url=url,
        )
    except SignatureError as exc:
        return JsonResponse({"error": str(exc)}, status=401)
    received.append(
        Received(
            view=view,
            url=url,
            body=json.loads(request.body),
            message_id=request.headers.get("Upstash-Message-Id", ""),
            retried=int(request.headers.get("Upstash-Retried", "0")),
            at=datetime.now(timezone.utc),
        )
    )
    status = scripted_statuses.pop(0) if scripted_statuses else 200
    return JsonResponse({"ok": status == 200}, status=status)


@csrf_exempt
@require_POST
def hook(request: HttpRequest) -> HttpResponse:
    return _verify_and_record(request, "sync")


# Django's view decorators wrap async views only from Django 5.0 on (on 4.2 they turn one into a
# sync view returning an unawaited coroutine), so this view does their two jobs itself.
async def async_hook(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    return _verify_and_record(request, "async")


async_hook.csrf_exempt = True  # type: ignore[attr-defined]  # what @csrf_exempt sets


@csrf_exempt
def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("boom from the Django view")
