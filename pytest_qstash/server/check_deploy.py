"""``pytest-qstash check-deploy FILE --app URL``: for each Upstash Workflow run in progress in an
export (``pytest-qstash export``), does the app's new code accept the run's recorded steps?

The export is loaded (``wire.load``) into a store of this process, which nothing else
reaches; for each run in progress the check builds the delivery QStash would make on resuming
it (``testing.deploy_check``) and sends it, signed with ``QSTASH_CURRENT_SIGNING_KEY`` from
the environment, to ``--app``'s base URL plus the run's recorded path and query: the app under
check, running with its new code. The answers make a table, one line per run, by run id: run
id, verdict, step, expected, found, detail.

A compatible app runs its next step on the probe and publishes it to the QStash it is pointed
at (its own ``QSTASH_URL``: a running ``pytest-qstash serve``, say), as it would on resuming.
``--url`` (default ``QSTASH_URL``) with ``--token`` (default ``QSTASH_TOKEN``) names that
QStash: the check then reads each run's log there before and after its probe, and the detail
says whether the app published the run's next step or finished it. Without a token, the detail
is the answer's status.

Exit status: 0 when every run is compatible (or none is in progress), 1 when any is
incompatible or an error (an app that cannot be reached is an error for each run, not a
usage error), 2 with one sentence on stderr for bad input (a file that cannot be read or
loaded, a bad URL, no signing key).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from . import export as exporting

if TYPE_CHECKING:  # the check's machinery is imported when it runs: `serve` starts without it
    from ..delivery.outcome import Outcome
    from ..engine.models import Message
    from ..engine.store import Store
    from ..engine.workflows import WorkflowRun
    from ..testing.deploy_check import Verdict

COMMAND = "pytest-qstash check-deploy"
#: The longest one probe may take (connecting, or waiting for the answer), in seconds.
TIMEOUT_S = 30.0
#: The longest a read of a run's log may take, in seconds.
_LOG_TIMEOUT_S = 10.0
_COLUMNS = ("run id", "verdict", "step", "expected", "found", "detail")


class CheckError(Exception):
    """Bad input, as the one sentence the command prints."""


def add_arguments(command: argparse.ArgumentParser) -> None:
    """The arguments of ``pytest-qstash check-deploy``."""
    command.add_argument(
        "file", metavar="FILE", help="an export file (pytest-qstash export --to FILE)"
    )
    command.add_argument(
        "--app",
        required=True,
        metavar="URL",
        help="the base URL of the app under check (its new code), e.g. http://127.0.0.1:8000: "
        "each run's probe goes there, with the run's recorded path and query",
    )
    command.add_argument(
        "--url",
        help="the QStash API the app publishes to (default: QSTASH_URL), read to tell what the "
        "app did with each probe",
    )
    command.add_argument(
        "--token",
        help="that QStash's token (default: QSTASH_TOKEN, which keeps it off the command line)",
    )


def main(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Run the command with its parsed ``args``; returns the exit status."""
    try:
        verdicts = check(args, env)
    except CheckError as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr, flush=True)
        return 2
    print(table(verdicts), flush=True)
    return 0 if all(v.verdict == "compatible" for v in verdicts) else 1


def check(args: argparse.Namespace, env: Mapping[str, str]) -> list[Verdict]:
    """The verdicts on every run in progress of ``args.file``; ``CheckError`` for bad input."""
    from ..testing.deploy_check import check_runs

    app = app_base(args.app)
    signing_key = env.get("QSTASH_CURRENT_SIGNING_KEY", "")
    if not signing_key:
        raise CheckError(
            "no signing key: set QSTASH_CURRENT_SIGNING_KEY in the environment to the key the "
            "app verifies deliveries with (the probes are signed with it, as QStash signs)"
        )
    qstash_url = args.url or env.get("QSTASH_URL")
    token = args.token or env.get("QSTASH_TOKEN")
    if qstash_url:
        try:
            qstash_url = exporting.base_url(qstash_url)
        except exporting.ExportError:
            raise CheckError(
                f"invalid --url {qstash_url!r}: expected the base URL of the QStash API the app "
                "publishes to, such as http://127.0.0.1:8080 (no query)"
            ) from None
    store = _load(args.file, signing_key)
    with httpx.Client(timeout=TIMEOUT_S, trust_env=False) as client:
        observe = None
        if qstash_url and token:
            observe = _log_watcher(client, qstash_url, token)
        return check_runs(
            store,
            _sender(client),
            signing_key=signing_key,
            url_for=lambda message: _probe_url(app, message),
            observe=observe if observe is not None else _unseen,
        )


def app_base(url: str) -> str:
    """``--app``, checked (http or https, a host, no query) and without a final ``/``."""
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or port == -1
        or parts.query
        or parts.fragment
    ):
        raise CheckError(
            f"invalid --app {url!r}: expected the app's base URL, such as http://127.0.0.1:8000"
        )
    return parts.geturl().rstrip("/")


def _load(path: str, signing_key: str) -> Store:
    """A store holding what the export at ``path`` holds."""
    from ..testing.fake import FakeQStash  # the fake's engine, never started: no interception
    from ..wire.load import LoadError

    fake = FakeQStash(freeze_time=False, current_signing_key=signing_key)
    try:
        fake.load(path)
    except LoadError as exc:
        said = str(exc)
        raise CheckError(said if path in said else f"cannot load {path}: {said}") from None
    return fake.store


def _probe_url(app: str, message: Message) -> str:
    """The app's base URL, then the recorded URL's path and query."""
    parts = urlsplit(message.url)
    return app + (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _sender(client: httpx.Client) -> Callable[[httpx.Request], Outcome]:
    from ..delivery.outcome import Outcome

    def send(request: httpx.Request) -> Outcome:
        try:
            return Outcome.of_response(client.send(request))
        except httpx.HTTPError as exc:
            return Outcome(None, httpx.Headers(), b"", f"{type(exc).__name__}: {exc}")

    return send


def _unseen(run: WorkflowRun) -> Callable[[], str | None]:
    return lambda: None


def _log_watcher(
    client: httpx.Client, url: str, token: str
) -> Callable[[WorkflowRun], Callable[[], str | None]]:
    """Reads the run's log (``GET /v2/workflows/logs?workflowRunId=``) on the QStash the app
    publishes to, before and after its probe: what the app did there."""

    def read(run_id: str) -> dict[str, Any] | None:
        try:
            response = client.get(
                f"{url}/v2/workflows/logs",
                params={"workflowRunId": run_id},
                headers={"Authorization": f"Bearer {token}"},
                timeout=_LOG_TIMEOUT_S,
            )
            runs = response.json().get("runs") if response.is_success else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        if not isinstance(runs, list):
            return None
        found = [r for r in runs if isinstance(r, dict) and r.get("workflowRunId") == run_id]
        return found[0] if found else None

    def watch(run: WorkflowRun) -> Callable[[], str | None]:
        before = read(run.run_id)

        def seen() -> str | None:
            after = read(run.run_id)
            if before is None or after is None:
                return None
            ended = after.get("workflowState") == "RUN_SUCCESS"
            if before.get("workflowState") == "RUN_STARTED" and ended:
                return "finished the run"
            known = {id_ for id_, _, _ in _log_steps(before)}
            added = [(name, nxt) for id_, name, nxt in _log_steps(after) if id_ not in known]
            if not added:
                return None
            names = [name for name, nxt in added if name and not nxt]
            if not names:
                return "published its next step"
            shown = ", ".join(repr(n) for n in dict.fromkeys(names))
            return f"published its next step {shown}"

        return seen

    return watch


def _log_steps(run: Mapping[str, Any]) -> list[tuple[str, str | None, bool]]:
    """(message id, step name, pending) for each entry of a run's log."""
    out: list[tuple[str, str | None, bool]] = []
    groups = run.get("steps")
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, dict) or not isinstance(group.get("steps"), list):
            continue
        pending = group.get("type") == "next"
        for step in group["steps"]:
            if isinstance(step, dict) and isinstance(step.get("messageId"), str):
                name = step.get("stepName")
                out.append((step["messageId"], name if isinstance(name, str) else None, pending))
    return out


def table(verdicts: list[Verdict]) -> str:
    """One line per run, columns aligned; ``-`` for a field that has no value."""
    if not verdicts:
        return "no workflow run in progress: nothing to check"
    rows = [_COLUMNS] + [
        (
            v.run_id,
            v.verdict,
            "-" if v.step is None else str(v.step),
            v.expected if v.expected is not None else "-",
            v.found if v.found is not None else "-",
            v.detail,
        )
        for v in verdicts
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS) - 1)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True))
        + "  "
        + row[-1]
        for row in rows
    ]
    return "\n".join(line.rstrip() for line in lines)
