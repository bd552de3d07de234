"""The workflow deploy check (``qstash.check_deploy()``): runs in progress, started and moved on
by a real ``upstash_workflow`` FastAPI app, probed against a changed app mounted at the same
URL. The SDK's own replay decides: a renamed, swapped or removed step is refused with
``Incompatible step name``; an appended step or a changed body is accepted."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_runs import run_command
from fastapi import FastAPI
from ports import closed_port
from qstash import AsyncQStash
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from upstash_workflow import AsyncWorkflowContext
from upstash_workflow.fastapi import Serve

from pytest_qstash import FakeQStash
from pytest_qstash.server import AppProcess, ServerProcess
from pytest_qstash.testing.deploy_check import Verdict

APP = "https://shop.test"
FLOW_URL = f"{APP}/flow"
CALL_URL = f"{APP}/calls"
STOCK = "https://stock.test"
MAIL = "https://mail.test"
at_start = pytest.mark.qstash(start="2026-01-01T00:00:00Z")

#: The app as deployed: run "a", sleep "b" (1h), run "c".
DEPLOYED = ("a", "sleep:b", "c")


@dataclass
class Seen:
    """What the app's step functions ran: (run id, step name, output)."""

    ran: list[tuple[str, str, Any]] = field(default_factory=list)

    def outputs(self, run_id: str) -> list[tuple[str, Any]]:
        return [(name, out) for rid, name, out in self.ran if rid == run_id]


def flow_app(seen: Seen, plan: tuple[str, ...] = DEPLOYED, *, version: str = "v1") -> FastAPI:
    """/flow runs ``plan`` in order: ``"x"`` is ``context.run("x")`` returning ``"x:<version>"``
    ... for a changed body, ``"sleep:x"`` a one-hour sleep; /mail runs "a", sleeps "b", then
    "send" publishes three messages and creates a schedule with the QStash client; /calls
    runs "a", then ``context.call("reserve")`` to the stock service, then "c"."""
    app = FastAPI()
    serve = Serve(app)

    async def step(context: AsyncWorkflowContext[Any], name: str) -> None:
        run_id = context.workflow_run_id

        async def body() -> str:
            out = f"{name}:{version}"
            seen.ran.append((run_id, name, out))
            return out

        await context.run(name, body)

    @serve.post("/flow")
    async def flow(context: AsyncWorkflowContext[Any]) -> None:
        for item in plan:
            if item.startswith("sleep:"):
                await context.sleep(item.removeprefix("sleep:"), "1h")
            else:
                await step(context, item)

    @serve.post("/mail")
    async def mail(context: AsyncWorkflowContext[Any]) -> None:
        await step(context, "a")
        await context.sleep("b", "1h")

        async def send() -> list[str]:
            client = AsyncQStash(os.environ["QSTASH_TOKEN"], retry=False)
            one = await client.message.publish_json(url=f"{MAIL}/send", body={"to": "ann"})
            assert not isinstance(one, list)
            more = await client.message.batch_json(
                [{"url": f"{MAIL}/send", "body": {"to": to}} for to in ("bob", "cy")]
            )
            schedule = await client.schedule.create(destination=f"{MAIL}/digest", cron="0 * * * *")
            ids = [one.message_id, *(m.message_id for m in more if not isinstance(m, list))]
            seen.ran.append((context.workflow_run_id, "send", [*ids, schedule]))
            return "sent"

        await context.run("send", send)

    @serve.post("/calls")
    async def calls(context: AsyncWorkflowContext[Any]) -> None:
        await step(context, "a")
        reply = await context.call("reserve", url=f"{STOCK}/reserve", method="POST", body={})
        seen.ran.append((context.workflow_run_id, "reserve", reply.status))
        await step(context, "c")

    return app


def stock_app(calls: list[str]) -> Starlette:
    async def reserve(request: Request) -> JSONResponse:
        calls.append(request.url.path)
        return JSONResponse({"reserved": 1})

    return Starlette(routes=[Route("/reserve", reserve, methods=["POST"])])


def asleep_at_b(qstash: FakeQStash, seen: Seen, runs: int = 1) -> list[str]:
    """Runs of the deployed app, each asleep at "b" (its sleep's step pending)."""
    qstash.mount(APP, flow_app(seen))
    run_ids = [qstash.trigger(FLOW_URL, {"n": i}) for i in range(runs)]
    qstash.advance("1m")
    for run_id in run_ids:
        assert [s.name for s in qstash.runs.one(run_id=run_id).steps] == ["a", "b"]
        assert seen.outputs(run_id) == [("a", "a:v1")]
    return run_ids


# -- compatible changes ----------------------------------------------------------------------
@at_start
def test_the_unchanged_app_accepts_every_run_and_they_end_as_before(qstash: FakeQStash) -> None:
    seen = Seen()
    run_ids = asleep_at_b(qstash, seen, runs=3)
    messages = [(m.message_id, m.state, m.retried) for m in qstash.messages]
    deliveries, drawn = len(qstash.deliveries), qstash.store.ids.drawn

    verdicts = qstash.check_deploy()

    assert [v.run_id for v in verdicts] == sorted(run_ids)
    for verdict in verdicts:
        assert verdict == Verdict(
            verdict.run_id, "compatible", None, None, None, "published its next step 'c'"
        )
    # The route ran on each probe ("c" with it); what it published was answered, not applied:
    # the fake's QStash is as it was, no id of its own drawn.
    assert sorted(seen.ran) == sorted((r, n, f"{n}:v1") for r in run_ids for n in ("a", "c"))
    assert [(m.message_id, m.state, m.retried) for m in qstash.messages] == messages
    assert len(qstash.deliveries) == deliveries
    assert qstash.store.ids.drawn == drawn
    for run_id in run_ids:
        run = qstash.runs.one(run_id=run_id)
        assert run.state == "RUN_STARTED"
        assert [s.name for s in run.steps] == ["a", "b"]
        assert run.step("b").message.deliveries == []
    seen.ran.clear()

    qstash.advance("2h")

    for run_id in run_ids:
        run = qstash.runs.one(run_id=run_id)
        assert run.state == "RUN_SUCCESS"
        assert [(s.name, s.out) for s in run.steps] == [("a", "a:v1"), ("b", None), ("c", "c:v1")]
        # Resumed once: "c" ran once more, on the sleep's delivery, and the run ended there.
        assert seen.outputs(run_id) == [("c", "c:v1")]
        assert {d.status for d in run.step("b").message.deliveries} == {200}
    assert [m.message_id for m in qstash.messages if m.state == "FAILED"] == []


@at_start
def test_a_steps_own_qstash_calls_are_answered_not_applied(qstash: FakeQStash) -> None:
    seen = Seen()
    qstash.mount(APP, flow_app(seen))
    qstash.mount(MAIL, lambda request: httpx.Response(200))
    run_id = qstash.trigger(f"{APP}/mail", {})
    qstash.advance("1m")
    drawn = qstash.store.ids.drawn

    [verdict] = qstash.check_deploy()
    [again] = qstash.check_deploy()

    assert (verdict.verdict, verdict.detail) == ("compatible", "published its next step 'send'")
    assert again == verdict
    # The client got its ids (the same on each check), none of them the fake's.
    [(_, _, dry_ids), (_, _, dry_again)] = [r for r in seen.ran if r[1] == "send"]
    assert dry_again == dry_ids
    assert [i[:4] for i in dry_ids] == ["msg_", "msg_", "msg_", "scd_"]
    assert len(set(dry_ids)) == 4
    assert [m for m in qstash.messages if m.url.startswith(MAIL)] == []
    assert qstash.schedules == []
    assert qstash.store.ids.drawn == drawn
    seen.ran.clear()

    qstash.advance("2h")

    assert qstash.runs.one(run_id=run_id).state == "RUN_SUCCESS"
    [(_, _, real_ids)] = [r for r in seen.ran if r[1] == "send"]
    sent = sorted(m.message_id for m in qstash.messages if m.url == f"{MAIL}/send")
    assert sent == sorted(real_ids[:3])
    assert [s.schedule_id for s in qstash.schedules] == [real_ids[3]]
    assert not set(real_ids) & set(dry_ids)


@at_start
@pytest.mark.parametrize(
    ("plan", "version"),
    [(("a", "sleep:b", "c", "d"), "v1"), (DEPLOYED, "v2")],
    ids=["step-appended", "body-changed"],
)
def test_compatible_changes(qstash: FakeQStash, plan: tuple[str, ...], version: str) -> None:
    seen = Seen()
    [run_id] = asleep_at_b(qstash, seen)
    qstash.mount(APP, flow_app(seen, plan, version=version))

    [verdict] = qstash.check_deploy()

    assert verdict.as_dict() == {
        "run_id": run_id,
        "verdict": "compatible",
        "step": None,
        "expected": None,
        "found": None,
        "detail": "published its next step 'c'",
    }
    # The new code ran its next step on the probe, as it will when the run resumes.
    assert seen.outputs(run_id)[-1] == ("c", f"c:{version}")


# -- incompatible changes --------------------------------------------------------------------
@at_start
@pytest.mark.parametrize(
    ("plan", "step", "expected", "found"),
    [
        (("a-renamed", "sleep:b", "c"), 1, "a-renamed", "a"),
        (("a", "sleep:nap", "c"), 2, "nap", "b"),
        (("sleep:b", "a", "c"), 1, "b", "a"),
        (("a", "c"), 2, "c", "b"),
    ],
    ids=["first-step-renamed", "sleep-renamed", "steps-swapped", "middle-step-removed"],
)
def test_incompatible_changes(
    qstash: FakeQStash, plan: tuple[str, ...], step: int, expected: str, found: str
) -> None:
    seen = Seen()
    [run_id] = asleep_at_b(qstash, seen)
    qstash.mount(APP, flow_app(seen, plan))

    [verdict] = qstash.check_deploy()

    assert (verdict.run_id, verdict.verdict) == (run_id, "incompatible")
    assert (verdict.step, verdict.expected, verdict.found) == (step, expected, found)
    assert verdict.detail == (
        f"500 Incompatible step name. Expected '{expected}', got '{found}' from the request"
    )
    assert qstash.runs.one(run_id=run_id).step(found).step_id == step
    # Refused before running anything: no step function ran, nothing was published.
    assert seen.outputs(run_id) == [("a", "a:v1")]
    assert len(qstash.runs.one(run_id=run_id).messages) == 3


@at_start
def test_a_step_whose_kind_changed_is_refused_by_type(qstash: FakeQStash) -> None:
    seen = Seen()
    [run_id] = asleep_at_b(qstash, seen)
    qstash.mount(APP, flow_app(seen, ("a", "b", "c")))  # the sleep "b" became a run "b"

    [verdict] = qstash.check_deploy()

    assert verdict == Verdict(
        run_id,
        "incompatible",
        2,
        "Run",
        "SleepFor",
        "500 Incompatible step type. Expected 'Run', got 'SleepFor' from the request",
    )


# -- runs at other places ---------------------------------------------------------------------
@at_start
def test_a_run_in_the_middle_of_a_call_is_probed_with_its_last_step(qstash: FakeQStash) -> None:
    seen, calls = Seen(), []
    qstash.mount(APP, flow_app(seen))
    qstash.mount(STOCK, stock_app(calls))
    qstash.handler_takes(STOCK, "10m")  # the third party is slow: the call stays in flight
    run_id = qstash.trigger(CALL_URL, {})
    qstash.advance("1m")
    run = qstash.runs.one(run_id=run_id)
    assert [s.name for s in run.steps] == ["a"]
    assert all(m.state != "CREATED" for m in run.messages)  # no step of its own pending

    messages = [(m.message_id, m.state) for m in qstash.messages]

    [verdict] = qstash.check_deploy()

    assert verdict == Verdict(
        run_id, "compatible", None, None, None, "published its next step 'reserve'"
    )
    assert [(m.message_id, m.state) for m in qstash.messages] == messages  # the call: not made

    qstash.mount(APP, flow_app(seen, version="v2"))  # /calls of v2 is unchanged: accepted
    assert qstash.check_deploy()[0].verdict == "compatible"


class Deploying:
    """An ASGI app that lets ``passes`` requests through to ``app``, then answers 503."""

    def __init__(self, app: Any, passes: int) -> None:
        self.app, self.passes = app, passes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if self.passes == 0:
                await PlainTextResponse("deploying", 503)(scope, receive, send)
                return
            self.passes -= 1
        await self.app(scope, receive, send)


@at_start
def test_a_run_whose_step_result_is_being_retried(qstash: FakeQStash) -> None:
    seen = Seen()
    [run_id] = asleep_at_b(qstash, seen)
    qstash.advance("58m")
    # The sleep's step is delivered and "c" runs; its result's delivery then fails.
    qstash.mount(APP, Deploying(flow_app(seen), passes=1))
    qstash.advance("1m")
    run = qstash.runs.one(run_id=run_id)
    c_result = run.step("c").message
    assert (c_result.state, c_result.retried) == ("RETRY", 1)

    qstash.mount(APP, flow_app(seen, ("a", "sleep:b", "c2")))
    [verdict] = qstash.check_deploy()

    assert (verdict.verdict, verdict.step, verdict.expected, verdict.found) == (
        "incompatible",
        3,
        "c2",
        "c",
    )
    assert (c_result.state, c_result.retried, len(c_result.deliveries)) == ("RETRY", 1, 1)

    qstash.mount(APP, flow_app(seen))
    [verdict] = qstash.check_deploy()
    assert (verdict.verdict, verdict.detail) == ("compatible", "finished the run")
    # Ended in the dry run only: the run ends when the step result's retry is delivered.
    assert run.state == "RUN_STARTED"
    assert (c_result.state, c_result.retried, len(c_result.deliveries)) == ("RETRY", 1, 1)

    qstash.advance("1h")
    assert run.state == "RUN_SUCCESS"
    assert c_result.state == "DELIVERED"


@at_start
def test_runs_sorted_by_id_each_judged_on_its_own(qstash: FakeQStash) -> None:
    seen = Seen()
    qstash.mount(APP, flow_app(seen))
    asleep = qstash.trigger(FLOW_URL, {}, run_id="wfr_b-asleep")
    qstash.advance("1m")
    fresh = qstash.trigger(FLOW_URL, {}, run_id="wfr_a-fresh")  # not delivered yet
    qstash.mount(APP, flow_app(seen, ("a", "c")))

    verdicts = qstash.check_deploy()

    assert [(v.run_id, v.verdict, v.step) for v in verdicts] == [
        (fresh, "compatible", None),
        (asleep, "incompatible", 2),
    ]
    assert verdicts[0].detail == "no step recorded yet: nothing to replay"


@at_start
def test_no_runs_no_verdicts(qstash: FakeQStash) -> None:
    assert qstash.check_deploy() == []


@at_start
def test_an_app_that_fails_otherwise_is_an_error(qstash: FakeQStash) -> None:
    seen = Seen()
    [run_id] = asleep_at_b(qstash, seen)

    def down(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="maintenance window, back soon")

    qstash.mount(APP, down)
    [verdict] = qstash.check_deploy()
    assert verdict == Verdict(
        run_id, "error", None, None, None, "503 maintenance window, back soon"
    )

    qstash.unmount(APP)
    [verdict] = qstash.check_deploy()
    assert verdict.verdict == "error"
    assert verdict.detail.startswith("no answer: unrouted")


@pytest.mark.anyio
@at_start
async def test_acheck_deploy_in_an_async_test(qstash: FakeQStash) -> None:
    seen = Seen()
    qstash.mount(APP, flow_app(seen))
    run_id = qstash.trigger(FLOW_URL, {})
    await qstash.aadvance("1m")
    messages = [(m.message_id, m.state) for m in qstash.messages]

    [unchanged] = await qstash.acheck_deploy()

    assert (unchanged.verdict, unchanged.detail) == ("compatible", "published its next step 'c'")
    assert [(m.message_id, m.state) for m in qstash.messages] == messages  # a dry run here too

    qstash.mount(APP, flow_app(seen, ("a", "c")))

    with pytest.raises(RuntimeError, match="acheck_deploy"):
        qstash.check_deploy()
    [verdict] = await qstash.acheck_deploy()

    assert (verdict.run_id, verdict.verdict, verdict.step) == (run_id, "incompatible", 2)


# -- the command: pytest-qstash check-deploy FILE --app URL -----------------------------------
CLI_RUNS = 2


@dataclass
class Exported:
    server: ServerProcess
    path: Path
    run_ids: list[str]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    """A ``serve`` process (the session's credentials) with runs of the deployed app, each
    asleep at "b", exported to a file; the app that made them is stopped."""
    path = tmp_path_factory.mktemp("deploy") / "runs.json"
    with ServerProcess.start(clock="virtual", args=["--credentials-from-env"]) as server:
        with deployed_app(server, DEPLOYED) as app:
            run_ids = [server.trigger(f"{app.url}/flow", {"n": n}) for n in range(CLI_RUNS)]
            server.advance("1m")
        for run_id in run_ids:
            run = server.runs.one(run_id=run_id)
            assert [s.name for s in run.steps] == ["a", "b"]
        done = command("export", "--to", str(path), "--url", server.url, token=server.token)
        assert done.returncode == 0, done.stderr
        yield Exported(server, path, sorted(run_ids))


def deployed_app(server: ServerProcess, plan: tuple[str, ...]) -> AppProcess:
    """``deploy_check_app`` running ``plan``, publishing to ``server``, on a port of its own."""
    env = {"QSTASH_URL": server.url, "DEPLOY_PLAN": ",".join(plan)}
    return AppProcess.start("deploy_check_app:app", cwd=Path(__file__).parent, env=env)


def command(
    *args: str, token: str | None = None, signing_key: bool = True
) -> subprocess.CompletedProcess[str]:
    """``pytest-qstash ARGS`` as a user runs it, with the signing key the apps verify with
    (and ``token``, when given)."""
    env = {}
    if signing_key:
        env["QSTASH_CURRENT_SIGNING_KEY"] = os.environ["QSTASH_CURRENT_SIGNING_KEY"]
    if token is not None:
        env["QSTASH_TOKEN"] = token
    return run_command(*args, env=env)


def table_rows(stdout: str) -> list[list[str]]:
    header, *lines = stdout.strip().splitlines()
    assert header.split() == ["run", "id", "verdict", "step", "expected", "found", "detail"]
    return [line.split(maxsplit=5) for line in lines]


def test_cli_the_unchanged_app_accepts_every_run(exported: Exported) -> None:
    server = exported.server
    with deployed_app(server, DEPLOYED) as app:
        done = command(
            "check-deploy", str(exported.path), "--app", app.url, "--url", server.url,
            token=server.token,
        )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert table_rows(done.stdout) == [
        [run_id, "compatible", "-", "-", "-", "published its next step 'c'"]
        for run_id in exported.run_ids
    ]
    assert done.stderr == ""


def test_cli_a_removed_step_makes_every_run_incompatible(exported: Exported) -> None:
    with deployed_app(exported.server, ("a", "c")) as app:
        done = command("check-deploy", str(exported.path), "--app", app.url)

    assert done.returncode == 1, done.stderr
    refusal = "500 Incompatible step name. Expected 'c', got 'b' from the request"
    assert table_rows(done.stdout) == [
        [run_id, "incompatible", "2", "c", "b", refusal] for run_id in exported.run_ids
    ]


def test_cli_without_the_apps_qstash_the_detail_is_the_status(exported: Exported) -> None:
    with deployed_app(exported.server, ("a", "sleep:b", "c", "d")) as app:
        done = command("check-deploy", str(exported.path), "--app", app.url + "/")

    assert done.returncode == 0, done.stderr
    assert [row[1:] for row in table_rows(done.stdout)] == [
        ["compatible", "-", "-", "-", "answered 200"]
    ] * CLI_RUNS


def test_cli_an_app_that_cannot_be_reached_is_an_error_per_run(exported: Exported) -> None:
    with closed_port() as port:
        done = command("check-deploy", str(exported.path), "--app", f"http://127.0.0.1:{port}")

    assert done.returncode == 1, done.stderr
    rows = table_rows(done.stdout)
    assert [row[:5] for row in rows] == [
        [run_id, "error", "-", "-", "-"] for run_id in exported.run_ids
    ]
    assert all(row[5].startswith("no answer: ConnectError") for row in rows), rows


def test_cli_no_run_in_progress(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"version": 1, "workflow_runs": []}))

    done = command("check-deploy", str(empty), "--app", "http://127.0.0.1:9")

    assert (done.returncode, done.stdout.strip()) == (
        0,
        "no workflow run in progress: nothing to check",
    )


@pytest.mark.parametrize(
    ("args", "signing_key", "said"),
    [
        (["missing.json", "--app", "http://127.0.0.1:9"], True, "cannot read"),
        (["not-json.json", "--app", "http://127.0.0.1:9"], True, "is not JSON"),
        (["empty.json", "--app", "ftp://127.0.0.1:9"], True, "invalid --app 'ftp://127.0.0.1:9'"),
        (["empty.json", "--app", "http://127.0.0.1:9?x=1"], True, "invalid --app"),
        (["empty.json", "--app", "http://127.0.0.1:9", "--url", "nope"], True, "invalid --url"),
        (["empty.json", "--app", "http://127.0.0.1:9"], False, "no signing key"),
    ],
    ids=["missing-file", "not-json", "bad-app-scheme", "app-with-query", "bad-url", "no-key"],
)
def test_cli_bad_input_is_one_sentence_and_status_2(
    tmp_path: Path, args: list[str], signing_key: bool, said: str
) -> None:
    (tmp_path / "empty.json").write_text(json.dumps({"version": 1}))
    (tmp_path / "not-json.json").write_text("{not json")
    args = [str(tmp_path / args[0]), *args[1:]]

    done = command("check-deploy", *args, signing_key=signing_key)

    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("pytest-qstash check-deploy: ")
    assert said in line
