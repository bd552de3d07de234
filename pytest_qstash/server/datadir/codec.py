"""The engine's state as plain data, and back: what a data dir holds (``serve --data-dir``).

The state is a graph of objects (a DLQ entry and a log entry refer to the message they are
about, a run to its messages, the clock's heap to due events): each object of a class in
``KINDS`` (made from the field registry, ``fields.REGISTRY``) becomes one row of its kind's
table, its fields as JSON under their public names, and a reference to it is ``{"$ref": n}``.
So shared objects come back shared, and cycles are no problem.

Only the classes in ``KINDS`` are ever built, with ``object.__new__`` and by setting their
fields: no constructor, no ``__setstate__``, nothing named by the data runs. The few values
that are not JSON (bytes, headers, tuples, a cron or retry-delay expression, the id
generator's random state) are written as small tagged objects (``forms.TAGGED``) and rebuilt
by the fixed function for their tag; an expression is saved as its text and parsed again.
Anything else in the state is an error when writing (a new kind of object must be added to
the registry, with a ``SCHEMA`` bump and a migration: ``tests/test_datadir_codec.py`` says so).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .. import codegen
from .. import fields as registry
from ..fields import Entry
from ..forms import TAGGED, UNTAGGED

#: The plain-data layout's version. Bump it whenever a saved class gains, loses or renames a
#: public field (or a kind comes or goes), and add a migration from the previous one to
#: MIGRATIONS. (1 was the pickled layout of pytest-qstash 0.1, which is not read; 2 named the
#: private attributes of the store's tables, 3 their public names, 4 added the messages a server
#: holds back, 5 the recorded deadlines of a loaded run's waits.)
SCHEMA = 5

#: Plain data, as read from a data dir: ``meta``, ``roots`` (name: value) and ``kinds``
#: (kind: {row id: {field: value}}).
Document = dict[str, Any]
#: Migrations: ``MIGRATIONS[n]`` turns a schema ``n`` document into a schema ``n + 1`` one.
MIGRATIONS: dict[int, Callable[[Document], None]] = {}

#: Schema 2 saved the store's tables under their private attributes' names; schema 3 under
#: public ones (the registry's). Written out, not derived: a migration never changes.
_PUBLIC_NAMES_3 = {
    "account": {"_current": "current", "_next": "next", "_token": "token"},
    "clock": {"_heap": "heap", "_seq": "seq"},
    "dedup_table": {"_ends": "ends", "_seen": "seen"},
    "dlq_table": {"_seq": "seq"},
    "id_generator": {"_random": "random"},
    "rejection_table": {"_kept": "kept"},
    "retention": {
        "_dead": "dead",
        "_deliveries": "deliveries",
        "_dlq": "dlq",
        "_events": "events",
        "_finished": "finished",
        "_finished_ms": "finished_ms",
        "_runs": "runs",
        "_workflows": "workflows",
    },
    "run_table": {"_members": "members"},
    "schedule_table": {"_clock": "clock", "_ids": "ids"},
    "store": {
        "_attempt_seq": "attempt_seq",
        "_callbacks_pending": "callbacks_pending",
        "_generation": "generation",
        "_global_waiting": "global_waiting",
        "_published_day": "published_day",
    },
    "trails": {"_items": "items", "_start": "start"},
    "waiter_table": {"_by_id": "by_id", "_count": "count", "_saved": "saved"},
    "workflow_runs": {"_members": "members"},
}


def _public_names(document: Document) -> None:
    """Schema 2 to 3: each row's private attribute names become the public ones."""
    for kind, renamed in _PUBLIC_NAMES_3.items():
        for fields in document["kinds"].get(kind, {}).values():
            for old, new in renamed.items():
                if type(fields) is dict and old in fields:
                    fields[new] = fields.pop(old)


def _messages_name_the_run_they_began(document: Document) -> None:
    """Schema 3 adds ``Message.started_run_id`` (the workflow run a plain publish began): a
    message saved before says it began none."""
    for fields in document["kinds"].get("messages", {}).values():
        fields.setdefault("started_run_id", None)


def _to_schema_3(document: Document) -> None:
    _public_names(document)
    _messages_name_the_run_they_began(document)


MIGRATIONS[2] = _to_schema_3


def _to_schema_4(document: Document) -> None:
    """Schema 4 adds the store's ``set_aside`` (the messages a server holding a loaded export
    holds back): a store saved before held none."""
    for fields in document["kinds"].get("store", {}).values():
        if type(fields) is dict:
            fields.setdefault("set_aside", {})


MIGRATIONS[3] = _to_schema_4


def _to_schema_5(document: Document) -> None:
    """Schema 5 adds ``WorkflowRun.wait_deadlines`` (the deadlines an export recorded for a
    loaded run's waits): a run saved before had none."""
    for fields in document["kinds"].get("workflow_runs", {}).values():
        if type(fields) is dict:
            fields.setdefault("wait_deadlines", {})


MIGRATIONS[4] = _to_schema_5


class CodecError(ValueError):
    """State that cannot be written as plain data, or plain data that is not such state."""


class SavedError(Exception):
    """An exception an app raised, kept in the state, as saved: its type's name and text."""


@dataclasses.dataclass(frozen=True)
class Kind:
    """A class whose objects are saved, field by field, under ``name``: its registry entry
    (``fields.REGISTRY``) as the data dir reads it. A dataclass's fields are read and set
    as themselves; a table (``engine.saved.Saved``) gives and takes its fields by their
    public names (``saved_fields``, ``restore_fields``)."""

    name: str
    cls: type
    #: The saved fields' keys in a row: the data dir's schema.
    fields: tuple[str, ...]

    @classmethod
    def of(cls, entry: Entry) -> Kind:
        return cls(entry.table, entry.cls, tuple(field.name for field in entry.all_fields))

    @functools.cached_property
    def dataclass(self) -> bool:
        return dataclasses.is_dataclass(self.cls)

    @functools.cached_property
    def mapping(self) -> bool:
        """A ``dict`` subclass: its items are saved beside its fields."""
        return issubclass(self.cls, dict)

    @functools.cached_property
    def defaults(self) -> dict[str, Callable[[], Any]]:
        """What a field left out of a row is (fields that have a default)."""
        return _defaults(self.cls) if self.dataclass else {}

    @functools.cached_property
    def filler(self) -> Callable[[Any, Mapping[str, Any], Callable[[Any], Any]], None] | None:
        """For a dataclass (most objects of a large state): a function that sets an object's
        fields from its row, written once for the class, as ``dataclasses`` writes
        ``__init__``. A restart sets every field of every object: a loop over a plan per
        field took most of it. The code is made of the class's own field names only; nothing
        of a row is in it. None for the other kinds (the generic loop in ``Decoder.fill``)."""
        if not self.dataclass or self.mapping:
            return None
        return codegen.filler(self.cls, self.field_defaults, _MISSING, _SCALARS, _MissingField)

    @functools.cached_property
    def field_defaults(self) -> tuple[tuple[str, str, Any, Callable[[], Any] | None], ...]:
        """Per saved field: its key, its attribute (a dataclass's: the same), the shared
        default a row that leaves it out takes (a plain value, never a list or dict; else
        ``_MISSING``), and what makes its default otherwise (None: the field has none, a row
        must have it)."""
        plan = []
        for key in self.fields:
            shared = self.plain_defaults.get(key, _MISSING)
            if type(shared) in (list, dict):
                shared = _MISSING
            plan.append((key, key, shared, self.defaults.get(key)))
        return tuple(plan)

    @functools.cached_property
    def plain_defaults(self) -> dict[str, Any]:
        """Fields whose default is a plain value (or an empty list or dict):
        a row leaves them out while they hold it, which keeps rows small."""
        plain: dict[str, Any] = {}
        for name, make in self.defaults.items():
            value = make()
            scalar = value is None or type(value) in (bool, int, float, str)
            if scalar or (type(value) in (tuple, list, dict) and not value):
                plain[name] = value
        return plain


#: Every class a data dir may hold: nothing else is ever built from one.
KINDS: tuple[Kind, ...] = tuple(Kind.of(entry) for entry in registry.REGISTRY)
_BY_CLASS: dict[type, Kind] = {kind.cls: kind for kind in KINDS}
_BY_NAME: dict[str, Kind] = {kind.name: kind for kind in KINDS}
#: The kinds' names: a data dir's tables beside ``meta`` and ``roots``.
KIND_NAMES = frozenset(_BY_NAME)


def fingerprint() -> dict[str, tuple[str, ...]]:
    """Each saved kind's fields: what a change of must bump ``SCHEMA``."""
    return {kind.name: kind.fields for kind in KINDS}


# -- writing ---------------------------------------------------------------------------------
class Encoder:
    """Writes objects as rows (``rows[kind]``: (id, fields as JSON)) and values as JSON-able
    data referring to them."""

    def __init__(self, known: Iterable[Kind] = KINDS) -> None:
        self._by_class = _BY_CLASS if known is KINDS else {kind.cls: kind for kind in known}
        self._ids: dict[int, int] = {}
        self._pending: list[Any] = []
        self.rows: dict[str, list[tuple[int, str]]] = {}
        self._values: dict[type, Callable[[Any], Any]] = {
            list: lambda v: [self.value(item) for item in v],
            tuple: lambda v: {"$tuple": [self.value(item) for item in v]},
            set: lambda v: {"$set": [self.value(item) for item in v]},
            frozenset: lambda v: {"$frozenset": [self.value(item) for item in v]},
            deque: lambda v: {"$deque": [self.value(item) for item in v], "maxlen": v.maxlen},
            dict: self._dict,
            random.Random: lambda v: {"$random": _random_state(v)},
        }
        for t, (tag, write) in TAGGED.items():
            self._values[t] = functools.partial(_tagged, tag, write)

    def value(self, v: Any) -> Any:
        t = type(v)
        if v is None or t is str or t is int or t is bool or t is float:
            return v
        write = self._values.get(t)
        if write is not None:
            return write(v)
        if t in self._by_class:
            return {"$ref": self._ref(v)}
        if isinstance(v, BaseException):
            return {"$error": f"{t.__name__}: {v}"}
        raise CodecError(
            f"cannot save a {t.__module__}.{t.__qualname__} in a data dir: add it to "
            "pytest_qstash/server/fields.py (REGISTRY), with a SCHEMA bump and a migration"
        )

    def _dict(self, v: dict[Any, Any]) -> Any:
        if all(type(k) is str and not k.startswith("$") for k in v):
            return {k: self.value(item) for k, item in v.items()}
        return {"$map": [[self.value(k), self.value(item)] for k, item in v.items()]}

    def _ref(self, obj: Any) -> int:
        n = self._ids.get(id(obj))
        if n is None:
            n = self._ids[id(obj)] = len(self._ids) + 1
            self._pending.append(obj)
        return n

    def root(self, obj: Any) -> Any:
        """A root's value, and every object it reaches written."""
        value = self.value(obj)
        while self._pending:
            pending, self._pending = self._pending, []
            for item in pending:
                self._write(item)
        return value

    def _write(self, obj: Any) -> None:
        kind = self._by_class[type(obj)]
        plain, value = kind.plain_defaults, self.value
        fields = {}
        if kind.dataclass:
            for key in kind.fields:
                v = getattr(obj, key)
                if key in plain:
                    default = plain[key]
                    if v is default or (type(v) is type(default) and v == default):
                        continue
                fields[key] = value(v)
        else:
            unknown = obj.undeclared_attributes()
            if unknown:
                raise CodecError(
                    f"{type(obj).__qualname__} has fields the data dir does not know: "
                    f"{unknown} (declare them in its SAVED or UNSAVED, bump SCHEMA)"
                )
            for key, v in obj.saved_fields().items():
                fields[key] = value(v)
        if kind.mapping:
            fields["$items"] = self._dict(obj)
        self.rows.setdefault(kind.name, []).append((self._ids[id(obj)], json.dumps(fields)))


def _tagged(tag: str, write: Callable[[Any], Any], value: Any) -> dict[str, Any]:
    return {tag: write(value)}


def _random_state(generator: random.Random) -> list[Any]:
    version, internal, gauss = generator.getstate()
    return [version, list(internal), gauss]


# -- reading ---------------------------------------------------------------------------------
class Decoder:
    """Builds the objects of a document (``kinds``: {kind: {id: fields}}), then values that
    refer to them. ``into`` maps row ids to live objects to restore in place (the engine's
    own store, clock...: whatever else refers to them keeps doing so)."""

    def __init__(
        self,
        kinds: Mapping[str, Mapping[int, Any]],
        into: Mapping[int, Any],
        known: Iterable[Kind] = KINDS,
    ) -> None:
        self._by_name = _BY_NAME if known is KINDS else {kind.name: kind for kind in known}
        self._objects: dict[int, Any] = {}
        self._readers: dict[str, Callable[[Any], Any]] = {
            "$ref": self._deref,
            "$tuple": lambda v: tuple(self._list(v)),
            "$set": lambda v: set(self._keys(v)),
            "$frozenset": lambda v: frozenset(self._keys(v)),
            "$map": self._map,
            "$random": _random,
            "$error": lambda v: SavedError(_text(v)),
        }
        # Their ``ValueError``/``TypeError`` on a malformed value is refused by ``decode``.
        self._readers.update(UNTAGGED)
        objects = self._objects
        for name, rows in kinds.items():
            kind = self._by_name.get(name)
            if kind is None:
                raise CodecError(f"unknown kind of object {name!r}")
            cls = kind.cls
            make: Callable[[type], Any] = dict.__new__ if kind.mapping else object.__new__
            before = len(objects)
            for n, fields in rows.items():
                if type(fields) is not dict:
                    raise CodecError(f"{name} {n}: expected an object of fields")
                live = into.get(n)
                if live is None:
                    objects[n] = make(cls)
                elif type(live) is not cls:
                    raise CodecError(f"{name} {n}: not a {type(live).__qualname__}")
                else:
                    objects[n] = live
            if len(objects) != before + len(rows):
                earlier = set(list(objects)[:before])
                taken = min(n for n in rows if n in earlier)
                raise CodecError(f"{name} {taken}: its id is taken by another object")
        self._rows = kinds

    def fill(self) -> None:
        """Set every object's fields (after all exist: references go any way)."""
        value, set_field, scalars = self.value, object.__setattr__, _SCALARS
        for name, rows in self._rows.items():
            kind = self._by_name[name]
            names = frozenset(kind.fields) | ({"$items"} if kind.mapping else frozenset())
            filler = kind.filler
            if filler is not None:
                for n, fields in rows.items():
                    if not names.issuperset(fields):
                        unknown = sorted(fields.keys() - names)
                        raise CodecError(f"{name} {n}: unknown fields {unknown}")
                    try:
                        filler(self._objects[n], fields, value)
                    except _MissingField as exc:
                        raise CodecError(f"{name} {n}: missing field {exc.args[0]!r}") from None
                continue
            plan = kind.field_defaults
            for n, fields in rows.items():
                obj = self._objects[n]
                if not names.issuperset(fields):
                    unknown = sorted(fields.keys() - names)
                    raise CodecError(f"{name} {n}: unknown fields {unknown}")
                get = fields.get
                values = {}
                for field_name, _, shared, make in plan:
                    v = get(field_name, _MISSING)
                    if v is _MISSING:
                        if shared is not _MISSING:
                            v = shared
                        elif make is not None:
                            v = make()
                        else:
                            raise CodecError(f"{name} {n}: missing field {field_name!r}")
                    elif v is not None and type(v) not in scalars:
                        v = value(v)
                    values[field_name] = v
                if kind.dataclass:
                    for field_name, v in values.items():
                        set_field(obj, field_name, v)
                else:
                    obj.restore_fields(values)
                if kind.mapping:
                    items = value(fields.get("$items", {}))
                    if not isinstance(items, dict):
                        raise CodecError(f"{name} {n}: its items are no mapping")
                    dict.clear(obj)
                    dict.update(obj, items)

    def value(self, v: Any) -> Any:
        t = type(v)
        if t is dict:  # first: the fillers ask only for values that are not scalars
            # A tagged value is a one-key object (a deque's has its maxlen beside); the
            # encoder writes no plain mapping of one key that starts with "$".
            size = len(v)
            if size == 1:
                (tag,) = v
                if tag == "$ref":
                    target = self._objects.get(v[tag]) if type(v[tag]) is int else None
                    if target is None:
                        raise CodecError(f"a reference to no object ({v[tag]!r})")
                    return target
                if tag[:1] == "$":
                    reader = self._readers.get(tag)
                    if reader is None:
                        raise CodecError(f"unknown tagged value {tag!r}")
                    return reader(v[tag])
            elif size == 2 and "$deque" in v:
                maxlen = v.get("maxlen")
                if maxlen is not None and type(maxlen) is not int:
                    raise CodecError("a deque's maxlen is no integer")
                return deque(self._list(v["$deque"]), maxlen)
            value = self.value
            return {k: item if type(item) in _SCALARS else value(item) for k, item in v.items()}
        if t is list:
            return self._list(v)
        if v is None or t is str or t is int or t is bool or t is float:
            return v
        raise CodecError(f"unexpected {t.__name__} in the state")

    def _list(self, v: Any) -> list[Any]:
        if type(v) is not list:
            raise CodecError("expected a list")
        value = self.value
        return [item if type(item) in _SCALARS else value(item) for item in v]

    def _keys(self, v: Any) -> list[Any]:
        """Set members and mapping keys: plain values only (an object's hash may depend on
        fields not set yet)."""
        if type(v) is list and all(type(key) in _PLAIN_KEYS for key in v):
            return v  # plain keys are their own JSON (the usual case: names, ids)
        keys = self._list(v)
        for key in keys:
            members = key if type(key) in (tuple, frozenset) else (key,)
            if not all(type(m) in _PLAIN_KEYS for m in members):
                raise CodecError(f"a {type(key).__name__} as a key or set member")
        return keys

    def _map(self, v: Any) -> dict[Any, Any]:
        if type(v) is not list or not all(type(p) is list and len(p) == 2 for p in v):
            raise CodecError("a mapping's items are no [key, value] pairs")
        keys = self._keys([pair[0] for pair in v])
        return {key: self.value(pair[1]) for key, pair in zip(keys, v, strict=True)}

    def _deref(self, v: Any) -> Any:
        if type(v) is not int or v not in self._objects:
            raise CodecError(f"a reference to no object ({v!r})")
        return self._objects[v]


_PLAIN_KEYS = (str, int, float, bool, type(None), bytes)
#: JSON values that are themselves (no tag to read).
_SCALARS = frozenset({str, int, float, bool})
_MISSING: Any = object()


class _MissingField(Exception):
    """A row without a field that has no default (the caller names the row)."""


def _same(value: Any) -> Any:
    return value


def _defaults(cls: type) -> dict[str, Callable[[], Any]]:
    """A dataclass's fields that have a default (filled when an older row lacks them)."""
    made: dict[str, Callable[[], Any]] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            made[f.name] = functools.partial(_same, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            made[f.name] = f.default_factory
    return made


def _text(v: Any) -> str:
    if type(v) is not str:
        raise CodecError(f"expected text, got {type(v).__name__}")
    return v


def _random(v: Any) -> random.Random:
    generator = random.Random()
    try:
        version, internal, gauss = v
        if type(internal) is not list or not all(type(i) is int for i in internal):
            raise TypeError("not integers")
        generator.setstate((version, tuple(internal), gauss))
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"an unreadable id generator state: {exc}") from None
    return generator


# -- whole documents -------------------------------------------------------------------------
def kinds_of(entries: Iterable[Entry]) -> tuple[Kind, ...]:
    """The kinds of a registry (``fields.REGISTRY``, or a copy of it that a test changed)."""
    return tuple(Kind.of(entry) for entry in entries)


def encode(
    roots: Mapping[str, Any], known: Iterable[Kind] = KINDS
) -> tuple[dict[str, Any], dict[str, list[tuple[int, str]]]]:
    """The roots' values (plain data) and every object they reach, as rows by kind."""
    encoder = Encoder(known)
    values = {name: encoder.root(obj) for name, obj in roots.items()}
    return values, encoder.rows


def decode(
    document: Document,
    into: Mapping[str, Any],
    optional: frozenset[str] = frozenset(),
    known: Iterable[Kind] = KINDS,
) -> dict[str, Any]:
    """The roots of a (current schema) document, its objects built; roots named in ``into``
    are restored into those objects (those in ``optional`` when the document has them)."""
    roots = document["roots"]
    targets: dict[int, Any] = {}
    for name, live in into.items():
        value = roots.get(name)
        if value is None and name in optional:
            continue
        if type(value) is not dict or type(value.get("$ref")) is not int:
            raise CodecError(f"the saved state has no {name}")
        targets[value["$ref"]] = live
    try:
        decoder = Decoder(document["kinds"], targets, known)
        decoder.fill()
        return {name: decoder.value(value) for name, value in roots.items()}
    except CodecError:
        raise
    except Exception as exc:  # whatever a malformed file makes a reader raise: refused
        raise CodecError(f"malformed state: {type(exc).__name__}: {exc}") from None


def migrate(document: Document, schema: int) -> Document:
    """A document of an older schema brought to ``SCHEMA``, one migration at a time."""
    while schema < SCHEMA:
        step = MIGRATIONS.get(schema)
        if step is None:
            raise CodecError(f"no migration from data-dir schema {schema} to {schema + 1}")
        step(document)
        schema += 1
    return document
