"""Budget 5: a workflow run's cost against the same bodies delivered as plain messages."""

from __future__ import annotations

import base64
import contextlib
import importlib
import importlib.metadata
import importlib.util
import itertools
import json
import statistics
import time
import unittest.mock
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import qstash
from bench import (
    START,
    Mode,
    Report,
    Step,
    interleaved,
    ms,
    us,
)
from fastapi import FastAPI
from qstash import AsyncQStash
from upstash_workflow.asyncio.serve import authorization as sdk_authorization
from upstash_workflow.fastapi import Serve

from pytest_qstash import FakeQStash

# -- 5. workflows ----------------------------------------------------------------------------
FLOW_BASE = "https://flow.bench"
FLOW_URL = f"{FLOW_BASE}/workflow"
# What upstash-workflow 2.0.0 sends with every step it publishes.
FLOW_FEATURES = "LazyFetch,InitialBody,WF_DetectTrigger"
FLOW_PAYLOAD = {"order": 1}


def _read_steps(content: bytes) -> int:
    """What ``serve()`` does with a delivered steps array before it runs the route: decode
    every entry, and each step's JSON and its ``out``. Returns how many entries it held (the
    initial payload is entry 0)."""
    entries = json.loads(content)
    base64.b64decode(entries[0]["body"])
    for entry in entries[1:]:
        if entry["callType"] == "step":
            step = json.loads(base64.b64decode(entry["body"]))
            json.loads(step["out"])
    return len(entries)


class ProtocolApp:
    """A workflow endpoint speaking the protocol as upstash-workflow's ``serve()`` does,
    without the SDK's own per-request cost: a route of ``steps`` runs of "step-<k>", each
    returning k * k. Each delivery's steps array is decoded; the next step goes out as the
    SDK sends it (one ``/v2/batch`` entry with the run headers and every delivered header
    forwarded), through one ``qstash.QStash`` client; after the last step the run is ended
    with the SDK's ``DELETE /v2/workflows/runs/{id}?cancel=false``. Its deliveries are
    checked byte for byte against the real SDK's."""

    def __init__(self, client: qstash.QStash, steps: int, stamps: list[float]) -> None:
        self.client = client
        self.steps = steps
        self.stamps = stamps  # when each delivery arrived: the per-step costs

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.stamps.append(time.perf_counter())
        step_id = _read_steps(request.content)  # the init entry, then steps 1 .. step_id - 1
        run_id = request.headers["upstash-workflow-runid"]
        if step_id > self.steps:
            self.client.http.request(
                path=f"/v2/workflows/runs/{run_id}?cancel=false",
                method="DELETE",
                parse_response=False,
            )
            return httpx.Response(200)
        headers = {
            "Content-Type": "application/json",
            "Upstash-Workflow-Init": "false",
            "Upstash-Workflow-RunId": run_id,
            "Upstash-Workflow-Url": FLOW_URL,
            "Upstash-Feature-Set": FLOW_FEATURES,
            "Upstash-Forward-Upstash-Workflow-Sdk-Version": "1",
        }
        for name, value in request.headers.items():  # the SDK's "user headers"
            if not name.startswith("upstash-workflow-"):
                headers[f"Upstash-Forward-{name}"] = value
                headers[f"Upstash-Failure-Callback-Forward-{name}"] = value
        step = {
            "method": "POST",
            "stepId": step_id,
            "stepName": f"step-{step_id}",
            "stepType": "Run",
            "out": json.dumps(step_id * step_id),
            "sleepFor": None,
            "sleepUntil": None,
            "concurrent": 1,
            "targetStep": None,
            "callUrl": None,
            "callMethod": None,
            "callBody": None,
            "callHeaders": None,
        }
        batch = [
            {"destination": FLOW_URL, "headers": headers, "body": json.dumps(step), "queue": None}
        ]
        self.client.http.request(
            path="/v2/batch",
            body=json.dumps(batch),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        return httpx.Response(200)


class PlainChainApp:
    """The same deliveries made as plain messages: the app decodes each body as
    ``ProtocolApp`` does, and publishes the next body (precomputed bytes, so no serialising
    is added) with one ``message.publish``."""

    def __init__(self, client: qstash.QStash, bodies: list[bytes], stamps: list[float]) -> None:
        self.client = client
        self.bodies = bodies
        self.stamps = stamps

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.stamps.append(time.perf_counter())
        delivered = _read_steps(request.content)
        if delivered < len(self.bodies):
            self.client.message.publish(
                url=FLOW_URL, body=self.bodies[delivered], content_type="application/json"
            )
        return httpx.Response(200)


def _sdk_workflow_app(steps: int) -> Any:
    """The same route written with the real SDK (FastAPI ``Serve``, async context); the SDK
    verifies every delivery with its ``Receiver``."""
    app = FastAPI()
    serve = Serve(app)

    @serve.post("/workflow")
    async def route(context: Any) -> None:
        for k in range(1, steps + 1):

            async def square(k: int = k) -> int:
                return k * k

            await context.run(f"step-{k}", square)

    return app


@dataclass
class FlowRuns:
    """Runs made in one sample: seconds per step of each, and each run's per-step costs."""

    per_step: float
    step_costs: list[list[float]]
    #: The first run's deliveries (body, headers), to hold against the SDK's.
    deliveries: list[tuple[bytes, list[tuple[str, str]]]]


def _protocol_runs(steps: int, runs: int) -> FlowRuns:
    """``runs`` timed runs (after one warm-up) of ``steps`` steps, each started with
    ``trigger`` and driven to its end by one ``tick()``."""
    with FakeQStash(start=START) as fake:
        stamps: list[float] = []
        fake.mount(FLOW_BASE, ProtocolApp(qstash.QStash(fake.token, retry=False), steps, stamps))
        elapsed = 0.0
        costs: list[list[float]] = []
        for index in range(runs + 1):
            stamps.clear()
            fake.trigger(FLOW_URL, FLOW_PAYLOAD)
            began = time.perf_counter()
            fake.tick()
            if index:  # the first run warms up
                elapsed += time.perf_counter() - began
                costs.append([b - a for a, b in itertools.pairwise(stamps)])
        assert [run.state for run in fake.runs] == ["RUN_SUCCESS"] * (runs + 1)
        assert len(fake.runs[-1].steps) == steps
        assert len(fake.deliveries) == (runs + 1) * (steps + 1)
        first = fake.deliveries[: steps + 1]  # a fresh fake's first run, as the SDK run is
        return FlowRuns(elapsed / (runs * steps), costs, _as_delivered(first))


def _plain_runs(bodies: list[bytes], runs: int) -> FlowRuns:
    """The same: each chain started with one ``publish`` of the first body."""
    steps = len(bodies) - 1
    with FakeQStash(start=START) as fake:
        stamps: list[float] = []
        client = qstash.QStash(fake.token, retry=False)
        fake.mount(FLOW_BASE, PlainChainApp(client, bodies, stamps))
        elapsed = 0.0
        costs: list[list[float]] = []
        for index in range(runs + 1):
            stamps.clear()
            client.message.publish(url=FLOW_URL, body=bodies[0], content_type="application/json")
            began = time.perf_counter()
            fake.tick()
            if index:
                elapsed += time.perf_counter() - began
                costs.append([b - a for a, b in itertools.pairwise(stamps)])
        assert [d.content for d in fake.deliveries] == bodies * (runs + 1)
        return FlowRuns(elapsed / (runs * steps), costs, [])


def _sdk_run(steps: int, reuse_client: bool = False) -> FlowRuns:
    """One run of the real SDK app. ``reuse_client``: serve() builds a throwaway
    ``AsyncQStash`` (an httpx client, so an SSL context loading the CA bundle) on every
    request; patched to hand out one built beforehand, to show what that costs."""
    with contextlib.ExitStack() as stack:
        if reuse_client:
            shared = AsyncQStash(base_url="disabled-client", token="disabled-client")
            stack.enter_context(
                unittest.mock.patch.object(sdk_authorization, "AsyncQStash", return_value=shared)
            )
        fake = stack.enter_context(FakeQStash(start=START))
        fake.mount(FLOW_BASE, _sdk_workflow_app(steps))
        fake.trigger(FLOW_URL, FLOW_PAYLOAD)
        began = time.perf_counter()
        fake.tick()
        elapsed = time.perf_counter() - began
        (run,) = fake.runs
        assert run.state == "RUN_SUCCESS", run
        assert len(run.steps) == steps
        return FlowRuns(elapsed / steps, [], _as_delivered(fake.deliveries))


def _as_delivered(deliveries: list[Any]) -> list[tuple[bytes, list[tuple[str, str]]]]:
    return [(d.content, d.headers.multi_items()) for d in deliveries]


#: A real upstash-workflow step <= 2 ms, where the protocol app's step costs 0.58 ms on the
#: reference machine (docs/performance.md): 2 / 0.58 = 3.4 protocol-app steps.
SDK_STEP_BUDGET = 3.4


def workflows(report: Report, steps: int, rounds: int, runs: int, sdk_rounds: int) -> None:
    sdk = f"upstash-workflow {importlib.metadata.version('upstash-workflow')}"
    # The budget row's workflow app must be what the SDK does: same deliveries, byte for byte
    # (bodies and headers, signatures included: ids are seeded, the clock is virtual).
    reference = _sdk_run(steps).deliveries
    if _protocol_runs(steps, 1).deliveries != reference:
        raise AssertionError(f"the protocol app's deliveries differ from {sdk}'s")
    bodies = [content for content, _ in reference]

    flow_costs: list[list[list[float]]] = []
    plain_costs: list[list[list[float]]] = []

    def flow() -> float:
        made = _protocol_runs(steps, runs)
        flow_costs.append(made.step_costs)
        return made.per_step

    def plain() -> float:
        made = _plain_runs(bodies, runs)
        plain_costs.append(made.step_costs)
        return made.per_step

    result = interleaved({"workflow": flow, "plain": plain}, rounds)
    ratio = result.ratio("workflow", "plain")
    report.check(
        f"5. {steps}-step workflow run, per step ({rounds} x {runs} runs)",
        us(result.median("workflow")),
        us(result.median("plain")) + " same bodies, plain",
        ratio,
        "<= 2x",
        ratio <= 2,
    )

    # Growth: each delivery carries every earlier step, so a step's cost grows with its body;
    # per KiB of body that growth should match the plain deliveries' (no quadratic term).
    window = max(1, min(10, steps // 5))
    kib = [len(body) / 1024 for body in bodies[1:]]  # step k is delivered bodies[k]
    kib_added = statistics.fmean(kib[-window:]) - statistics.fmean(kib[:window])

    def growth(per_run: list[list[float]]) -> tuple[float, float, float]:
        """Mean cost of the first and the last ``window`` steps, and the cost per KiB."""
        first = statistics.fmean(statistics.fmean(costs[:window]) for costs in per_run)
        last = statistics.fmean(statistics.fmean(costs[-window:]) for costs in per_run)
        return first, last, (last - first) / kib_added

    flow_growth = [growth(sample) for sample in flow_costs]
    plain_growth = [growth(sample) for sample in plain_costs]

    def shown(figures: list[tuple[float, float, float]]) -> str:
        first, last, per_kib = (statistics.median(f[i] for f in figures) for i in range(3))
        return f"{first * 1e6:,.0f} -> {last * 1e6:,.0f} us, {per_kib * 1e6:+.1f} us/KiB"

    report.check(
        f"5. step cost, steps {steps - window + 1}-{steps} vs 1-{window} "
        f"({kib[-window]:.1f}-{kib[-1]:.1f} vs {kib[0]:.1f}-{kib[window - 1]:.1f} KiB bodies)",
        shown(flow_growth),
        shown(plain_growth) + " plain",
        statistics.median(f[2] / p[2] for f, p in zip(flow_growth, plain_growth, strict=True)),
        "info",
        None,
    )

    # The real SDK app for the same run, against the protocol app: what the SDK costs, and
    # how much of that is the client serve() builds on every request and throws away.
    def sdk_step(reuse_client: bool) -> Callable[[], float]:
        return lambda: _sdk_run(steps, reuse_client).per_step

    def protocol_step() -> float:
        return _protocol_runs(steps, 1).per_step

    real = interleaved(
        {"sdk": sdk_step(False), "sdk, client once": sdk_step(True), "protocol": protocol_step},
        sdk_rounds,
    )
    sdk_ratio = real.ratio("sdk", "protocol")
    report.check(
        f"5. same run, real {sdk} (FastAPI Serve), per step ({sdk_rounds} rounds)",
        ms(real.median("sdk")),
        ms(real.median("protocol")) + " protocol app",
        sdk_ratio,
        f"<= {SDK_STEP_BUDGET}x (2 ms)",
        sdk_ratio <= SDK_STEP_BUDGET,
    )
    throwaway = real.median("sdk") - real.median("sdk, client once")
    report.check(
        "5. of which the SDK's throwaway AsyncQStash per request",
        f"{ms(throwaway)} ({throwaway / real.median('sdk'):.0%} of a step)",
        ms(real.median("sdk, client once")) + " with it built once",
        None,
        "info",
        None,
    )


def steps(report: Report, mode: Mode) -> list[Step]:
    # steps, rounds, timed runs per round, real-SDK rounds
    size = {"full": (50, 21, 3, 5), "ci": (20, 7, 2, 3), "smoke": (3, 2, 1, 1)}[mode]
    return [("5", "<= 2x", lambda: workflows(report, *size))]
