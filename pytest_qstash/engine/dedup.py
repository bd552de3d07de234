"""Deduplication: a publish with the deduplication id (or, content-based, the same URL, body
and headers) of one made within the window is answered with what that one created, and creates
nothing. Messages and schedule creations each keep their own."""

from __future__ import annotations

import hashlib
from collections import deque

import httpx

from .options import MessageOptions
from .saved import Saved, saved_as

DEFAULT_DEDUP_WINDOW_MS = 10 * 60 * 1000


def dedup_key(url: str, content: bytes, opts: MessageOptions) -> str | None:
    """The key a publish is deduplicated on, or None when it asks for no deduplication."""
    if opts.deduplication_id is not None:
        return "id:" + opts.deduplication_id
    if not opts.content_based_deduplication:
        return None
    digest = hashlib.sha256()
    for part in (url.encode(), content, *_header_bytes(opts.headers)):
        digest.update(len(part).to_bytes(8, "big") + part)
    return "content:" + digest.hexdigest()


class Deduplication(Saved):
    """What each key created (an id), until its window ends."""

    SAVED = saved_as("window_ms _seen _ends")

    def __init__(self, window_ms: int = DEFAULT_DEDUP_WINDOW_MS) -> None:
        self.window_ms = window_ms
        #: key -> (what it created, when the window ends).
        self._seen: dict[str, tuple[str, int]] = {}
        #: (when the window ends, key), in that order (the window is fixed): what to forget.
        self._ends: deque[tuple[int, str]] = deque()

    def deduplicated(self, key: str | None, now_ms: int) -> str | None:
        """The id an earlier publish with the same key created within the window."""
        hit = self._seen.get(key) if key is not None else None
        if hit is None or hit[1] <= now_ms:
            return None
        return hit[0]

    def remember(self, key: str | None, created_id: str, now_ms: int) -> None:
        # A key whose window ended answers nothing: forget it, so that memory follows the
        # publishes of one window, not of all time (a few at a time, oldest first).
        ends = self._ends
        while ends and ends[0][0] <= now_ms:
            end, old = ends.popleft()
            hit = self._seen.get(old)
            if hit is not None and hit[1] == end:
                del self._seen[old]
        if key is not None:
            self._seen[key] = (created_id, now_ms + self.window_ms)
            ends.append((now_ms + self.window_ms, key))

    @property
    def kept(self) -> int:
        """How many keys are remembered (some may have ended since the last publish)."""
        return len(self._seen)


def _header_bytes(headers: httpx.Headers) -> list[bytes]:
    return sorted(f"{k.lower()}:{v}".encode() for k, v in headers.multi_items())
