"""What the server's inspection endpoints answer, and how a client reads it back.

Each model a test reads (``Message``, ``Delivery``, ``WorkflowRun``, ...) has one ``Model``
here, derived from its entry in the field registry (``fields.REGISTRY``): the list of its
wire fields. The server renders an item with it, and the client reads
the JSON back with the same ``Model`` into an instance of the in-process class itself, so a
server's records have the fixture's fields and methods (``run.step(name)``,
``run.failure_function_state``, ``message.json()``), computed by the same code.

On the wire, times are ISO 8601 strings, headers ``[name, value]`` pairs, bodies text with
base64 beside when the text is not the bytes (``fields.Bytes``). Fields
a model only derives (``delivery.ok``, ``run.labels``, ``run.steps``) are rendered too, for
readers of the JSON that are not this client (curl, the dashboard); the client recomputes
them. What a message was published with is written once, at its top level where a test reads
it, and put back into its ``options`` when read (``Derived.hoisted_from``). A model's
``left_out`` names the dataclass fields that do not travel, each for a reason said beside it;
the tests check that every other field does.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from ...engine.flow_control import FlowKey
from ...engine.models import ApiCall, Delivery, DlqEntry, Event, Invoker, Message
from ...engine.options import FlowControl, MessageOptions
from ...engine.queues import Queue
from ...engine.run_settings import RunSettings
from ...engine.schedules import Schedule
from ...engine.url_groups import Endpoint, UrlGroup
from ...engine.waiters import Waiter
from ...engine.workflow_dlq import WorkflowDlqEntry
from ...engine.workflows import WorkflowRun
from .. import codegen
from ..fields import REGISTRY, Derived, Entry
from ..forms import BYTES, PLAIN, Bytes, Kind, ListOf, Nested, bytes_as_text
from ..forms import iso_time as iso_time
from ..forms import read_time as read_time

T = TypeVar("T")

__all__ = ["BYTES", "Derived", "Kind", "ListOf", "Model", "Nested", "Wire", "bytes_as_text"]


@dataclasses.dataclass(frozen=True)
class Wire:
    """One field on the wire: its JSON ``name``, the model field it comes from and goes back
    into (``attr``, by default the same name), and its ``kind``."""

    name: str
    kind: Kind = PLAIN
    attr: str = ""

    @property
    def field(self) -> str:
        return self.attr or self.name


class Model(Generic[T]):
    """One model's wire form: renders an item to JSON and reads it back into the class."""

    def __init__(
        self,
        cls: type[T],
        kind: str,
        fields: Iterable[Wire],
        derived: Iterable[Derived] = (),
        *,
        left_out: Iterable[str] = (),
        build: Callable[[dict[str, Any]], T] | None = None,
        get: Callable[[T, str], Any] | None = None,
        summary_leaves: Iterable[str] = (),
    ) -> None:
        self.cls = cls
        self.kind = kind
        self.fields = tuple(fields)
        self.derived = tuple(derived)
        self.left_out = frozenset(left_out)
        self._build = build
        self._get = get
        #: Wire fields that grow with what the item holds (a run's messages, a queue's
        #: members): a list's row (``summary``) goes without them.
        self.summary_leaves = frozenset(summary_leaves)
        self._renderers: dict[frozenset[str], Callable[[Any], dict[str, Any]]] = {}

    @functools.cached_property
    def _plan(self) -> tuple[codegen.Step, ...]:
        """Per rendered field, in order: its name, what reads it from an item (an attribute
        name, or a function), what writes a value that is not None (None: the value is its
        own JSON), and the nested field and key it is moved out of (``Derived.hoisted_from``)."""
        plan: list[codegen.Step] = []
        for wire in self.fields:
            if self._get is not None:
                read: str | Callable[[Any], Any] = functools.partial(
                    _read_with, self._get, wire.field
                )
            else:
                read = wire.field
            plan.append((wire.name, read, _writer(wire.kind), None))
        for extra in self.derived:
            plan.append(
                (extra.name, extra.read or extra.name, _writer(extra.kind), extra.hoisted_from)
            )
        return tuple(plan)

    def _renderer(self, without: frozenset[str]) -> Callable[[Any], dict[str, Any]]:
        """The function that renders an item, leaving out ``without``: written once per
        model (and per set of fields left out), as ``dataclasses`` writes ``__init__``, since
        a list renders thousands of items. Its code is made of the model's own field names;
        nothing of an item is in it."""
        made = self._renderers.get(without)
        if made is not None:
            return made
        made = codegen.renderer(self.kind, self._plan, without)
        self._renderers[without] = made
        return made

    def render(self, item: T, *, without: frozenset[str] = frozenset()) -> dict[str, Any]:
        return self._renderer(without)(item)

    def only(self, names: Iterable[str]) -> Callable[[T], dict[str, Any]]:
        """What renders an item's fields ``names`` alone (a dashboard row's), as ``render``
        does: a name the model does not render is an error."""
        keep = frozenset(names)
        rendered = {step[0] for step in self._plan}
        if not keep <= rendered:
            raise ValueError(f"{self.kind}: no field {sorted(keep - rendered)} to render")
        return self._renderer(frozenset(rendered - keep))

    def summary(self, item: T) -> dict[str, Any]:
        """The item's JSON without ``summary_leaves``: what a list shows, bounded whatever
        the item holds. ``read`` cannot read it back."""
        return self.render(item, without=self.summary_leaves)

    @functools.cached_property
    def _bytes(self) -> tuple[Wire, ...]:
        """The wire fields that are bytes (read from two JSON fields)."""
        return tuple(wire for wire in self.fields if isinstance(wire.kind, Bytes))

    @functools.cached_property
    def _hoisted(self) -> tuple[tuple[str, str, str], ...]:
        """Per hoisted field: its top-level name, and the nested field and key it goes back to."""
        return tuple(
            (extra.name, *extra.hoisted_from) for extra in self.derived if extra.hoisted_from
        )

    def _unhoisted(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with each hoisted value put back into its nested field (copies: the
        caller's JSON is left as it was)."""
        data = dict(data)
        copied: set[str] = set()
        for name, nested, key in self._hoisted:
            inner = data[nested]
            if inner is None:
                continue
            if nested not in copied:
                inner = data[nested] = dict(inner)
                copied.add(nested)
            inner[key] = data[name]
        return data

    def read(self, data: dict[str, Any]) -> T:
        """An instance of the model from what ``render`` wrote; ``ValueError`` when the
        JSON is not one (a server of another version, say)."""
        try:
            if self._hoisted:
                data = self._unhoisted(data)
            values = {
                wire.field: None if data[wire.name] is None else wire.kind.decode(data[wire.name])
                for wire in self.fields
            }
            for wire in self._bytes:
                text = data[wire.name]
                if text is not None:
                    encoded = data.get(wire.name + Bytes.suffix)
                    values[wire.field] = BYTES.read(text, encoded)
            if self._build is not None:
                return self._build(values)
            return self.cls(**values)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"cannot read a {self.kind} from the server's answer ({type(exc).__name__}: "
                f"{exc}); is the server the same pytest-qstash version as this client?"
            ) from None


def _read_with(get: Callable[[Any, str], Any], field: str, item: Any) -> Any:
    return get(item, field)


def _writer(kind: Kind) -> Callable[[Any], Any] | None:
    """What writes a value of ``kind``, or None when a value is its own JSON
    (``codegen.SPLIT``: bytes, written as two fields)."""
    if isinstance(kind, Bytes):
        return codegen.SPLIT
    return None if kind is PLAIN or type(kind) is Kind else kind.encode


# -- the models, from the registry ------------------------------------------------------------
def models(registry: Iterable[Entry] = REGISTRY) -> dict[type, Model[Any]]:
    """A ``Model`` per class of ``registry`` that the control API shows (``Entry.record``):
    each of its fields as the registry says, a nested class's by that class's model."""
    entries = {entry.cls: entry for entry in registry if entry.record}
    made: dict[type, Model[Any]] = {}

    def model_of(cls: type) -> Model[Any]:
        model = made.get(cls)
        if model is None:
            # A class the registry names by a subclass (a copy that changed a model) is it.
            entry = entries.get(cls) or next(e for c, e in entries.items() if issubclass(c, cls))
            model = made[cls] = made[entry.cls] = Model(
                entry.cls,
                entry.record,
                (),
                left_out=entry.left_out,
                build=entry.build,
                get=entry.get,
                summary_leaves=entry.summary_leaves,
            )
            # Bound after the model is known: a class may nest itself (not today, but cheap).
            model.fields = tuple(
                Wire(field.record_name, (field.form or PLAIN).bind(model_of), field.name)
                for field in entry.all_fields
                if field.name not in entry.left_out
            )
            model.derived = tuple(
                dataclasses.replace(extra, kind=extra.kind.bind(model_of))
                for extra in entry.derived
            )
        return model

    for cls in entries:
        model_of(cls)
    return made


_MODELS = models()
FLOW_CONTROL: Model[FlowControl] = _MODELS[FlowControl]
DELIVERY: Model[Delivery] = _MODELS[Delivery]
MESSAGE_OPTIONS: Model[MessageOptions] = _MODELS[MessageOptions]
MESSAGE: Model[Message] = _MODELS[Message]
DLQ_ENTRY: Model[DlqEntry] = _MODELS[DlqEntry]
EVENT: Model[Event] = _MODELS[Event]
SCHEDULE: Model[Schedule] = _MODELS[Schedule]
QUEUE: Model[Queue] = _MODELS[Queue]
ENDPOINT: Model[Endpoint] = _MODELS[Endpoint]
URL_GROUP: Model[UrlGroup] = _MODELS[UrlGroup]
FLOW_KEY: Model[FlowKey] = _MODELS[FlowKey]
WAITER: Model[Waiter] = _MODELS[Waiter]
API_CALL: Model[ApiCall] = _MODELS[ApiCall]
INVOKER: Model[Invoker] = _MODELS[Invoker]
RUN_SETTINGS: Model[RunSettings] = _MODELS[RunSettings]
RUN: Model[WorkflowRun] = _MODELS[WorkflowRun]
WORKFLOW_DLQ_ENTRY: Model[WorkflowDlqEntry] = _MODELS[WorkflowDlqEntry]


#: Each inspection list, by the fixture's attribute that holds it: its item's model.
MODELS: dict[str, Model[Any]] = {
    "messages": MESSAGE,
    "deliveries": DELIVERY,
    "dlq": DLQ_ENTRY,
    "events": EVENT,
    "schedules": SCHEDULE,
    "queues": QUEUE,
    "url_groups": URL_GROUP,
    "runs": RUN,
    "flow_keys": FLOW_KEY,
    "waiters": WAITER,
    "workflow_dlq": WORKFLOW_DLQ_ENTRY,
    "api_calls": API_CALL,
}

#: The state lists (what the dashboard shows): how one item is written, its kind's name. The
#: API calls are served but not shown: each holds its caller's Authorization header.
LISTS: dict[str, tuple[Callable[[Any], dict[str, Any]], str]] = {
    name: (model.render, model.kind) for name, model in MODELS.items() if name != "api_calls"
}

#: Each model's summary by the name of what it renders: a row of a list (the dashboard's).
delivery = DELIVERY.summary
message = MESSAGE.summary
dlq_entry = DLQ_ENTRY.summary
event = EVENT.summary
schedule = SCHEDULE.summary
queue = QUEUE.summary
url_group = URL_GROUP.summary
run = RUN.summary
flow_key = FLOW_KEY.summary
waiter = WAITER.summary
workflow_dlq_entry = WORKFLOW_DLQ_ENTRY.summary
api_call = API_CALL.summary
