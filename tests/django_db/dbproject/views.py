"""Views that read what is in the database and add a row: what a delivery saw and wrote."""

from __future__ import annotations

from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse

from .models import Note


def notes(request: HttpRequest) -> JsonResponse:
    seen = list(Note.objects.order_by("id").values_list("text", flat=True))
    Note.objects.create(text=f"written by {request.path}")
    return JsonResponse({"seen": seen, "in_transaction": connection.in_atomic_block})


# Django refuses ATOMIC_REQUESTS for async views: they say so.
@transaction.non_atomic_requests
async def async_notes(request: HttpRequest) -> JsonResponse:
    seen = [note.text async for note in Note.objects.order_by("id")]
    await Note.objects.acreate(text=f"written by {request.path}")
    return JsonResponse({"seen": seen})
