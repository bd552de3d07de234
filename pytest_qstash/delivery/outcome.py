"""What sending one delivery gives: the attempt's ``Outcome``, or ``Unrouted`` when nothing
could answer it."""

from __future__ import annotations

from dataclasses import dataclass

import httpx


class Unrouted(Exception):
    """Nothing could answer the request; the reason says what was tried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class Outcome:
    """What one attempt produced: a response, or the exception the app raised."""

    status: int | None
    headers: httpx.Headers
    content: bytes
    error: str | None = None
    exception: BaseException | None = None

    @classmethod
    def of_response(cls, response: httpx.Response) -> Outcome:
        return cls(response.status_code, response.headers, response.content)

    @classmethod
    def of_exception(cls, exc: BaseException) -> Outcome:
        # QStash sees a crashed handler as a 500 from the server.
        return cls(500, httpx.Headers(), b"", f"{type(exc).__name__}: {exc}", exc)
