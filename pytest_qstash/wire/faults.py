"""Injected failures of the QStash API itself, for testing the publisher's error handling.

A ``FaultTable`` holds what to fail next. Every authenticated API request is checked against
it before routing (a caller without the token never uses a fault up); a matching fault
answers in place of the API (a 429 the SDK turns into ``RateLimitExceededError`` or
``DailyMessageLimitExceededError``, any error status, or a network error raised as
``httpx.ConnectError``) and nothing is stored for that call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

import httpx

from ._http import error_response, request_path
from .publish_headers import HTTP_METHODS

FaultKind = Literal["error", "burst", "daily", "network"]
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)

#: Endpoint names and the (method, path prefix) they stand for.
ENDPOINT_NAMES: dict[str, tuple[str | None, str]] = {
    "publish": ("POST", "/v2/publish"),
    "enqueue": ("POST", "/v2/enqueue"),
    "batch": ("POST", "/v2/batch"),
    "any": (None, "/"),
}


#: What QStash's rate limiters report (free plan's daily message limit).
BURST_LIMIT = 100
DAILY_LIMIT = 1000

_ENDPOINT_HELP = (
    '"publish", "enqueue", "batch", "any", a path prefix such as "/v2/messages", '
    'or a method and a path prefix such as "DELETE /v2/messages"'
)
_KIND_HELP = (
    '"error" (answer `status`, default 500), "burst" (429 with Burst-RateLimit-* headers), '
    '"daily" (429 with RateLimit-* headers) or "network" (raise httpx.ConnectError)'
)


@dataclass(eq=False)
class Fault:
    """One armed failure: the next ``times`` API calls matching ``endpoint`` fail."""

    endpoint: str
    kind: FaultKind
    status: int | None
    times: int
    method: str | None = field(repr=False, default=None)
    prefix: str = field(repr=False, default="/")
    #: The requests this fault has failed so far, oldest first.
    failed: list[httpx.Request] = field(default_factory=list, repr=False)

    @property
    def remaining(self) -> int:
        return self.times - len(self.failed)

    def matches(self, request: httpx.Request, path: str) -> bool:
        if self.remaining <= 0:
            return False
        if self.method is not None and request.method != self.method:
            return False
        prefix = self.prefix.rstrip("/")
        return not prefix or path == prefix or path.startswith(prefix + "/")


class FaultTable:
    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self.faults: list[Fault] = []

    def add(
        self,
        endpoint: str = "publish",
        *,
        status: int | None = None,
        kind: str | None = None,
        times: int = 1,
    ) -> Fault:
        method, prefix = _parse_endpoint(endpoint)
        resolved_kind, resolved_status = _resolve_kind(kind, status)
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise ValueError(f"invalid times {times!r}: expected a positive integer")
        fault = Fault(endpoint, resolved_kind, resolved_status, times, method, prefix)
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()

    def intercept(self, request: httpx.Request) -> httpx.Response | None:
        """The injected answer for ``request``, or None to let the API answer it.
        Raises ``httpx.ConnectError`` for a network fault."""
        path = request_path(request).partition("?")[0]
        for fault in self.faults:
            if fault.matches(request, path):
                fault.failed.append(request)
                if fault.remaining == 0:
                    self.faults.remove(fault)
                return self._answer(fault, request)
        return None

    def _answer(self, fault: Fault, request: httpx.Request) -> httpx.Response:
        now_s = self._now_ms() // 1000
        if fault.kind == "network":
            raise httpx.ConnectError(
                f"injected network error (qstash.fail_next) for {request.method} {request.url}",
                request=request,
            )
        if fault.kind == "burst":
            response = error_response(429, "too many requests: burst rate limit exceeded")
            response.headers["Burst-RateLimit-Limit"] = str(BURST_LIMIT)
            response.headers["Burst-RateLimit-Remaining"] = "0"
            response.headers["Burst-RateLimit-Reset"] = str(now_s + 1)
            return response
        if fault.kind == "daily":
            response = error_response(429, "daily message limit exceeded")
            response.headers["RateLimit-Limit"] = str(DAILY_LIMIT)
            response.headers["RateLimit-Remaining"] = "0"
            # The daily limit resets at the next midnight UTC.
            response.headers["RateLimit-Reset"] = str(now_s - now_s % 86_400 + 86_400)
            return response
        assert fault.status is not None
        return error_response(fault.status, f"injected failure (qstash.fail_next): {fault.status}")


def _parse_endpoint(endpoint: str) -> tuple[str | None, str]:
    if not isinstance(endpoint, str):
        raise TypeError(f"invalid endpoint {endpoint!r}: expected {_ENDPOINT_HELP}")
    text = endpoint.strip()
    if text in ENDPOINT_NAMES:
        return ENDPOINT_NAMES[text]
    method, _, path = text.partition(" ")
    if path and method.upper() in HTTP_METHODS and path.strip().startswith("/"):
        return method.upper(), path.strip()
    if text.startswith("/") and " " not in text:
        return None, text
    raise ValueError(f"invalid endpoint {endpoint!r}: expected {_ENDPOINT_HELP}")


def _resolve_kind(kind: str | None, status: int | None) -> tuple[FaultKind, int | None]:
    if status is not None and (
        isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599
    ):
        raise ValueError(f"invalid status {status!r}: expected an error status from 400 to 599")
    if kind is None:
        kind = "burst" if status == 429 else "error"
    if kind not in FAULT_KINDS:
        raise ValueError(f"invalid kind {kind!r}: expected {_KIND_HELP}")
    if kind == "error":
        return "error", 500 if status is None else status
    if kind == "network":
        if status is not None:
            raise ValueError('kind="network" answers no status: leave status out')
        return "network", None
    if status not in (None, 429):
        raise ValueError(f"kind={kind!r} always answers 429: leave status out or pass 429")
    return ("burst" if kind == "burst" else "daily"), 429
