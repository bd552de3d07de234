"""pytest-qstash: a faithful, in-process Upstash QStash for tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The names below load on first use (PEP 562): the pytest plugin imports this package in every
# run, and a run that never uses QStash should not pay for the engine, respx and httpx.
_WHERE = {
    "Fault": ".api.faults",
    "AppClockWarning": ".appclock",
    "parse_duration_ms": ".durations",
    "AsyncContextError": ".errors",
    "DeliveryLoopError": ".errors",
    "DeliveryTimeoutError": ".errors",
    "LifespanError": ".errors",
    "QStashFakeError": ".errors",
    "ReentrantCallError": ".errors",
    "SettingError": ".errors",
    "UnroutedDeliveryError": ".errors",
    "FakeQStash": ".fake",
    "QStashOutsideFakeWarning": ".intercept",
    "Found": ".query",
    "Invoker": ".state.models",
    "ApiCall": ".state.models",
    "Delivery": ".state.models",
    "DeliveryKind": ".state.models",
    "DlqEntry": ".state.models",
    "Event": ".state.models",
    "FlowControl": ".state.models",
    "Message": ".state.models",
    "MessageState": ".state.models",
    "Waiter": ".state.models",
    "Queue": ".state.queues",
    "Schedule": ".state.schedules",
    "Endpoint": ".state.url_groups",
    "UrlGroup": ".state.url_groups",
    "WorkflowDlqEntry": ".state.workflow_dlq",
    "StepGroup": ".state.workflows",
    "WorkflowRun": ".state.workflows",
    "WorkflowStep": ".state.workflows",
}

if TYPE_CHECKING:
    from .api.faults import Fault
    from .appclock import AppClockWarning
    from .durations import parse_duration_ms
    from .errors import (
        AsyncContextError,
        DeliveryLoopError,
        DeliveryTimeoutError,
        LifespanError,
        QStashFakeError,
        ReentrantCallError,
        SettingError,
        UnroutedDeliveryError,
    )
    from .fake import FakeQStash
    from .intercept import QStashOutsideFakeWarning
    from .query import Found
    from .state.models import (
        ApiCall,
        Delivery,
        DeliveryKind,
        DlqEntry,
        Event,
        FlowControl,
        Invoker,
        Message,
        MessageState,
        Waiter,
    )
    from .state.queues import Queue
    from .state.schedules import Schedule
    from .state.url_groups import Endpoint, UrlGroup
    from .state.workflow_dlq import WorkflowDlqEntry
    from .state.workflows import StepGroup, WorkflowRun, WorkflowStep

__all__ = [
    "ApiCall",
    "AppClockWarning",
    "AsyncContextError",
    "Delivery",
    "DeliveryKind",
    "DeliveryLoopError",
    "DeliveryTimeoutError",
    "DlqEntry",
    "Endpoint",
    "Event",
    "FakeQStash",
    "Fault",
    "FlowControl",
    "Found",
    "Invoker",
    "LifespanError",
    "Message",
    "MessageState",
    "QStashFakeError",
    "QStashOutsideFakeWarning",
    "Queue",
    "ReentrantCallError",
    "Schedule",
    "SettingError",
    "StepGroup",
    "UnroutedDeliveryError",
    "UrlGroup",
    "Waiter",
    "WorkflowDlqEntry",
    "WorkflowRun",
    "WorkflowStep",
    "parse_duration_ms",
]


def __getattr__(name: str) -> Any:
    import importlib
    import importlib.util

    where = _WHERE.get(name)
    if where is None:
        # A submodule, as ``import pytest_qstash`` used to load them all (``.fake``, ...).
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
            return importlib.import_module(f".{name}", __name__)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value  # once: later reads are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
