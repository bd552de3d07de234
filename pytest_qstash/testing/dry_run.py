"""A dry run of the fake's QStash API: while the workflow deploy check's probe is being answered
(``testing/deploy_check.py``), the API calls the app makes are recorded and answered as QStash
answers them on success, and none of them is applied: the store stays as it was.

The answers (``DryRun.answer``), one per call the workflow SDKs make from a route, in the
shape they read:

- ``POST /v2/publish/...`` and ``/v2/enqueue/...``: ``{"messageId"}`` (for a URL group, one
  ``{"messageId", "url"}`` per endpoint); ``POST /v2/batch``: one of those per item;
- ``POST /v2/trigger/...``: ``{"workflowRunId", "workflowCreatedAt"}``;
  ``POST /v2/batch/trigger``: one ``{"workflowRunId", "workflowCreatedAt", "deduplicated"}``
  per item;
- ``DELETE /v2/workflows/runs/{id}`` (the route's end, or a cancel): 200 with no body;
  ``POST /v2/wait/{eventId}``: 200 with no body, as the real wait answers;
- ``POST /v2/notify/{eventId}``: 201, one ``NotifyResponse`` per run waiting for the event;
  ``POST /v2/notify/{runId}/{eventId}``: 201, the run's ``NotifyResponse``;
- ``POST /v2/schedules/...``: ``{"scheduleId"}``; ``DELETE /v2/messages/{id}``:
  ``{"cancelled": 1}``; a bulk cancel: ``{"cancelled": 0}``;
- a read (``GET``, ``HEAD``): answered from the store, as QStash answers it (a read changes
  nothing);
- any other call: 200 with ``{}``.

The ids in those answers are derived from the dry run's seed (the probe) and the call's place
among its calls: the same on every run of a test, and none drawn from the store's generator,
so the ids a test sees after the check are those it would see without it.

``DryRun.did`` reads what the app did to a run from the calls: ``finished the run``,
``canceled the run``, ``published its next step 'c'``, ``asked to wait for event 'paid'``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

import httpx

from ..engine.ids import BASE58
from ..engine.store import Store
from ..engine.workflows import STEP, TO_CALLBACK
from ..wire._http import empty_response, json_response, request_path
from ..wire.waiters import notify_answer

_RUNS = "/v2/workflows/runs"
_STEP_NAME_HEADER = "upstash-callback-forward-upstash-workflow-stepname"


@dataclass(frozen=True, slots=True)
class DryCall:
    """An API call the app made during a dry run: its path percent-decoded, its headers by
    lowercase name."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    content: bytes


class DryRun:
    """Records the API calls made while it is the gateway's (``ApiGateway.dry_run``) and
    answers each with a plausible success, applying none."""

    def __init__(self, store: Store, seed: str) -> None:
        self._store = store  # read only: the URL groups, waiters and runs answers name
        self._seed = seed
        self._ids = 0
        self.calls: list[DryCall] = []

    # -- answers ------------------------------------------------------------------------
    def answer(self, request: httpx.Request) -> httpx.Response | None:
        """The answer to ``request``, recorded; None for a read, which the store answers."""
        raw_path, _, query = request_path(request).partition("?")
        path = unquote(raw_path)
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.calls.append(DryCall(request.method, path, query, headers, request.content))
        method = request.method
        if method in ("GET", "HEAD"):
            return None
        if method == "DELETE":
            if path.startswith(f"{_RUNS}/"):
                return empty_response(200)
            if path.rstrip("/") in (_RUNS, "/v2/messages"):
                return json_response({"cancelled": 0})
            if path.startswith("/v2/messages/"):
                return json_response({"cancelled": 1})
            return json_response({})
        if method != "POST":
            return json_response({})
        if path.startswith("/v2/publish/"):
            return json_response(self._published(path.removeprefix("/v2/publish/")))
        if path.startswith("/v2/enqueue/"):
            _, _, destination = path.removeprefix("/v2/enqueue/").partition("/")
            return json_response(self._published(destination))
        if path.rstrip("/") == "/v2/batch":
            items = _json_list(request.content)
            return json_response(
                [self._published(str(item.get("destination", ""))) for item in items]
            )
        if path.rstrip("/") == "/v2/batch/trigger":
            items = _json_list(request.content)
            return json_response(
                [{**self._triggered(item.get("headers")), "deduplicated": False} for item in items],
                201,
            )
        if path.startswith("/v2/trigger/"):
            return json_response(self._triggered(headers))
        if path.startswith("/v2/wait/"):
            return empty_response(200)
        if path.startswith("/v2/notify/"):
            return self._notified(path.removeprefix("/v2/notify/"))
        if path.startswith("/v2/schedules/") and not path.endswith(("/pause", "/resume")):
            return json_response({"scheduleId": "scd_" + self._token(28)})
        return json_response({})

    def _published(self, destination: str) -> Any:
        group = self._store.url_groups.get(destination)
        if group is None:
            return {"messageId": self._message_id()}
        return [{"messageId": self._message_id(), "url": e.url} for e in group.endpoints]

    def _triggered(self, headers: Any) -> dict[str, Any]:
        named = _lowered(headers).get("upstash-workflow-runid", "").strip()
        run_id = named or "wfr_" + self._token(21)
        return {"workflowRunId": run_id, "workflowCreatedAt": self._store.clock.now_ms}

    def _notified(self, rest: str) -> httpx.Response:
        run_id, _, event_id = rest.rpartition("/")
        waiting = self._store.waiters.of_event(event_id)
        if not run_id:  # every run waiting for the event
            answers = []
            for each in waiting:
                run = self._store.workflows.get(each.run_id)
                if run is not None:
                    answers.append({**notify_answer(run, each, None), **self._resumed()})
            return json_response(answers, 201)
        run = self._store.workflows.get(run_id)
        if run is None:
            return json_response(
                {"workflowRunId": run_id, "workflowCreatedAt": 0, "error": ""}, 201
            )
        waiter = next((w for w in waiting if w.run_id == run_id), None)
        resumed = self._resumed() if waiter is not None else {}
        return json_response({**notify_answer(run, waiter, None), **resumed}, 201)

    def _resumed(self) -> dict[str, str]:
        return {"messageId": self._message_id()}

    def _message_id(self) -> str:
        return "msg_" + self._token(40)

    def _token(self, length: int) -> str:
        """``length`` base58 characters, from the seed and how many ids came before."""
        self._ids += 1
        digest = hashlib.sha512(f"dry run {self._seed} {self._ids}".encode()).digest()
        return "".join(BASE58[byte % len(BASE58)] for byte in digest[:length])

    # -- what the app did ---------------------------------------------------------------
    def did(self, run_id: str) -> str | None:
        """What the calls did to the run ``run_id``: ended it, published its next steps (by
        name), asked to wait for an event; None when they did nothing to it."""
        ended: str | None = None
        published = False
        names: list[str] = []
        waits: list[str] = []
        for call in self.calls:
            if call.method == "DELETE" and call.path.rstrip("/") == f"{_RUNS}/{run_id}":
                cancel = (parse_qs(call.query).get("cancel") or ["true"])[0].lower()
                ended = "finished the run" if cancel == "false" else "canceled the run"
            if (
                call.method == "POST"
                and call.path.startswith("/v2/wait/")
                and call.headers.get("upstash-workflow-runid", "").strip() == run_id
            ):
                waits.append(call.path.removeprefix("/v2/wait/"))
            for headers, body in _published_items(call):
                if headers.get("upstash-workflow-runid", "").strip() != run_id:
                    continue
                if headers.get("upstash-workflow-init", "").lower() == "true":
                    continue
                published = True
                name = _step_name(headers, body)
                if name is not None:
                    names.append(name)
        if ended is not None:
            return ended
        if names:
            shown = ", ".join(repr(name) for name in dict.fromkeys(names))
            return f"published its next step {shown}"
        if published:
            return "published its next step"
        if waits:
            return f"asked to wait for event {', '.join(repr(w) for w in waits)}"
        return None


def _published_items(call: DryCall) -> list[tuple[dict[str, str], str]]:
    """What a publish call publishes: (headers by lowercase name, body) per message."""
    if call.method != "POST":
        return []
    if call.path.startswith(("/v2/publish/", "/v2/enqueue/")):
        return [(call.headers, call.content.decode("utf-8", "replace"))]
    if call.path.rstrip("/") != "/v2/batch":
        return []
    out: list[tuple[dict[str, str], str]] = []
    for item in _json_list(call.content):
        body = item.get("body")
        out.append((_lowered(item.get("headers")), body if isinstance(body, str) else ""))
    return out


def _step_name(headers: dict[str, str], body: str) -> str | None:
    """The name of the step a workflow publish carries: a step's (its JSON's ``stepName``),
    or a ``context.call``'s (its callback's step name)."""
    call_type = headers.get("upstash-workflow-calltype", STEP)
    if call_type == TO_CALLBACK:
        return headers.get(_STEP_NAME_HEADER)
    if call_type != STEP:
        return None
    try:
        step = json.loads(body)
    except ValueError:
        return None
    name = step.get("stepName") if isinstance(step, dict) else None
    return name if isinstance(name, str) else None


def _json_list(content: bytes) -> list[dict[str, Any]]:
    """The objects of a JSON list (a batch's items); the rest left out."""
    try:
        parsed = json.loads(content)
    except (ValueError, RecursionError):
        return []
    return [item for item in parsed if isinstance(item, dict)] if isinstance(parsed, list) else []


def _lowered(headers: Any) -> dict[str, str]:
    if not isinstance(headers, dict):
        return {}
    return {str(name).lower(): str(value) for name, value in headers.items()}
