"""A workflow run's steps as the app published them: each step message's JSON decoded
(``WorkflowStep``), and the steps grouped as Upstash's logs group them (``StepGroup``).

Read from a run's messages (``workflows.py``); nothing here changes a run.
"""

from __future__ import annotations

import base64
import contextlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from .models import Message


@dataclass(eq=False, slots=True)
class WorkflowStep:
    """One step result the app published (``context.run``, ``sleep``, ``sleep_until``,
    ``call``), decoded from the step JSON the SDK sent."""

    step_id: int
    name: str
    #: The SDK's step type: ``Run``, ``SleepFor``, ``SleepUntil``, ``Call``; the TypeScript
    #: SDK's ``Wait``, ``WaitForWebhook``, ``CreateWebhook``, ``Notify``, ``Invoke`` too.
    type: str
    #: The step's result, decoded from the JSON string the SDK stores it as (``None`` for a
    #: sleep; for a call, ``{"status", "body" (text), "header"}``; for a notified wait, the
    #: event's data; for an ``Invoke``, ``{"body", "isFailed", "isCanceled"}``).
    out: Any
    concurrent: int
    sleep_for: int | str | None
    sleep_until: int | None
    #: The step JSON exactly as published, for anything not surfaced above.
    raw: dict[str, Any] = field(repr=False)
    #: The message that carried the step: its delivery resumes the run.
    message: Message = field(repr=False)

    @property
    def message_id(self) -> str:
        return self.message.message_id

    @property
    def is_plan(self) -> bool:
        """A parallel plan step: the SDK's announcement that a step of a ``parallel`` group
        is about to run (``targetStep``), not a step result."""
        return bool(self.raw.get("targetStep"))

    @property
    def target_step(self) -> int:
        """The step id a plan step stands for (the step's own id otherwise)."""
        return int(self.raw.get("targetStep") or self.step_id)

    @property
    def created_at(self) -> datetime:
        """When the app published the step (the step ran at that virtual instant)."""
        return self.message.created_at

    @property
    def resumes_at(self) -> datetime:
        """When the run continues after this step: the publish time, or the end of a sleep."""
        return self.message.not_before

    def __repr__(self) -> str:
        return f"<WorkflowStep {self.step_id} {self.name!r} {self.type} out={self.out!r}>"


@dataclass(frozen=True, slots=True)
class StepGroup:
    """Steps as the logs group them: ``sequential`` or ``parallel``."""

    type: Literal["sequential", "parallel"]
    steps: list[WorkflowStep]


def group_steps(published: list[WorkflowStep]) -> list[StepGroup]:
    """Published steps (plan steps included) as Upstash groups them: ``sequential`` (one step
    each) and ``parallel`` (the steps run side by side, in step id order; a planned step that
    has not finished yet is its plan step)."""
    results = {step.step_id: step for step in published if not step.is_plan}
    groups: list[StepGroup] = []
    placed: set[int] = set()
    for step in published:
        if step.concurrent <= 1 and not step.is_plan:
            groups.append(StepGroup("sequential", [step]))
            continue
        first = step.target_step
        if first in placed:
            continue
        # The plan's first step id: the lowest target of the plan steps of this group.
        batch = [
            s
            for s in published
            if s.concurrent == step.concurrent and abs(s.target_step - first) < step.concurrent
        ]
        start = min(s.target_step for s in batch if s.target_step not in placed)
        ids = range(start, start + step.concurrent)
        if any(i in placed for i in ids):
            continue
        placed.update(ids)
        members: list[WorkflowStep] = []
        for i in ids:
            result = results.get(i)
            plan = next((s for s in batch if s.is_plan and s.target_step == i), None)
            if result is not None:
                members.append(result)
            elif plan is not None:
                members.append(plan)
        groups.append(StepGroup("parallel", members))
    return groups


#: Step types whose ``out`` QStash sets, base64: a notified wait's event data, a webhook's
#: request.
_BASE64_OUT = frozenset({"Wait", "WaitForWebhook"})


def decode_step(message: Message) -> WorkflowStep | None:
    """A step message's JSON as a ``WorkflowStep``; None for a body that is not one."""
    try:
        raw = json.loads(message.content)
    except ValueError:
        return None
    if not isinstance(raw, dict) or "stepName" not in raw:
        return None
    out = raw.get("out")
    if isinstance(out, str) and raw.get("stepType") in _BASE64_OUT:
        with contextlib.suppress(ValueError):  # a wait's out is the event's data, base64
            out = base64.b64decode(out, validate=True).decode("utf-8")
    if isinstance(out, str):
        with contextlib.suppress(ValueError):  # not JSON: kept as text, as the SDK does
            out = json.loads(out)
    return WorkflowStep(
        step_id=int(raw.get("stepId") or 0),
        name=str(raw["stepName"]),
        type=str(raw.get("stepType", "")),
        out=out,
        concurrent=int(raw.get("concurrent") or 1),
        sleep_for=raw.get("sleepFor"),
        sleep_until=raw.get("sleepUntil"),
        raw=raw,
        message=message,
    )
