"""Workflow waits: runs waiting for an event, the notifies that resume them, and timeouts.

A run waits with ``POST /v2/wait/{eventId}`` (the TypeScript SDK's ``context.waitForEvent``
and ``waitForWebhook``): the request's headers are the step's publish headers, its body the
wait step and its timeout. The wait ends in one of three ways, each publishing the wait step
back into the run as QStash does, the SDK reading the outcome from it:

- a notify of the event (``POST /v2/notify/{eventId}``, every waiter of the event; or
  ``/v2/notify/{runId}/{eventId}``, that run's): the step with ``out`` set to the event's data,
  base64, and ``waitTimeout: false``;
- its timeout (default 7 days): the step with ``waitTimeout: true``, to the timeout URL;
- the run ending (cancelled, failed): the waiter is dropped, nothing is published.

A notify for one run when that run is not waiting is kept and consumed by the run's next wait
for the event; a notify of an event nobody waits for is lost. Nothing here knows HTTP.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .durations import parse_duration_ms
from .models import ms_to_datetime
from .options import LATEST_MS, MessageOptions
from .saved import Saved, saved_as
from .workflows import WorkflowRun

#: QStash's default wait timeout: seven days.
DEFAULT_TIMEOUT_MS = 7 * 86_400_000

#: Publish headers of the wait request that are not the step's own.
_TRANSPORT = frozenset(
    {
        "authorization",
        "host",
        "content-length",
        "connection",
        "accept",
        "accept-encoding",
        "user-agent",
        "transfer-encoding",
    }
)


@dataclass(eq=False, slots=True)
class Waiter:
    """A workflow run waiting for an event (``context.waitForEvent``, or a webhook's request
    for ``context.waitForWebhook``), from its wait until a notify or its timeout."""

    event_id: str
    run_id: str
    #: Where the notified step goes (the workflow URL) and the publish headers it goes with.
    url: str
    headers: dict[str, str] = field(repr=False)
    created_ms: int
    deadline_ms: int
    #: Where the timed-out step goes, with these headers (``{name: [values]}``) and body.
    timeout_url: str
    timeout_headers: dict[str, list[str]] = field(repr=False)
    timeout_body: str | None
    #: The wait step as the SDK sent it (``stepId``, ``stepName``, ``stepType``, ...).
    step: dict[str, Any] = field(repr=False)
    #: The step's publish back into the run when notified, and when timed out (to
    #: ``timeout_url``, with ``timeout_headers`` forwarded).
    options: MessageOptions = field(repr=False)
    timeout_options: MessageOptions = field(repr=False)
    #: The fake's own id of this wait (what its timeout is planned under).
    waiter_id: str = ""
    #: Which clock event is this waiter's timeout: a stale one (notified since) is skipped.
    generation: int = 0

    @property
    def step_name(self) -> str:
        return str(self.step.get("stepName", ""))

    @property
    def step_type(self) -> str:
        """``Wait`` for ``waitForEvent``, ``WaitForWebhook`` for a webhook."""
        return str(self.step.get("stepType", ""))

    @property
    def created_at(self) -> datetime:
        return ms_to_datetime(self.created_ms)

    @property
    def deadline(self) -> datetime:
        """When the wait times out (the step then resumes with ``timeout: true``)."""
        return ms_to_datetime(self.deadline_ms)

    def __repr__(self) -> str:
        return (
            f"<Waiter {self.event_id!r} run={self.run_id} step={self.step_name!r} "
            f"deadline={self.deadline.isoformat()}>"
        )


class Waiters(Saved):
    """The waits in progress, by event, and the notifies kept for runs not yet waiting."""

    SAVED = saved_as("_by_id _saved _count")

    def __init__(self) -> None:
        self._by_id: dict[str, Waiter] = {}
        #: (run id, event id) -> event data, oldest first: ``/v2/notify/{runId}/{eventId}``
        #: sent before the run waited.
        self._saved: dict[tuple[str, str], list[bytes]] = {}
        self._count = 0

    def __iter__(self) -> Iterator[Waiter]:
        return iter(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)

    def new_id(self) -> str:
        self._count += 1
        return f"wait_{self._count:06d}"

    def add(self, waiter: Waiter) -> None:
        self._by_id[waiter.waiter_id] = waiter

    def remove(self, waiter: Waiter) -> None:
        self._by_id.pop(waiter.waiter_id, None)

    def live(self, waiter_id: str, generation: int) -> Waiter | None:
        """The waiter a timeout event is for, unless it was notified (or dropped) since."""
        waiter = self._by_id.get(waiter_id)
        return waiter if waiter is not None and waiter.generation == generation else None

    def of_event(self, event_id: str) -> list[Waiter]:
        return [w for w in self._by_id.values() if w.event_id == event_id]

    def of_run(self, run_id: str) -> list[Waiter]:
        return [w for w in self._by_id.values() if w.run_id == run_id]

    def save(self, run_id: str, event_id: str, data: bytes) -> None:
        self._saved.setdefault((run_id, event_id), []).append(data)

    def take_saved(self, run_id: str, event_id: str) -> bytes | None:
        kept = self._saved.get((run_id, event_id))
        if not kept:
            return None
        data = kept.pop(0)
        if not kept:
            del self._saved[(run_id, event_id)]
        return data

    def forget_run(self, run_id: str) -> list[Waiter]:
        """The run ended: its waits end (nothing is published) and its kept notifies go."""
        ended = self.of_run(run_id)
        for waiter in ended:
            self.remove(waiter)
        for key in [key for key in self._saved if key[0] == run_id]:
            del self._saved[key]
        return ended


# -- the rules ------------------------------------------------------------------------------
def new_waiter(
    run: WorkflowRun,
    event_id: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    now_ms: int,
    waiter_id: str,
    options: MessageOptions,
    timeout_options: MessageOptions,
) -> Waiter:
    """What the run's wait for ``event_id`` is: ``body`` is the wait request's JSON (``url``,
    ``timeout``, ``timeoutUrl``, ``timeoutHeaders``, ``timeoutBody``, ``step``), ``headers``
    its publish headers; ``options`` publish the step when notified, ``timeout_options`` when
    timed out. ``ValueError`` for a timeout that is not a duration."""
    timeout = body.get("timeout")
    timeout_ms = (
        DEFAULT_TIMEOUT_MS
        if timeout in (None, "")
        else parse_duration_ms(timeout, what="wait timeout")
    )
    if now_ms + timeout_ms > LATEST_MS:
        raise ValueError(f"wait timeout {timeout!r} ends after the year 9999")
    step = body.get("step")
    timeout_headers = body.get("timeoutHeaders")
    return Waiter(
        event_id=event_id,
        run_id=run.run_id,
        url=_text(body.get("url")) or run.url,
        headers=step_headers(headers),
        created_ms=now_ms,
        deadline_ms=now_ms + timeout_ms,
        timeout_url=_text(body.get("timeoutUrl")) or _text(body.get("url")) or run.url,
        timeout_headers=header_lists_of(timeout_headers),
        timeout_body=_text(body.get("timeoutBody")) or None,
        step=dict(step) if isinstance(step, Mapping) else {},
        options=options,
        timeout_options=timeout_options,
        waiter_id=waiter_id,
    )


def resume_step(waiter: Waiter, data: bytes | None) -> tuple[str, bytes, MessageOptions]:
    """The wait step going back into its run, notified with ``data`` or timed out (None):
    where it goes, its body and what it is published with."""
    step: dict[str, Any] = {**waiter.step, "waitEventId": waiter.event_id}
    if data is None:
        step.pop("out", None)
        step["waitTimeout"] = True
        url, opts = waiter.timeout_url, waiter.timeout_options
    else:
        step["out"] = base64.b64encode(data).decode("ascii")
        step["waitTimeout"] = False
        url, opts = waiter.url, waiter.options
    return url, json.dumps(step).encode(), opts.copy()


def step_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A wait request's headers that are the step's publish headers (not its transport's)."""
    return {k: v for k, v in headers.items() if k.lower() not in _TRANSPORT}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def header_lists_of(value: Any) -> dict[str, list[str]]:
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, list[str]] = {}
    for name, values in value.items():
        if isinstance(values, str):
            out[str(name)] = [values]
        elif isinstance(values, list):
            out[str(name)] = [str(v) for v in values]
    return out
