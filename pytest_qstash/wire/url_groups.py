"""URL groups: ``/v2/topics`` (the SDK's ``url_group``)."""

from __future__ import annotations

from typing import Any

import httpx

from ..engine.deliverable import checked_url
from ..engine.store import Store
from ..engine.url_groups import Endpoint, UrlGroup
from ._http import ApiError, empty_response, json_response, read_json, request_path
from .publish import check_name


def upsert_endpoints(store: Store, request: httpx.Request, name: str) -> httpx.Response:
    check_name(name, "url group name")
    endpoints = _endpoints(read_json(request), need_url=True)
    # Every endpoint is checked before the group changes.
    endpoints = [Endpoint(checked_url(e.url, "endpoint url"), e.name) for e in endpoints]
    store.upsert_url_group(name, endpoints)
    return empty_response()


def remove_endpoints(store: Store, request: httpx.Request, name: str) -> httpx.Response:
    if name not in store.url_groups:
        raise ApiError(404, f"url group {name} not found")
    store.remove_url_group_endpoints(name, _endpoints(read_json(request), need_url=False))
    return empty_response()


def get_url_group(store: Store, request: httpx.Request, name: str) -> httpx.Response:
    group = store.url_groups.get(name)
    if group is None:
        raise ApiError(404, f"url group {name} not found")
    return json_response(_group_json(group))


def list_url_groups(store: Store, request: httpx.Request) -> httpx.Response:
    return json_response([_group_json(g) for g in store.url_groups.values()])


def delete_url_group(store: Store, request: httpx.Request, name: str) -> httpx.Response:
    store.delete_url_group(name)
    return empty_response()


def _endpoints(body: Any, *, need_url: bool) -> list[Endpoint]:
    raw = body.get("endpoints") if isinstance(body, dict) else None
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, 'invalid body: expected {"endpoints": [{"url": ..., "name": ...}]}')
    out = []
    for item in raw:
        url = item.get("url") if isinstance(item, dict) else None
        name = item.get("name") if isinstance(item, dict) else None
        if (need_url and not isinstance(url, str)) or (url is None and name is None):
            raise ApiError(
                400,
                "invalid endpoint: each endpoint needs a url" + ("" if need_url else " or a name"),
            )
        out.append(Endpoint(url or "", name))
    return out


def _group_json(group: UrlGroup) -> dict[str, Any]:
    return {
        "name": group.name,
        "createdAt": group.created_ms,
        "updatedAt": group.updated_ms,
        "endpoints": [
            {"url": e.url, **({"name": e.name} if e.name else {})} for e in group.endpoints
        ],
    }


def set_default_headers(store: Store, request: httpx.Request, name: str) -> httpx.Response:
    """``PATCH /v2/topics/{name}`` with ``{"headers": {...}}`` (not in the SDK). QStash documents
    the call in one line, not how the stored headers combine with a message's own, nor how a
    group shows them: answered 501, as other endpoints not served, rather than guessed."""
    path = request_path(request).partition("?")[0]
    raise ApiError(
        501,
        f"PATCH {path} is not implemented by pytest-qstash yet (a URL group's default headers)",
    )
