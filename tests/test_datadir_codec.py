"""The data dir's codec: the engine's state as plain data and back, building only the
allow-listed classes. The state is made through the real ``qstash`` SDK against the fixture,
written, read into a new fake, and compared as the control API renders it, now and after
time moves on both."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

import httpx
import pytest
from qstash import QStash
from qstash.message import FlowControl

from pytest_qstash import FakeQStash
from pytest_qstash.engine.store import Store
from pytest_qstash.server.control import records
from pytest_qstash.server.datadir import codec as codec

#: The fingerprint of the saved classes' fields, per schema. A change of fields without a new
#: SCHEMA fails ``test_the_saved_fields_are_those_of_the_schema``.
FINGERPRINTS = {
    2: "886dbadfbd4f7571",
    3: "224585d67c06e0c3",
    4: "17cef6e2b199eaf8",
    5: "5506efbdd250d193",
}


class App:
    """An endpoint: ``/fail`` answers 500, anything else 200 (a workflow route too)."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/fail":
            return httpx.Response(500, text="down")
        headers = {"Upstash-Workflow-Sdk-Version": "1"} if "workflow" in request.url.path else {}
        return httpx.Response(200, headers=headers, text="ok")


def _roots(fake: FakeQStash) -> dict[str, Any]:
    # As the server's data dir names them (persistence._roots), and the fake's extras.
    store = fake.store
    roots = {
        "store": store,
        "clock": fake.clock,
        "account": fake.account,
        "workflows": store.workflows,
        "extras": fake.saved_extras(),
    }
    if store.retention is not None:
        roots["retention"] = store.retention
    return roots


def _through_json(fake: FakeQStash) -> codec.Document:
    values, rows = codec.encode(_roots(fake))
    kinds = {kind: {n: json.loads(text) for n, text in found} for kind, found in rows.items()}
    return json.loads(json.dumps({"meta": {}, "roots": values, "kinds": kinds}))


def _fresh() -> FakeQStash:
    return FakeQStash(start="2020-01-01", freeze_time=False, raise_app_exceptions=False)


def _restored(document: codec.Document, fake: FakeQStash | None = None) -> FakeQStash:
    # json turns row ids into strings when the whole document is dumped: back to ints.
    document["kinds"] = {
        kind: {int(n): fields for n, fields in rows.items()}
        for kind, rows in document["kinds"].items()
    }
    fake = fake if fake is not None else _fresh()
    roots = {k: v for k, v in _roots(fake).items() if k != "extras"}
    decoded = codec.decode(document, roots, frozenset({"retention"}))
    fake.restore_extras(decoded["extras"])
    return fake


def _records(fake: FakeQStash) -> dict[str, Any]:
    listed = {
        name: [write(i) for i in getattr(fake, name)] for name, (write, _) in records.LISTS.items()
    }
    listed["now"] = fake.clock.now_ms
    listed["api_calls"] = [(c.method, c.path, c.status) for c in fake.api_calls]
    return listed


def _unsigned(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unsigned(v) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) == 2 and str(value[0]).lower() == "upstash-signature":
            return None
        return [_unsigned(v) for v in value]
    return value


def _workload(qstash: FakeQStash, client: QStash) -> dict[str, str]:
    qstash.mount("https://shop.test", App())
    ids = {}
    failed = client.message.publish_json(
        url="https://shop.test/fail", body={"n": 1}, retries=3, retry_delay="1000 * (1 + retried)"
    )
    ids["failed"] = failed.message_id  # type: ignore[union-attr]
    dead = client.message.publish_json(url="https://shop.test/fail", body={}, retries=0)
    ids["dead"] = dead.message_id  # type: ignore[union-attr]
    client.message.publish_json(
        url="https://shop.test/later",
        body={"n": 2},
        delay="2h",
        callback="https://shop.test/cb",
        flow_control=FlowControl(key="tenant", parallelism=1, rate=5, period=2),
        label="a,b",
    )
    client.schedule.create(
        destination="https://shop.test/cron", cron="CRON_TZ=Europe/Paris 0 9 * * *"
    )
    client.queue.upsert("emails", parallelism=1)
    client.message.enqueue_json(queue="emails", url="https://shop.test/q", body={})
    client.url_group.upsert_endpoints(url_group="team", endpoints=[{"url": "https://shop.test/g"}])
    client.message.publish_json(url_group="team", body={}, deduplication_id="once")
    qstash.trigger("https://shop.test/workflow", {"order": 7})
    qstash.fail_next("publish", status=503)
    with pytest.raises(Exception, match="503"):
        client.message.publish_json(url="https://shop.test/x", body={})
    qstash.fail_next("/v2/schedules", status=500, times=2)  # armed, not used yet
    qstash.tick()
    return ids


def test_a_restored_state_reads_and_goes_on_as_the_original(
    qstash: FakeQStash, client: QStash
) -> None:
    ids = _workload(qstash, client)
    copy = _restored(_through_json(qstash))
    copy.mount("https://shop.test", App())
    assert _records(copy) == _records(qstash)
    assert copy.store.messages[ids["failed"]].retry_delay == "1000 * (1 + retried)"
    assert [f.times for f in copy.saved_extras()["faults"]] == [2]

    # What happens next is the same: retries on the expression's schedule, the cron in its
    # zone, the delayed message, the same ids (the id generator came back where it was).
    qstash.advance("1d")
    copy.start()
    try:
        copy.advance("1d")
    finally:
        copy.stop()
    # Signatures aside: their JWT's "iat" is the app clock's, frozen for the fixture only.
    assert _unsigned(_records(copy)) == _unsigned(_records(qstash))
    retried = [d.at_ms for d in qstash.deliveries.filter(message_id=ids["failed"])]
    assert [b - a for a, b in itertools.pairwise(retried)] == [1000, 2000, 3000]


def test_shared_objects_come_back_shared(qstash: FakeQStash, client: QStash) -> None:
    ids = _workload(qstash, client)
    copy = _restored(_through_json(qstash))
    store = copy.store
    [entry] = [e for e in store.dlq.values() if e.message_id == ids["dead"]]
    assert entry.message is store.messages[ids["dead"]]
    assert all(e.message is store.messages[e.message_id] for e in store.events if e.message)
    assert store.schedules._clock is copy.clock  # the one clock every part moves
    assert store.workflows.on_end is not None  # the store's own callback, kept
    logged = {id(d) for d in store.deliveries}
    attempts = [d for m in store.messages.values() for d in m.deliveries]
    assert attempts
    assert all(id(d) in logged for d in attempts)


def test_only_allow_listed_classes_are_built(
    qstash: FakeQStash, client: QStash, monkeypatch: pytest.MonkeyPatch
) -> None:
    _workload(qstash, client)
    document = _through_json(qstash)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a constructor ran")

    # Objects are made by setting fields: no constructor of the engine's runs.
    fresh = _fresh()
    assert fresh.store.messages == {}  # the fresh fake's own engine, built before the patch
    monkeypatch.setattr(Store, "__init__", refuse)
    assert _records(_restored(json.loads(json.dumps(document)), fresh)) == _records(qstash)
    monkeypatch.undo()

    [message] = [r for r in document["kinds"]["messages"].values() if r["url"].endswith("later")]
    for kind, fields, error in [
        ("os.system", {}, "unknown kind of object 'os.system'"),
        ("messages", {**message, "url": {"$pickle": "gASV"}}, "unknown tagged value"),
        ("messages", {**message, "url": {"$ref": 10**6}}, "a reference to no object"),
        ("messages", {**message, "__class__": "x"}, "unknown fields"),
        ("messages", {**message, "$items": {}}, "unknown fields"),
        ("messages", {k: v for k, v in message.items() if k != "url"}, "missing field 'url'"),
    ]:
        broken = json.loads(json.dumps(document))
        broken["kinds"] = {
            name: {int(n): f for n, f in rows.items()} for name, rows in broken["kinds"].items()
        }
        broken["kinds"].setdefault(kind, {})[10**9] = fields
        with pytest.raises(codec.CodecError, match=error):
            codec.decode(broken, {})

    with pytest.raises(codec.CodecError, match=r"cannot save a builtins\.function"):
        codec.encode({"store": {"hook": lambda: None}})
    for kind in codec.KINDS:  # nothing of theirs runs when an object is made
        assert kind.cls.__new__ in (object.__new__, dict.__new__), kind.name


def test_the_saved_fields_are_those_of_the_schema() -> None:
    """A class the data dir saves gained, lost or renamed a field: data dirs written before
    hold the old fields. Bump ``SCHEMA`` in pytest_qstash/server/datadir/codec.py, add a
    migration from the previous schema to ``MIGRATIONS`` (with a test), and pin the new
    fingerprint in ``FINGERPRINTS`` here."""
    fields = codec.fingerprint()
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    assert FINGERPRINTS.get(codec.SCHEMA) == digest, (
        f"the saved classes' fields changed (fingerprint {digest}, schema {codec.SCHEMA}): "
        "bump SCHEMA in pytest_qstash/server/datadir/codec.py, add a migration to "
        "MIGRATIONS, and pin the new fingerprint in tests/test_datadir_codec.py"
    )

    # The classes that are no dataclasses declare what they save (``Saved``): all of it.
    fake = FakeQStash()
    store = fake.store
    objects = [
        store,
        fake.clock,
        fake.account,
        store.ids,
        store.dedup,
        store.dlq,
        store.schedules,
        store.queues,
        store.flow_keys,
        store.workflows,
        store.waiters,
        store.api_errors,
    ]
    for obj in objects:
        assert obj.undeclared_attributes() == [], (
            f"{type(obj).__qualname__}'s fields changed: declare them in its SAVED (or "
            "UNSAVED), bump SCHEMA and add a migration"
        )


def test_the_schema_names_public_fields_only() -> None:
    """A data dir's rows are keyed by public names, whatever attribute holds a field: a
    table declares which of its attributes holds each (``Saved.SAVED``), so renaming a
    private attribute changes that table's line, not the schema."""
    for kind in codec.KINDS:
        private = [key for key in kind.fields if key.startswith("_")]
        assert not private, (kind.name, private)
    assert Store.SAVED["generation"] == "_generation"


def test_the_data_dir_names_no_attribute_of_the_engine() -> None:
    """The registry and the codec read and restore a table through its public methods
    (``saved_fields``, ``restore_fields``): neither names a private attribute, even as text
    (but for the migration from schema 2, whose rows were keyed by them)."""
    import ast
    import inspect

    from pytest_qstash.server import fields

    for module in (fields, codec):
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign | ast.Assign) and "_PUBLIC_NAMES_3" in ast.dump(node):
                node.value = ast.Constant(None)  # the schema 2 names, written out for good
        named = [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.isidentifier()
            and node.value.startswith("_")
            and not node.value.startswith("__")
        ]
        assert named == [], (module.__name__, named)


@pytest.mark.qstash(retention=True)
def test_a_restored_retention_goes_on_forgetting(qstash: FakeQStash, client: QStash) -> None:
    """The retention restored is the clock's, and works on the restored store's own
    collections: what it forgets after the restart leaves the store and the log."""
    ids = _workload(qstash, client)
    fresh = FakeQStash(
        start="2020-01-01", freeze_time=False, raise_app_exceptions=False, retention=True
    )
    copy = _restored(_through_json(qstash), fresh)
    store = copy.store
    assert store.retention is not None
    assert store.retention._messages is store.messages  # shared, not a copy
    assert store.retention._events is store.events
    assert copy.clock.on_move == store.retention.expire, (copy.clock.on_move, store.retention)
    assert len(store.retention._finished) == len(qstash.store.retention._finished)  # type: ignore[union-attr]
    assert ids["dead"] in store.messages
    copy.mount("https://shop.test", App())
    copy.start()
    try:
        copy.advance("400d")  # past every plan's log and DLQ retention
    finally:
        copy.stop()
    qstash.advance("400d")
    assert store.retention.forgotten == qstash.store.retention.forgotten  # type: ignore[union-attr]
    assert store.retention.forgotten["messages"] > 0
    assert sorted(store.messages) == sorted(qstash.store.messages)
    assert ids["dead"] not in store.messages
    assert len(store.events) == len(qstash.store.events)


def test_a_schema_4_run_is_migrated_to_keep_no_wait_deadline() -> None:
    document: dict[str, Any] = {"kinds": {"workflow_runs": {"1": {"run_id": "wfr_1"}}}}
    codec.migrate(document, 4)
    assert document["kinds"]["workflow_runs"]["1"] == {"run_id": "wfr_1", "wait_deadlines": {}}


def test_a_schema_3_store_is_migrated_to_hold_back_no_message() -> None:
    document: dict[str, Any] = {"kinds": {"store": {"1": {"generation": {"msg_1": 2}}}}}
    codec.migrate(document, 3)
    assert document["kinds"]["store"]["1"] == {"generation": {"msg_1": 2}, "set_aside": {}}


def test_schema_2_messages_are_migrated_to_say_they_began_no_run() -> None:
    document: dict[str, Any] = {"kinds": {"messages": {"1": {"message_id": "msg_1"}}}}
    codec.migrate(document, 2)
    assert document["kinds"]["messages"]["1"] == {"message_id": "msg_1", "started_run_id": None}
