"""URL groups (QStash's "topics"): named sets of endpoints a publish fans out to."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from .models import ms_to_datetime


class UnknownDestination(ValueError):
    """A destination that is neither an http(s) URL nor a URL group with endpoints."""


@dataclass(eq=False, slots=True)
class Endpoint:
    url: str
    name: str | None = None


@dataclass(eq=False, slots=True)
class UrlGroup:
    name: str
    created_ms: int
    updated_ms: int
    endpoints: list[Endpoint] = field(default_factory=list)

    @property
    def created_at(self) -> datetime:
        return ms_to_datetime(self.created_ms)

    @property
    def updated_at(self) -> datetime:
        return ms_to_datetime(self.updated_ms)

    def __repr__(self) -> str:
        endpoints = ", ".join(f"{e.name}={e.url}" if e.name else e.url for e in self.endpoints)
        updated = self.updated_at.isoformat()
        return f"<UrlGroup {self.name} endpoints=[{endpoints}] updated={updated}>"

    def upsert(self, endpoint: Endpoint, now_ms: int) -> None:
        # The URL is an endpoint's identity; upserting it again renames it.
        for existing in self.endpoints:
            if existing.url == endpoint.url:
                existing.name = endpoint.name or existing.name
                break
        else:
            self.endpoints.append(endpoint)
        self.updated_ms = now_ms

    def remove(self, url: str | None, name: str | None, now_ms: int) -> int:
        before = len(self.endpoints)
        self.endpoints = [
            e
            for e in self.endpoints
            if not ((url is not None and e.url == url) or (name is not None and e.name == name))
        ]
        self.updated_ms = now_ms
        return before - len(self.endpoints)


def upsert_group(
    groups: dict[str, UrlGroup], name: str, endpoints: Iterable[Endpoint], now_ms: int
) -> UrlGroup:
    """Add the endpoints to the group ``name`` of ``groups`` (created if it does not exist);
    an endpoint whose URL it has already is renamed."""
    group = groups.get(name)
    if group is None:
        group = groups[name] = UrlGroup(name, now_ms, now_ms)
    for endpoint in endpoints:
        group.upsert(endpoint, now_ms)
    return group
