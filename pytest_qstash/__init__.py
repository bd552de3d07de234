"""pytest-qstash: a faithful, in-process Upstash QStash for tests."""

from __future__ import annotations

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
    UnroutedDeliveryError,
)
from .fake import FakeQStash
from .intercept import QStashOutsideFakeWarning
from .query import Found
from .state.invocations import Invoker
from .state.models import (
    ApiCall,
    Delivery,
    DeliveryKind,
    DlqEntry,
    Event,
    FlowControl,
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
    "StepGroup",
    "UnroutedDeliveryError",
    "UrlGroup",
    "Waiter",
    "WorkflowDlqEntry",
    "WorkflowRun",
    "WorkflowStep",
    "parse_duration_ms",
]
