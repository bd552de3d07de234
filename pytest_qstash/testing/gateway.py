"""The fake's QStash API: each call answered against the store, through the faults a test armed,
and kept in a bounded call log; which DLQ entries the test has read. A server's data dir keeps
what it holds (``saved``/``restore``)."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from ..delivery.dispatcher import Dispatcher
from ..engine.clock import VirtualClock
from ..engine.models import ApiCall, DlqEntry
from ..engine.store import Store
from ..intercept import sdk_retries
from ..wire import api
from ..wire._http import request_path
from ..wire.faults import Fault, FaultTable

if TYPE_CHECKING:  # a deploy check's, made when one runs
    from .dry_run import DryRun

#: How many API calls ``qstash.api_calls`` keeps (the newest).
API_CALLS_KEPT = 1_000
#: The calls that publish: their answers are what a simulation may lose.
_PUBLISHES = ("/v2/publish/", "/v2/enqueue/", "/v2/batch")


def _first_message_id(response: httpx.Response) -> str:
    try:
        answer = json.loads(response.content)
    except ValueError:
        return "?"
    first = answer[0] if isinstance(answer, list) and answer else answer
    found = first.get("messageId") if isinstance(first, dict) else None
    return found if isinstance(found, str) else "?"


class ApiGateway:
    """What answers the fake's QStash API calls (the interception's, ``qstash.transport``'s)."""

    def __init__(self, store: Store, dispatcher: Dispatcher, clock: VirtualClock) -> None:
        self._store = store
        self._dispatcher = dispatcher  # its cause, at the time of each call
        # Holds the clock, not the fake: a fake no one holds any more is freed at once rather
        # than left to the cycle collector.
        self.faults = FaultTable(lambda: clock.now_ms)
        # Bounded: a call holds its headers and answer (about 2.6 KB), and a suite that
        # publishes 100k messages in one test must not hold them all.
        self.calls: deque[ApiCall] = deque(maxlen=API_CALLS_KEPT)
        #: DLQ entries the test has read (``qstash.dlq``, or the DLQ through the API).
        self.dlq_read: set[str] = set()
        # What puts the SDK's retry sleeps back, once a simulation has made them instant.
        self._restore_sleeps: Callable[[], None] | None = None
        #: While the deploy check's probe is answered: records the calls and answers them,
        #: applying none (no fault, no simulation, no call log either).
        self.dry_run: DryRun | None = None

    def handle(self, request: httpx.Request) -> httpx.Response:
        store = self._store
        if self.dry_run is not None:
            answer = self.dry_run.answer(request)
            return answer if answer is not None else api.handle(store, request)
        path = request_path(request).partition("?")[0]
        at_ms = store.clock.now_ms

        def sent(content: bytes) -> tuple[str, str, httpx.URL, httpx.Headers, bytes]:
            return (request.method, path, request.url, request.headers, content)

        try:
            if store.simulation is not None:
                self._drop_step_result(request, path)
            response = api.handle(store, request, self.faults, self._dispatcher.cause)
        except Exception as exc:  # an injected network error (or a simulated one): no answer
            self.calls.append(
                ApiCall(*sent(request.content), at_ms, None, error=f"{type(exc).__name__}: {exc}")
            )
            raise
        kept = request.content if response.status_code < 400 else b""
        self.calls.append(
            ApiCall(*sent(kept), at_ms, response.status_code, response.headers, response.content)
        )
        if store.simulation is not None and response.status_code < 300:
            self._lose_answer(request, path, response)
        if (
            request.method == "GET"
            and response.status_code == 200
            and path.startswith(("/v2/dlq", "/v2/workflows/dlq"))
        ):
            self.mark_dlq_read(store.dlq)  # listed (or fetched) through the API
        return response

    def _lose_answer(self, request: httpx.Request, path: str, response: httpx.Response) -> None:
        """A simulation's ``publish_lost_answer``: the publish is stored, its answer is not
        delivered (the client sees a network error), where the SDK will send it again.
        Workflow runs' own publishes are left alone (a step's result is another protocol)."""
        simulation = self._store.simulation
        if (
            simulation is None
            or request.method != "POST"
            or not path.startswith(_PUBLISHES)
            or any(name.lower().startswith("upstash-workflow-") for name in request.headers)
        ):
            return
        # Named whether or not the SDK will retry: the names of later publishes must not
        # depend on it.
        sent = simulation.publish_sent(path)
        if not sdk_retries.will_retry():
            return
        message_id = _first_message_id(response)
        if simulation.loses_answer(sent, message_id, self._store.clock.now_ms):
            self._sleep_instantly()
            raise httpx.ReadError(
                "the answer was lost on its way back (simulated: the publish was stored)",
                request=request,
            )

    def _drop_step_result(self, request: httpx.Request, path: str) -> None:
        """A simulation's ``step_retry``: a step result the app publishes during a workflow
        delivery never reaches QStash (each of the SDK's tries fails on the network)."""
        simulation, cause = self._store.simulation, self._dispatcher.cause
        if (
            simulation is None
            or cause is None
            or cause.workflow_run_id is None
            or request.method != "POST"
            or not path.startswith(_PUBLISHES)
        ):
            return
        run_id = cause.workflow_run_id
        # The run's own publish: its id in the headers (a publish) or in an item's (a batch).
        if request.headers.get("upstash-workflow-runid") != run_id and (
            run_id.encode() not in request.content
        ):
            return
        if simulation.loses_step_result(cause, self._store.clock.now_ms):
            self._sleep_instantly()
            raise httpx.ConnectError("simulated: the step's result never reached QStash")

    def _sleep_instantly(self) -> None:
        """The SDK sends again what failed, after sleeps that are instant until we stop."""
        if self._restore_sleeps is None:
            self._restore_sleeps = sdk_retries.instant_sleeps()

    def close(self) -> None:
        """The fake stopped: the SDK's retry sleeps are real ones again."""
        if self._restore_sleeps is not None:
            restore, self._restore_sleeps = self._restore_sleeps, None
            restore()

    def mark_dlq_read(self, dlq_ids: Iterable[str]) -> None:
        read = self.dlq_read
        read.update(dlq_ids)
        if len(read) > 2 * len(self._store.dlq) + 64:
            # Entries deleted, retried or expired since: forget them too (amortized).
            read.intersection_update(self._store.dlq)

    def unread_dlq(self) -> list[DlqEntry]:
        """The DLQ entries the test never read, oldest first."""
        return [e for e in self._store.dlq.values() if e.dlq_id not in self.dlq_read]

    def saved(self) -> dict[str, Any]:
        return {"api_calls": self.calls, "dlq_read": self.dlq_read, "faults": self.faults.faults}

    def restore(self, extras: Mapping[str, Any]) -> None:
        calls, read, faults = extras.get("api_calls"), extras.get("dlq_read"), extras.get("faults")
        if (
            not isinstance(calls, deque)
            or not all(isinstance(call, ApiCall) for call in calls)
            or not isinstance(read, set)
            or not all(isinstance(dlq_id, str) for dlq_id in read)
            or not isinstance(faults, list)
            or not all(isinstance(fault, Fault) for fault in faults)
        ):
            raise ValueError("not the fake's saved API calls, DLQ entries read and faults")
        self.calls = deque(calls, maxlen=API_CALLS_KEPT)
        self.dlq_read = read
        self.faults.faults = faults
