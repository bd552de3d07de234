"""Queues: ``/v2/queues`` (upsert, get, list, delete, pause, resume)."""

from __future__ import annotations

from typing import Any

import httpx

from ..engine.queues import Queue
from ..engine.store import Store
from ._http import ApiError, empty_response, json_response, read_json
from .publish import check_name


def upsert_queue(store: Store, request: httpx.Request) -> httpx.Response:
    body = read_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("queueName"), str):
        raise ApiError(
            400, 'invalid body: expected {"queueName": ..., "parallelism": ..., "paused": ...}'
        )
    name = body["queueName"]
    check_name(name, "queue name")
    parallelism = body.get("parallelism", 1)
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise ApiError(400, f"invalid parallelism {parallelism!r}: expected an integer >= 1")
    paused = body.get("paused", False)
    if not isinstance(paused, bool):
        raise ApiError(400, f"invalid paused {paused!r}: expected true or false")
    store.check_queues([name], parallelism)
    store.update_queue(name, parallelism=parallelism, paused=paused)
    return empty_response()


def get_queue(store: Store, request: httpx.Request, name: str) -> httpx.Response:
    check_name(name, "queue name")
    return json_response(queue_json(_queue(store, name)))


def list_queues(store: Store, request: httpx.Request) -> httpx.Response:
    return json_response([queue_json(q) for q in store.queues.values()])


def delete_queue(store: Store, request: httpx.Request, name: str) -> httpx.Response:
    store.delete_queue(name)
    return empty_response()


def pause_queue(store: Store, request: httpx.Request, name: str) -> httpx.Response:
    _queue(store, name)
    store.update_queue(name, paused=True)
    return empty_response()


def resume_queue(store: Store, request: httpx.Request, name: str) -> httpx.Response:
    _queue(store, name)
    store.update_queue(name, paused=False)
    return empty_response()


def _queue(store: Store, name: str) -> Queue:
    queue = store.queues.get(name)
    if queue is None:
        raise ApiError(404, f"queue {name} not found")
    return queue


def queue_json(queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
        "parallelism": queue.parallelism,
        "createdAt": queue.created_ms,
        "updatedAt": queue.updated_ms,
        "lag": queue.lag,
        "paused": queue.paused,
    }
