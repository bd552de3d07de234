"""``Client``: steer and read a running ``pytest-qstash serve`` over its control API.

It speaks plain HTTP through the standard library (``urllib``), so a test's own httpx mocks
(respx, pytest-httpx) and the in-process fake never see its calls. Its verbs and lists are the
fixture's: ``tick()``, ``advance("10m")``, ``drain()``, ``messages``, ``deliveries``, ... with
``filter``/``one``; items are ``Record``s with the same field names.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from ..durations import Duration
from ..errors import QStashFakeError
from ..query import Found
from .records import LISTS, Record

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
        return _moment(self._call("GET", "state")["now"])

    @property
    def clock(self) -> str:
        """``"virtual"`` or ``"real"``."""
        return str(self._call("GET", "state")["clock"])

    @property
    def plan(self) -> str:
        """The QStash plan whose limits apply now (``serve --plan``, or the last reset's)."""
        return str(self._call("GET", "state")["plan"])

    def next_due(self) -> datetime | None:
        due = self._call("GET", "state")["next_due"]
        return None if due is None else _moment(due)

    def tick(self) -> Found[Record]:
        """Deliver everything due now; returns the deliveries made."""
        return self._move("tick", {})

    def advance(self, duration: Duration) -> Found[Record]:
        """Move a virtual clock forward, delivering each message at its own time."""
        if isinstance(duration, timedelta):
            duration = duration.total_seconds()
        return self._move("advance", {"by": duration})

    def advance_to(self, moment: datetime | str) -> Found[Record]:
        if isinstance(moment, datetime):
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=timezone.utc)
            moment = moment.isoformat()
        return self._move("advance_to", {"to": moment})

    def drain(self, within: Duration = "30d") -> Found[Record]:
        """Deliver everything pending, each at its own time; the clock stops at the last."""
        if isinstance(within, timedelta):
            within = within.total_seconds()
        return self._move("drain", {"within": within})

    def _move(self, action: str, body: dict[str, Any]) -> Found[Record]:
        answer = self._call("POST", action, body)
        return Found((Record("delivery", d) for d in answer["deliveries"]), "delivery")

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

    # -- what a test reads ------------------------------------------------------------------
    def _list(self, name: str) -> Found[Record]:
        _, kind = LISTS[name]
        return Found((Record(kind, item) for item in self._call("GET", name)), kind)

    @property
    def messages(self) -> Found[Record]:
        return self._list("messages")

    @property
    def deliveries(self) -> Found[Record]:
        return self._list("deliveries")

    @property
    def dlq(self) -> Found[Record]:
        return self._list("dlq")

    @property
    def events(self) -> Found[Record]:
        return self._list("events")

    @property
    def schedules(self) -> Found[Record]:
        return self._list("schedules")

    @property
    def queues(self) -> Found[Record]:
        return self._list("queues")

    @property
    def url_groups(self) -> Found[Record]:
        return self._list("url_groups")

    @property
    def runs(self) -> Found[Record]:
        return self._list("runs")

    @property
    def flow_keys(self) -> Found[Record]:
        """Flow-control keys: ``key``, ``parallelism``, ``rate``, ``period`` (seconds),
        ``paused``, ``active`` (attempts in flight), ``waiting`` (messages waiting)."""
        return self._list("flow_keys")

    @property
    def workflow_dlq(self) -> Found[Record]:
        """The failed workflow runs (``dlq_id``, ``run_id``, ``labels``,
        ``failure_function_state``, ...), as ``FakeQStash.workflow_dlq``."""
        return self._list("workflow_dlq")

    @property
    def waiters(self) -> Found[Record]:
        """Workflow runs waiting for an event (``event_id``, ``run_id``, ``step_name``,
        ``deadline``), as ``FakeQStash.waiters``."""
        return self._list("waiters")

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
        body: dict[str, Any] = {}
        if start is not None:
            body["start"] = start
        if keep is True or keep is False:
            body["keep"] = keep
        elif isinstance(keep, str):
            body["keep"] = [keep]
        elif keep:
            body["keep"] = list(keep)
        if plan is not None:
            body["plan"] = plan
        self._call("POST", "reset", body)

    def redeliver(self, message_id: str) -> Record:
        """Deliver a DELIVERED message once more, as QStash's at-least-once delivery sometimes
        does (same ``Upstash-Message-Id``, body and headers, a fresh signature): due now, so
        the next ``tick()`` (or, on a real clock, the server itself) delivers it. Tests that
        the app is idempotent. Returns the message; ``ServerError`` (400) for an unknown id
        or a message not DELIVERED."""
        return Record("message", self._call("POST", "redeliver", {"message_id": message_id}))

    def resume_run(
        self, dlq_id: str, *, retries: int | None = None, headers: dict[str, str] | None = None
    ) -> Record:
        """A failed workflow run resumed from its workflow DLQ entry, as
        ``FakeQStash.resume_run``: a new run going on from the step that failed."""
        body = {"dlq_id": dlq_id, "retries": retries, "headers": headers}
        return Record("run", self._call("POST", "resume_run", body))

    def restart_run(
        self, dlq_id: str, *, retries: int | None = None, headers: dict[str, str] | None = None
    ) -> Record:
        """A failed workflow run started again from the beginning, as
        ``FakeQStash.restart_run``."""
        body = {"dlq_id": dlq_id, "retries": retries, "headers": headers}
        return Record("run", self._call("POST", "restart_run", body))

    def retry_failure_function(self, dlq_id: str) -> Record:
        """The failed run's failure function called again, as
        ``FakeQStash.retry_failure_function``."""
        return Record("run", self._call("POST", "retry_failure_function", {"dlq_id": dlq_id}))

    def mount(self, prefix: str, to: str) -> Mounted:
        """Send the server's outbound requests whose URL starts with ``prefix`` (deliveries,
        callbacks, a workflow's ``context.call`` and ``context.api.*``) to ``to`` plus the rest
        of the path and query, as ``serve --mount`` does; records and signatures keep the
        original URL. It stays (a reset too) until ``unmount``; as a context manager, until
        the block ends. ``ServerError`` (400) for a prefix or target that is no http(s) URL."""
        answer = self._call("POST", "mounts", {"prefix": prefix, "to": to})
        return Mounted(self, str(answer["prefix"]), str(answer["to"]))

    def unmount(self, prefix: str) -> bool:
        """Forget the outbound mount at ``prefix``; False when there was none."""
        return bool(self._call("DELETE", "mounts", {"prefix": prefix})["removed"])

    @property
    def mounts(self) -> dict[str, str]:
        """The outbound mounts: ``{prefix: to}``."""
        return {m["prefix"]: m["to"] for m in self._call("GET", "mounts")}

    def mark(self) -> dict[str, int]:
        """Where the server's histories stand now, for ``report(since=...)``."""
        mark: dict[str, int] = self._call("GET", "mark")
        return mark

    def report(self, since: dict[str, int] | None = None) -> str | None:
        """The failure report of what the server saw since ``since`` (a ``mark()``; by
        default since its last reset), as the ``qstash`` report section shows it; None when
        it saw nothing."""
        text = self._call("POST", "report", {} if since is None else {"since": since})["text"]
        return None if text is None else str(text)

    def fail_next(
        self,
        endpoint: str = "publish",
        *,
        status: int | None = None,
        kind: str | None = None,
        times: int = 1,
    ) -> dict[str, Any]:
        """Make the next ``times`` API calls matching ``endpoint`` fail, as
        ``FakeQStash.fail_next`` does (``kind``: error, burst, daily, network)."""
        body = {"endpoint": endpoint, "status": status, "kind": kind, "times": times}
        result: dict[str, Any] = self._call("POST", "fail_next", body)
        return result

    def clear_faults(self) -> None:
        self._call("POST", "clear_faults", {})

    def trigger(
        self,
        url: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        run_id: str | None = None,
        retries: int | None = None,
        label: str | None = None,
    ) -> str:
        """Start an Upstash Workflow run at ``url``; returns its run id."""
        answer = self._call(
            "POST",
            "trigger",
            {
                "url": url,
                "body": body,
                "headers": headers,
                "run_id": run_id,
                "retries": retries,
                "label": label,
            },
        )
        return str(answer["run_id"])

    def notify(
        self, event_id: str, data: Any = None, *, run_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Notify an event's waiters, or one run's (``run_id``), as ``FakeQStash.notify``;
        returns the ``NotifyResponse`` answers."""
        answer: list[dict[str, Any]] = self._call(
            "POST", "notify", {"event_id": event_id, "data": data, "run_id": run_id}
        )
        return answer

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
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
