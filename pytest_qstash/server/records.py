"""What the server's inspection endpoints answer, and how a client reads it back.

Each model a test reads (``Message``, ``Delivery``, ``WorkflowRun``, ...) has one ``Model``
here: the list of its wire fields. The server renders an item with it, and the client reads
the JSON back with the same ``Model`` into an instance of the in-process class itself, so a
server's records have the fixture's fields and methods (``run.step(name)``,
``run.failure_function_state``, ``message.json()``), computed by the same code.

On the wire, times are ISO 8601 strings, headers ``[name, value]`` pairs, bodies text. Fields
a model only derives (``delivery.ok``, ``run.labels``, ``run.steps``) are rendered too, for
readers of the JSON that are not this client (curl, the dashboard); the client recomputes
them. What a message was published with is written once, at its top level where a test reads
it, and put back into its ``options`` when read (``Derived.hoisted_from``). A model's
``left_out`` names the dataclass fields that do not travel, each for a reason said beside it;
the tests check that every other field does.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import Any, Generic, TypeVar

import httpx

from ..state.flow_control import FlowKey
from ..state.models import ApiCall, Delivery, DlqEntry, Event, FlowControl, Invoker, Message, Waiter
from ..state.options import MessageOptions
from ..state.queues import Queue
from ..state.retry import RetryDelayExpression
from ..state.run_settings import RunSettings
from ..state.schedules import CronExpression, Schedule
from ..state.url_groups import Endpoint, UrlGroup
from ..state.workflow_dlq import WorkflowDlqEntry
from ..state.workflows import StepGroup, WorkflowRun, WorkflowStep

T = TypeVar("T")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


def iso_time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def read_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- how one value travels ---------------------------------------------------------------------
class Kind:
    """A value's wire form: ``encode`` for the server, ``decode`` for the client. None travels
    as null and comes back as None, whatever the kind."""

    def encode(self, value: Any) -> Any:
        return value

    def decode(self, value: Any) -> Any:
        return value


class _Plain(Kind):
    pass


#: Moments already written (a batch's messages share one): cleared when it grows past
#: ``_MOMENTS_KEPT``, so it stays small whatever the clock does.
_moments: dict[int, str] = {}
_MOMENTS_KEPT = 4096


class _Millis(Kind):
    """Integer milliseconds since the epoch, as an ISO 8601 moment."""

    def encode(self, value: Any) -> Any:
        text = _moments.get(value)
        if text is None:
            text = (_EPOCH + value * _MS).isoformat().replace("+00:00", "Z")
            if type(value) is int:
                if len(_moments) >= _MOMENTS_KEPT:
                    _moments.clear()
                _moments[value] = text
        return text

    def decode(self, value: Any) -> Any:
        return (read_time(value) - _EPOCH) // _MS


class _Moment(Kind):
    """A datetime (a derived field: rendered only)."""

    def encode(self, value: Any) -> Any:
        return iso_time(value)


class _Bytes(Kind):
    """Bytes as two JSON fields: ``name``, the text (what ``.body`` shows), and
    ``name_base64``, null when that text is the bytes in UTF-8, else base64 of the bytes
    (QStash's ``body``/``bodyBase64`` rule, with the text kept for readers that know only it)."""

    #: The suffix of the base64 field's name.
    suffix = "_base64"

    def encode(self, value: Any) -> Any:
        return bytes_as_text(value)[0]

    def decode(self, value: Any) -> Any:
        return str(value).encode()

    def read(self, text: Any, encoded: Any) -> bytes:
        """The bytes of a ``name`` and ``name_base64`` pair."""
        if encoded is None:
            return str(text).encode()
        return base64.b64decode(str(encoded), validate=True)


def bytes_as_text(value: bytes) -> tuple[str, str | None]:
    """``value`` as its text and, when that text is not the bytes in UTF-8, base64 of them."""
    try:
        return value.decode(), None
    except UnicodeDecodeError:
        return value.decode(errors="replace"), base64.b64encode(value).decode("ascii")


class _Headers(Kind):
    def encode(self, value: Any) -> Any:
        if not value:
            return []
        return [[k, v] for k, v in value.multi_items()]

    def decode(self, value: Any) -> Any:
        # As bytes: a value beyond ASCII (UTF-8, as QStash forwards it) is kept.
        return httpx.Headers([(str(k).encode(), str(v).encode()) for k, v in value])


class _Url(Kind):
    def encode(self, value: Any) -> Any:
        return str(value)

    def decode(self, value: Any) -> Any:
        return httpx.URL(value)


class _Tuple(Kind):
    def encode(self, value: Any) -> Any:
        return list(value)

    def decode(self, value: Any) -> Any:
        return tuple(value)


class _Keys(Kind):
    """An insertion-ordered ``dict[str, None]`` (a set that keeps its order), as a list."""

    def encode(self, value: Any) -> Any:
        return list(value)

    def decode(self, value: Any) -> Any:
        return dict.fromkeys(value)


class _Set(Kind):
    def encode(self, value: Any) -> Any:
        return sorted(value)

    def decode(self, value: Any) -> Any:
        return set(value)


class _RetryDelay(Kind):
    def encode(self, value: Any) -> Any:
        return value.text

    def decode(self, value: Any) -> Any:
        return RetryDelayExpression(value)


class _Cron(Kind):
    def encode(self, value: Any) -> Any:
        return value.text

    def decode(self, value: Any) -> Any:
        return CronExpression.parse(value)


class _Outstanding(Kind):
    """A flow-control key's limits in use: ``{(parallelism, rate, period): count}``."""

    def encode(self, value: Any) -> Any:
        return [[*limits, count] for limits, count in value.items()]

    def decode(self, value: Any) -> Any:
        return {(p, r, s): n for p, r, s, n in value}


class ListOf(Kind):
    def __init__(self, kind: Kind) -> None:
        self.kind = kind

    def encode(self, value: Any) -> Any:
        return [None if v is None else self.kind.encode(v) for v in value]

    def decode(self, value: Any) -> Any:
        return [None if v is None else self.kind.decode(v) for v in value]


class Nested(Kind):
    def __init__(self, model: Model[Any]) -> None:
        self.model = model

    def encode(self, value: Any) -> Any:
        return self.model.render(value)

    def decode(self, value: Any) -> Any:
        return self.model.read(value)


PLAIN: Kind = _Plain()
MILLIS: Kind = _Millis()
MOMENT: Kind = _Moment()
BYTES = _Bytes()
HEADERS: Kind = _Headers()


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


@dataclasses.dataclass(frozen=True)
class Derived:
    """A field the server renders from a property (``read`` says how), not read back.

    ``hoisted_from`` names a nested wire field and its key (``("options", "method")``) that
    this property reads (a message's ``method`` is its ``options.method``): the value is
    written once, here at the top level, and taken out of the nested JSON; reading puts it
    back there. When the nested field is null, the property is read as usual."""

    name: str
    kind: Kind = PLAIN
    read: Callable[[Any], Any] | None = None
    hoisted_from: tuple[str, str] | None = None


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
    def _plan(self) -> tuple[_Step, ...]:
        """Per rendered field, in order: its name, what reads it from an item (an attribute
        name, or a function), what writes a value that is not None (None: the value is its
        own JSON), and the nested field and key it is moved out of (``Derived.hoisted_from``)."""
        plan: list[_Step] = []
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
        namespace: dict[str, Callable[[Any], Any]] = {}
        lines = ["def render(item):", "    out = {}"]
        for i, (name, read, write, hoisted_from) in enumerate(self._plan):
            if name in without:
                continue
            indent = "    "
            if hoisted_from is not None:
                lines += [
                    f"    nested = out.get({hoisted_from[0]!r})",
                    "    if nested is not None:",
                    f"        out[{name!r}] = nested.pop({hoisted_from[1]!r})",
                    "    else:",
                ]
                indent = "        "
            if isinstance(read, str):
                if not read.isidentifier():
                    raise ValueError(f"{self.kind}: no attribute can be named {read!r}")
                lines.append(f"{indent}v = item.{read}")
            else:
                namespace[f"R{i}"] = read
                lines.append(f"{indent}v = R{i}(item)")
            if write is _SPLIT:
                namespace["split"] = bytes_as_text
                encoded = name + _Bytes.suffix
                lines += [
                    f"{indent}if v is None:",
                    f"{indent}    out[{name!r}] = out[{encoded!r}] = None",
                    f"{indent}else:",
                    f"{indent}    out[{name!r}], out[{encoded!r}] = split(v)",
                ]
            elif write is None:
                lines.append(f"{indent}out[{name!r}] = v")
            else:
                namespace[f"W{i}"] = write
                lines.append(f"{indent}out[{name!r}] = None if v is None else W{i}(v)")
        lines.append("    return out")
        exec("\n".join(lines), namespace)  # the model's own field names only
        made = namespace["render"]
        self._renderers[without] = made
        return made

    def render(self, item: T, *, without: frozenset[str] = frozenset()) -> dict[str, Any]:
        return self._renderer(without)(item)

    def summary(self, item: T) -> dict[str, Any]:
        """The item's JSON without ``summary_leaves``: what a list shows, bounded whatever
        the item holds. ``read`` cannot read it back."""
        return self.render(item, without=self.summary_leaves)

    @functools.cached_property
    def _bytes(self) -> tuple[Wire, ...]:
        """The wire fields that are bytes (read from two JSON fields)."""
        return tuple(wire for wire in self.fields if isinstance(wire.kind, _Bytes))

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
                    encoded = data.get(wire.name + _Bytes.suffix)
                    values[wire.field] = BYTES.read(text, encoded)
            if self._build is not None:
                return self._build(values)
            return self.cls(**values)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"cannot read a {self.kind} from the server's answer ({type(exc).__name__}: "
                f"{exc}); is the server the same pytest-qstash version as this client?"
            ) from None


#: One rendered field: its name, reader (an attribute's name or a function), writer and what
#: it is a copy of (``Model._plan``).
_Step = tuple[
    str, "str | Callable[[Any], Any]", "Callable[[Any], Any] | None", "tuple[str, str] | None"
]


def _read_with(get: Callable[[Any, str], Any], field: str, item: Any) -> Any:
    return get(item, field)


def _writer(kind: Kind) -> Callable[[Any], Any] | None:
    """What writes a value of ``kind``, or None when a value is its own JSON (``_SPLIT``:
    bytes, written as two fields)."""
    if isinstance(kind, _Bytes):
        return _SPLIT
    return None if type(kind) in (Kind, _Plain) else kind.encode


def _split(value: Any) -> Any:
    raise AssertionError("bytes are written by the renderer's own code")


_SPLIT: Callable[[Any], Any] = _split


# -- the models ---------------------------------------------------------------------------------
FLOW_CONTROL = Model(
    FlowControl,
    "flow control",
    [Wire("key"), Wire("parallelism"), Wire("rate"), Wire("period")],
)

DELIVERY = Model(
    Delivery,
    "delivery",
    [
        Wire("message_id"),
        Wire("url"),
        Wire("method"),
        Wire("headers", HEADERS),
        Wire("body", BYTES, "content"),
        Wire("at", MILLIS, "at_ms"),
        Wire("retried"),
        Wire("status"),
        Wire("response_headers", HEADERS),
        Wire("response_body", BYTES, "response_content"),
        Wire("error"),
        Wire("kind"),
        Wire("ended_at", MILLIS, "ended_ms"),
    ],
    [Derived("ok")],
    # The app's exception object stays in the server: its text is in ``error``.
    left_out=["exception"],
)

MESSAGE_OPTIONS = Model(
    MessageOptions,
    "message options",
    [
        Wire("method"),
        Wire("headers", HEADERS),
        Wire("delay_ms"),
        Wire("not_before_ms"),
        Wire("retries"),
        Wire("retry_delay", _RetryDelay()),
        Wire("timeout_ms"),
        Wire("callback"),
        Wire("failure_callback"),
        Wire("callback_headers", HEADERS),
        Wire("failure_callback_headers", HEADERS),
        Wire("deduplication_id"),
        Wire("content_based_deduplication"),
        Wire("label"),
        Wire("redact", _Tuple()),
        Wire("flow_control", Nested(FLOW_CONTROL)),
        Wire("cron"),
        Wire("schedule_id"),
        Wire("queue"),
        Wire("workflow_headers"),
    ],
    # What callbacks of a message are published with, and which options a publish named:
    # the engine's own bookkeeping, read by nothing a record offers.
    left_out=["callback_options", "failure_callback_options", "given"],
)


def _option(name: str, kind: Kind = PLAIN) -> Derived:
    """A message's property that reads its option ``name``, written at the top level."""
    return Derived(name, kind, hoisted_from=("options", name))


MESSAGE = Model(
    Message,
    "message",
    [
        Wire("message_id"),
        Wire("url"),
        Wire("body", BYTES, "content"),
        Wire("created_at", MILLIS, "created_ms"),
        Wire("not_before", MILLIS, "not_before_ms"),
        Wire("max_retries"),
        Wire("options", Nested(MESSAGE_OPTIONS)),
        Wire("state"),
        Wire("retried"),
        Wire("queue"),
        Wire("url_group"),
        Wire("endpoint_name"),
        Wire("schedule_id"),
        Wire("caller_ip"),
        Wire("callback_for"),
        Wire("is_failure_callback"),
        Wire("workflow_run_id"),
        Wire("deliveries", ListOf(Nested(DELIVERY))),
        Wire("cascade_depth"),
        Wire("from_schedule"),
        Wire("retried_from"),
    ],
    # ``labels``: split as the QStash API shows them, and as a run's are.
    [
        Derived("content_type"),
        Derived("done"),
        Derived("labels", _Tuple()),
        # What the message was published with, at the top level (the fields a test reads),
        # each the property that reads its option: written there only, not in ``options``.
        _option("method"),
        _option("headers", HEADERS),
        _option("label"),
        _option("deduplication_id"),
        _option("content_based_deduplication"),
        _option("retry_delay"),
        _option("timeout_ms"),
        _option("callback"),
        _option("failure_callback"),
        _option("callback_headers", HEADERS),
        _option("failure_callback_headers", HEADERS),
        _option("flow_control", Nested(FLOW_CONTROL)),
        _option("redact", _Tuple()),
    ],
)

DLQ_ENTRY = Model(
    DlqEntry,
    "DLQ entry",
    [
        Wire("dlq_id"),
        Wire("message", Nested(MESSAGE)),
        Wire("created_at", MILLIS, "created_ms"),
        Wire("response_status"),
        Wire("response_headers", HEADERS),
        Wire("response_body", BYTES, "response_content"),
        Wire("error"),
    ],
    [
        Derived("message_id"),
        Derived("url"),
        Derived("body"),
        Derived("retried"),
        Derived("workflow_run_id"),
    ],
)

EVENT = Model(
    Event,
    "event",
    [
        Wire("message_id"),
        Wire("state"),
        Wire("time", MILLIS, "time_ms"),
        Wire("url"),
        Wire("error"),
        Wire("next_delivery_time", MILLIS, "next_delivery_ms"),
        Wire("response_status"),
        Wire("response_headers", HEADERS),
        Wire("response_body", BYTES, "response_content"),
    ],
    # The message a log line is about is in the messages list, by ``message_id`` (the
    # client links it back): nesting it sent every message again with each of its lines.
    left_out=["message"],
)


SCHEDULE = Model(
    Schedule,
    "schedule",
    [
        Wire("schedule_id"),
        Wire("destination"),
        Wire("cron", _Cron(), "expression"),
        Wire("body", BYTES, "content"),
        Wire("options", Nested(MESSAGE_OPTIONS)),
        Wire("created_at", MILLIS, "created_ms"),
        Wire("next_run", MILLIS, "next_ms"),
        Wire("paused"),
        Wire("queue"),
        Wire("caller_ip"),
        Wire("last_run", MILLIS, "last_ms"),
        Wire("last_message_ids"),
        Wire("error"),
        Wire("generation"),
    ],
    [Derived("method")],
    summary_leaves=["options", "last_message_ids"],
)

QUEUE = Model(
    Queue,
    "queue",
    [
        Wire("name"),
        Wire("created_at", MILLIS, "created_ms"),
        Wire("updated_at", MILLIS, "updated_ms"),
        Wire("parallelism"),
        Wire("paused"),
        Wire("members", _Keys()),
        Wire("parked", _Set()),
    ],
    [Derived("lag")],
    summary_leaves=["members", "parked"],
)

ENDPOINT = Model(Endpoint, "endpoint", [Wire("url"), Wire("name")])

URL_GROUP = Model(
    UrlGroup,
    "URL group",
    [
        Wire("name"),
        Wire("created_at", MILLIS, "created_ms"),
        Wire("updated_at", MILLIS, "updated_ms"),
        Wire("endpoints", ListOf(Nested(ENDPOINT))),
    ],
)

FLOW_KEY = Model(
    FlowKey,
    "flow-control key",
    [
        Wire("key"),
        Wire("parallelism"),
        Wire("rate"),
        Wire("period", attr="period_s"),
        Wire("paused"),
        Wire("pinned_parallelism"),
        Wire("pinned_rate"),
        Wire("period_start", MILLIS, "period_start_ms"),
        Wire("rate_count"),
        Wire("active"),
        Wire("waiting_messages", _Keys(), "waiting"),
        Wire("wake_at", MILLIS, "wake_ms"),
        Wire("outstanding", _Outstanding()),
    ],
    # ``waiting`` on the wire is the count (what curl and the dashboard show); the model's
    # ``waiting`` is the ids, carried as ``waiting_messages``.
    [Derived("waiting", read=lambda key: key.wait_list_size)],
    summary_leaves=["waiting_messages", "outstanding"],
)

WAITER = Model(
    Waiter,
    "waiter",
    [
        Wire("event_id"),
        Wire("run_id"),
        Wire("url"),
        Wire("headers"),
        Wire("created_at", MILLIS, "created_ms"),
        Wire("deadline", MILLIS, "deadline_ms"),
        Wire("timeout_url"),
        Wire("timeout_headers"),
        Wire("timeout_body"),
        Wire("step"),
        Wire("waiter_id"),
        Wire("generation"),
        Wire("options", Nested(MESSAGE_OPTIONS)),
        Wire("timeout_options", Nested(MESSAGE_OPTIONS)),
    ],
    [Derived("step_name"), Derived("step_type")],
)

API_CALL = Model(
    ApiCall,
    "API call",
    [
        Wire("method"),
        Wire("path"),
        Wire("url", _Url(), "request_url"),
        Wire("headers", HEADERS),
        Wire("body", BYTES, "content"),
        Wire("at", MILLIS, "at_ms"),
        Wire("status"),
        Wire("response_headers", HEADERS),
        Wire("response_body", BYTES, "response_content"),
        Wire("error"),
    ],
    [Derived("ok")],
)

INVOKER = Model(
    Invoker,
    "invoker",
    [
        Wire("run_id"),
        Wire("url"),
        Wire("created_at", MILLIS, "created_ms"),
        Wire("step"),
        Wire("headers"),
        Wire("options", Nested(MESSAGE_OPTIONS)),
    ],
)

RUN_SETTINGS = Model(
    RunSettings,
    "run settings",
    [
        Wire("options", Nested(MESSAGE_OPTIONS)),
        Wire("run_wide"),
    ],
    [
        Derived("retries"),
        Derived("retry_delay", _RetryDelay()),
        Derived("timeout_ms"),
        Derived("failure_callback"),
        Derived("failure_callback_headers", HEADERS),
        Derived("label"),
        Derived("flow_control", Nested(FLOW_CONTROL)),
    ],
)


class _RunMessages(Kind):
    """A run's messages with the call type each joined it under."""

    def encode(self, value: Any) -> Any:
        return [
            {"call_type": call_type, "message": MESSAGE.render(message)}
            for message, call_type in value
        ]

    def decode(self, value: Any) -> Any:
        return [(MESSAGE.read(item["message"]), str(item["call_type"])) for item in value]


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
    messages = values.pop("_members")
    run = WorkflowRun(**values)
    for message, call_type in messages:
        run.add_message(message, call_type)
    return run


def _run_field(run: WorkflowRun, name: str) -> Any:
    return run.typed_messages if name == "_members" else getattr(run, name)


RUN = Model(
    WorkflowRun,
    "workflow run",
    [
        Wire("run_id"),
        Wire("url"),
        Wire("created_at", MILLIS, "created_ms"),
        Wire("state"),
        Wire("completed_at", MILLIS, "completed_ms"),
        Wire("dlq_id"),
        Wire("response"),
        Wire("invoker", Nested(INVOKER)),
        Wire("messages", _RunMessages(), "_members"),
        Wire("settings", Nested(RUN_SETTINGS)),
        Wire("resumed_from"),
        Wire("carried"),
        Wire("refused"),
    ],
    [
        Derived("body"),
        Derived("invoker_run_id", read=lambda run: run.invoker and run.invoker.run_id),
        Derived("labels", _Tuple()),
        Derived("label"),
        Derived("flow_control_key"),
        Derived("failure_function_state"),
        Derived("steps", read=lambda run: [_step(step) for step in run.steps]),
        Derived("step_groups", read=lambda run: [_group(group) for group in run.step_groups]),
    ],
    build=_build_run,
    get=_run_field,
    summary_leaves=["messages"],
)

WORKFLOW_DLQ_ENTRY = Model(
    WorkflowDlqEntry,
    "workflow DLQ entry",
    [Wire("entry", Nested(DLQ_ENTRY)), Wire("run", Nested(RUN))],
    [
        Derived("dlq_id"),
        Derived("run_id"),
        Derived("workflow_url"),
        Derived("url"),
        Derived("body"),
        Derived("created_at", MOMENT),
        Derived("response_status"),
        Derived("response_body"),
        Derived("labels", _Tuple()),
        Derived("failure_callback"),
        Derived("failure_function_state"),
    ],
    summary_leaves=["entry", "run"],
)


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
