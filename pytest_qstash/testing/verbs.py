"""What a test does as the outside world, from Python: start, notify, resume or restart
workflow runs, redeliver a message, slow a handler down, make API calls fail. Verbs the
server's control API shares are declared by their parameters (``engine.verb_specs``)."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..delivery.dispatcher import Dispatcher
from ..delivery.handler_time import HandlerDuration, HandlerTimes
from ..engine import trigger, workflow_dlq
from ..engine.models import Message
from ..engine.options import InvalidOption
from ..engine.store import Store
from ..engine.verb_specs import ContinueRun, FailNext, Notify, Trigger, verb
from ..engine.workflows import WorkflowRun
from ..wire.faults import Fault
from ..wire.publish_headers import read_overrides
from ..wire.waiters import notify_answer
from .appclock import AppClock
from .gateway import ApiGateway
from .moments import start_ms

if TYPE_CHECKING:  # loaded on first use: a test that never loads or checks pays for neither
    from ..wire.load import Loaded
    from .deploy_check import Verdict


class PythonVerbs:
    """``FakeQStash``'s verbs (a mixin over the fake's store, dispatcher, handler times and
    API)."""

    store: Store
    _dispatcher: Dispatcher
    _handler_times: HandlerTimes
    _gateway: ApiGateway
    _app_clock: AppClock
    start_given: bool

    def load(
        self,
        source: str | os.PathLike[str] | Mapping[str, Any],
        *,
        start: datetime | str | float | None = None,
    ) -> Loaded:
        """Create what an export holds (``pytest-qstash export``'s file, its path or its
        parsed JSON), as QStash had it, ids kept: schedules, queues, URL groups, flow-control
        keys, DLQ entries, workflow runs in progress at their recorded step (the next
        ``tick``/``advance`` resumes them in the app mounted at their URL) and the workflow
        DLQ. All or nothing: ``LoadError`` (a ``ValueError``) names the entry that cannot be
        read, and nothing is loaded.

        The clock starts at the export's time when the fake holds nothing yet and the test
        did not choose its start (``FakeQStash(start=...)``, the marker's or the ini's
        ``start``); otherwise it stays where it is. ``start`` moves it there first (not
        backwards, once something is planned)."""
        from ..wire.load import LoadError, export_start_ms, load_export, read_document

        document = read_document(source)  # read once: its time, then its resources
        store = self.store
        fresh = not (store.messages or store.schedules or store.dlq or len(store.clock))
        at: int | None
        if start is not None:
            at = start_ms(start)
        else:
            at = export_start_ms(document) if fresh and not self.start_given else None
        if at is not None and at < store.clock.now_ms:
            if not fresh:
                raise LoadError(
                    f"cannot load at {start!r}: the fake's clock is past it already and time "
                    "never goes backwards (load before anything is published)"
                )
            store.clock.start_over_at(at)
        loaded = load_export(store, document, start_ms=at)
        self._app_clock.move_to(store.clock.now_ms)
        return loaded

    def handler_takes(
        self,
        url_or_pattern: str | re.Pattern[str],
        duration: HandlerDuration,
        *,
        times: int | None = None,
    ) -> None:
        """Make attempts to URLs starting with ``url_or_pattern`` (or matching a compiled
        ``re.Pattern``) take ``duration`` of virtual time: the next ``times`` attempts, or all
        of them. The newest rule that matches wins over older ones and over a mount's
        ``duration``. The app is called when the attempt starts; until its end the message is
        ACTIVE, and ``advance()`` can stop inside the interval."""
        self._handler_times.add(url_or_pattern, duration, times)

    def redeliver(self, message_id: str) -> Message:
        """Deliver a DELIVERED message once more, as QStash's at-least-once delivery
        sometimes does: the same ``Upstash-Message-Id``, body and headers, a fresh signature.
        It is due now: the next ``tick()``/``advance()`` delivers it (and its callback, if it
        has one). Tests an idempotent handler. ``ValueError`` for an unknown id or a message
        not DELIVERED."""
        message = self.store.messages.get(message_id)
        if message is None:
            raise ValueError(f"cannot redeliver {message_id!r}: no message has this id")
        self.store.redeliver(message)
        return message

    @verb(ContinueRun)
    def resume_run(self, call: ContinueRun) -> WorkflowRun:
        """What ``POST /v2/workflows/dlq/resume/{dlq_id}`` does: a new run (a new run id)
        that goes on from the step that failed, the steps that succeeded kept. ``retries``
        and ``headers`` (``Upstash-*`` overrides: ``Upstash-Retry-Delay``, ``Upstash-Label``,
        ``Upstash-Flow-Control-Key``, ...) replace the run's settings. Its first delivery is
        due now."""
        return self._continue_run(functools.partial(workflow_dlq.resume, self.store), call)

    @verb(ContinueRun)
    def restart_run(self, call: ContinueRun) -> WorkflowRun:
        """What ``POST /v2/workflows/dlq/restart/{dlq_id}`` does: a new run from the start,
        with the failed run's initial payload and headers."""
        return self._continue_run(functools.partial(workflow_dlq.restart, self.store), call)

    def retry_failure_function(self, dlq_id: str) -> WorkflowRun:
        """What ``POST /v2/workflows/dlq/callback/{dlq_id}`` does: call the failed run's
        failure function (or failure URL) again, once its call has failed
        (``failure_function_state == "CALLBACK_FAIL"``; a ``ValueError`` otherwise)."""
        return workflow_dlq.retry_failure_function(
            self.store, _dlq_id(dlq_id), cause=self._dispatcher.cause
        )

    def _continue_run(
        self,
        action: Callable[..., WorkflowRun],
        call: ContinueRun,
    ) -> WorkflowRun:
        dlq_id, retries, headers = call.dlq_id, call.retries, call.headers
        named = {k: v for k, v in (headers or {}).items() if k.lower().startswith("upstash-")}
        if retries is not None:
            if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
                raise ValueError(f"invalid retries {retries!r}: expected an int >= 0")
            named["Upstash-Retries"] = str(retries)
        try:
            overrides = read_overrides(named, self.store.clock.now_ms)
            return action(_dlq_id(dlq_id), overrides, cause=self._dispatcher.cause)
        except InvalidOption as exc:
            raise ValueError(str(exc)) from None

    @verb(Trigger)
    def trigger(self, call: Trigger) -> str:
        """Start an Upstash Workflow run at ``url`` as a workflow client would; returns its
        run id. The run exists at once (``qstash.runs``); its first delivery is due now.

        ``body``: the initial payload (``str``/``bytes`` as is, anything else as JSON);
        ``headers`` reach the route function as request headers; ``run_id`` chooses the id.
        As ``@upstash/workflow``'s ``client.trigger`` does, ``retries`` (default 3), a
        ``failure_url`` given and ``label`` (``"a,b"``: the labels ``a`` and ``b``) hold for
        every step of the run that the app's ``serve()`` options do not set itself. By
        default the failure URL is the workflow URL itself (where ``serve()``'s
        ``failure_function`` answers), for the first delivery only: a ``serve()`` with a
        failure function sends its own with every step. ``failure_url=False`` sets none.
        """
        return trigger.trigger_run(self.store, call, cause=self._dispatcher.cause)

    @verb(Notify)
    def notify(self, call: Notify) -> list[dict[str, Any]]:
        """What ``POST /v2/notify/{event_id}`` does: every run waiting for the event (a
        TypeScript SDK ``context.waitForEvent``) resumes with ``data`` as the event's data;
        the event is lost when none waits. With ``run_id``, what ``POST
        /v2/notify/{run_id}/{event_id}`` does: that run resumes if it waits for the event,
        else the event is kept for its next wait of it.

        ``data``: ``str``/``bytes`` as is, anything else as JSON. Returns the API's answers
        (``NotifyResponse``), one per run reached; the resumed steps are due now (``tick()``
        delivers them). ``ValueError`` for an empty id, or a ``run_id`` that names no run in
        progress."""
        event_id, data, run_id = call.event_id, call.data, call.run_id
        for name, value in (("event id", event_id), ("run id", run_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"invalid {name} {value!r}: expected a non-empty string")
        if data is None:
            content = b""
        elif isinstance(data, bytes):
            content = data
        elif isinstance(data, str):
            content = data.encode()
        else:
            content = json.dumps(data).encode()
        try:
            reached = self.store.notify(
                event_id, content, run_id=run_id, cause=self._dispatcher.cause
            )
        except KeyError:
            runs = ", ".join(r.run_id for r in self.store.workflows if r.active) or "none"
            raise ValueError(
                f"cannot notify run {run_id!r}: it is not a workflow run in progress "
                f"(runs in progress: {runs})"
            ) from None
        return [notify_answer(*item) for item in reached]

    @verb(FailNext)
    def fail_next(self, call: FailNext) -> Fault:
        """Make the next ``times`` QStash API calls matching ``endpoint`` fail; nothing is
        stored for a failed call. Returns the ``Fault`` (``.failed`` lists the requests it
        failed, ``.remaining`` how many are still to fail).

        ``endpoint``: ``"publish"``, ``"enqueue"``, ``"batch"``, ``"any"`` (every API call), a
        path prefix (``"/v2/messages"``, any method) or a method and a path prefix
        (``"DELETE /v2/messages"``).

        ``kind``:

        - ``"error"``: answer ``status`` (400-599, default 500) with ``{"error": ...}``; the
          SDK raises ``QStashError``;
        - ``"burst"``: 429 with ``Burst-RateLimit-Limit/-Remaining/-Reset``; the SDK raises
          ``RateLimitExceededError``. ``status=429`` alone means this;
        - ``"daily"``: 429 with ``RateLimit-Limit/-Remaining/-Reset`` (reset at the next
          midnight UTC); the SDK raises ``DailyMessageLimitExceededError``;
        - ``"network"``: raise ``httpx.ConnectError``. The SDK retries network errors (5
          times by default, sleeping for real in between): build the client with
          ``retry=False``, or a zero backoff, in tests.

        Faults are matched in the order they were armed, by calls with the right token only.
        Bad arguments raise ``ValueError`` listing the accepted values.
        """
        return self._gateway.faults.add(
            call.endpoint, status=call.status, kind=call.kind, times=call.times
        )

    def clear_faults(self) -> None:
        """Disarm every fault ``fail_next`` armed that has not fired yet."""
        self._gateway.faults.clear()

    def check_deploy(self) -> list[Verdict]:
        """For each workflow run in progress (by run id), whether the app mounted at its URL
        now accepts its recorded steps: the run's next delivery sent as a probe, the app's
        answer read (``testing.deploy_check``; ``docs/how-to/check-deploy.md``). A dry run
        for QStash's state: the app's API calls meanwhile are answered, not applied."""
        __tracebackhide__ = True
        from . import deploy_check

        return deploy_check.check_fake(self._dispatcher, self._gateway)

    async def acheck_deploy(self) -> list[Verdict]:
        """``check_deploy`` from async code."""
        __tracebackhide__ = True
        from . import deploy_check

        return await deploy_check.acheck_fake(self._dispatcher, self._gateway)


def _dlq_id(dlq_id: object) -> str:
    if not isinstance(dlq_id, str) or not dlq_id:
        raise ValueError(f"invalid DLQ id {dlq_id!r}: expected the dlq_id of a DLQ entry")
    return dlq_id
