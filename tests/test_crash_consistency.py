"""A data dir after a crash at any byte: the journal cut at every line boundary and at seeded
random bytes inside its lines, and a snapshot cut mid-write. Each prefix loads (or is refused
with one sentence saying what to do), and every request acknowledged before the cut is there
after the restart, exactly as it was answered.

The server is the real app in this process, fed real QStash API requests (what the ``qstash``
SDK sends: the same routes, headers and bodies) and control calls; each restart is a new app
on a copy of the data dir, as ``pytest-qstash serve --data-dir`` starts."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_qstash.server.control import records
from pytest_qstash.server.control.app import QStashServerApp, ServerSettings
from pytest_qstash.server.datadir import snapshot
from pytest_qstash.server.datadir.persistence import DataDir, PersistenceError

SETTINGS = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual", start="2026-01-01")
AUTH = {"Authorization": "Bearer token-1"}
APP = "https://app.example.com"
#: What is compared after a restart: every list the control API has that a request changes.
LISTS = ("messages", "dlq", "events", "schedules", "queues", "url_groups", "runs")
#: Cuts inside each line, at seeded random bytes (the same on every run).
CUTS_PER_LINE = 3


def _api(method: str, path: str, body: Any = None, **headers: str) -> httpx.Request:
    content = b"" if body is None else json.dumps(body).encode()
    return httpx.Request(
        method, f"http://127.0.0.1:1{path}", headers={**AUTH, **headers}, content=content
    )


def _control(action: str, body: dict[str, Any]) -> httpx.Request:
    return httpx.Request("POST", f"http://127.0.0.1:1/_qstash/{action}", headers=AUTH, json=body)


#: The requests a crash interrupts, in order: the QStash API (what the SDK sends for
#: ``message.publish_json``, ``enqueue_json``, ``schedule.create``, ``url_group.upsert_endpoints``,
#: ``message.cancel``, ``queue.upsert``) and control calls that move the clock. Nothing falls
#: due: no delivery is made, so the state is exactly what the requests made.
REQUESTS: list[tuple[str, Callable[[], httpx.Request]]] = [
    ("api", lambda: _api("POST", f"/v2/publish/{APP}/a", {"n": 1}, **{"Upstash-Delay": "2d"})),
    ("api", lambda: _api("POST", "/v2/queues/", {"queueName": "orders", "parallelism": 2})),
    (
        "api",
        lambda: _api("POST", f"/v2/enqueue/orders/{APP}/b", {"n": 2}, **{"Upstash-Delay": "3d"}),
    ),
    (
        "api",
        lambda: _api(
            "POST", f"/v2/schedules/{APP}/cron", {"n": 3}, **{"Upstash-Cron": "0 0 1 1 *"}
        ),
    ),
    (
        "api",
        lambda: _api("POST", "/v2/topics/team/endpoints", {"endpoints": [{"url": f"{APP}/t"}]}),
    ),
    ("control", lambda: _control("advance", {"by": "1h"})),
    ("api", lambda: _api("POST", f"/v2/publish/{APP}/c", "x" * 300, **{"Upstash-Delay": "5d"})),
    ("api", lambda: _api("POST", f"/v2/publish/{APP}/d", {"n": 4}, **{"Upstash-Delay": "6d"})),
    ("cancel", lambda: _api("DELETE", "/v2/messages/{first}")),
    ("control", lambda: _control("advance", {"by": "2h"})),
    (
        "api",
        lambda: _api(
            "POST",
            f"/v2/publish/{APP}/e",
            {"n": 5},
            **{"Upstash-Delay": "7d", "Upstash-Deduplication-Id": "once"},
        ),
    ),
]


def state(app: QStashServerApp) -> dict[str, Any]:
    """The server's state as its control API lists it, and its clock."""
    out: dict[str, Any] = {"now": records.iso_time(app.fake.now)}
    for name in LISTS:
        render = records.MODELS[name].render
        out[name] = [render(item) for item in getattr(app.fake, name)]
    return out


def _journal(data_dir: Path) -> Path:
    [path] = data_dir.glob("journal-*.jsonl")
    return path


class Recorded:
    """The crashed server's data dir, copied as ``kill -9`` left it, the journal's size after
    each acknowledged request, and the state each request left."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        #: (journal size, state) before any request, then after each one.
        self.marks: list[tuple[int, dict[str, Any]]] = []
        #: The snapshot a clean stop then wrote over it: what a crash cuts mid-write.
        self.final_snapshot = b""


def record(tmp_path: Path) -> Recorded:
    crashed = Recorded(tmp_path / "crashed")

    async def run() -> None:
        live = tmp_path / "live"
        app = QStashServerApp(SETTINGS, DataDir(live))
        app.startup()
        app.persistence.started(app)  # nothing awaited below: no snapshot besides the first
        size = _journal(live).stat().st_size
        crashed.marks.append((size, state(app)))
        first = ""
        for kind, make in REQUESTS:
            request = make()
            if kind == "control":
                answer = await app.control(request, request.url.path.rsplit("/", 1)[1])
            else:
                if kind == "cancel":
                    request = _api("DELETE", f"/v2/messages/{first}")
                answer = app.api(request)
            assert answer.status_code < 300, answer.content  # acknowledged
            first = first or json.loads(answer.content).get("messageId", "")
            crashed.marks.append((_journal(live).stat().st_size, state(app)))
        shutil.copytree(live, crashed.directory, ignore=shutil.ignore_patterns("lock"))
        await app.shutdown()  # a clean stop: the snapshot that covers everything
        crashed.final_snapshot = (live / snapshot.NAME).read_bytes()

    asyncio.run(run())
    return crashed


def restart(data_dir: Path) -> dict[str, Any]:
    """A server started on ``data_dir``: its state (``PersistenceError`` when refused)."""

    async def run() -> dict[str, Any]:
        app = QStashServerApp(SETTINGS, DataDir(data_dir))
        app.startup()
        try:
            app.persistence.started(app)
            return state(app)
        finally:
            await app.shutdown()

    return asyncio.run(run())


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return record(tmp_path_factory.mktemp("crash"))


def _copy_cut(crashed: Recorded, to: Path, cut: int) -> Path:
    shutil.copytree(crashed.directory, to)
    path = _journal(to)
    path.write_bytes(path.read_bytes()[:cut])
    return to


def _cuts(crashed: Recorded) -> list[int]:
    """Every line boundary of the journal (the first line, its header, included) and
    ``CUTS_PER_LINE`` seeded random bytes inside each line."""
    data = _journal(crashed.directory).read_bytes()
    ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    chosen = random.Random(32)
    cuts = {0, *ends}
    for start, end in zip([0, *ends], ends, strict=False):
        cuts.update(chosen.randrange(start + 1, end) for _ in range(CUTS_PER_LINE))
    return sorted(cuts)


def test_the_requests_were_journaled_one_line_each(crashed: Recorded) -> None:
    sizes = [size for size, _ in crashed.marks]
    data = _journal(crashed.directory).read_bytes()
    assert len(crashed.marks) == len(REQUESTS) + 1
    assert sizes == sorted(set(sizes))  # each acknowledged request wrote before its answer
    assert data.count(b"\n") == len(REQUESTS) + 1  # the header, then one line per request
    assert sizes[-1] == len(data)
    assert len(crashed.marks[-1][1]["messages"]) == 5  # what the cuts below must keep


def test_a_journal_cut_anywhere_keeps_every_request_acknowledged_before_the_cut(
    crashed: Recorded, tmp_path: Path
) -> None:
    cuts = _cuts(crashed)
    assert len(cuts) > (len(REQUESTS) + 1) * (CUTS_PER_LINE + 1) // 2  # lines and inside them
    for cut in cuts:
        # The requests whose line is whole before the cut: those acknowledged before it.
        # (A cut inside the header line: none was, as after the header.)
        acknowledged = max(
            (i for i, (size, _) in enumerate(crashed.marks) if size <= cut), default=0
        )
        restored = restart(_copy_cut(crashed, tmp_path / f"cut-{cut}", cut))
        assert restored == crashed.marks[acknowledged][1], f"journal cut at byte {cut}"


def test_a_snapshot_cut_mid_write_leaves_the_one_before_it(
    crashed: Recorded, tmp_path: Path
) -> None:
    """The snapshot is written to a temporary file, then renamed: a crash mid-write leaves
    part of the new one beside the old one, and the old one with the journal is the state."""
    new = crashed.final_snapshot
    every = crashed.marks[-1][1]
    chosen = random.Random(6)
    for cut in sorted({0, 100, len(new) // 2, len(new) - 1, *chosen.sample(range(len(new)), 5)}):
        data_dir = tmp_path / f"tmp-{cut}"
        shutil.copytree(crashed.directory, data_dir)
        (data_dir / f"{snapshot.NAME}.tmp").write_bytes(new[:cut])
        assert restart(data_dir) == every, f"snapshot cut at byte {cut} of {len(new)}"


def test_a_torn_snapshot_loads_or_is_refused_with_one_sentence(
    crashed: Recorded, tmp_path: Path
) -> None:
    """A snapshot file itself cut short (a copy of a data dir taken mid-write, a disk that
    lost its tail): the server refuses it in one sentence naming it and saying what to do,
    never with a traceback of its own, and never starts on part of a state."""
    new = crashed.final_snapshot
    every = crashed.marks[-1][1]
    page = 4096
    cuts = sorted({0, 1, 99, 100, *range(page, len(new), page), len(new) - 1, len(new)})
    refused = loaded = 0
    for cut in cuts:
        data_dir = tmp_path / f"torn-{cut}"
        data_dir.mkdir(mode=0o700)
        path = data_dir / snapshot.NAME
        path.write_bytes(new[:cut])
        path.chmod(0o600)
        try:
            restored = restart(data_dir)
        except PersistenceError as exc:
            refused += 1
            message = str(exc)
            assert "\n" not in message, message
            assert str(data_dir) in message, message
            assert "delete" in message or "another --data-dir" in message, message
            continue
        loaded += 1
        # Only the whole file loads (sqlite finds a page missing, or a cell's JSON cut):
        # never a part of the state.
        assert cut == len(new), f"a snapshot cut at byte {cut} of {len(new)} loaded"
        assert restored == every
    assert refused == len(cuts) - 1
    assert loaded == 1
