"""``pytest-qstash export``: an account's state, read through QStash's own REST API, in one
JSON file (to find out why a message failed in production, and later to load into a test).

It reads, with the account's token, every list the API has of what an account holds, and
follows each cursor to its end:

- ``schedules``: ``GET /v2/schedules``;
- ``queues``: ``GET /v2/queues``;
- ``url_groups``: ``GET /v2/topics`` (each group with its endpoints);
- ``dlq``: ``GET /v2/dlq`` (whole bodies and headers), page after page;
- ``workflow_runs``: ``GET /v2/workflows/logs?state=RUN_STARTED``, the runs in progress with
  their steps, page after page;
- ``failed_workflow_runs``: the same with ``state=RUN_FAILED``, the failed runs' steps (what
  the workflow DLQ's resume and restart replay);
- ``workflow_dlq``: ``GET /v2/workflows/dlq``, page after page;
- ``flow_control``: ``GET /v2/flowControl``.

The file holds QStash's answers as they came, each resource a list of answers (one for a
plain list, one per page for a paged one, in the order read), which is what ``jq
--slurpfile`` makes of the answers ``curl`` appends to a file: a user can build one by hand.
Beside them: ``version`` (the format's, 1), ``source`` (the API's URL) and ``exported_at``
(QStash's time when it first answered, its ``Date``: a local server's virtual clock too; this
machine's when no answer is dated).
Never the token (an answer that contains it has it replaced) nor the signing keys (never
read). The file is written at once or not at all (a temporary file renamed), readable by its
owner only: it can hold message bodies.

Whatever goes wrong (the API unreachable, the token refused, an answer that is not QStash's,
a cursor that comes back, a destination that cannot be written) is one sentence on stderr
and exit status 2, with no file written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

#: The file format's version (``"version"``): a loader refuses one it does not know.
FORMAT_VERSION = 1
#: Where the export reads without ``--url`` or ``QSTASH_URL``, as the SDKs.
DEFAULT_URL = "https://qstash.upstash.io"
#: The longest one request may take (connecting, or waiting for the answer), in seconds.
TIMEOUT_S = 30.0
#: What an answer that contained the token holds there instead.
TOKEN_REPLACEMENT = "REDACTED:QSTASH_TOKEN"
#: A token this long or longer is replaced wherever a text holds it; a shorter one (no
#: QStash token is, a local server's may be) only where a text is the token, or a bearer
#: header of it: replacing its every occurrence would rewrite unrelated text.
_SEARCHED_TOKEN = 16
#: The most of an error answer a message quotes.
_QUOTED = 200

COMMAND = "pytest-qstash export"


@dataclass(frozen=True)
class Resource:
    """One list of the account: the file's key for it and the request that reads it."""

    #: The key of the file that holds the answers.
    name: str
    path: str
    #: Query parameters sent on every page (a filter).
    params: tuple[tuple[str, str], ...] = ()
    #: A paged list: the key of the answer's list of items (the answer is an object with
    #: it and a ``cursor`` while more remain). None: the answer is the list itself.
    items: str | None = None

    @property
    def request(self) -> str:
        query = "&".join(f"{name}={value}" for name, value in self.params)
        return f"GET {self.path}" + (f"?{query}" if query else "")


RESOURCES = (
    Resource("schedules", "/v2/schedules"),
    Resource("queues", "/v2/queues"),
    Resource("url_groups", "/v2/topics"),
    Resource("dlq", "/v2/dlq", items="messages"),
    # In progress: RUN_STARTED, the state of a run from its start until it succeeds, fails or
    # is cancelled (the document's `state` filter). No trimBody: the document says its default
    # (-1) leaves bodies out, yet the SDKs never send it and read whole step outputs.
    Resource("workflow_runs", "/v2/workflows/logs", (("state", "RUN_STARTED"),), items="runs"),
    # The failed runs, whose steps the workflow DLQ's resume and restart replay once loaded.
    Resource(
        "failed_workflow_runs", "/v2/workflows/logs", (("state", "RUN_FAILED"),), items="runs"
    ),
    Resource("workflow_dlq", "/v2/workflows/dlq", items="messages"),
    Resource("flow_control", "/v2/flowControl"),
)


class ExportError(Exception):
    """Why the export stopped, as the one sentence the command prints."""


def add_arguments(command: argparse.ArgumentParser) -> None:
    """The options of ``pytest-qstash export``."""
    command.add_argument(
        "--to",
        required=True,
        metavar="FILE",
        help="the JSON file to write (replaced if it exists; readable by its owner only)",
    )
    command.add_argument(
        "--url",
        help=f"the QStash API to read (default: QSTASH_URL, else {DEFAULT_URL})",
    )
    command.add_argument(
        "--token",
        help="the account's token (default: QSTASH_TOKEN, which keeps it off the command line)",
    )


def main(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Run the command with its parsed ``args``; returns the exit status (2: it failed, with
    one sentence on stderr, and wrote nothing)."""
    try:
        url = base_url(args.url or env.get("QSTASH_URL") or DEFAULT_URL)
        token = args.token or env.get("QSTASH_TOKEN")
        if not token:
            raise ExportError(
                "no token: set QSTASH_TOKEN in the environment (or pass --token), the "
                "token of the account to export"
            )
        if not token.isascii() or not token.isprintable():
            raise ExportError(
                "invalid token: it has characters no QStash token has (expected printable "
                "ASCII, as the Upstash console shows it)"
            )
        target = destination(args.to)
        document = export(url, token, progress=_progress)
        write_atomically(target, document)
    except ExportError as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"{COMMAND}: wrote {target}", file=sys.stderr, flush=True)
    return 0


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def base_url(url: str) -> str:
    """The API's URL, checked (http or https, a host, no query) and without a final ``/``."""
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise ExportError(f"invalid URL {url!r}: expected the QStash API's, such as {DEFAULT_URL}")
    if parts.query or parts.fragment or parts.username or parts.password:
        # Not quoted whole: a query or a user part may hold a secret.
        host = parts.hostname + (f":{port}" if port is not None else "")
        raise ExportError(
            f"invalid URL {parts.scheme}://{host}{parts.path}...: expected the API's base URL "
            f"alone, such as {DEFAULT_URL} (no query, fragment or user)"
        )
    return parts.geturl().rstrip("/")


def destination(to: str) -> Path:
    """The file to write, checked before anything is read: its folder exists and is writable,
    and it is not itself a folder."""
    path = Path(to).expanduser()
    folder = path.parent
    if not folder.is_dir():
        raise ExportError(f"cannot write {to}: the directory {folder} does not exist")
    if path.is_dir():
        raise ExportError(f"cannot write {to}: it is a directory (--to names the file to write)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ExportError(f"cannot write {to}: the directory {folder} is not writable")
    return path


# -- reading --------------------------------------------------------------------------------
def export(
    url: str,
    token: str,
    *,
    progress: Callable[[str], None] = lambda line: None,
    transport: httpx.BaseTransport | None = None,
) -> dict[str, Any]:
    """The export document of the account at ``url``: every resource read, each cursor
    followed. ``progress`` gets one line per resource as it is read (``dlq: 120 (2 pages)``).
    ``ExportError`` says why it could not be read."""
    document: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "source": url,
        "exported_at": _now_iso(),
    }
    dates: list[str] = []
    with httpx.Client(
        base_url=url,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        timeout=TIMEOUT_S,
        follow_redirects=False,  # the token goes to the URL given, nowhere else
        transport=transport,
    ) as client:
        for resource in RESOURCES:
            answers = _read(client, url, resource, dates)
            document[resource.name] = answers
            progress(_summary(resource, answers))
    # QStash's own time when it first answered (its Date), rather than this machine's: the
    # same for QStash, and a local server's virtual clock for one.
    answered_at = _date(dates[0]) if dates else None
    if answered_at is not None:
        document["exported_at"] = answered_at
    replaced = _replace_token(document, token)
    if replaced:
        progress(
            f"{COMMAND}: {replaced} value(s) of the answers contained the token itself; "
            f"the file has {TOKEN_REPLACEMENT} there instead"
        )
    return document


def _now_iso() -> str:
    moment = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return moment.replace("+00:00", "Z")


def _date(header: str) -> str | None:
    """An HTTP ``Date`` as the file's ISO 8601 form; None for one that cannot be read."""
    try:
        moment = parsedate_to_datetime(header)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        return None
    iso = moment.astimezone(timezone.utc).isoformat(timespec="milliseconds")
    return iso.replace("+00:00", "Z")


def _read(client: httpx.Client, url: str, resource: Resource, dates: list[str]) -> list[Any]:
    """The answers to ``resource``'s request: one, or one per page until no cursor is left."""
    if resource.items is None:
        answer = _get(client, url, resource, None, dates)
        if not isinstance(answer, list):
            raise ExportError(
                f"{url} answered {resource.request} with {_kind(answer)}, not the list QStash "
                "answers: is it a QStash API?"
            )
        return [answer]
    pages: list[Any] = []
    seen: set[str] = set()
    cursor: str | None = None
    while True:
        page = _get(client, url, resource, cursor, dates)
        if not isinstance(page, dict) or not isinstance(page.get(resource.items), list):
            raise ExportError(
                f"{url} answered {resource.request} with {_kind(page)}, not an object with a "
                f"{resource.items!r} list as QStash answers: is it a QStash API?"
            )
        pages.append(page)
        following = page.get("cursor")
        # The last page has no cursor (null, or "" as the workflow logs say).
        if following is None or following == "":
            return pages
        if not isinstance(following, str | int):
            raise ExportError(
                f"{url} answered {resource.request} with the cursor {following!r}, not a "
                "string: is it a QStash API?"
            )
        following = str(following)
        if following in seen:
            raise ExportError(
                f"{url} answered {resource.request} with the cursor {following!r} a second "
                f"time (after {len(pages)} pages): stopped rather than read the same pages "
                "forever"
            )
        seen.add(following)
        cursor = following


def _get(
    client: httpx.Client, url: str, resource: Resource, cursor: str | None, dates: list[str]
) -> Any:
    params = dict(resource.params)
    if cursor is not None:
        params["cursor"] = cursor
    request = resource.request + (" (next page)" if cursor is not None else "")
    try:
        response = client.get(resource.path, params=params)
    except httpx.TimeoutException:
        raise ExportError(
            f"could not reach {url}: {request} got no answer within {TIMEOUT_S:g} s"
        ) from None
    except httpx.HTTPError as exc:
        raise ExportError(f"could not reach {url} ({request}): {_reason(exc)}") from None
    status = response.status_code
    if "date" in response.headers:
        dates.append(response.headers["date"])
    if status in (401, 403):
        raise ExportError(
            f"{url} refused the token: {request} answered {status}{_quoted_error(response)} "
            "(check QSTASH_TOKEN or --token)"
        )
    if 300 <= status < 400 and "location" in response.headers:
        raise ExportError(
            f"{url} answered {request} with {status}, a redirect to "
            f"{response.headers['location']} (not followed: pass the API's own URL as --url)"
        )
    if not 200 <= status < 300:
        raise ExportError(f"{url} answered {request} with {status}{_quoted_error(response)}")
    try:
        return json.loads(response.content)
    except (ValueError, RecursionError):
        kind = response.headers.get("content-type", "no content type")
        raise ExportError(
            f"{url} answered {request} with something that is not JSON ({kind}, "
            f"{len(response.content)} bytes): is it a QStash API?"
        ) from None


def _reason(exc: httpx.HTTPError) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _quoted_error(response: httpx.Response) -> str:
    """`` (the error QStash gave)``: its ``error`` field, else the start of the body."""
    try:
        body = json.loads(response.content)
        text = str(body["error"]) if isinstance(body, dict) and "error" in body else ""
    except (ValueError, RecursionError):
        text = response.content[:_QUOTED].decode("utf-8", "replace")
    text = " ".join(text.split())
    if len(text) > _QUOTED:
        text = text[:_QUOTED] + "..."
    return f" ({text})" if text else ""


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object with " + (", ".join(repr(k) for k in list(value)[:5]) or "no keys")
    return f"a JSON {type(value).__name__}"


def _summary(resource: Resource, answers: list[Any]) -> str:
    if resource.items is None:
        return f"{resource.name}: {len(answers[0])}"
    count = sum(len(page[resource.items]) for page in answers)
    pages = len(answers)
    return f"{resource.name}: {count} ({pages} page{'' if pages == 1 else 's'})"


def _replace_token(document: dict[str, Any], token: str) -> int:
    """Replace, in place, the token wherever an answer holds it (a message that carried it in
    a header or its body); how many strings held it."""
    replaced = 0

    whole = {token, f"Bearer {token}"}

    def clean(value: Any) -> Any:
        nonlocal replaced
        if isinstance(value, str):
            if value in whole or (len(token) >= _SEARCHED_TOKEN and token in value):
                replaced += 1
                return value.replace(token, TOKEN_REPLACEMENT)
            return value
        if isinstance(value, list):
            return [clean(item) for item in value]
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        return value

    for resource in RESOURCES:
        document[resource.name] = clean(document[resource.name])
    return replaced


# -- writing --------------------------------------------------------------------------------
def write_atomically(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` as JSON to ``path``, mode 0600: a temporary file beside it, renamed
    over it once whole, so that ``path`` is the old file or the new one, never a part."""
    try:
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate an answer escaped: kept as its escape
        data = (json.dumps(document, indent=2) + "\n").encode("ascii")
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            os.chmod(temporary, 0o600)  # mkstemp's already; said, not assumed
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise ExportError(f"cannot write {path}: {exc.strerror or exc}") from None
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Make the rename durable where the platform can (a folder opened read-only)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
