"""The server's records are the in-process models, and its verbs are declared once.

- Every model's wire form (``records.Model``) carries every field of the model, so a field
  added to a model later fails here until it travels (or is said not to, with a reason).
- Each list's items read back from JSON render the same JSON again and show the same public
  fields as the originals (a populated in-process fake: messages, callbacks, retries, the
  DLQ, a schedule, a queue, a URL group, flow control, a workflow run and its workflow DLQ
  entry, a waiter, API calls).
- ``Client``'s lists hold the classes ``FakeQStash``'s hold; its verbs are the control API's
  table (``verbs.VERBS``) with ``FakeQStash``'s Python signatures, those with parameters all
  made from one dataclass each (``state.verb_specs``); the docs list every verb.
- Through real SDK traffic against a ``serve`` process: a workflow run with a failure
  function, labels and flow control, read through ``Client``, equals the same run made
  in-process (``run.step(name)``, ``failure_function_state``, ``label``,
  ``flow_control_key``, ``step_groups``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

# Imported at collection, under the session's QSTASH_* (the SDK's serve() reads them when the
# route is declared): a first import inside a server test would point the in-process copy of
# the app at that server, which a later in-process fake does not intercept.
import records_app
from ports import closed_port
from qstash import QStash

from pytest_qstash import FakeQStash
from pytest_qstash.engine import verb_specs
from pytest_qstash.server import AppProcess, Client, ServerProcess
from pytest_qstash.server.control import records
from pytest_qstash.server.control.verbs import VERBS

HERE = Path(__file__).parent
API = "https://qstash.upstash.io"
SHOP = "https://shop.test"
FLOW = f"{SHOP}/flow"


# -- the wire form covers every model field ---------------------------------------------------
def _all_models() -> list[records.Model[Any]]:
    found = [model for model in vars(records).values() if isinstance(model, records.Model)]
    assert len(found) >= len(records.MODELS)
    return found


@pytest.mark.parametrize("model", _all_models(), ids=lambda model: model.kind)
def test_every_field_of_a_model_travels(model: records.Model[Any]) -> None:
    fields = {f.name for f in dataclasses.fields(model.cls)}  # type: ignore[arg-type]
    carried = {wire.field for wire in model.fields}
    assert carried | model.left_out == fields, (
        f"{model.cls.__name__}: add the new field to records.{model.kind} (or to left_out, "
        f"saying why): not carried: {sorted(fields - carried - model.left_out)}; "
        f"not a field: {sorted((carried | model.left_out) - fields)}"
    )
    names = [wire.name for wire in model.fields] + [extra.name for extra in model.derived]
    assert len(names) == len(set(names)), f"a wire name repeats in {model.kind}"
    assert model.summary_leaves <= set(names), f"{model.kind}: a summary leaves no such field"
    for extra in model.derived:  # a derived field renders a public attribute of the model
        if extra.read is None:
            assert hasattr(model.cls, extra.name), f"{model.kind} has no {extra.name}"


def _return_type(cls: type, name: str) -> Any:
    member = inspect.getattr_static(cls, name)
    function = member.fget if isinstance(member, property) else member
    return typing.get_type_hints(function)["return"]


@pytest.mark.parametrize("name", list(records.MODELS))
def test_the_client_s_lists_hold_the_in_process_classes(name: str) -> None:
    in_process = _return_type(FakeQStash, name)
    assert _return_type(Client, name) == in_process
    [item_class] = typing.get_args(in_process)
    assert records.MODELS[name].cls is item_class


# -- read back, the same fields and methods -------------------------------------------------
class Route:
    """A workflow route as the TypeScript SDK answers; any other path answers 200, /fail 500."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/fail":
            return httpx.Response(500, text="declined")
        if request.url.path == "/flow":
            return httpx.Response(200, headers={"Upstash-Workflow-Sdk-Version": "1"})
        return httpx.Response(200, json={"ok": True}, headers={"X-App": "shop"})


def _send_wait(fake: FakeQStash, run_id: str) -> None:
    """The TypeScript SDK's ``POST /v2/wait/{eventId}`` for a run."""
    answer = httpx.post(
        f"{API}/v2/wait/order-7-paid",
        json={
            "url": FLOW,
            "timeoutUrl": FLOW,
            "timeoutHeaders": {"Upstash-Workflow-Runid": [run_id]},
            "step": {"stepId": 1, "stepType": "Wait", "stepName": "wait for payment"},
        },
        headers={
            "Authorization": f"Bearer {fake.token}",
            "Upstash-Workflow-RunId": run_id,
            "Upstash-Workflow-Url": FLOW,
            "Upstash-Workflow-Init": "false",
            "Upstash-Workflow-CallType": "step",
            "Upstash-Forward-Upstash-Workflow-Sdk-Version": "1",
        },
    )
    assert answer.status_code == 200, answer.text


@pytest.fixture
def populated() -> Iterator[FakeQStash]:
    with FakeQStash(start="2026-03-01T09:00:00Z", strict=False) as fake:
        fake.mount(SHOP, Route())
        fake.mount("https://records.test", records_app.app)
        sdk = QStash(fake.token, retry=False)
        sdk.message.publish_json(
            url=f"{SHOP}/jobs/a",
            body={"n": 1},
            headers={"X-Tenant": "acme"},
            callback=f"{SHOP}/cb",
            failure_callback=f"{SHOP}/fcb",
            label="shop",
            deduplication_id="d-1",
            flow_control={"key": "tenant-7", "parallelism": 2, "rate": 5, "period": "1m"},
        )
        sdk.message.publish(
            url=f"{SHOP}/fail",
            body=b"\x00raw",
            retries=1,
            retry_delay="1000 * (1 + retried)",
            delay="10s",
        )
        sdk.message.publish_json(url=f"{SHOP}/later", body={"n": 3}, delay="3d")
        sdk.queue.upsert("jobs", parallelism=2)
        sdk.message.enqueue_json(queue="jobs", url=f"{SHOP}/queued", body={"n": 4})
        sdk.url_group.upsert_endpoints(
            url_group="team", endpoints=[{"url": f"{SHOP}/a", "name": "a"}, {"url": f"{SHOP}/b"}]
        )
        sdk.message.publish_json(url_group="team", body={"n": 5})
        sdk.schedule.create(destination=f"{SHOP}/cron", cron="CRON_TZ=Europe/Paris 0 9 * * *")
        fake.trigger("https://records.test/workflow/charge", {"order": 7}, label="shop,vip")
        waiting = fake.trigger(FLOW, {"order": 8})
        fake.drain(within="1h")
        _send_wait(fake, waiting)
        yield fake


def _public(item: Any) -> dict[str, Any]:
    out = {}
    for name in dir(item):
        if name.startswith("_"):
            continue
        value = getattr(item, name)
        out[name] = value() if name == "json" and _is_json(item) else value
    return out


def _is_json(item: Any) -> bool:
    try:
        item.json()
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def _same(a: Any, b: Any) -> bool:
    """Equal values; model instances (compared by identity) by their wire form."""
    model = next((m for m in _all_models() if isinstance(a, m.cls)), None)
    if model is not None:
        return isinstance(b, model.cls) and model.render(a) == model.render(b)
    if isinstance(a, (list, tuple)) and not isinstance(a, str):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if callable(a):
        return callable(b)  # a method: the same one, since the class is the same
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):  # StepGroup, WorkflowStep
        return type(a) is type(b) and all(
            _same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    return bool(a == b)


def test_every_list_reads_back_as_its_in_process_items(populated: FakeQStash) -> None:
    seen = set()
    for name, model in records.MODELS.items():
        items = list(getattr(populated, name))
        assert items, f"the scenario has no {model.kind}"
        for item in items:
            wire = json.loads(json.dumps(model.render(item)))
            copy = model.read(wire)
            assert type(copy) is type(item)
            assert model.render(copy) == wire
            original, read = _public(item), _public(copy)
            assert original.keys() == read.keys()
            differs = [
                key
                for key in original
                if key not in model.left_out and not _same(original[key], read[key])
            ]
            assert not differs, f"{model.kind} {key_of(item)}: {differs} differ"
            seen.add(name)
    assert seen == set(records.MODELS)


def _plainly(model: records.Model[Any], item: Any) -> dict[str, Any]:
    """An item rendered field by field, each read from the item and written by its kind:
    what ``Model.render`` gives, without its plan."""

    def write(kind: records.Kind, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(kind, records.Nested):
            return _plainly(kind.model, value)
        if isinstance(kind, records.ListOf):
            return [write(kind.kind, v) for v in value]
        return kind.encode(value)

    out = {}
    for wire in model.fields:
        value = model._get(item, wire.field) if model._get else getattr(item, wire.field)
        out[wire.name] = write(wire.kind, value)
        if wire.kind is records.BYTES:  # and base64 beside, when the text is not the bytes
            out[f"{wire.name}_base64"] = None if value is None else records.bytes_as_text(value)[1]
    for extra in model.derived:
        value = extra.read(item) if extra.read is not None else getattr(item, extra.name)
        out[extra.name] = write(extra.kind, value)
        if extra.hoisted_from is not None and out[extra.hoisted_from[0]] is not None:
            del out[extra.hoisted_from[0]][extra.hoisted_from[1]]  # written at the top only
    return out


def test_an_item_renders_as_its_fields_one_by_one(populated: FakeQStash) -> None:
    """Rendering plans its fields once per model and moves what a message was published
    with out of its rendered options to the top level (``Derived.hoisted_from``): the JSON
    is byte for byte what reading and writing each field by itself gives, for every item of
    every list."""
    for name, model in records.MODELS.items():
        for item in getattr(populated, name):
            rendered = model.render(item)
            assert json.dumps(rendered) == json.dumps(_plainly(model, item)), (name, item)
            again = model.render(item)  # moments written once are written the same
            assert json.dumps(again) == json.dumps(rendered)


def key_of(item: Any) -> str:
    for name in ("message_id", "dlq_id", "run_id", "schedule_id", "name", "key", "path"):
        if hasattr(item, name):
            return str(getattr(item, name))
    return repr(item)


def test_a_run_read_back_answers_its_methods(populated: FakeQStash) -> None:
    run = populated.runs.one(url="https://records.test/workflow/charge")
    copy = records.RUN.read(json.loads(json.dumps(records.RUN.render(run))))
    assert copy.step("validate").out == run.step("validate").out == {"order": 7, "valid": True}
    with pytest.raises(KeyError, match="no step 'nope'"):
        copy.step("nope")
    assert [(g.type, [s.name for s in g.steps]) for g in copy.step_groups] == [
        ("sequential", ["validate"]),
        ("sequential", ["cool-down"]),
    ]
    assert (copy.state, copy.label, copy.labels) == ("RUN_FAILED", "shop", ("shop", "vip"))
    assert copy.failure_function_state == run.failure_function_state == "CALLBACK_SUCCESS"
    assert copy.json() == {"order": 7}
    assert copy.failure_call is not None
    assert copy.failure_call.state == "DELIVERED"
    assert [m.message_id for m in copy.messages] == [m.message_id for m in run.messages]
    assert copy.messages[1].json()["stepName"] == "validate"  # the step as the SDK sent it


def test_a_body_that_is_not_json_reads_back_as_text(populated: FakeQStash) -> None:
    message = populated.messages.one(url=f"{SHOP}/fail")
    copy = records.MESSAGE.read(records.MESSAGE.render(message))
    assert copy.body == message.body  # the NUL byte too
    assert copy.retry_delay == "1000 * (1 + retried)"
    assert copy.deliveries[0].duration == message.deliveries[0].duration


def test_bytes_that_are_not_utf8_read_back_as_they_were(populated: FakeQStash) -> None:
    message = populated.messages.one(url=f"{SHOP}/fail")
    binary = dataclasses.replace(message, content=bytes(range(256)))
    rendered = json.loads(json.dumps(records.MESSAGE.render(binary)))
    assert rendered["body"] == bytes(range(256)).decode(errors="replace")  # text, as before
    assert records.MESSAGE.read(rendered).content == bytes(range(256))
    plain = records.MESSAGE.render(message)
    assert plain["body_base64"] is None  # UTF-8: the text is the bytes
    assert records.MESSAGE.read(plain).content == message.content


def test_what_a_message_was_published_with_is_written_once(populated: FakeQStash) -> None:
    message = populated.messages.one(url=f"{SHOP}/fail")
    rendered = records.MESSAGE.render(message)
    hoisted = [d.name for d in records.MESSAGE.derived if d.hoisted_from]
    assert {"method", "headers", "retry_delay", "callback"} <= set(hoisted)
    assert not set(hoisted) & set(rendered["options"])  # at the top level only
    assert rendered["retry_delay"] == "1000 * (1 + retried)"
    sent = json.loads(json.dumps(rendered))
    copy = records.MESSAGE.read(sent)
    assert copy.options.retry_delay == message.options.retry_delay
    assert copy.options.headers == message.options.headers
    assert sent == json.loads(json.dumps(rendered))  # reading left the JSON as it was


def test_a_server_of_another_shape_is_said_so() -> None:
    with pytest.raises(ValueError, match="cannot read a message"):
        records.MESSAGE.read({"message_id": "msg_1"})


# -- the verbs: one table, Client and FakeQStash agree -----------------------------------------
def _parameters(function: Any) -> list[tuple[str, bool]]:
    signature = inspect.signature(function)
    return [
        (p.name, p.default is inspect.Parameter.empty)
        for p in signature.parameters.values()
        if p.name != "self"
    ]


#: Verbs the fixture has under the same name for another thing: its ``mount`` puts an app
#: in-process, the server's sends outbound requests elsewhere.
NOT_THE_FIXTURE_S = frozenset({"mount", "unmount"})


@pytest.mark.parametrize("name", [n for n in VERBS if n != "state"])
def test_the_client_s_verbs_are_the_table_s(name: str) -> None:
    verb = VERBS[name]
    declared = [(arg.parameter, arg.required) for arg in verb.args]
    member = inspect.getattr_static(Client, name)
    if isinstance(member, property):  # a read-only verb read as an attribute
        assert (verb.method, declared) == ("GET", [])
        return
    assert _parameters(member) == declared
    in_process = getattr(FakeQStash, name, None)
    if in_process is not None and name not in NOT_THE_FIXTURE_S:
        assert _parameters(in_process) == declared  # the fixture's verb: its Python signature


@pytest.mark.parametrize("name", sorted(verb_specs.SPECS))
def test_a_declared_verb_is_made_from_its_spec_alone(name: str) -> None:
    spec = verb_specs.SPECS[name]
    declared = [(f.name, f.default is dataclasses.MISSING) for f in dataclasses.fields(spec)]
    assert [(arg.name, arg.required) for arg in VERBS[name].args] == declared
    for made in (getattr(FakeQStash, name), getattr(Client, name)):
        assert _parameters(made) == declared
        assert inspect.getsource(made).count("def method(") == 1  # verb_specs.verb's, shared


def test_a_field_added_to_a_spec_is_a_parameter_of_the_method_made_from_it() -> None:
    # What adding a parameter to a verb is: a field, and nothing else.
    trigger = verb_specs.Trigger
    grown = dataclasses.make_dataclass(
        "Grown",
        [("delay", "str | None", dataclasses.field(default=None, kw_only=True))],
        bases=(trigger,),
        frozen=True,
    )

    class Fixture:
        @verb_specs.verb(grown)
        def trigger(self, call: Any) -> Any:
            return verb_specs.values(call)

    given = Fixture().trigger("https://app.test/w", label="a", delay="1m")  # type: ignore[call-arg]
    assert given["delay"] == "1m"
    assert given["label"] == "a"
    assert ("delay", False) in _parameters(Fixture.trigger)
    with pytest.raises(TypeError, match=r"Fixture.trigger\(\) got an unexpected keyword"):
        Fixture().trigger("https://app.test/w", nope=1)  # type: ignore[call-arg]


def test_the_docs_list_every_verb_and_list() -> None:
    text = (HERE.parent / "docs" / "control.md").read_text()
    for verb in VERBS.values():
        if verb.name != "state":
            assert f"`{verb.method} /_qstash/{verb.route}`" in text or (
                f"/_qstash/{verb.route}`" in text and f"`{verb.name}`" in text
            ), verb.name
    for name in records.MODELS:
        assert f"`{name}`" in text, name


def test_a_verb_the_table_does_not_have_is_refused_in_the_client() -> None:
    client = Client("http://127.0.0.1:9", "token")
    with pytest.raises(TypeError, match="the tick verb takes no by"):
        client._verb("tick", by=1)


# -- through a server: the same run as in-process ------------------------------------------
def _path(url: str | None) -> str | None:
    return None if url is None else urlsplit(url).path


def _play(target: FakeQStash | ServerProcess, url: str) -> None:
    """The scenario, with the verbs both have: a run that fails at "charge" (its failure
    function called), then resumed from its DLQ entry under a flow-control key."""
    target.trigger(url, {"order": 7}, label="shop,vip")
    target.drain()
    [entry] = target.workflow_dlq
    target.resume_run(
        entry.dlq_id,
        headers={
            "Upstash-Flow-Control-Key": "tenant-7",
            "Upstash-Flow-Control-Value": "parallelism=1",
        },
    )
    target.drain()


def _summary(target: FakeQStash | ServerProcess) -> dict[str, Any]:
    runs = []
    for run in target.runs:
        runs.append(
            {
                "path": _path(run.url),
                "state": run.state,
                "label": run.label,
                "labels": run.labels,
                "flow_control_key": run.flow_control_key,
                "failure_function_state": run.failure_function_state,
                "payload": run.json(),
                "steps": [(s.name, s.type, s.out, s.concurrent) for s in run.steps],
                "groups": [(g.type, [s.name for s in g.steps]) for g in run.step_groups],
                "validate": run.step("validate").out,
                "resumed": run.resumed_from is not None,
                "carried": run.carried,
                "messages": [
                    (m.kind, m.state, _path(m.url), len(m.deliveries), m.label)
                    for m in run.messages
                ],
                "failure_call": _path(run.failure_call.url) if run.failure_call else None,
                "took": run.completed_at - run.created_at if run.completed_at else None,
            }
        )
    failed = [
        (e.labels, e.failure_function_state, e.response_status, _path(e.workflow_url))
        for e in target.workflow_dlq
    ]
    keys = [(k.key, k.parallelism, k.wait_list_size) for k in target.flow_keys]
    return {"runs": runs, "workflow_dlq": failed, "flow_keys": keys}


@pytest.fixture
def app(qstash_server: ServerProcess) -> Iterator[AppProcess]:
    qstash_server.reset()
    with AppProcess.start("records_app:app", cwd=HERE) as started:
        yield started


def test_a_run_over_the_server_equals_the_same_run_in_process(
    qstash_server: ServerProcess, app: AppProcess
) -> None:
    _play(qstash_server, f"{app.url}/workflow/charge")
    served = _summary(qstash_server)

    [failed, resumed] = qstash_server.runs
    assert failed.step("validate").out == {"order": 7, "valid": True}
    assert (failed.label, failed.labels) == ("shop", ("shop", "vip"))
    assert failed.failure_function_state == "CALLBACK_SUCCESS"
    assert resumed.flow_control_key == "tenant-7"
    assert resumed.step_groups[0].type == "sequential"

    with FakeQStash() as fake:
        fake.mount("https://records.test", records_app.app)
        _play(fake, "https://records.test/workflow/charge")
        assert _summary(fake) == served


def test_every_server_list_holds_the_in_process_model(
    qstash_server: ServerProcess, app: AppProcess
) -> None:
    with closed_port() as port:  # every attempt fails at once
        _every_list_holds_the_model(qstash_server, app, f"http://127.0.0.1:{port}")


def _every_list_holds_the_model(qstash_server: ServerProcess, app: AppProcess, down: str) -> None:
    sdk = QStash(qstash_server.token, base_url=qstash_server.url, retry=False)
    sdk.message.publish_json(
        url=f"{down}/jobs",
        body={"n": 1},
        retries=0,
        callback=f"{down}/cb",
        flow_control={"key": "tenant-7", "parallelism": 1},
    )
    sdk.queue.upsert("jobs", parallelism=1)
    sdk.url_group.upsert_endpoints(url_group="team", endpoints=[{"url": f"{down}/a"}])
    sdk.schedule.create(destination=f"{down}/cron", cron="0 9 * * *")
    qstash_server.trigger(f"{app.url}/workflow/charge", {"order": 7}, label="shop")
    flow = f"{app.url}/flow"
    waiting = qstash_server.trigger(flow, {"order": 8})
    qstash_server.tick()
    answer = httpx.post(
        f"{qstash_server.url}/v2/wait/order-8-paid",
        json={"url": flow, "timeoutUrl": flow, "step": {"stepId": 1}},
        headers={
            "Authorization": f"Bearer {qstash_server.token}",
            "Upstash-Workflow-RunId": waiting,
            "Upstash-Workflow-Url": flow,
        },
    )
    assert answer.status_code == 200, answer.text
    qstash_server.drain(within="1h")

    for name, model in records.MODELS.items():
        items = getattr(qstash_server, name)
        assert items, f"no {model.kind} on the server"
        assert items.kind == model.kind
        for item in items:
            assert type(item) is model.cls
            public = {n for n in dir(item) if not n.startswith("_")}
            assert public == {n for n in dir(model.cls) if not n.startswith("_")}
    # A log line's message is linked from the messages list: the JSON names it by id only.
    messages = {m.message_id: m for m in qstash_server.messages}
    for event in qstash_server.events:
        assert event.message is not None
        assert event.message.message_id == event.message_id
        assert records.MESSAGE.render(event.message) == records.MESSAGE.render(
            messages[event.message_id]
        )
    run = qstash_server.runs.one(label="shop")
    assert run.step("validate").out == {"order": 7, "valid": True}
    assert qstash_server.waiters.one(run_id=waiting).step_type == ""
    assert qstash_server.api_calls.filter(path="/v2/wait/order-8-paid")[0].ok


def test_the_client_does_not_import_the_fake() -> None:
    # A test process that only talks to a server pays for the records and the verbs table,
    # not for the in-process fake (respx, the interception).
    code = (
        "import sys, pytest_qstash.server.control.client\n"
        "print([m for m in ('respx', 'pytest_qstash.testing.fake') if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE.parent, check=True
    )
    assert done.stdout.strip() == "[]"


def test_serve_imports_nothing_it_never_runs() -> None:
    # The command's process intercepts nothing (respx, httpcore, trio) and never runs httpx's
    # own command line (rich, pygments where installed): a tenth of a second of every start.
    code = (
        "import sys, pytest_qstash.server.cli\n"
        "print([m for m in ('respx', 'httpcore', 'trio', 'rich', 'pygments', 'httpx._main')"
        " if sys.modules.get(m) is not None])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE.parent, check=True
    )
    assert done.stdout.strip() == "[]"


def test_large_answers_are_the_json_httpx_writes() -> None:
    """The server writes its lists (and reads its data dir) through orjson when installed:
    the same bytes as httpx's ``json=`` for what records hold, and what orjson cannot take
    goes through the standard library."""
    from pytest_qstash.server.control import fastjson

    value = [{"body": 'caf\u00e9 \u2028 "q" \\ \n\t\u0001', "n": -12, "ok": True, "x": None}]
    assert fastjson.dumps(value) == httpx.Response(200, json=value).content
    huge = {"n": 2**70}  # beyond 64 bits: the standard library writes it
    assert fastjson.dumps(huge) == b'{"n":1180591620717411303424}'
    assert fastjson.dumps({1: "a"}) == b'{"1":"a"}'  # a key that is not text, as json does
    assert fastjson.loads('{"n": NaN}')["n"] != fastjson.loads('{"n": NaN}')["n"]
    assert fastjson.loads(b'[1, "\\u00e9"]') == [1, "\u00e9"]
    with pytest.raises(ValueError):
        fastjson.loads("{not json")
