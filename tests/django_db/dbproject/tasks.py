from __future__ import annotations

from django_qstash import stashed_task

from .models import Note


@stashed_task
def add_note(text: str) -> list[str]:
    seen = list(Note.objects.order_by("id").values_list("text", flat=True))
    Note.objects.create(text=text)
    return seen


@stashed_task
async def add_note_async(text: str) -> list[str]:
    seen = [note.text async for note in Note.objects.order_by("id")]
    await Note.objects.acreate(text=text)
    return seen
