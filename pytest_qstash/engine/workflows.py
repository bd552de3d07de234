"""Upstash Workflow runs: the run table QStash keeps on top of its messages.

A run is a sequence of ordinary messages tied together by the ``Upstash-Workflow-RunId``
publish header. The message published with ``Upstash-Workflow-Init: true`` starts the run;
later ones (the steps the app publishes, third-party calls and their callbacks, the failure
callback) are appended to it. Each message has a *call type* (``Upstash-Workflow-CallType``,
``step`` when absent) that decides what a delivery of it carries: a ``step`` message goes to
the workflow URL with the run's steps so far as its body, the others go as published.

Nothing here knows HTTP; the store tells this table about every message it creates.
"""

from __future__ import annotations

import base64
import json
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from .models import DlqEntry, InvalidTransition, Invoker, Message, ms_to_datetime
from .options import MessageOptions
from .run_settings import RunSettings
from .saved import UNSET, Saved, saved_as
from .workflow_steps import StepGroup, WorkflowStep, decode_step, group_steps

RunState = Literal["RUN_STARTED", "RUN_SUCCESS", "RUN_FAILED", "RUN_CANCELED"]
FailureFunctionState = Literal[
    "CALLBACK_INPROGRESS", "CALLBACK_SUCCESS", "CALLBACK_FAIL", "CALLBACK_CANCELED"
]

STEP = "step"
TO_CALLBACK = "toCallback"
FROM_CALLBACK = "fromCallback"
FAILURE_CALL = "failureCall"

NOT_FOUND = "A workflow run is not found with the given id."

_RUN_ID = "upstash-workflow-runid"
_INIT = "upstash-workflow-init"
_URL = "upstash-workflow-url"
_CALL_TYPE = "upstash-workflow-calltype"


@dataclass(frozen=True, slots=True)
class RunHeaders:
    """The workflow protocol headers of one publish (``Upstash-Workflow-*``, not forwarded)."""

    run_id: str
    init: bool
    url: str | None
    call_type: str

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> RunHeaders | None:
        """From lower-cased publish headers; None when the publish belongs to no run."""
        run_id = headers.get(_RUN_ID, "").strip()
        if not run_id:
            return None
        return cls(
            run_id=run_id,
            init=headers.get(_INIT, "").strip().lower() == "true",
            url=headers.get(_URL) or None,
            call_type=headers.get(_CALL_TYPE, "").strip() or STEP,
        )


@dataclass(eq=False, slots=True)
class RunMember:
    message: Message
    call_type: str
    #: The message as an element of a delivered steps array, built once (compact JSON).
    entry_json: str
    #: The decoded step, once asked for (a message's body never changes).
    decoded: WorkflowStep | None = None
    was_decoded: bool = False

    def step(self) -> WorkflowStep | None:
        if not self.was_decoded:
            self.decoded, self.was_decoded = decode_step(self.message), True
        return self.decoded


@dataclass(eq=False, slots=True)
class WorkflowRun:
    """A workflow run as QStash tracks it, from its init message to its end."""

    run_id: str
    url: str
    created_ms: int
    state: RunState = "RUN_STARTED"
    completed_ms: int | None = None
    #: The DLQ entry of the message whose failure ended the run.
    dlq_id: str | None = None
    #: What the app sent with ``DELETE .../runs/{id}?cancel=false`` (the TypeScript SDK sends
    #: the route's result; Python sends nothing).
    response: str | None = None
    #: The run whose ``context.invoke`` started this one (TypeScript SDK), if any.
    invoker: Invoker | None = None
    #: Its messages in the order they came, each with its call type (``add_message``).
    members: list[RunMember] = field(default_factory=list, repr=False)
    #: What the trigger set for the whole run (retries, failure URL, labels, ...).
    settings: RunSettings = field(default_factory=RunSettings, repr=False)
    #: The DLQ entry this run resumes or restarts (``qstash.resume_run`` / ``restart_run``).
    resumed_from: str | None = None
    #: How many of the run's first messages were carried over from the run it resumes (the
    #: init message and the steps that had succeeded): they are not this run's own.
    carried: int = 0
    #: Step publishes of this run the API refused (``"<status> <error>"``): the SDK reads
    #: such an answer as a cancelled run, so the report shows them.
    refused: list[str] = field(default_factory=list, repr=False)
    #: When its waits in progress timed out, by event id, as an export recorded them
    #: (``qstash.load``): the run's next wait for that event keeps the deadline.
    wait_deadlines: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def labels(self) -> tuple[str, ...]:
        """The run's labels (``Upstash-Label: a,b`` at trigger is ``("a", "b")``)."""
        return self.settings.labels

    @property
    def label(self) -> str | None:
        """The run's first label, as Upstash's ``label`` field shows it."""
        return self.labels[0] if self.labels else None

    @property
    def flow_control_key(self) -> str | None:
        return self.settings.flow_control_key

    @property
    def redact(self) -> tuple[str, ...]:
        """What the trigger's ``Upstash-Redact-Fields`` hides, for every step of the run."""
        return self.members[0].message.redact if self.members else ()

    @property
    def created_at(self) -> datetime:
        return ms_to_datetime(self.created_ms)

    @property
    def completed_at(self) -> datetime | None:
        return None if self.completed_ms is None else ms_to_datetime(self.completed_ms)

    @property
    def active(self) -> bool:
        return self.state == "RUN_STARTED"

    @property
    def messages(self) -> list[Message]:
        """Every message of the run, in publish order (the init message first)."""
        return [member.message for member in self.members]

    @property
    def typed_messages(self) -> list[tuple[Message, str]]:
        """Every message of the run with the call type it joined under (``step``,
        ``toCallback``, ``fromCallback``, ``failureCall``), in publish order."""
        return [(member.message, member.call_type) for member in self.members]

    def take_wait_deadline(self, event_id: str) -> int | None:
        """The recorded deadline of its wait for ``event_id``, once (None: none recorded)."""
        return self.wait_deadlines.pop(event_id, None) if self.wait_deadlines else None

    def add_message(self, message: Message, call_type: str) -> int:
        """Append a message to the run's list, nothing else, and return its position: how a
        copy of a run read back from the server's JSON is built (the run table's ``track``
        and ``adopt`` also index it)."""
        self.members.append(RunMember(message, call_type, _entry_json(message, call_type)))
        return len(self.members) - 1

    def replace_message(self, position: int, message: Message) -> None:
        """Put ``message`` in the place of the one at ``position``, under its call type (a
        dead letter retried takes the failed message's place)."""
        call_type = self.members[position].call_type
        self.members[position] = RunMember(message, call_type, _entry_json(message, call_type))

    def carry(self, source: WorkflowRun, position: int) -> None:
        """Start with ``source``'s live messages before ``position`` (a resumed run replays
        them as steps already done; they stay ``source``'s messages)."""
        if self.members:
            raise InvalidTransition(f"workflow run {self.run_id} has begun: it carries nothing")
        kept = source.live_members(position)
        self.members.extend(kept)
        self.carried = len(kept)

    def call_type_at(self, position: int) -> str:
        return self.members[position].call_type

    def live_members(self, stop: int | None = None) -> list[RunMember]:
        """The run's messages before position ``stop`` (all: None), each with its call type
        and steps-array element; cancelled ones left out."""
        members = self.members if stop is None else self.members[:stop]
        return [m for m in members if m.message.state != "CANCELED"]

    def steps_body(self, position: int) -> bytes:
        """A JSON array of the run's live messages up to and including ``position``, each
        ``{messageId, body: <standard, padded base64>, callType}``."""
        entries = [
            member.entry_json
            for member in self.members[: position + 1]
            if member.message.state != "CANCELED"
        ]
        return ("[" + ",".join(entries) + "]").encode()

    def raw_steps(self) -> list[dict[str, Any]]:
        """Every live message of the run as a steps-array element (the lazy fetch)."""
        return [
            json.loads(member.entry_json)
            for member in self.members
            if member.message.state != "CANCELED"
        ]

    # -- transitions: each checks it is allowed ---------------------------------------------
    def succeed(self, now_ms: int, response: str | None = None) -> None:
        """The app reported the route's end: RUN_SUCCESS, with what it returned."""
        self._require_active("succeed")
        self.state = "RUN_SUCCESS"
        self.completed_ms = now_ms
        self.response = response or None

    def fail(self, now_ms: int, dlq_id: str) -> None:
        """A message the run cannot go on without failed into the DLQ as ``dlq_id``."""
        self._require_active("fail")
        self.state = "RUN_FAILED"
        self.completed_ms = now_ms
        self.dlq_id = dlq_id

    def cancel(self, now_ms: int) -> list[Message]:
        """Cancelled: RUN_CANCELED. Returns its messages still owed a delivery (sleeps,
        retries, the attempt in flight), which are cancelled with it."""
        self._require_active("be cancelled")
        self.state = "RUN_CANCELED"
        self.completed_ms = now_ms
        return self._owed()

    def refuse(self, reason: str, now_ms: int) -> list[Message]:
        """The API refused one of its step publishes (``reason`` kept): the SDK takes that
        for a cancel and stops, so an active run ends RUN_FAILED. Returns its messages still
        owed a delivery, which are cancelled with it (none when it had ended already)."""
        self.refused.append(reason)
        if not self.active:
            return []
        self.state = "RUN_FAILED"
        self.completed_ms = now_ms
        return self._owed()

    def resume(self) -> None:
        """The dead letter that failed it is published again (a DLQ retry): it runs again."""
        if self.state != "RUN_FAILED":
            raise InvalidTransition(
                f"workflow run {self.run_id} cannot be resumed: it is {self.state} (only "
                "from RUN_FAILED)"
            )
        self.state, self.completed_ms, self.dlq_id = "RUN_STARTED", None, None

    def _require_active(self, transition: str) -> None:
        if not self.active:
            raise InvalidTransition(
                f"workflow run {self.run_id} cannot {transition}: it is {self.state} (only "
                "from RUN_STARTED)"
            )

    def _owed(self) -> list[Message]:
        return [member.message for member in self.members if not member.message.done]

    @property
    def body(self) -> str:
        """The run's initial payload, as the init message carried it."""
        return self.members[0].message.body if self.members else ""

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def steps(self) -> list[WorkflowStep]:
        """The steps the app published, in order (the initial payload is not a step, nor
        are the plan steps the SDK publishes before a ``parallel`` group's steps run)."""
        return [step for step in self._published_steps() if not step.is_plan]

    def _published_steps(self) -> list[WorkflowStep]:
        return [
            step
            for member in self.members[1:]
            if member.call_type == STEP and (step := member.step()) is not None
        ]

    @property
    def step_groups(self) -> list[StepGroup]:
        """The steps as Upstash groups them: ``sequential`` (one step each) and ``parallel``
        (the steps run side by side, in step id order; a planned step that has not
        finished yet is its plan step)."""
        return group_steps(self._published_steps())

    def step(self, name: str) -> WorkflowStep:
        """The step called ``name`` (the last one, should a name repeat)."""
        for step in reversed(self.steps):
            if step.name == name:
                return step
        names = ", ".join(repr(s.name) for s in self.steps) or "none"
        raise KeyError(f"run {self.run_id} has no step {name!r} (steps: {names})")

    @property
    def failure_call(self) -> Message | None:
        """The failure callback QStash published when the run failed (to the
        ``failure_function``'s route or the ``failure_url``), if any."""
        for member in reversed(self.members):
            if member.call_type == FAILURE_CALL:
                return member.message
        return None

    @property
    def failure_function_state(self) -> FailureFunctionState | None:
        """How the failure callback went: None when there is none."""
        message = self.failure_call
        if message is None:
            return None
        if message.state == "DELIVERED":
            return "CALLBACK_SUCCESS"
        if message.state == "FAILED":
            return "CALLBACK_FAIL"
        if message.state == "CANCELED":
            return "CALLBACK_CANCELED"
        return "CALLBACK_INPROGRESS"

    def __repr__(self) -> str:
        return (
            f"<WorkflowRun {self.run_id} {self.url} state={self.state} "
            f"steps={len(self.steps)} created_at={self.created_at.isoformat()}>"
        )


class WorkflowRuns(Saved):
    """The run table: runs by id, and which run (and call type) each message belongs to."""

    SAVED = saved_as("runs _members")
    UNSAVED = {"on_end": UNSET}

    def __init__(self) -> None:
        self.runs: dict[str, WorkflowRun] = {}
        #: message id -> (its run, its position in the run)
        self._members: dict[str, tuple[WorkflowRun, int]] = {}
        #: Told of every run that ends (succeeds, fails, is cancelled): the store ends its
        #: waits and reports it to its invoker.
        self.on_end: Callable[[WorkflowRun], None] | None = None

    def tell_weakly(self, method: Callable[[WorkflowRun], None]) -> None:
        """Tell ``method`` (of the store that owns this table) of every run that ends, held
        weakly: no reference cycle, so a store no one holds is freed at once (a suite's many
        fakes would keep the cycle collector busy)."""
        held = weakref.WeakMethod(method)

        def call(run: WorkflowRun) -> None:
            bound = held()
            if bound is not None:
                bound(run)

        self.on_end = call

    def _ended(self, run: WorkflowRun) -> None:
        if self.on_end is not None:
            self.on_end(run)

    def get(self, run_id: str) -> WorkflowRun | None:
        return self.runs.get(run_id)

    def __iter__(self) -> Iterator[WorkflowRun]:
        return iter(self.runs.values())

    # -- publishing -------------------------------------------------------------------------
    def target_of(self, headers: Mapping[str, str]) -> tuple[str, WorkflowRun | None] | None:
        """For a publish of a later step (not an init): the run id it names and that run,
        None when QStash does not know it. None for any other publish."""
        tag = RunHeaders.of(headers)
        if tag is None or tag.init:
            return None
        return tag.run_id, self.runs.get(tag.run_id)

    def existing_init(self, headers: Mapping[str, str]) -> Message | None:
        """The init message of the run an init publish names, when that run already exists:
        a run is never started twice (the publish is answered as deduplicated)."""
        tag = RunHeaders.of(headers)
        if tag is None or not tag.init:
            return None
        run = self.runs.get(tag.run_id)
        return run.messages[0] if run is not None and run.messages else None

    def inherit(self, opts: MessageOptions) -> None:
        """Give a later publish of a run what its trigger set: the redaction, for every
        message of the run; the other settings (``RunSettings``), for a step that sets none
        of its own."""
        tag = RunHeaders.of(opts.workflow_headers)
        if tag is None or tag.init:
            return
        run = self.runs.get(tag.run_id)
        if run is None:
            return
        # Redaction is the run's (the SDKs send it with the trigger only), whatever the
        # feature set: a step's or a call's body and headers are hidden as its trigger's are.
        if not opts.redact:
            opts.redact = run.redact
        if tag.call_type == STEP:
            run.settings.fill(opts)

    def track(
        self,
        message: Message,
        headers: Mapping[str, str],
        now_ms: int,
        opts: MessageOptions | None = None,
    ) -> bool:
        """Tie a new message to its run (starting the run on an init publish).

        Returns False when the message must never be delivered: it is for a run that has
        ended (a call's callback arriving after a cancel, say). A failure callback is the
        exception: it is what a failed run publishes."""
        tag = RunHeaders.of(headers)
        if tag is None:
            return True
        message.workflow_run_id = tag.run_id
        run = self.runs.get(tag.run_id)
        if run is None:
            if not tag.init:
                return True  # the API refuses these; one made internally just keeps its tag
            run = self.runs[tag.run_id] = WorkflowRun(
                run_id=tag.run_id, url=tag.url or message.url, created_ms=now_ms
            )
            if opts is not None:
                run.settings = RunSettings.of(opts)
        self._members[message.message_id] = (run, run.add_message(message, tag.call_type))
        return run.active or tag.call_type == FAILURE_CALL

    def replace_dead_letter(self, failed: Message, copy: Message, entry: DlqEntry) -> None:
        """A run's dead letter published again (a DLQ retry): the copy takes the failed
        message's place in the run, so its delivery carries the same steps, and a run that
        failed through that entry runs again from there."""
        found = self._members.pop(failed.message_id, None)
        if found is None:
            return
        run, position = found
        run.replace_message(position, copy)
        self._members[copy.message_id] = (run, position)
        copy.workflow_run_id = run.run_id
        if run.state == "RUN_FAILED" and run.dlq_id == entry.dlq_id:
            run.resume()

    # -- resuming and restarting (the workflow DLQ) ------------------------------------------
    def start(
        self,
        run_id: str,
        url: str,
        now_ms: int,
        settings: RunSettings,
        *,
        resumed_from: str | None = None,
    ) -> WorkflowRun:
        """A new run with no message yet (its messages join it by ``carry`` and ``adopt``)."""
        if run_id in self.runs:
            raise ValueError(f"a workflow run {run_id!r} already exists")
        run = self.runs[run_id] = WorkflowRun(
            run_id=run_id, url=url, created_ms=now_ms, settings=settings, resumed_from=resumed_from
        )
        return run

    def carry(self, run: WorkflowRun, source: WorkflowRun, position: int) -> None:
        """Start ``run`` with ``source``'s live messages before ``position``: a resumed run's
        deliveries replay them as steps already done (they stay ``source``'s messages)."""
        run.carry(source, position)

    def adopt(self, run: WorkflowRun, message: Message, call_type: str) -> None:
        """Make a message the engine published (not the app) the run's next one."""
        self._members[message.message_id] = (run, run.add_message(message, call_type))
        message.workflow_run_id = run.run_id

    def position(self, message: Message) -> int:
        """Where a message of a run stands in it (0: the init message)."""
        return self._members[message.message_id][1]

    def call_type(self, message: Message) -> str:
        run, position = self._members[message.message_id]
        return run.call_type_at(position)

    def forget(self, run: WorkflowRun) -> list[Message]:
        """Drop a run that ended (retention): it leaves the table, and so do the messages it
        owns; returns them. Messages a resumed run carried over stay their own run's."""
        self.runs.pop(run.run_id, None)
        owned: list[Message] = []
        for message in run.messages:
            found = self._members.get(message.message_id)
            if found is not None and found[0] is run:
                del self._members[message.message_id]
                owned.append(message)
        return owned

    # -- delivering -------------------------------------------------------------------------
    def membership(self, message_id: str) -> tuple[WorkflowRun, str] | None:
        """The run a message belongs to and its call type, or None."""
        found = self._members.get(message_id)
        if found is None:
            return None
        run, position = found
        return run, run.call_type_at(position)

    def steps_body(self, message_id: str) -> bytes:
        """The body of a ``step`` delivery: a JSON array of the run's messages up to and
        including this one (cancelled ones left out), each ``{messageId, body: <standard,
        padded base64>, callType}``."""
        run, position = self._members[message_id]
        return run.steps_body(position)

    def raw_steps(self, run: WorkflowRun) -> list[dict[str, Any]]:
        """Every live message of the run as a steps-array element (the lazy fetch)."""
        return run.raw_steps()

    # -- ending -----------------------------------------------------------------------------
    def succeed(self, run: WorkflowRun, now_ms: int, response: str | None = None) -> None:
        """The run's route returned (``WorkflowRun.succeed``)."""
        run.succeed(now_ms, response)
        self._ended(run)

    def cancel(self, run: WorkflowRun, now_ms: int) -> list[Message]:
        """End the run as cancelled; returns its messages still owed a delivery (sleeps,
        retries, the attempt in flight), for the store to cancel."""
        owed = run.cancel(now_ms)
        self._ended(run)
        return owed

    def refuse_step(self, run: WorkflowRun, reason: str, now_ms: int) -> list[Message]:
        """The API refused a step publish of an active run: the SDK takes such an answer
        for a cancelled run and stops, so the run can never go on. It ends RUN_FAILED with
        the reason kept; returns its messages still owed a delivery, for the store to
        cancel."""
        was_active = run.active
        owed = run.refuse(reason, now_ms)
        if was_active:
            self._ended(run)
        return owed

    def message_failed(self, message: Message, entry: DlqEntry, now_ms: int) -> None:
        """A message of a run ran out of retries. A step (or a call's callback, without
        which the run cannot go on) fails the run; a third-party call does not (the SDK
        sends it with ``WF_NoDelete``: its failure reaches the run through the callback),
        nor does the failure callback itself."""
        found = self.membership(message.message_id)
        if found is None:
            return
        run, call_type = found
        if run.active and call_type in (STEP, FROM_CALLBACK):
            run.fail(now_ms, entry.dlq_id)
            self._ended(run)

    def fail_loaded(self, run: WorkflowRun, ended_ms: int, dlq_id: str) -> None:
        """A recorded run that had failed into the DLQ as ``dlq_id`` (an export loaded)."""
        run.fail(ended_ms, dlq_id)
        self._ended(run)

    def is_third_party_call(self, message: Message) -> bool:
        """A ``context.call``'s request to the third party. When it fails for good, its last
        answer still reaches the run through the callback as an ordinary result (Upstash:
        a non-2xx call "will still be treated as successful"), so it is not dead-lettered."""
        found = self.membership(message.message_id)
        return found is not None and found[1] == TO_CALLBACK

    def failure_fields(self, message: Message) -> dict[str, Any]:
        """What a workflow failure callback adds to QStash's callback JSON: the run, and the
        run's *initial* payload as ``sourceBody`` (the ``InitialBody`` feature)."""
        found = self.membership(message.message_id)
        if found is None:
            return {}
        run = found[0]
        initial = run.messages[0].content if run.messages else b""
        return {
            "workflowRunId": run.run_id,
            "workflowCreatedAt": run.created_ms,
            "sourceBody": base64.b64encode(initial).decode("ascii"),
        }


def _entry_json(message: Message, call_type: str) -> str:
    entry = {
        "messageId": message.message_id,
        "body": base64.b64encode(message.content).decode("ascii"),
        "callType": call_type,
    }
    return json.dumps(entry, separators=(",", ":"))
