"""``Client``: steer and read a running ``pytest-qstash serve`` over its control API.

It speaks plain HTTP through the standard library (``urllib``), so a test's own httpx mocks
(respx, pytest-httpx) and the in-process fake never see its calls. Its verbs and lists are the
fixture's: ``tick()``, ``advance("10m")``, ``drain()``, ``messages``, ``deliveries``, ... with
``filter``/``one``; items are the in-process models themselves (``Message``, ``WorkflowRun``,
...), read back from the server's JSON (``records``). The verbs are those the control API
declares (``verbs.VERBS``); each method here is a typed door onto one of them. A verb with
parameters declared in ``state.verb_specs`` (``trigger``, ``notify``, ...) takes the very
parameters the fixture's method does, made from the same dataclass (``verb``).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from ...engine.durations import DRAIN_WITHIN, Duration
from ...engine.flow_control import FlowKey
from ...engine.models import ApiCall, Delivery, DlqEntry, Event, Message
from ...engine.queues import Queue
from ...engine.schedules import Schedule
from ...engine.url_groups import UrlGroup
from ...engine.verb_specs import ContinueRun, FailNext, Notify, Trigger, values, verb
from ...engine.waiters import Waiter
from ...engine.workflow_dlq import WorkflowDlqEntry
from ...engine.workflows import WorkflowRun
from ...errors import QStashFakeError
from ...testing.query import Found
from ...wire.export_entries import read_document
from ..runner.holdback import HeldDelivery
from . import records
from .verbs import VERBS

T = TypeVar("T")

CONTROL_PREFIX = "/_qstash"


class ServerError(QStashFakeError):
    """The server refused a control request (its status and ``{"error": ...}`` message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Client:
    """A running server's control API. ``url`` and ``token`` default to ``QSTASH_URL`` and
    ``QSTASH_TOKEN``, as an app's SDK client's do."""

    def __init__(
        self, url: str | None = None, token: str | None = None, *, timeout: float = 60.0
    ) -> None:
        url = url or os.environ.get("QSTASH_URL")
        token = token or os.environ.get("QSTASH_TOKEN")
        if not url or not token:
            raise ValueError(
                "no server to talk to: pass url= and token=, or set QSTASH_URL and QSTASH_TOKEN "
                "to what `pytest-qstash serve` printed"
            )
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        # No proxy: the server is local, and an HTTP_PROXY in the environment must not see it.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # -- time -------------------------------------------------------------------------------
    @property
    def now(self) -> datetime:
        """The server's clock."""
        return _moment(self._verb("state")["now"])

    @property
    def clock(self) -> str:
        """``"virtual"`` or ``"real"``."""
        return str(self._verb("state")["clock"])

    @property
    def plan(self) -> str:
        """The QStash plan whose limits apply now (``serve --plan``, or the last reset's)."""
        return str(self._verb("state")["plan"])

    def next_due(self) -> datetime | None:
        due = self._verb("state")["next_due"]
        return None if due is None else _moment(due)

    def tick(self) -> Found[Delivery]:
        """Deliver everything due now; returns the deliveries made."""
        return _deliveries(self._verb("tick"))

    def advance(self, duration: Duration) -> Found[Delivery]:
        """Move a virtual clock forward, delivering each message at its own time."""
        if isinstance(duration, timedelta):
            duration = duration.total_seconds()
        return _deliveries(self._verb("advance", by=duration))

    def advance_to(self, moment: datetime | str) -> Found[Delivery]:
        if isinstance(moment, datetime):
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=timezone.utc)
            moment = moment.isoformat()
        return _deliveries(self._verb("advance_to", to=moment))

    def drain(self, within: Duration = DRAIN_WITHIN) -> Found[Delivery]:
        """Deliver everything pending, each at its own time; the clock stops at the last."""
        if isinstance(within, timedelta):
            within = within.total_seconds()
        return _deliveries(self._verb("drain", within=within))

    def wait_until(
        self, condition: Callable[[Client], bool], timeout: float = 10.0, interval: float = 0.02
    ) -> None:
        """For a server on the real clock: poll until ``condition(client)`` holds, or raise
        ``TimeoutError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not condition(self):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the condition did not hold within {timeout} s")
            time.sleep(interval)

    # -- what a test reads: the in-process models, read back from the server's JSON ---------
    def _list(self, name: str, model: records.Model[T]) -> Found[T]:
        return Found((model.read(item) for item in self._call("GET", name)), model.kind)

    @property
    def messages(self) -> Found[Message]:
        return self._list("messages", records.MESSAGE)

    @property
    def deliveries(self) -> Found[Delivery]:
        return self._list("deliveries", records.DELIVERY)

    @property
    def dlq(self) -> Found[DlqEntry]:
        return self._list("dlq", records.DLQ_ENTRY)

    @property
    def events(self) -> Found[Event]:
        """QStash's log; each entry's ``message`` is linked from the messages list (read
        after the log, so it has every message a line is about)."""
        events = list(self._list("events", records.EVENT))
        messages = {message.message_id: message for message in self.messages}
        for event in events:
            event.message = messages.get(event.message_id)
        return Found(events, records.EVENT.kind)

    @property
    def schedules(self) -> Found[Schedule]:
        return self._list("schedules", records.SCHEDULE)

    @property
    def queues(self) -> Found[Queue]:
        return self._list("queues", records.QUEUE)

    @property
    def url_groups(self) -> Found[UrlGroup]:
        return self._list("url_groups", records.URL_GROUP)

    @property
    def runs(self) -> Found[WorkflowRun]:
        """Upstash Workflow runs, in the order they started (``run.step(name)``,
        ``run.steps``, ``run.failure_function_state``, ... as in-process)."""
        return self._list("runs", records.RUN)

    @property
    def flow_keys(self) -> Found[FlowKey]:
        """Flow-control keys: ``key``, ``parallelism``, ``rate``, ``period_s``, ``paused``,
        ``active`` (attempts in flight), ``waiting`` (the ids of the messages waiting) and
        ``wait_list_size``, as ``FakeQStash.flow_keys``."""
        return self._list("flow_keys", records.FLOW_KEY)

    @property
    def workflow_dlq(self) -> Found[WorkflowDlqEntry]:
        """The failed workflow runs (``dlq_id``, ``run_id``, ``labels``,
        ``failure_function_state``, ...), as ``FakeQStash.workflow_dlq``."""
        return self._list("workflow_dlq", records.WORKFLOW_DLQ_ENTRY)

    @property
    def waiters(self) -> Found[Waiter]:
        """Workflow runs waiting for an event (``event_id``, ``run_id``, ``step_name``,
        ``deadline``), as ``FakeQStash.waiters``."""
        return self._list("waiters", records.WAITER)

    @property
    def api_calls(self) -> Found[ApiCall]:
        """The QStash API calls the server answered since its last reset (the newest
        1,000), each with its answer, as ``FakeQStash.api_calls``."""
        return self._list("api_calls", records.API_CALL)

    # -- steering ---------------------------------------------------------------------------
    def reset(
        self,
        start: datetime | str | float | None = None,
        *,
        keep: Iterable[str] | bool = (),
        plan: str | None = None,
    ) -> None:
        """Forget everything (messages, runs, the DLQ, the log, schedules, queues, URL groups),
        keeping the credentials. The clock starts afresh, as a new server's: a virtual one at
        ``start`` if given, else at the server's ``--start``, else now (wherever an earlier
        test moved it); a real one reads the wall clock.

        ``keep`` names what an app provisioned and should find again: ``"url_groups"``,
        ``"queues"``, ``"schedules"``, or ``True`` for all three. Kept queues come back empty,
        kept schedules with their ids and settings (their next firing is the first cron time
        from now; the messages they make later are new ones). ``plan`` chooses the QStash
        plan until the next reset (by default the server's ``--plan``)."""
        if isinstance(start, datetime):
            start = start.isoformat()
        kept: bool | list[str] | None
        if keep is True or keep is False:
            kept = keep
        elif isinstance(keep, str):
            kept = [keep]
        else:
            kept = list(keep) or None
        self._verb("reset", start=start, keep=kept, plan=plan)

    def redeliver(self, message_id: str) -> Message:
        """Deliver a DELIVERED message once more, as QStash's at-least-once delivery sometimes
        does (same ``Upstash-Message-Id``, body and headers, a fresh signature): due now, so
        the next ``tick()`` (or, on a real clock, the server itself) delivers it. Tests that
        the app is idempotent. Returns the message; ``ServerError`` (400) for an unknown id
        or a message not DELIVERED."""
        return records.MESSAGE.read(self._verb("redeliver", message_id=message_id))

    @verb(ContinueRun)
    def resume_run(self, call: ContinueRun) -> WorkflowRun:
        """A failed workflow run resumed from its workflow DLQ entry, as
        ``FakeQStash.resume_run``: a new run going on from the step that failed."""
        return records.RUN.read(self._send("resume_run", call))

    @verb(ContinueRun)
    def restart_run(self, call: ContinueRun) -> WorkflowRun:
        """A failed workflow run started again from the beginning, as
        ``FakeQStash.restart_run``."""
        return records.RUN.read(self._send("restart_run", call))

    def retry_failure_function(self, dlq_id: str) -> WorkflowRun:
        """The failed run's failure function called again, as
        ``FakeQStash.retry_failure_function``."""
        return records.RUN.read(self._verb("retry_failure_function", dlq_id=dlq_id))

    def mount(self, prefix: str, to: str) -> Mounted:
        """Send the server's outbound requests whose URL starts with ``prefix`` (deliveries,
        callbacks, a workflow's ``context.call`` and ``context.api.*``) to ``to`` plus the rest
        of the path and query, as ``serve --mount`` does; records and signatures keep the
        original URL. It stays (a reset too) until ``unmount``; as a context manager, until
        the block ends. ``ServerError`` (400) for a prefix or target that is no http(s) URL."""
        answer = self._verb("mount", prefix=prefix, to=to)
        return Mounted(self, str(answer["prefix"]), str(answer["to"]))

    def unmount(self, prefix: str) -> bool:
        """Forget the outbound mount at ``prefix``; False when there was none."""
        return bool(self._verb("unmount", prefix=prefix)["removed"])

    @property
    def mounts(self) -> dict[str, str]:
        """The outbound mounts: ``{prefix: to}``."""
        return {m["prefix"]: m["to"] for m in self._verb("mounts")}

    def load(
        self,
        source: str | os.PathLike[str] | Mapping[str, Any],
        *,
        start: datetime | str | float | None = None,
    ) -> dict[str, Any]:
        """Load an export (``pytest-qstash export``'s file: its path, read here, or its parsed
        JSON) into the server, as ``FakeQStash.load`` does in-process: all of it or nothing.
        Returns what it took in (``source``, ``exported_at`` and a count per resource:
        ``schedules``, ``queues``, ``url_groups``, ``flow_control``, ``dlq``,
        ``workflow_runs``, ``workflow_dlq``). ``start``: where a virtual clock stands for it
        (by default the export's time on a server that holds nothing yet and whose start was
        not chosen, else where it is); a real clock is left alone. ``LoadError`` for a file
        that cannot be read, ``ServerError`` (400, the same sentence) for a document that
        cannot be loaded.

        From then on the server holds back the deliveries to URLs neither on this machine
        nor mounted (``held()``), unless it was started with ``--allow-outbound``."""
        if isinstance(start, datetime):
            start = (start if start.tzinfo else start.replace(tzinfo=timezone.utc)).isoformat()
        document = dict(read_document(source))
        answer: dict[str, Any] = self._verb("load", document=document, start=start)
        return answer

    def held(self) -> Found[HeldDelivery]:
        """The deliveries the server holds back (a loaded export's URLs that are neither on
        this machine nor mounted), in the order they were held: ``message_id``, ``url``,
        ``reason``, ``held_at``, ``kind``. None of them was attempted."""
        items = self._verb("held")
        return Found((HeldDelivery.read(item) for item in items), "held delivery")

    def retry_held(self, message_id: str | None = None) -> list[str]:
        """Plan the held-back deliveries again, due now (or only ``message_id``'s): those
        whose URL was mounted since go to the mount, the others are held back again. Returns
        the ids planned; ``ServerError`` (400) for an id that is not held back."""
        return [str(i) for i in self._verb("retry_held", message_id=message_id)["retried"]]

    def mark(self) -> dict[str, int]:
        """Where the server's histories stand now, for ``report(since=...)``."""
        mark: dict[str, int] = self._verb("mark")
        return mark

    def report(self, since: dict[str, int] | None = None) -> str | None:
        """The failure report of what the server saw since ``since`` (a ``mark()``; by
        default since its last reset), as the ``qstash_server`` report section shows it;
        None when it saw nothing."""
        text = self._verb("report", since=since)["text"]
        return None if text is None else str(text)

    @verb(FailNext)
    def fail_next(self, call: FailNext) -> dict[str, Any]:
        """Make the next ``times`` API calls matching ``endpoint`` fail, as
        ``FakeQStash.fail_next`` does (``kind``: error, burst, daily, network)."""
        result: dict[str, Any] = self._send("fail_next", call)
        return result

    def clear_faults(self) -> None:
        self._verb("clear_faults")

    def simulate(self, seed: int, faults: list[str] | None = None) -> dict[str, Any]:
        """Inject the faults QStash's at-least-once contract allows (``duplicate``,
        ``lost_ack``, ``reorder``; ``faults`` picks some) on the schedule of ``seed``, until
        the next reset (``serve --simulate`` keeps one across resets). Answers the simulation:
        its ``seed``, ``faults`` and the faults ``injected``."""
        answer: dict[str, Any] = self._verb("simulate", seed=seed, faults=faults)
        return answer

    @property
    def simulation(self) -> dict[str, Any] | None:
        """The simulation the server runs under (``seed``, ``faults``, every fault
        ``injected`` so far: kind, message id, time, description), or None."""
        answer: dict[str, Any] | None = self._verb("simulation")
        return answer

    @verb(Trigger)
    def trigger(self, call: Trigger) -> str:
        """Start an Upstash Workflow run at ``url``; returns its run id. The arguments are
        ``FakeQStash.trigger``'s."""
        return str(self._send("trigger", call)["run_id"])

    @verb(Notify)
    def notify(self, call: Notify) -> list[dict[str, Any]]:
        """Notify an event's waiters, or one run's (``run_id``), as ``FakeQStash.notify``;
        returns the ``NotifyResponse`` answers."""
        answer: list[dict[str, Any]] = self._send("notify", call)
        return answer

    def _send(self, name: str, call: Any) -> Any:
        """Call the control verb ``name`` with a spec's values (``state.verb_specs``)."""
        __tracebackhide__ = True
        return self._verb(name, **values(call))

    def _verb(self, name: str, **args: Any) -> Any:
        """Call the control verb ``name`` (``verbs.VERBS``) with these arguments, named by
        their keys in the JSON body; one the table does not declare is refused here."""
        __tracebackhide__ = True
        verb = VERBS[name]
        unknown = set(args) - {arg.name for arg in verb.args}
        if unknown:
            raise TypeError(f"the {name} verb takes no {', '.join(sorted(unknown))}")
        if verb.method == "GET":
            return self._call("GET", verb.route)
        return self._call(verb.method, verb.route, {k: v for k, v in args.items() if v is not None})

    # -- HTTP -------------------------------------------------------------------------------
    def _call(self, method: str, action: str, body: dict[str, Any] | None = None) -> Any:
        __tracebackhide__ = True
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{CONTROL_PREFIX}/{action}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:  # its connection closed now, not whenever the error is collected
                text = exc.read().decode("utf-8", errors="replace")
            try:
                message = str(json.loads(text)["error"])
            except (ValueError, KeyError, TypeError):
                message = text
            raise ServerError(exc.code, message) from None

    def __repr__(self) -> str:
        return f"<pytest_qstash.server.Client {self.url}>"


class Mounted:
    """An outbound mount made by ``Client.mount``: ``prefix`` and ``to`` as the server keeps
    them; leaving a ``with`` block unmounts it."""

    def __init__(self, client: Client, prefix: str, to: str) -> None:
        self.client = client
        self.prefix = prefix
        self.to = to

    def __enter__(self) -> Mounted:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.client.unmount(self.prefix)

    def __repr__(self) -> str:
        return f"<pytest_qstash.server.Mounted {self.prefix} -> {self.to}>"


def _moment(text: str) -> datetime:
    return records.read_time(text)


def _deliveries(answer: Any) -> Found[Delivery]:
    return Found((records.DELIVERY.read(d) for d in answer["deliveries"]), "delivery")
