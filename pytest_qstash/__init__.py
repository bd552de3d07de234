"""pytest-qstash: a faithful, in-process Upstash QStash for tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _moved

_moved.install()

# The names below load on first use (PEP 562): the pytest plugin imports this package in every
# run, and a run that never uses QStash should not pay for the engine, respx and httpx.
_WHERE = {
    "Fault": ".wire.faults",
    "Loaded": ".wire.load",
    "LoadError": ".wire.export_entries",
    "AppClockWarning": ".testing.appclock",
    "parse_duration_ms": ".engine.durations",
    "AsyncContextError": ".errors",
    "DeliveryLoopError": ".errors",
    "DeliveryTimeoutError": ".errors",
    "LifespanError": ".errors",
    "QStashFakeError": ".errors",
    "ReentrantCallError": ".errors",
    "SettingError": ".errors",
    "UnroutedDeliveryError": ".errors",
    "FakeQStash": ".testing.fake",
    "QStashOutsideFakeWarning": ".intercept.router",
    "Found": ".testing.query",
    "Invoker": ".engine.models",
    "ApiCall": ".engine.models",
    "Delivery": ".engine.models",
    "DeliveryKind": ".engine.models",
    "DlqEntry": ".engine.models",
    "Event": ".engine.models",
    "FlowControl": ".engine.options",
    "Message": ".engine.models",
    "MessageState": ".engine.models",
    "Waiter": ".engine.waiters",
    "Queue": ".engine.queues",
    "Schedule": ".engine.schedules",
    "Endpoint": ".engine.url_groups",
    "UrlGroup": ".engine.url_groups",
    "WorkflowDlqEntry": ".engine.workflow_dlq",
    "StepGroup": ".engine.workflow_steps",
    "WorkflowRun": ".engine.workflows",
    "WorkflowStep": ".engine.workflow_steps",
}

if TYPE_CHECKING:
    from .engine.durations import parse_duration_ms
    from .engine.models import (
        ApiCall,
        Delivery,
        DeliveryKind,
        DlqEntry,
        Event,
        Invoker,
        Message,
        MessageState,
    )
    from .engine.options import FlowControl
    from .engine.queues import Queue
    from .engine.schedules import Schedule
    from .engine.url_groups import Endpoint, UrlGroup
    from .engine.waiters import Waiter
    from .engine.workflow_dlq import WorkflowDlqEntry
    from .engine.workflow_steps import StepGroup, WorkflowStep
    from .engine.workflows import WorkflowRun
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
    from .intercept.router import QStashOutsideFakeWarning
    from .testing.appclock import AppClockWarning
    from .testing.fake import FakeQStash
    from .testing.query import Found
    from .wire.export_entries import LoadError
    from .wire.faults import Fault
    from .wire.load import Loaded

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
    "LoadError",
    "Loaded",
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
