"""Flow control: ``/v2/flowControl`` (get, list, pause, resume, pin, unpin, resetRate) and
``/v2/globalParallelism``."""

from __future__ import annotations

from typing import Any

import httpx

from ..engine.flow_control import MAX_PERIOD_S, FlowKey
from ..engine.store import Store
from ._http import ApiError, empty_response, json_response

_PIN_LIMITS = ("parallelism", "rate", "period")


def list_flow_keys(store: Store, request: httpx.Request) -> httpx.Response:
    search = request.url.params.get("search", "")
    return json_response(
        [flow_json(f) for f in store.flow_keys.values() if search.lower() in f.key.lower()]
    )


def get_flow_key(store: Store, request: httpx.Request, key: str) -> httpx.Response:
    return json_response(flow_json(_flow(store, key)))


def pause_flow_key(store: Store, request: httpx.Request, key: str) -> httpx.Response:
    store.pause_flow_key(key)
    return empty_response()


def resume_flow_key(store: Store, request: httpx.Request, key: str) -> httpx.Response:
    store.resume_flow_key(key)
    return empty_response()


def pin_flow_key(store: Store, request: httpx.Request, key: str) -> httpx.Response:
    params = request.url.params
    # Every value is checked before any is applied: a refused pin changes nothing.
    limits = {name: _positive(params[name], name) for name in _PIN_LIMITS if name in params}
    if limits.get("period", 0) > MAX_PERIOD_S:
        raise ApiError(
            400,
            f"invalid period {limits['period']}: it is in seconds, at most {MAX_PERIOD_S} "
            "(one week)",
        )
    store.pin_flow_key(
        key,
        parallelism=limits.get("parallelism"),
        rate=limits.get("rate"),
        period_s=limits.get("period"),
    )
    return empty_response()


def unpin_flow_key(store: Store, request: httpx.Request, key: str) -> httpx.Response:
    _flow(store, key)
    params = request.url.params
    store.unpin_flow_key(
        key,
        parallelism=params.get("parallelism", "").lower() == "true",
        rate=params.get("rate", "").lower() == "true",
    )
    return empty_response()


def reset_rate(store: Store, request: httpx.Request, key: str) -> httpx.Response:
    _flow(store, key)
    store.reset_flow_rate(key)
    return empty_response()


def global_parallelism(store: Store, request: httpx.Request) -> httpx.Response:
    return json_response(
        {"parallelismMax": store.global_parallelism, "parallelismCount": len(store.in_flight)}
    )


def _flow(store: Store, key: str) -> FlowKey:
    flow = store.flow_keys.get(key)
    if flow is None:
        raise ApiError(404, f"flow control key {key} not found")
    return flow


def _positive(value: str, name: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise ApiError(400, f"invalid {name} {value!r}: expected a positive integer")
    return int(value)


def flow_json(flow: FlowKey) -> dict[str, Any]:
    return {
        "flowControlKey": flow.key,
        "waitListSize": flow.wait_list_size,
        "parallelismMax": flow.parallelism or 0,
        "parallelismCount": flow.active,
        "rateMax": flow.rate or 0,
        "rateCount": flow.rate_count,
        "ratePeriod": flow.period_s,
        "ratePeriodStart": flow.period_start_ms // 1000,
        "isPaused": flow.paused,
        "isPinnedParallelism": flow.pinned_parallelism,
        "isPinnedRate": flow.pinned_rate,
    }
