"""Interception of the QStash hosts, and only those, with respx.

Our router sits on respx's ``httpx`` mocker (``Client._transport_for_url``), above the
transports: QStash calls are answered before pytest-httpx or a user's respx router (on the
default ``httpcore`` mocker) could see them, and every other request passes on to exactly
where it would have gone without us. There is no catch-all route to shadow anyone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

import httpx
import respx
from respx.models import AllMockedAssertionError, PassThrough

DEFAULT_HOSTS = ("qstash.upstash.io",)
_REGIONAL = re.compile(r"qstash(-[a-z0-9-]+)?\.upstash\.io")


def host_of(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    return (parts.hostname or "", parts.port)


class QStashRouter(respx.MockRouter):
    def __init__(
        self, api: Callable[[httpx.Request], httpx.Response], extra_urls: Iterable[str]
    ) -> None:
        super().__init__(assert_all_called=False, assert_all_mocked=True, using="httpx")
        self._api = api
        self._extra = {host_of(url) for url in extra_urls if url}

    def claims(self, request: httpx.Request) -> bool:
        host = request.url.host
        if _REGIONAL.fullmatch(host):
            return True
        port = request.url.port
        if (host, port) in self._extra or (host, None) in self._extra:
            return True
        # QSTASH_URL is read per request: a test may set it after the fake started.
        env_url = os.environ.get("QSTASH_URL")
        return env_url is not None and host_of(env_url) in ((host, port), (host, None))

    def start(self) -> None:
        super().start()
        # The newest fake answers first (a FakeQStash started inside the fixture's, say);
        # when it stops, the one before it answers again.
        routers = self.Mocker.routers if self.Mocker else []
        if self in routers:
            routers.remove(self)
            routers.insert(0, self)

    def handler(self, request: httpx.Request) -> httpx.Response:
        if not self.claims(request):
            raise self._decline(request)
        request.read()
        response = self._api(request)
        self.calls.record(request, response)
        return response

    async def async_handler(self, request: httpx.Request) -> httpx.Response:
        if not self.claims(request):
            raise self._decline(request)
        await request.aread()
        response = self._api(request)
        self.calls.record(request, response)
        return response

    def _decline(self, request: httpx.Request) -> Exception:
        # Another router on the same mocker decides for itself; alone, we step aside.
        others = [r for r in (self.Mocker.routers if self.Mocker else []) if r is not self]
        if others:
            return AllMockedAssertionError(f"not a QStash request: {request!r}")
        return PassThrough(
            f"not a QStash request: {request!r}",
            request=request,
            origin=None,  # type: ignore[arg-type]  # respx only reads it for its own routes
        )
