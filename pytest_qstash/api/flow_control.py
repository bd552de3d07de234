"""Flow control: ``/v2/flowControl`` (get, list, pause, resume, pin, unpin, resetRate) and
``/v2/globalParallelism``."""

from __future__ import annotations

from typing import Any

import httpx

from ..state.flow_control import MAX_PERIOD_S, FlowKey
from ..state.store import Store
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
    store.flow_key(key).paused = True
    return empty_response()


def resume_flow_key(store: Store, request: httpx.Request, key: str) -> httpx.Response:
    store.flow_key(key).paused = False
    store.wake_flow(key)
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
    flow = store.flow_key(key)
    if "parallelism" in limits:
        flow.parallelism, flow.pinned_parallelism = limits["parallelism"], True
    if "rate" in limits or "period" in limits:
        flow.rate = limits.get("rate", flow.rate)
        flow.period_s = limits.get("period", flow.period_s)
        flow.pinned_rate = True
    # Pinning resets the rate state: a new period starts now.
    flow.period_start_ms, flow.rate_count = store.clock.now_ms, 0
    store.wake_flow(key)
    return empty_response()


def unpin_flow_key(store: Store, request: httpx.Request, key: str) -> httpx.Response:
    flow = _flow(store, key)
    params = request.url.params
    if params.get("parallelism", "").lower() == "true":
        flow.pinned_parallelism = False
    if params.get("rate", "").lower() == "true":
        flow.pinned_rate = False
    flow.refresh()  # the unfinished messages' limits apply again (the pinned ones if none)
    store.wake_flow(key)
    return empty_response()


def reset_rate(store: Store, request: httpx.Request, key: str) -> httpx.Response:
    flow = _flow(store, key)
    flow.period_start_ms, flow.rate_count = store.clock.now_ms, 0
    store.wake_flow(key)
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
