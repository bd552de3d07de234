"""Faults QStash's delivery contract allows, injected on a seed: at-least-once, not in order.

QStash promises that a message is delivered at least once, not exactly once and not in
publish order (docs: "Deduplication", "Retries", "Ordering" under QStash's features). A
``Simulation`` makes the engine do what that contract allows and a happy path never shows:

- ``duplicate``: a message the app acknowledged (2xx) is delivered once more, right after: the
  same ``Upstash-Message-Id``, body and headers, a fresh signature (its callback too, if it
  has one);
- ``lost_ack``: the app's 2xx never reaches QStash: the attempt counts as failed and is retried
  after the message's backoff, ``Upstash-Retried`` counting up. Only where a retry is left: a
  lost answer on the last attempt would dead-letter a message the app handled, which no
  correct app could prevent;
- ``reorder``: of the messages due at the same moment, one published later is delivered first.
  A queue of parallelism 1 (or a flow-control key's) still delivers in order: its admission
  holds the later message, whatever the order they come due in;
- ``publish_lost_answer``: a publish (enqueue, batch) is stored, but its answer never reaches
  the client, which sees a network error. Only where the official SDK will send it again (the
  API layer asks): without a deduplication id, that retry is a second message; with one,
  QStash's deduplication answers it;
- ``step_retry``: a workflow step ran in the app, but its result never reached QStash (each try
  the SDK makes during that delivery fails on the network), so the delivery fails and QStash
  calls the same step again: the step's function runs twice. Only where the delivery has a
  retry left.

Every decision is drawn from the seed and the decision's own key (the fault kind, what the
message is, the attempt), never from a shared sequence: leaving one fault out (shrinking a
failing schedule) leaves every other decision as it was. A message is named in a key by where
it goes (its method and its URL's path and query, and how many went there before it; a
callback by the message it reports on and whether that attempt succeeded; a publish request
by its destination's path), not by its id: ids come in sequence, so one extra message (a
handler's second run publishing again) would rename every message after it and change their
decisions. Never by its body: a body holding a time
(a callback's ``createdAt``, an app's own timestamps) differs from one run to the next, and a
replay must inject the same faults. Nor by its URL's host and port: an app served on a free
port has another one at each run.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

import httpx

from .attempts import AttemptResult
from .clock import DueEvent
from .models import Message, ms_to_datetime

#: Every fault kind a simulation can inject, in the order the docs describe them.
FAULT_KINDS = ("duplicate", "lost_ack", "reorder", "publish_lost_answer", "step_retry")
#: What a server simulates: the SDK's retries of a publish (what a lost publish answer, or a
#: step result that never arrives, depends on) happen in the client's own process there.
OVER_HTTP = ("duplicate", "lost_ack", "reorder")
#: The chance of each decision going the faulty way: a schedule of a test delivering ten
#: messages holds a few faults (each one found within 50 seeds all but surely), not so many
#: that every schedule costs twice a plain run.
FAULT_RATE = 0.2
#: Where a promoted delivery ranks among the events due at its moment: before all others.
_FIRST = -(1 << 62)


class UnknownFault(ValueError):
    """A fault kind no simulation knows (the message lists the kinds there are)."""


def fault_kinds(faults: Iterable[str] | None) -> tuple[str, ...]:
    """The fault kinds named (all of them for None), checked: ``UnknownFault`` otherwise."""
    if faults is None:
        return FAULT_KINDS
    if isinstance(faults, str):
        faults = [part.strip() for part in faults.split(",") if part.strip()]
    if not isinstance(faults, (list, tuple, set, frozenset)) or not all(
        isinstance(kind, str) for kind in faults
    ):
        raise UnknownFault(
            f"invalid faults {faults!r}: expected a list of fault kinds, some of "
            f"{', '.join(FAULT_KINDS)}"
        )
    chosen = tuple(dict.fromkeys(faults))
    unknown = [kind for kind in chosen if kind not in FAULT_KINDS]
    if unknown or not chosen:
        named = ", ".join(repr(k) for k in unknown) if unknown else "none"
        raise UnknownFault(
            f"unknown fault kind(s) {named}: expected some of {', '.join(FAULT_KINDS)}"
        )
    return chosen


def over_http(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """``kinds`` for a server, checked: ``UnknownFault`` for one only a fake in the test's own
    process can inject."""
    local = [kind for kind in kinds if kind not in OVER_HTTP]
    if local:
        raise UnknownFault(
            f"{', '.join(local)} is simulated in-process only (it rests on the SDK's own "
            f"retries, in the client's process): expected some of {', '.join(OVER_HTTP)}"
        )
    return kinds


def check_seed(seed: object, what: str = "simulate_seed") -> int:
    """A simulation seed: an integer, or its digits as text (a command line's, an ini
    file's); ``ValueError`` naming ``what`` and the value otherwise."""
    if isinstance(seed, int) and not isinstance(seed, bool):
        return seed
    if isinstance(seed, str) and seed.strip().lstrip("-").isdigit():
        return int(seed)
    raise ValueError(f"invalid {what}={seed!r}: expected an integer")


@dataclass(frozen=True, slots=True)
class InjectedFault:
    """One fault a simulation injected."""

    kind: str
    #: The message it touched.
    message_id: str
    at_ms: int
    #: One line saying what happened.
    description: str
    #: What names this decision in the schedule (what shrinking keeps or leaves out).
    key: str

    @property
    def at(self) -> datetime:
        return ms_to_datetime(self.at_ms)

    def __str__(self) -> str:
        return f"{self.kind} {self.message_id} at {self.at.isoformat()}: {self.description}"


class Simulation:
    """The faults of one seeded schedule. ``only``: decision keys allowed to go the faulty
    way (a shrunk schedule); None allows every one the seed picks."""

    def __init__(
        self,
        seed: int,
        faults: Iterable[str] | None = None,
        *,
        only: Collection[str] | None = None,
    ) -> None:
        self.seed = check_seed(seed)
        self.kinds = fault_kinds(faults)
        self._only = frozenset(only) if only is not None else None
        #: Every fault injected so far, in order.
        self.injected: list[InjectedFault] = []
        self._duplicated: set[str] = set()
        self._messages: Mapping[str, Message] = {}
        #: What each message is, for the keys (``created``), and how many of each there were.
        self._names: dict[str, str] = {}
        self._seen: dict[str, int] = {}

    def __repr__(self) -> str:
        return (
            f"<Simulation seed={self.seed} faults={','.join(self.kinds)} "
            f"injected={len(self.injected)}>"
        )

    def bind(self, messages: Mapping[str, Message]) -> None:
        """The store's messages, which ``rank`` looks up (the store binds them)."""
        self._messages = messages

    def created(self, message: Message) -> None:
        """Name a new message by where it goes, and how many went there before it (the store
        tells each, as it is created)."""
        source = message.callback_for
        if source is None:
            where = f"{message.method} {_path_of(message.url)}"
        else:
            outcome = "ok" if _reports_success(message.content) else "failed"
            where = f"{message.kind} of {self._name(source)} {outcome}"
        self._names[message.message_id] = self._counted(where)

    def publish_sent(self, path: str) -> str:
        """Name a publish request (``/v2/publish/<destination>``, an enqueue, a batch) as
        ``created`` names a message: by where it goes (the destination's path, not its host
        and port) and how many such were sent before it, never by its body."""
        scheme = max(path.find("http://"), path.find("https://"))
        where = path if scheme < 0 else path[:scheme] + _path_of(path[scheme:])
        return self._counted(f"POST {where}")

    def _counted(self, where: str) -> str:
        what = hashlib.sha256(where.encode()).hexdigest()[:16]
        count = self._seen[what] = self._seen.get(what, 0) + 1
        return f"{what}.{count}"

    def _name(self, message_id: str) -> str:
        return self._names.get(message_id, message_id)

    # -- the decisions -----------------------------------------------------------------------
    def _picks(self, kind: str, key: str) -> bool:
        if kind not in self.kinds or (self._only is not None and key not in self._only):
            return False
        return random.Random(f"{self.seed}:{key}").random() < FAULT_RATE

    def _inject(self, kind: str, message_id: str, now_ms: int, key: str, text: str) -> None:
        self.injected.append(InjectedFault(kind, message_id, now_ms, text, key))

    def answer_seen(self, message: Message, result: AttemptResult, now_ms: int) -> AttemptResult:
        """What QStash sees of an attempt's answer: the app's, or (``lost_ack``) none."""
        if not result.ok or message.workflow_run_id is not None:
            return result
        if message.retried >= message.max_retries:
            return result
        key = f"lost_ack:{self._name(message.message_id)}:{message.retried}"
        if not self._picks("lost_ack", key):
            return result
        text = (
            f"the app answered {result.status}; the answer was lost on its way back, so the "
            f"attempt failed and is retried (Upstash-Retried {message.retried + 1})"
        )
        self._inject("lost_ack", message.message_id, now_ms, key, text)
        error = (
            f"no answer received (simulated lost acknowledgement: the app answered {result.status})"
        )
        return AttemptResult(None, httpx.Headers(), b"", error, result.exception)

    def delivers_again(self, message: Message, now_ms: int) -> bool:
        """Whether a message just DELIVERED is delivered once more (``duplicate``)."""
        if message.state != "DELIVERED" or message.workflow_run_id is not None:
            return False
        if message.message_id in self._duplicated:
            return False
        key = f"duplicate:{self._name(message.message_id)}"
        if not self._picks("duplicate", key):
            return False
        self._duplicated.add(message.message_id)
        text = "delivered once more after the app acknowledged it (same Upstash-Message-Id)"
        self._inject("duplicate", message.message_id, now_ms, key, text)
        return True

    def loses_answer(self, sent: str, message_id: str, now_ms: int) -> bool:
        """Whether the answer to a publish the store took (``sent``: its name, from
        ``publish_sent``) is lost on its way back."""
        key = f"publish_lost_answer:{sent}"
        if not self._picks("publish_lost_answer", key):
            return False
        text = (
            f"the publish was stored as {message_id}, but its answer was lost on its way back: "
            "the SDK sends it again"
        )
        self._inject("publish_lost_answer", message_id, now_ms, key, text)
        return True

    def loses_step_result(self, message: Message, now_ms: int) -> bool:
        """Whether the step results the app publishes while ``message`` (a workflow run's)
        is delivered never reach QStash, so that its delivery fails and the step runs again.
        Asked at each result published; decided once per attempt."""
        if message.workflow_run_id is None or message.retried >= message.max_retries:
            return False
        key = f"step_retry:{self._name(message.message_id)}:{message.retried}"
        if any(fault.key == key for fault in self.injected):
            return True
        if not self._picks("step_retry", key):
            return False
        text = (
            f"the step run by this delivery of run {message.workflow_run_id} never got its "
            "result to QStash: the delivery fails and the same step runs again"
        )
        self._inject("step_retry", message.message_id, now_ms, key, text)
        return True

    def rank(self, event: DueEvent, pending: Iterable[DueEvent]) -> int:
        """Where a new clock event ranks among those due at its moment (``reorder``): a
        delivery the seed promotes goes before them; every other event keeps its sequence."""
        if event.kind != "deliver" or "reorder" not in self.kinds:
            return event.seq
        message = self._messages.get(event.target)
        key = f"reorder:{self._name(event.target)}:{event.generation}"
        if message is None or not self._picks("reorder", key):
            return event.seq
        overtaken = [
            e.target
            for e in pending
            if e.kind == "deliver" and e.due_ms == event.due_ms and e.target != event.target
        ]
        if not overtaken:
            return event.seq
        text = f"due at the same moment as {', '.join(overtaken[:3])}, delivered before"
        if len(overtaken) > 3:
            text += f" them and {len(overtaken) - 3} more"
        self._inject("reorder", message.message_id, event.due_ms, key, text)
        return _FIRST + event.seq


def _reports_success(content: bytes) -> bool:
    """Whether a callback's body reports a 2xx attempt (its ``status``)."""
    try:
        status = json.loads(content).get("status")
    except (ValueError, AttributeError):
        return False
    return isinstance(status, int) and 200 <= status < 300


def _path_of(url: str) -> str:
    """A URL's path and query: what names where a message goes, whatever the host's port."""
    rest = url.partition("://")[2] or url
    slash = rest.find("/")
    return rest[slash:] if slash >= 0 else "/"
