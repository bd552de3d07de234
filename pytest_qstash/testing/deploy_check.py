"""The workflow deploy check: for each Upstash Workflow run in progress, does the app's new code
accept the run's recorded steps?

Upstash's "Update a workflow" page warns that removing, renaming or reordering steps breaks
the runs in progress: on resuming one, the SDK replays its recorded steps against the route's
code and refuses a mismatch (``Incompatible step name. Expected '<new code's>', got
'<recorded>' from the request``; ``Incompatible step type`` for a step whose kind changed;
both SDKs word it so).

For each active run this module builds a **probe**, the delivery QStash would make on resuming
it, and sends it to the app as it is now:

- the run's pending ``step`` message (not done: a sleep's step, a step result not delivered
  yet), the first due;
- else its last ``step`` message, its steps so far delivered again (a run waiting for an
  event, or in the middle of a ``context.call``: the route replays its steps and asks for the
  wait or the call again).

The probe is built as every delivery is (``delivery.requests.delivery_request``), signed, with
the message's id and retry count. The answer is the verdict (``Verdict``): a 2xx is
``compatible``; an answer holding the SDK's refusal is ``incompatible`` (with the refused
step's id, the name the new code expected and the one recorded); anything else (another
status, no answer) is ``error``.

The check leaves the probe message itself as it was: it is a check, not an attempt (no
delivery is recorded, its state and retry count stay). In-process (``check_fake``), it is a
dry run for QStash's state as well: while the app answers a probe, the fake's API gateway
records the calls it makes and answers them without applying any (``testing/dry_run.py``), so
the store is as it was after the check; what the app did (published its next step, ended the
run) is read from those calls. The app's route does run, and its step functions with it
(their own outbound calls reach what is mounted for them). Against a ``pytest-qstash serve``
(the command), the app's calls reach that QStash, as on resuming.

``check_runs`` and ``acheck_runs`` take how to send (the fake's sender in-process,
``FakeQStash.check_deploy``; an HTTP client in ``pytest-qstash check-deploy``) and how to see
what the app did; ``probes`` and ``judge`` are the two halves they share.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import httpx

from ..delivery.dispatcher import Dispatcher
from ..delivery.outcome import Outcome, Unrouted
from ..delivery.requests import delivery_request
from ..engine.models import Message
from ..engine.store import Store
from ..engine.workflow_steps import decode_step
from ..engine.workflows import STEP, WorkflowRun
from ..errors import AsyncContextError
from .dry_run import DryRun
from .gateway import ApiGateway

VerdictKind = Literal["compatible", "incompatible", "error"]

#: The SDKs' refusal of a recorded step (upstash-workflow's ``_validate_step``,
#: @upstash/workflow's ``validateStep``; also inside its parallel wording).
_REFUSAL = re.compile(
    r"Incompatible step (name|type)\. Expected '(.*?)', got '(.*?)' from the request", re.S
)
#: How much of an answer's body an error's detail quotes.
_QUOTED = 120


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the app's code accepts a run's recorded steps.

    ``verdict``: ``compatible`` (the app answered 2xx), ``incompatible`` (the SDK refused a
    recorded step) or ``error`` (anything else). For ``incompatible``: ``step``, the id of the
    recorded step the SDK refused (``stepId``: 1 is the first step after the initial payload),
    ``expected``, the name (or, for a changed kind, the type) the new code has there, and
    ``found``, the recorded one. ``detail``: one line, what the app did (``published its next
    step 'c'``, ``finished the run``, ``answered 200``) or, for an error, the status and the
    start of the body."""

    run_id: str
    verdict: VerdictKind
    step: int | None
    expected: str | None
    found: str | None
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Probe:
    """A run in progress and the message whose delivery resumes it."""

    run: WorkflowRun
    message: Message
    #: The message's place in the run (what its delivery carries: the run's steps up to it).
    position: int


#: Before a probe is sent, what watches the run; called after the answer, it says what the
#: app did (``published its next step 'c'``), or None when it cannot tell.
Observe = Callable[[WorkflowRun], Callable[[], str | None]]
Send = Callable[[httpx.Request], Outcome]
AsyncSend = Callable[[httpx.Request], Awaitable[Outcome]]


def probes(store: Store) -> list[Probe | WorkflowRun]:
    """For each active run, by run id: its probe, or the run alone when it has no step
    recorded yet (nothing to replay, nothing to refuse)."""
    out: list[Probe | WorkflowRun] = []
    for run in sorted((r for r in store.workflows if r.active), key=lambda r: r.run_id):
        probe = _probe(run)
        out.append(run if probe is None else probe)
    return out


def _probe(run: WorkflowRun) -> Probe | None:
    steps = [
        (position, message)
        for position, (message, call_type) in enumerate(run.typed_messages)
        if call_type == STEP and message.state != "CANCELED"
    ]
    pending = [(m.not_before_ms, p, m) for p, m in steps if not m.done]
    if pending:
        _, position, message = min(pending, key=lambda item: (item[0], item[1]))
    elif steps:
        position, message = steps[-1]
    else:
        return None
    if position == 0:
        return None  # the initial payload alone: the route has not run a step yet
    return Probe(run, message, position)


def request_for(
    store: Store,
    probe: Probe,
    *,
    signing_key: str,
    region: str | None = None,
    url: str | None = None,
) -> httpx.Request:
    """The probe's signed delivery request (to ``url`` when given, else the message's URL).
    Its signature's id is derived from the message and the moment, so the check draws no id
    of the store's: the ids a test sees after it are those it would see without it."""
    seed = f"deploy-check {probe.message.message_id} {store.clock.now_ms}".encode()
    return delivery_request(
        store,
        probe.message,
        signing_key=signing_key,
        region=region,
        jwt_id="jwt_" + hashlib.sha256(seed).hexdigest()[:28],
        url=url,
    )


def judge(probe: Probe, outcome: Outcome, did: str | None = None) -> Verdict:
    """The verdict on the app's answer to ``probe``; ``did``: what the app was seen to do."""
    run_id = probe.run.run_id
    status = outcome.status
    if status is not None and 200 <= status < 300:
        return Verdict(run_id, "compatible", None, None, None, did or f"answered {status}")
    text = _answer_text(outcome.content)
    refused = _REFUSAL.search(text)
    if refused is not None:
        kind, expected, found = refused.groups()
        step = _refused_step(probe, kind, found)
        detail = _one_line(f"{status} {refused.group(0)}")
        return Verdict(run_id, "incompatible", step, expected, found, detail)
    if status is None:
        return Verdict(run_id, "error", None, None, None, _one_line(f"no answer: {outcome.error}"))
    body = outcome.content.decode("utf-8", "replace") or (outcome.error or "")
    return Verdict(run_id, "error", None, None, None, _one_line(f"{status} {body}"))


def not_started(run: WorkflowRun) -> Verdict:
    return Verdict(
        run.run_id, "compatible", None, None, None, "no step recorded yet: nothing to replay"
    )


@dataclass(frozen=True, slots=True)
class _Planned:
    """A probe ready to send: its request, and how to see what the app did on it."""

    probe: Probe
    request: httpx.Request
    watch: Observe

    def watched(self) -> Callable[[Outcome], Verdict]:
        """Start watching the run (just before the probe is sent); give the answer to the
        function returned for the verdict."""
        seen = self.watch(self.probe.run)
        return lambda outcome: judge(self.probe, outcome, seen())


def _planned(
    store: Store,
    *,
    signing_key: str,
    region: str | None,
    url_for: Callable[[Message], str | None] | None,
    observe: Observe | None,
) -> list[_Planned | Verdict]:
    """Every active run's probe, by run id (a verdict already for a run with nothing to
    replay); what the app did is watched from just before its probe is sent."""
    watch = observe if observe is not None else _unseen
    out: list[_Planned | Verdict] = []
    for item in probes(store):
        if isinstance(item, WorkflowRun):
            out.append(not_started(item))
            continue
        url = url_for(item.message) if url_for is not None else None
        request = request_for(store, item, signing_key=signing_key, region=region, url=url)
        out.append(_Planned(item, request, watch))
    return out


def _unrouted(exc: Unrouted) -> Outcome:
    return Outcome(None, httpx.Headers(), b"", f"unrouted: {exc.reason}")


def check_runs(
    store: Store,
    send: Send,
    *,
    signing_key: str,
    region: str | None = None,
    url_for: Callable[[Message], str | None] | None = None,
    observe: Observe | None = None,
) -> list[Verdict]:
    """Probe every active run of ``store`` through ``send``, one after the other, by run id.
    ``url_for``: where a probe goes (None: the message's URL); ``observe``: how to see what
    the app did (default: not seen, the detail is the answer's status)."""
    verdicts: list[Verdict] = []
    for item in _planned(
        store, signing_key=signing_key, region=region, url_for=url_for, observe=observe
    ):
        if isinstance(item, Verdict):
            verdicts.append(item)
            continue
        verdict = item.watched()
        try:
            outcome = send(item.request)
        except Unrouted as exc:
            outcome = _unrouted(exc)
        verdicts.append(verdict(outcome))
    return verdicts


async def acheck_runs(
    store: Store,
    send: AsyncSend,
    *,
    signing_key: str,
    region: str | None = None,
    url_for: Callable[[Message], str | None] | None = None,
    observe: Observe | None = None,
) -> list[Verdict]:
    """``check_runs`` with an async ``send``."""
    verdicts: list[Verdict] = []
    for item in _planned(
        store, signing_key=signing_key, region=region, url_for=url_for, observe=observe
    ):
        if isinstance(item, Verdict):
            verdicts.append(item)
            continue
        verdict = item.watched()
        try:
            outcome = await send(item.request)
        except Unrouted as exc:
            outcome = _unrouted(exc)
        verdicts.append(verdict(outcome))
    return verdicts


def check_fake(dispatcher: Dispatcher, gateway: ApiGateway) -> list[Verdict]:
    """``FakeQStash.check_deploy``: each probe through the fake's sender, into the app
    mounted at the run's URL now (or a user's mock of it), as the fake's deliveries go; a dry
    run for the fake's QStash (``gateway.dry_run``): the app's API calls are answered, not
    applied."""
    __tracebackhide__ = True
    dispatcher.refuse_reentry()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        settings = dispatcher.settings
        try:
            return check_runs(
                dispatcher.store,
                dispatcher.sender.send,
                signing_key=settings.signing_key(),
                region=settings.region,
                observe=_dry_runs(dispatcher.store, gateway),
            )
        finally:
            gateway.dry_run = None
    raise AsyncContextError(
        "qstash.check_deploy() blocks, and this code runs inside an event loop: use "
        "`await qstash.acheck_deploy()` here instead"
    )


async def acheck_fake(dispatcher: Dispatcher, gateway: ApiGateway) -> list[Verdict]:
    """``FakeQStash.acheck_deploy``: ``check_fake`` from async code."""
    __tracebackhide__ = True
    dispatcher.refuse_reentry()
    settings = dispatcher.settings
    try:
        return await acheck_runs(
            dispatcher.store,
            dispatcher.sender.asend,
            signing_key=settings.signing_key(),
            region=settings.region,
            observe=_dry_runs(dispatcher.store, gateway),
        )
    finally:
        gateway.dry_run = None


def _dry_runs(store: Store, gateway: ApiGateway) -> Observe:
    """For each probe, a dry run of the gateway while the app answers it (seeded by the run
    and the moment: its ids are the same on every run of a test, and none is the store's);
    what the app did is what its calls did."""

    def watch(run: WorkflowRun) -> Callable[[], str | None]:
        dry_run = DryRun(store, f"{run.run_id} {store.clock.now_ms}")
        gateway.dry_run = dry_run

        def seen() -> str | None:
            gateway.dry_run = None
            return dry_run.did(run.run_id)

        return seen

    return watch


def _unseen(run: WorkflowRun) -> Callable[[], str | None]:
    return lambda: None


def _refused_step(probe: Probe, kind: str, found: str) -> int | None:
    """The id of the recorded step the SDK refused: the first one the probe carried whose name
    (or type, for a changed kind) is the one found."""
    for message, call_type in probe.run.typed_messages[1 : probe.position + 1]:
        if call_type != STEP or message.state == "CANCELED":
            continue
        step = decode_step(message)
        if step is None:
            continue
        if (step.name if kind == "name" else step.type) == found:
            return step.target_step
    return None


def _answer_text(content: bytes) -> str:
    """An answer's body as text; for the SDKs' error JSON (``{"error", "message"}``), its
    message."""
    text = content.decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
        return str(parsed["message"])
    return text


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _QUOTED else flat[: _QUOTED - 3] + "..."
