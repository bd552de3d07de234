"""What a publish asks for, beside the headers that say it: the error a bad option raises, the
names and header lists as QStash shows them, and the range a due time must stay in.

``MessageOptions`` itself is a model (``models.py``); the ``Upstash-*`` headers are read into
one at the edge, in ``wire/publish_headers.py``, the one module that knows their names.
"""

from __future__ import annotations

import httpx

from .models import LATEST_MS, MessageOptions

__all__ = ["InvalidOption", "MessageOptions", "canonical", "check_due_in_range", "header_lists"]


class InvalidOption(ValueError):
    """A header's value is not one QStash accepts (the API answers 400 with this text)."""


def canonical(name: str) -> str:
    """Go's canonical header form, the one QStash shows: ``x-foo-bar`` -> ``X-Foo-Bar``."""
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def header_lists(headers: httpx.Headers) -> dict[str, list[str]]:
    """Headers as QStash shows them (callback bodies, logs): canonical names, lists of values."""
    out: dict[str, list[str]] = {}
    for name, value in headers.multi_items():
        out.setdefault(canonical(name), []).append(value)
    return out


def check_due_in_range(opts: MessageOptions, now_ms: int) -> None:
    """Refuse a delay that puts the message beyond what a datetime can show (year 9999)."""
    if opts.delay_ms is not None and opts.due_ms(now_ms) > LATEST_MS:
        raise InvalidOption(
            f"invalid Upstash-Delay of {opts.delay_ms} ms: it puts the message after the year 9999"
        )
