"""The one registry of the fields the server shows and keeps, and how each travels.

Each class whose objects the control API shows (``records``) or a data dir keeps
(``datadir_codec``) has one ``Entry`` here; both codecs are derived from it. A dataclass's
fields are its own: every field travels, under its name and in its type's form
(``forms.form_of``: bytes, headers, expressions, another model), unless its ``Field`` here
says otherwise (its name on the control API where that differs, another form such as a
moment kept as milliseconds). So a plain field added to a model travels in the records and
in the data dir with no edit here. A class that is no dataclass (the store's tables)
declares what it saves itself (``engine.saved.Saved``), each field under a public name (the
data dir's schema): nothing here names an attribute.

What a message and a run's settings show of their options is derived from their properties
of the same names (``_options_read_by``).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import sys
from collections.abc import Callable
from typing import Any

from ..engine.account import Account
from ..engine.attempts import Attempt, AttemptResult
from ..engine.clock import DueEvent, VirtualClock
from ..engine.dedup import Deduplication
from ..engine.dlq import DeadLetters
from ..engine.flow_control import FlowKey, FlowKeys
from ..engine.ids import IdGenerator
from ..engine.models import ApiCall, Delivery, DlqEntry, Event, Invoker, Message
from ..engine.options import FlowControl, MessageOptions
from ..engine.plans import Plan
from ..engine.queues import Queue, Queues
from ..engine.rejections import RejectedCall, RejectedCalls
from ..engine.retention import Retention, Trail
from ..engine.run_settings import RunSettings
from ..engine.saved import Saved
from ..engine.schedules import Schedule, Schedules
from ..engine.store import Store
from ..engine.url_groups import Endpoint, UrlGroup
from ..engine.waiters import Waiter, Waiters
from ..engine.workflow_dlq import WorkflowDlqEntry
from ..engine.workflow_steps import StepGroup, WorkflowStep
from ..engine.workflows import RunHeaders, RunMember, WorkflowRun, WorkflowRuns
from ..wire.faults import Fault
from .forms import (
    KEYS,
    MILLIS,
    MOMENT,
    OUTSTANDING,
    PLAIN,
    RUN_MESSAGES,
    TUPLE,
    Kind,
    form_of,
    iso_time,
)


# -- the registry --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Field:
    """One field: its public ``name`` (the data dir's key; the control API's too unless
    ``record`` names it otherwise) and its ``form`` in the control API's JSON."""

    name: str
    #: None: its type's (``forms.form_of``).
    form: Kind | None = None
    record: str = ""

    @property
    def record_name(self) -> str:
        return self.record or self.name


@dataclasses.dataclass(frozen=True)
class Derived:
    """A field the control API renders from a property (``read`` says how), not read back.

    ``hoisted_from`` names a nested field and its key (``("options", "method")``) that this
    property reads (a message's ``method`` is its ``options.method``): the value is written
    once, at the top level, and taken out of the nested JSON; reading puts it back there.
    When the nested field is null, the property is read as usual."""

    name: str
    kind: Kind = PLAIN
    read: Callable[[Any], Any] | None = None
    hoisted_from: tuple[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class Entry:
    """A class the server shows or keeps: its data-dir ``table`` and, when the control API
    shows it, its ``record`` name (what an error names). For a dataclass, ``fields`` says
    only how the fields that do not travel as themselves do; another class is a table that
    declares its saved fields (``Saved.SAVED``)."""

    cls: type
    table: str
    fields: tuple[Field, ...] = ()
    record: str = ""
    #: Rendered-only properties of a record.
    derived: tuple[Derived, ...] = ()
    #: Fields a record leaves out (the engine's own bookkeeping; a reason beside each).
    left_out: frozenset[str] = frozenset()
    #: Record fields that grow with what the item holds: a list's row goes without them.
    summary_leaves: frozenset[str] = frozenset()
    #: How a record builds an item from its values and reads a field, when not as usual.
    build: Callable[[dict[str, Any]], Any] | None = None
    get: Callable[[Any, str], Any] | None = None

    @functools.cached_property
    def all_fields(self) -> tuple[Field, ...]:
        """Every field, in the class's order: a dataclass's own, each as its ``Field`` here
        says when it has one (its type's form otherwise); a table's as it declares them."""
        if not dataclasses.is_dataclass(self.cls):
            if not issubclass(self.cls, Saved):
                raise TypeError(f"{self.cls.__qualname__}: neither a dataclass nor Saved")
            return tuple(Field(name) for name in self.cls.SAVED)
        declared = {field.name: field for field in self.fields}
        made = []
        for f in dataclasses.fields(self.cls):
            field = declared.get(f.name) or Field(f.name)
            if field.form is None:
                form = PLAIN if _scalar(f.type) else form_of(_resolved(self.cls, f.name, f.type))
                field = Field(field.name, form, field.record)
            made.append(field)
        return tuple(made)

    def with_field(self, field: Field) -> Entry:
        """This entry with one more declared field (a field added to a copy of it)."""
        return dataclasses.replace(self, fields=(*self.fields, field))


#: What a publish gave that a record shows (the options' own bookkeeping left out).
_OPTIONS_LEFT_OUT = frozenset({"callback_options", "failure_callback_options", "given"})


_SCALARS = frozenset({"int", "str", "bool", "float", "None"})


def _scalar(annotation: Any) -> bool:
    """Whether a field's annotation (text, as ``from __future__ import annotations`` leaves
    it) names scalars only: ``int``, ``str | None``..."""
    if isinstance(annotation, str):
        return all(part.strip() in _SCALARS for part in annotation.split("|"))
    return annotation in (int, str, bool, float)


def _resolved(cls: type, name: str, annotation: Any) -> Any:
    """Field ``name``'s annotation as the type it names, read where the field is declared
    (``typing.get_type_hints`` for one field: that resolves every field of the class, which
    took most of this module's import)."""
    if not isinstance(annotation, str):
        return annotation
    owner = next(c for c in cls.__mro__ if name in vars(c).get("__annotations__", {}))
    # The package's own annotation text, evaluated as ``get_type_hints`` does.
    return eval(annotation, vars(sys.modules[owner.__module__]), dict(vars(owner)))


def _options_read_by(cls: type, *, hoisted: bool) -> tuple[Derived, ...]:
    """``cls``'s properties that read an option of the same name (a message's ``method`` is
    its ``options.method``), each rendered in the option's form, read from the option;
    ``hoisted``: written at the top level only, taken out of the rendered ``options`` (and
    put back there when read)."""
    return tuple(
        Derived(
            f.name,
            form_of(_resolved(MessageOptions, f.name, f.type)),
            operator.attrgetter(f"options.{f.name}"),
            ("options", f.name) if hoisted else None,
        )
        for f in dataclasses.fields(MessageOptions)
        if f.name not in _OPTIONS_LEFT_OUT and isinstance(getattr(cls, f.name, None), property)
    )


def _step(item: WorkflowStep) -> dict[str, Any]:
    return {
        "step_id": item.step_id,
        "name": item.name,
        "type": item.type,
        "out": item.out,
        "concurrent": item.concurrent,
        # A parallel group's plan step (the TypeScript SDK's) names the step it stands for.
        "target_step": item.raw.get("targetStep"),
        "message_id": item.message_id,
        "created_at": iso_time(item.created_at),
        "resumes_at": iso_time(item.resumes_at),
    }


def _group(group: StepGroup) -> dict[str, Any]:
    return {"type": group.type, "step_ids": [step.step_id for step in group.steps]}


def _build_run(values: dict[str, Any]) -> WorkflowRun:
    messages = values.pop("members")
    run = WorkflowRun(**values)
    for message, call_type in messages:
        run.add_message(message, call_type)
    return run


def _run_field(run: WorkflowRun, name: str) -> Any:
    return run.typed_messages if name == "members" else getattr(run, name)


_TIMES = (Field("created_ms", MILLIS, "created_at"), Field("updated_ms", MILLIS, "updated_at"))

#: Every class a data dir may hold (nothing else is ever built from one), and the records.
REGISTRY: tuple[Entry, ...] = (
    # -- the store and its tables: no dataclasses; each declares what it saves (``Saved``)
    Entry(Store, "store"),
    Entry(VirtualClock, "clock"),
    Entry(Account, "account"),
    Entry(IdGenerator, "id_generator"),
    Entry(Deduplication, "dedup_table"),
    Entry(DeadLetters, "dlq_table"),
    Entry(Schedules, "schedule_table"),
    Entry(Queues, "queue_table"),
    Entry(FlowKeys, "flow_key_table"),
    Entry(WorkflowRuns, "run_table"),
    Entry(Waiters, "waiter_table"),
    Entry(RejectedCalls, "rejection_table"),
    Entry(Trail, "trails"),
    Entry(Retention, "retention"),
    # -- the models: dataclasses, each field as itself unless said here
    Entry(
        Message,
        "messages",
        (
            Field("content", record="body"),
            Field("created_ms", MILLIS, "created_at"),
            Field("not_before_ms", MILLIS, "not_before"),
        ),
        record="message",
        # ``labels``: split as the QStash API shows them, and as a run's are.
        derived=(
            Derived("content_type"),
            Derived("done"),
            Derived("labels", TUPLE),
            # What the message was published with, at the top level (the fields a test
            # reads), each the property that reads its option: written there only.
            *_options_read_by(Message, hoisted=True),
        ),
    ),
    Entry(
        Delivery,
        "deliveries",
        (
            Field("content", record="body"),
            Field("at_ms", MILLIS, "at"),
            Field("response_content", record="response_body"),
            Field("ended_ms", MILLIS, "ended_at"),
        ),
        record="delivery",
        derived=(Derived("ok"),),
        # The app's exception object stays in the server: its text is in ``error``.
        left_out=frozenset({"exception"}),
    ),
    Entry(
        DlqEntry,
        "dlq",
        (
            Field("created_ms", MILLIS, "created_at"),
            Field("response_content", record="response_body"),
        ),
        record="DLQ entry",
        derived=tuple(
            Derived(name) for name in ("message_id", "url", "body", "retried", "workflow_run_id")
        ),
    ),
    Entry(
        Event,
        "events",
        (
            Field("time_ms", MILLIS, "time"),
            Field("next_delivery_ms", MILLIS, "next_delivery_time"),
            Field("response_content", record="response_body"),
        ),
        record="event",
        # The message a log line is about is in the messages list, by ``message_id`` (the
        # client links it back): nesting it sent every message again with each of its lines.
        left_out=frozenset({"message"}),
    ),
    Entry(FlowControl, "flow_controls", record="flow control"),
    Entry(
        ApiCall,
        "api_calls",
        (
            Field("request_url", record="url"),
            Field("content", record="body"),
            Field("at_ms", MILLIS, "at"),
            Field("response_content", record="response_body"),
        ),
        record="API call",
        derived=(Derived("ok"),),
    ),
    Entry(
        Waiter,
        "waiters",
        (
            Field("created_ms", MILLIS, "created_at"),
            Field("deadline_ms", MILLIS, "deadline"),
        ),
        record="waiter",
        derived=(Derived("step_name"), Derived("step_type")),
    ),
    Entry(
        MessageOptions,
        "message_options",
        (),
        record="message options",
        # What callbacks of a message are published with, and which options a publish
        # named: the engine's own bookkeeping, read by nothing a record offers.
        left_out=_OPTIONS_LEFT_OUT,
    ),
    Entry(
        RunSettings,
        "run_settings",
        (),
        record="run settings",
        derived=(
            # The run-wide settings, each the property that reads its option.
            *_options_read_by(RunSettings, hoisted=False),
        ),
    ),
    Entry(Attempt, "attempts"),
    Entry(AttemptResult, "attempt_results"),
    Entry(Plan, "plans"),
    Entry(Endpoint, "url_group_endpoints", record="endpoint"),
    Entry(
        UrlGroup,
        "url_groups",
        _TIMES,
        record="URL group",
    ),
    Entry(
        Invoker,
        "invokers",
        (Field("created_ms", MILLIS, "created_at"),),
        record="invoker",
    ),
    Entry(RunHeaders, "run_headers"),
    Entry(WorkflowStep, "workflow_steps"),
    Entry(StepGroup, "step_groups"),
    Entry(RunMember, "run_members"),
    Entry(
        WorkflowRun,
        "workflow_runs",
        (
            Field("created_ms", MILLIS, "created_at"),
            Field("completed_ms", MILLIS, "completed_at"),
            Field("members", RUN_MESSAGES, "messages"),
        ),
        record="workflow run",
        derived=(
            Derived("body"),
            Derived("invoker_run_id", read=lambda run: run.invoker and run.invoker.run_id),
            Derived("labels", TUPLE),
            Derived("label"),
            Derived("flow_control_key"),
            Derived("failure_function_state"),
            Derived("steps", read=lambda run: [_step(step) for step in run.steps]),
            Derived("step_groups", read=lambda run: [_group(group) for group in run.step_groups]),
        ),
        build=_build_run,
        get=_run_field,
        summary_leaves=frozenset({"messages"}),
    ),
    Entry(
        WorkflowDlqEntry,
        "workflow_dlq",
        (),
        record="workflow DLQ entry",
        derived=(
            *(Derived(name) for name in ("dlq_id", "run_id", "workflow_url", "url", "body")),
            Derived("created_at", MOMENT),
            Derived("response_status"),
            Derived("response_body"),
            Derived("labels", TUPLE),
            Derived("failure_callback"),
            Derived("failure_function_state"),
        ),
        summary_leaves=frozenset({"entry", "run"}),
    ),
    Entry(DueEvent, "due_events"),
    Entry(
        Schedule,
        "schedules",
        (
            Field("expression", record="cron"),
            Field("content", record="body"),
            Field("created_ms", MILLIS, "created_at"),
            Field("next_ms", MILLIS, "next_run"),
            Field("last_ms", MILLIS, "last_run"),
        ),
        record="schedule",
        derived=(Derived("method"),),
        summary_leaves=frozenset({"options", "last_message_ids"}),
    ),
    Entry(
        FlowKey,
        "flow_keys",
        (
            Field("period_s", record="period"),
            Field("period_start_ms", MILLIS, "period_start"),
            Field("waiting", KEYS, "waiting_messages"),
            Field("wake_ms", MILLIS, "wake_at"),
            Field("outstanding", OUTSTANDING),
        ),
        record="flow-control key",
        # ``waiting`` in a record is the count (what curl and the dashboard show); the
        # model's ``waiting`` is the ids, carried as ``waiting_messages``.
        derived=(Derived("waiting", read=lambda key: key.wait_list_size),),
        summary_leaves=frozenset({"waiting_messages", "outstanding"}),
    ),
    Entry(
        Queue,
        "queues",
        (*_TIMES, Field("members", KEYS)),
        record="queue",
        derived=(Derived("lag"),),
        summary_leaves=frozenset({"members", "parked"}),
    ),
    Entry(RejectedCall, "rejections"),
    Entry(Fault, "faults"),
)
