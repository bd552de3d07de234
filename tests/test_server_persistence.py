"""``serve --data-dir DIR``: the state survives a stop, a ``kill -9`` under load, and a clock
that ran on while the server was down. Real server processes on loopback, the real ``qstash``
SDK as the client, an HTTP endpoint in this process receiving the deliveries."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import json
import logging
import os
import pickle
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from qstash import QStash
from qstash.message import FlowControl

from pytest_qstash.engine.ids import IdGenerator
from pytest_qstash.server import Client, ServerProcess
from pytest_qstash.server.control.app import QStashServerApp, ServerSettings
from pytest_qstash.server.datadir import codec as codec
from pytest_qstash.server.datadir import journal, persistence, snapshot
from pytest_qstash.server.datadir.persistence import DataDir, PersistenceError

#: What the control API lists, and the QStash API's flow-control keys: the state compared.
LISTS = ("messages", "deliveries", "dlq", "events", "schedules", "queues", "url_groups", "runs")


class Endpoint:
    """An app's endpoint in this process: records each delivery's message id and path;
    ``/fail`` answers 500."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str]] = []
        #: Each delivery's body, by message id.
        self.bodies: dict[str, bytes] = {}
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with endpoint._lock:
                    endpoint.received.append((self.headers["upstash-message-id"], self.path))
                    endpoint.bodies[self.headers["upstash-message-id"]] = body
                # ``/echo-fail`` answers 500 with the body it got.
                answer = body if self.path == "/echo-fail" else b""
                self.send_response(500 if self.path in ("/fail", "/echo-fail") else 200)
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def ids(self, path: str) -> set[str]:
        """The message ids delivered to ``path`` (each test has its own: ids are seeded)."""
        with self._lock:
            return {message_id for message_id, to in self.received if to == path}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[Endpoint]:
    started = Endpoint()
    yield started
    started.close()


def serve(
    data_dir: Path, *, clock: str = "virtual", port: int = 0, start: str | None = None
) -> ServerProcess:
    args = ["--data-dir", str(data_dir)]
    return ServerProcess.start(clock=clock, port=port, start=start, args=args)


def restart(data_dir: Path, port: int) -> ServerProcess:
    """On the port it had (the load's clients reconnect), or another if that was taken."""
    try:
        return serve(data_dir, port=port)
    except RuntimeError:
        return serve(data_dir)


def kill(server: ServerProcess) -> None:
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=10)
    server.stop()


def status_line(server: ServerProcess) -> str:
    """What the server says once it serves (on stderr, after its four lines on stdout)."""
    deadline = time.monotonic() + 10
    while "Ctrl-C stops it" not in server.output and time.monotonic() < deadline:
        time.sleep(0.01)
    return server.output


def newest_journal(data_dir: Path) -> int:
    """The generation of the journal taking entries now (the newest one)."""
    return max(int(p.name.split("-")[1].split(".")[0]) for p in data_dir.glob("journal-*.jsonl"))


def snapshot_covers(data_dir: Path, generation: int) -> bool:
    """Whether the snapshot in place has taken in the journals up to ``generation`` (a
    running server holds its journals exclusively: they are not read here)."""
    covered = json.loads(saved(data_dir, "SELECT value FROM meta WHERE key = 'journal'")[0])
    return bool(covered >= generation)


def saved(data_dir: Path, query: str = "") -> list[Any]:
    """The snapshot's cells ``query`` selects; by default every cell of every table."""
    db = sqlite3.connect(f"file:{data_dir / 'snapshot.sqlite'}?mode=ro", uri=True)
    try:
        if query:
            return [cell for row in db.execute(query) for cell in row]
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [
            cell
            for table in tables
            for row in db.execute(f'SELECT * FROM "{table}"')
            for cell in row
        ]
    finally:
        db.close()


def everything(server: ServerProcess) -> dict[str, Any]:
    """The server's whole visible state, as JSON."""
    auth = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=auth, timeout=10) as http:
        state = {name: http.get(f"/_qstash/{name}").json() for name in LISTS}
        state["state"] = http.get("/_qstash/state").json()
        state["flow_control"] = http.get("/v2/flowControl").json()
    return state


def listed(server: ServerProcess) -> dict[str, Any]:
    """What the control API lists (reads that change nothing: no QStash API call, which the
    API-call log would keep)."""
    auth = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=auth, timeout=10) as http:
        return {name: http.get(f"/_qstash/{name}").json() for name in LISTS}


def test_a_restart_keeps_the_state(tmp_path: Path, endpoint: Endpoint) -> None:
    server = serve(tmp_path, start="2026-06-01T00:00:00Z")  # far from the crons' firings
    try:
        token = server.token
        assert f"state kept in {tmp_path} (new)" in status_line(server)
        sdk = QStash(token, base_url=server.url, retry=False)
        later = sdk.message.publish_json(url=f"{endpoint.url}/later", body={"n": 1}, delay="1h")
        later_due = sdk.message.get(later.message_id).not_before  # type: ignore[union-attr]
        sdk.schedule.create(destination=f"{endpoint.url}/cron", cron="0 0 1 1 *")
        sdk.queue.upsert("emails", parallelism=2)
        sdk.url_group.upsert_endpoints(url_group="team", endpoints=[{"url": f"{endpoint.url}/a"}])
        sdk.message.publish_json(
            url=f"{endpoint.url}/flow",
            body={},
            delay="2h",
            flow_control=FlowControl(key="tenant-1", parallelism=1),
        )
        failed = sdk.message.publish_json(url=f"{endpoint.url}/fail", body={}, retries=0)
        [attempt] = server.tick()
        assert attempt.status == 500
        server.trigger(f"{endpoint.url}/workflow", {"order": 7})
        keys = sdk.signing_key.rotate()
        server.advance("5m")  # the workflow's first step is delivered on the way
        before = everything(server)
        assert [e["message_id"] for e in before["dlq"]] == [failed.message_id]  # type: ignore[union-attr]
        assert len(before["runs"]) == 1
        assert len(before["schedules"]) == 1
        server.stop()  # a clean stop: the last snapshot

        server = serve(tmp_path)
        assert server.token == token
        assert server.env["QSTASH_CURRENT_SIGNING_KEY"] == keys.current  # the rotated ones
        assert server.env["QSTASH_NEXT_SIGNING_KEY"] == keys.next
        restored = "restored: 4 messages, 1 schedule, 1 DLQ entry, 1 workflow run"
        assert restored in status_line(server)
        assert everything(server) == before
        sdk = QStash(token, base_url=server.url, retry=False)  # and as the SDK reads it
        assert sdk.message.get(later.message_id).not_before == later_due  # type: ignore[union-attr]
        assert [s.cron for s in sdk.schedule.list()] == ["0 0 1 1 *"]
        assert sdk.queue.get("emails").parallelism == 2
        assert [e.url for e in sdk.url_group.get("team").endpoints] == [f"{endpoint.url}/a"]
        assert [m.message_id for m in sdk.dlq.list().messages] == [failed.message_id]  # type: ignore[union-attr]

        # Changes after the restart: the last ones (if not all) in the journal only, which
        # the restart after a kill -9 replays.
        sdk.message.cancel(later.message_id)  # type: ignore[union-attr]
        sdk.schedule.create(destination=f"{endpoint.url}/cron2", cron="0 0 1 2 *")
        sdk.queue.upsert("emails", parallelism=3)
        sdk.dlq.delete(before["dlq"][0]["dlq_id"])
        server.advance("1m")  # nothing due: the clock alone moves
        again = sdk.message.publish_json(url=f"{endpoint.url}/again", body={"n": 2}, delay="1d")
        before = everything(server)
        kill(server)

        server = serve(tmp_path)
        assert " replayed)" in status_line(server)
        assert everything(server) == before
        sdk = QStash(token, base_url=server.url, retry=False)
        assert sdk.message.get(again.message_id).body == '{"n": 2}'  # type: ignore[union-attr]

        # A reset forgets on disk too: what is left after a clean stop holds no old id.
        server.reset()
        server.stop()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["lock", "snapshot.sqlite"]
        cells = "\n".join(str(cell) for cell in saved(tmp_path))
        assert token in cells
        assert again.message_id not in cells  # type: ignore[union-attr]
        assert before["messages"][0]["message_id"] not in cells
    finally:
        server.stop()


#: Every byte, once: a body that is not UTF-8.
BINARY = bytes(range(256))


def test_a_binary_body_comes_back_byte_exact_everywhere(tmp_path: Path, endpoint: Endpoint) -> None:
    """Published over the server by the SDK: the delivered request, the control API's records
    (``Client``), the DLQ's response body, and after a clean restart (the snapshot) and a
    kill -9 (the journal), all hold the very bytes."""
    server = serve(tmp_path)
    try:
        sdk = QStash(server.token, base_url=server.url, retry=False)
        sent = sdk.message.publish(url=f"{endpoint.url}/echo-fail", body=BINARY, retries=0)  # type: ignore[arg-type]
        message_id = sent.message_id  # type: ignore[union-attr]
        [delivery] = server.tick()
        assert endpoint.bodies[message_id] == BINARY
        assert delivery.content == BINARY
        assert delivery.response_content == BINARY
        client = Client(server.url, server.token)
        assert client.messages.one(message_id=message_id).content == BINARY
        [entry] = client.dlq
        assert entry.message.content == BINARY
        assert entry.response_content == BINARY
        # The JSON keeps its text for readers that know only it, and says the bytes beside.
        auth = {"Authorization": f"Bearer {server.token}"}
        [item] = httpx.get(f"{server.url}/_qstash/messages", headers=auth).json()
        assert item["body"] == BINARY.decode(errors="replace")
        assert base64.b64decode(item["body_base64"]) == BINARY
        server.stop()

        server = serve(tmp_path)
        assert server.messages.one(message_id=message_id).content == BINARY
        assert server.dlq.one().response_content == BINARY
        sdk = QStash(server.token, base_url=server.url, retry=False)
        published = sdk.message.publish(url=f"{endpoint.url}/later", body=BINARY[::-1], delay="1d")  # type: ignore[arg-type]
        later = published.message_id  # type: ignore[union-attr]
        kill(server)

        server = serve(tmp_path)
        assert " replayed)" in status_line(server)
        assert server.messages.one(message_id=later).content == BINARY[::-1]
        [delivery] = server.advance("1d")
        assert delivery.content == endpoint.bodies[later] == BINARY[::-1]
    finally:
        server.stop()


def test_a_server_only_read_stops_without_writing_its_state_again(
    tmp_path: Path, endpoint: Endpoint
) -> None:
    """A clean stop writes the last snapshot only when something changed since the one on
    disk: a large state that was restarted and read stops at once, and is still whole."""
    server = serve(tmp_path)
    try:
        sdk = QStash(server.token, base_url=server.url, retry=False)
        kept = sdk.message.publish_json(url=f"{endpoint.url}/later", body={"n": 1}, delay="1d")
        server.stop()
        snapshot = tmp_path / "snapshot.sqlite"
        written = snapshot.stat()

        server = serve(tmp_path)  # read through the control API (no QStash API call)
        before = listed(server)
        server.stop()
        unchanged = snapshot.stat()
        assert (unchanged.st_ino, unchanged.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["lock", "snapshot.sqlite"]

        server = serve(tmp_path)  # changed: the stop writes it
        assert listed(server) == before
        sdk = QStash(server.token, base_url=server.url, retry=False)
        sdk.message.cancel(kept.message_id)  # type: ignore[union-attr]
        server.stop()
        assert snapshot.stat().st_ino != written.st_ino
        server = serve(tmp_path)
        assert [m.state for m in server.messages] == ["CANCELED"]
    finally:
        server.stop()


def test_kill_9_under_load_loses_nothing_acknowledged(tmp_path: Path, endpoint: Endpoint) -> None:
    """Publishers and a ticker run while the server is killed twice: every message a
    publish was answered 200 for is there after the restarts, with its body under its id,
    and is delivered (at least once: what was delivered after the last snapshot again).
    A third kill, once a snapshot has taken in the deliveries, redelivers none of them."""
    server = serve(tmp_path)
    port = int(server.url.rsplit(":", 1)[1])
    acked: dict[str, int] = {}
    stop = threading.Event()

    def publish(first: int) -> None:
        sdk = QStash(server.token, base_url=server.url, retry=False)
        i = first
        while not stop.is_set():
            try:
                result = sdk.message.publish_json(url=f"{endpoint.url}/load", body={"i": i})
            except Exception:  # the server is down: try again, where it is now
                time.sleep(0.05)
                sdk = QStash(server.token, base_url=server.url, retry=False)
                continue
            acked[result.message_id] = i  # type: ignore[union-attr]
            i += 1

    def tick() -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {server.token}"}) as http:
            while not stop.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    http.post(f"{server.url}/_qstash/tick", timeout=10)
                time.sleep(0.02)

    load = [threading.Thread(target=publish, args=(n * 1_000_000,)) for n in range(2)]
    load.append(threading.Thread(target=tick))
    for thread in load:
        thread.start()
    try:
        for _ in range(2):
            wanted, deadline = len(acked) + 25, time.monotonic() + 20
            while len(acked) < wanted and time.monotonic() < deadline:
                time.sleep(0.01)
            kill(server)
            server = restart(tmp_path, port)
        wanted, deadline = len(acked) + 20, time.monotonic() + 20
        while len(acked) < wanted and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in load:
            thread.join(timeout=20)
    try:
        assert len(acked) >= 70
        server.drain()
        stored = {m.message_id: m for m in server.messages}
        lost = sorted(set(acked) - set(stored))
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:3]}"
        assert all(stored[mid].json() == {"i": i} for mid, i in acked.items())
        assert all(stored[mid].state == "DELIVERED" for mid in acked)
        assert set(acked) <= endpoint.ids("/load")

        # The snapshots taken while serving bound what a crash redelivers: once one has
        # caught up with the deliveries, a kill -9 makes none of them again.
        delivered = len(server.deliveries)
        drained = newest_journal(tmp_path)  # the drain is journaled there
        deadline = time.monotonic() + 10
        while not snapshot_covers(tmp_path, drained) and time.monotonic() < deadline:
            time.sleep(0.05)  # until a snapshot takes it in
        kill(server)
        server = restart(tmp_path, port)
        assert "0 journal entries replayed" in status_line(server)
        assert server.tick() == []
        assert len(server.deliveries) == delivered
    finally:
        server.stop()


def test_on_a_real_clock_what_fell_due_while_down_goes_out_at_start(
    tmp_path: Path, endpoint: Endpoint
) -> None:
    server = serve(tmp_path, clock="real")
    try:
        sdk = QStash(server.token, base_url=server.url, retry=False)
        result = sdk.message.publish_json(url=f"{endpoint.url}/late", body={}, delay=1)
        message_id = result.message_id  # type: ignore[union-attr]
        due = server.messages.one(message_id=message_id).not_before
        server.stop()
        while time.time() < due.timestamp() + 0.2:
            time.sleep(0.05)
        assert message_id not in endpoint.ids("/late")

        restarted = time.time()
        server = serve(tmp_path, clock="real")
        deadline = time.time() + 10
        while message_id not in endpoint.ids("/late") and time.time() < deadline:
            time.sleep(0.02)
        [delivery] = server.deliveries.filter(message_id=message_id)
        assert delivery.status == 200
        assert delivery.at.timestamp() >= restarted > due.timestamp()  # late: once it started
    finally:
        server.stop()


def test_the_status_line_says_where_the_state_lives(qstash_server: ServerProcess) -> None:
    assert "state in memory, lost when the server stops" in status_line(qstash_server)


def test_a_data_dir_of_another_clock_or_version_is_refused(tmp_path: Path) -> None:
    settings = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual")

    async def write_one() -> None:
        app = QStashServerApp(settings, DataDir(tmp_path))
        app.startup()
        app.persistence.started(app)
        await app.shutdown()

    asyncio.run(write_one())

    with pytest.raises(PersistenceError, match="on a virtual clock: start it with --clock virtual"):
        QStashServerApp(ServerSettings("t", "k1", "k2", clock="real"), DataDir(tmp_path))
    token_given = DataDir(tmp_path, frozenset({"token"}))
    with pytest.raises(PersistenceError, match="another token than the one given"):
        QStashServerApp(ServerSettings("t", "k1", "k2", clock="virtual"), token_given)

    db = sqlite3.connect(tmp_path / "snapshot.sqlite")
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(persistence.SCHEMA + 1),))
    db.execute("UPDATE meta SET value = '\"9.9.9\"' WHERE key = 'version'")
    db.commit()
    db.close()
    command = [sys.executable, "-m", "pytest_qstash", "serve", "--clock=virtual", "--port=0"]
    done = subprocess.run(
        [*command, "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    newer = f"written by pytest-qstash 9.9.9 (data-dir schema {persistence.SCHEMA + 1})"
    assert newer in done.stderr
    assert f"(schema {persistence.SCHEMA}), which cannot read a newer schema" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_torn_journal_tail_loses_only_the_entry_it_tore(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What ``kill -9`` in the middle of a journal write leaves: its last line cut short.
    The journal is copied while the server still has it open (as a killed server leaves
    it), its tail torn, and a server started on the copy: the entries before it are
    replayed, and the log says one was dropped."""
    settings = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual", start="2026-01-01")
    auth = {"Authorization": "Bearer token-1"}

    def publish(app: QStashServerApp, n: int) -> str:
        request = httpx.Request(
            "POST",
            f"http://127.0.0.1:1/v2/publish/https://example.com/{n}",
            headers=auth,
            content=b"{}",
        )
        return str(json.loads(app.api(request).content)["messageId"])

    async def crash_copy() -> list[str]:
        app = QStashServerApp(settings, DataDir(tmp_path / "a"))
        app.startup()
        app.persistence.started(app)  # nothing awaited below: no snapshot is taken
        ids = [publish(app, n) for n in range(5)]
        shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns("lock"))
        await app.shutdown()
        return ids

    ids = asyncio.run(crash_copy())
    [journal] = (tmp_path / "b").glob("journal-*.jsonl")
    journal.write_bytes(journal.read_bytes()[:-7])

    async def restart() -> list[str]:
        app = QStashServerApp(settings, DataDir(tmp_path / "b"))
        app.startup()
        app.persistence.started(app)
        restored = list(app.fake.store.messages)
        await app.shutdown()
        return restored

    with caplog.at_level(logging.WARNING, logger="pytest_qstash.server"):
        assert asyncio.run(restart()) == ids[:-1]
    assert "its last entry was cut short by a crash" in caplog.text


#: The journal table pytest-qstash wrote before its journals were JSON lines.
_SQLITE_JOURNAL = """
CREATE TABLE journal (
    seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, method TEXT NOT NULL, target TEXT NOT NULL,
    headers BLOB NOT NULL, body BLOB NOT NULL, at_ms INTEGER NOT NULL, drawn INTEGER NOT NULL
)
"""


def test_a_journal_an_earlier_version_wrote_in_sqlite_is_replayed(tmp_path: Path) -> None:
    """An upgrade after a ``kill -9``: the journal the earlier version left (a sqlite table)
    is replayed as its own would be, then retired once a snapshot covers it."""
    settings = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual", start="2026-01-01")
    auth = {"Authorization": "Bearer token-1", "Upstash-Delay": "1h"}

    async def crash_copy() -> list[str]:
        app = QStashServerApp(settings, DataDir(tmp_path / "a"))
        app.startup()
        app.persistence.started(app)
        ids = []
        for n in range(3):
            request = httpx.Request(
                "POST", f"http://127.0.0.1:1/v2/publish/https://example.com/{n}", headers=auth
            )
            ids.append(json.loads(app.api(request).content)["messageId"])
        shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns("lock"))
        await app.shutdown()
        return ids

    ids = asyncio.run(crash_copy())
    [new] = (tmp_path / "b").glob("journal-*.jsonl")
    entries = [json.loads(line) for line in new.read_bytes().splitlines()[1:]]
    assert len(entries) == 3
    old = new.with_suffix(".sqlite")
    db = sqlite3.connect(old)
    db.execute(_SQLITE_JOURNAL)
    db.executemany(
        "INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                e["seq"],
                e["kind"],
                e["method"],
                e["target"],
                e["headers"].encode("latin-1"),
                base64.b64decode(e["body"]),
                e["at_ms"],
                e["drawn"],
            )
            for e in entries
        ],
    )
    db.commit()
    db.close()
    new.unlink()

    async def restart() -> tuple[list[str], str]:
        app = QStashServerApp(settings, DataDir(tmp_path / "b"))
        app.startup()
        app.persistence.started(app)
        restored = list(app.fake.store.messages), app.persistence.describe(app)
        await app.shutdown()  # a clean stop: its snapshot covers the old journal
        return restored

    restored, described = asyncio.run(restart())
    assert restored == ids
    assert "3 journal entries replayed" in described
    assert not list((tmp_path / "b").glob("journal-*.sqlite*"))


def test_a_journal_of_a_newer_format_is_refused_naming_both_versions(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    data_dir.mkdir(mode=0o700)
    newer = data_dir / "journal-00000007.jsonl"
    newer.write_bytes(b'{"journal": 99, "version": "9.9.9"}\n{"seq": 1}\n')
    newer.chmod(0o600)
    with pytest.raises(PersistenceError) as refused:
        DataDir(data_dir)
    message = str(refused.value)
    assert "pytest-qstash 9.9.9 in journal format 99" in message
    assert f"reads format {journal.FORMAT} and older" in message
    assert newer.read_bytes().startswith(b'{"journal": 99')  # left as it was
    with pytest.raises(PersistenceError, match="journal format 99"):
        DataDir(data_dir)  # the same answer again: the refused start let go of its lock


def test_a_file_that_is_no_journal_is_said_and_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file named like a journal that another program wrote: the server starts from its
    snapshot, and the log names the file and says its entries are lost."""
    settings = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual", start="2026-01-01")

    async def start() -> int:
        app = QStashServerApp(settings, DataDir(tmp_path))
        app.startup()
        app.persistence.started(app)
        held = len(app.fake.store.messages)
        await app.shutdown()
        return held

    asyncio.run(start())  # a data dir with its first snapshot
    stranger = tmp_path / "journal-00000099.jsonl"
    stranger.write_bytes(b"not json at all\n{}\n")
    with caplog.at_level(logging.ERROR, logger="pytest_qstash.server"):
        assert asyncio.run(start()) == 0
    assert "journal-00000099.jsonl cannot be read" in caplog.text
    assert "it is no pytest-qstash journal" in caplog.text


def test_a_journal_write_cut_short_is_taken_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write the disk cuts short (full) raises and leaves the journal whole lines: the
    entries before and after it are read back, nothing torn or skipped."""
    path = tmp_path / "journal-00000001.jsonl"
    file = journal.JournalFile(path, "test")
    file.append(journal.Entry(1, "api", "POST", "https://a.test/1", b"A: b", b"one", 5, 0))
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        real_write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal.os, "write", half_then_full)
    with pytest.raises(OSError, match="No space left"):
        file.append(journal.Entry(2, "api", "POST", "https://a.test/2", b"", b"two", 6, 1))
    monkeypatch.setattr(journal.os, "write", real_write)
    file.append(journal.Entry(3, "api", "POST", "https://a.test/3", b"", b"\x00\xff", 7, 2))
    file.close()
    found = journal.read(path)
    assert [(e.seq, e.body, e.headers) for e in found.entries] == [
        (1, b"one", b"A: b"),
        (3, b"\x00\xff", b""),
    ]
    assert (found.skipped, found.torn) == (0, False)
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_ids_come_out_the_same_though_deliveries_are_not_replayed(tmp_path: Path) -> None:
    """A delivery draws an id (its signature's JWT id) and is not journaled: the replay puts
    the id generator where it was before each request, so the publish after it gets the id
    its client was answered with."""
    settings = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual", start="2026-01-01")
    auth = {"Authorization": "Bearer token-1"}
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{unused.getsockname()[1]}"  # refused once closed

    def publish(app: QStashServerApp, path: str) -> str:
        request = httpx.Request(
            "POST", f"http://127.0.0.1:1/v2/publish/{nowhere}/{path}", headers=auth, content=b"{}"
        )
        return str(json.loads(app.api(request).content)["messageId"])

    async def crash_copy() -> list[str]:
        app = QStashServerApp(settings, DataDir(tmp_path / "a"))
        app.startup()
        app.persistence.started(app)
        ids = [publish(app, "first")]
        tick = httpx.Request("POST", "http://127.0.0.1:1/_qstash/tick", headers=auth)
        answer = await app.control(tick, "tick")
        assert [d["error"] is not None for d in json.loads(answer.content)["deliveries"]] == [True]
        ids.append(publish(app, "second"))
        shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns("lock"))
        await app.shutdown()
        return ids

    ids = asyncio.run(crash_copy())

    async def restart() -> dict[str, str]:
        app = QStashServerApp(settings, DataDir(tmp_path / "b"))
        app.startup()
        app.persistence.started(app)
        restored = {m.message_id: m.url.rsplit("/", 1)[1] for m in app.fake.messages}
        await app.shutdown()
        return restored

    assert asyncio.run(restart()) == {ids[0]: "first", ids[1]: "second"}


def test_the_replay_moves_the_id_generator_both_ways(tmp_path: Path) -> None:
    made = IdGenerator(7)
    expected = [made.message_id(), made.jwt_id(), made.token(21), made.message_id()]
    skipped = IdGenerator(7)
    skipped.skip(made.drawn - 40)  # where the last message id began
    assert skipped.message_id() == expected[-1]

    data_dir = DataDir(tmp_path)
    ids = IdGenerator(7)
    data_dir._move_ids(ids, 0)  # first seen: where a rewind starts over from
    [ids.message_id() for _ in range(3)]
    data_dir._move_ids(ids, 40)  # a replayed request drew more than it first did: back
    assert ids.jwt_id() == expected[1]
    data_dir._move_ids(ids, made.drawn - 40)  # a delivery drew in between: forward
    assert ids.message_id() == expected[-1]


def test_without_fork_a_thread_writes_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where there is no fork (Windows), the state is encoded on the event loop and a thread
    writes it; the journal it covers goes."""
    monkeypatch.setattr(persistence, "FORK", False)
    monkeypatch.setattr(persistence, "SNAPSHOT_EVERY_S", 0.0)  # one is due at once
    settings = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual", start="2026-01-01")
    auth = {"Authorization": "Bearer token-1"}

    async def serve_and_snapshot() -> list[str]:
        app = QStashServerApp(settings, DataDir(tmp_path / "a"))
        app.startup()
        app.persistence.started(app)
        for n in range(3):
            request = httpx.Request(
                "POST", f"http://127.0.0.1:1/v2/publish/https://example.com/{n}", headers=auth
            )
            app.api(request)
        data_dir = app.persistence
        assert isinstance(data_dir, DataDir)
        # The next snapshot waits at least as long as the last one took: on a loaded machine
        # the first one (at start) can take longer than this test's steps, so it is due now.
        data_dir._took = data_dir._last_taken = 0.0
        data_dir._step(app)
        assert data_dir._retiring is not None
        data_dir._retiring.join(timeout=30)
        shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns("lock"))
        await app.shutdown()
        return list(app.fake.store.messages)

    ids = asyncio.run(serve_and_snapshot())
    assert len(list((tmp_path / "b").glob("journal-*.jsonl"))) == 1  # the one opened after

    async def restart() -> tuple[list[str], str]:
        app = QStashServerApp(settings, DataDir(tmp_path / "b"))
        app.startup()
        app.persistence.started(app)
        restored = list(app.fake.store.messages), app.persistence.describe(app)
        await app.shutdown()
        return restored

    restored, described = asyncio.run(restart())
    assert restored == ids
    assert "3 messages" in described
    assert "0 journal entries replayed" in described


def test_a_load_pauses_the_collector_and_gives_it_back_as_it_was() -> None:
    """Reading and building a state allocates objects that all stay: the cyclic collector
    is paused meanwhile (each collection would walk all that was built so far), then left as
    it was found."""
    assert gc.isenabled()
    with persistence._collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with persistence._collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_reset_gives_what_serve_froze_back_to_the_collector(tmp_path: Path) -> None:
    """``serve`` freezes what it loaded (the restored state lives until a reset); a reset
    unfreezes it, so that the state it forgot, whose objects refer to each other, is freed."""
    data_dir = DataDir(tmp_path)
    try:
        gc.freeze()
        assert gc.get_freeze_count() > 0
        data_dir.reset()
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        persistence._unlock(data_dir._lock)


def test_the_first_snapshot_after_a_replay_waits_for_the_first_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart that replayed a journal takes its first snapshot later than the ordinary
    second: RESTART_SNAPSHOT_WAIT times as long as the load took (the journals keep what the
    old snapshot lacks meanwhile). A restart with nothing to replay takes none at all."""
    monkeypatch.setattr(persistence, "FORK", False)
    monkeypatch.setattr(persistence, "SNAPSHOT_EVERY_S", 0.0)
    monkeypatch.setattr(persistence, "RESTART_SNAPSHOT_WAIT", 1e6)
    settings = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual", start="2026-01-01")
    auth = {"Authorization": "Bearer token-1"}

    async def publish_then_crash() -> None:
        app = QStashServerApp(settings, DataDir(tmp_path / "a"))
        app.startup()
        app.persistence.started(app)
        request = httpx.Request("POST", "http://127.0.0.1:1/v2/publish/https://example.com/x")
        request.headers.update(auth)
        app.api(request)  # journaled, in no snapshot
        shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns("lock"))
        await app.shutdown()

    asyncio.run(publish_then_crash())

    async def restart() -> tuple[float, str, int]:
        data_dir = DataDir(tmp_path / "b")
        app = QStashServerApp(settings, data_dir)
        app.startup()
        data_dir.started(app)
        waits = data_dir._last_taken - time.monotonic()
        data_dir._step(app)  # not yet, though snapshots may otherwise be taken at once
        journals = len(list((tmp_path / "b").glob("journal-*.jsonl")))
        described = data_dir.describe(app)
        await app.shutdown()
        return waits, described, journals

    waits, described, journals = asyncio.run(restart())
    assert "1 journal entry replayed" in described
    assert waits > 1.0
    assert journals == 2  # the replayed one, kept, and the new one


# -- plain data: the same command line, retry delays, upgrades, privacy, hostile cells --------
def _state_of(server: ServerProcess) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {server.token}"}
    return dict(httpx.get(f"{server.url}/_qstash/state", headers=auth, timeout=10).json())


def _wait_for_snapshot(server: ServerProcess, data_dir: Path) -> None:
    """Until a snapshot has taken in every request made so far."""
    generation = newest_journal(data_dir)
    deadline = time.monotonic() + 20
    while not snapshot_covers(data_dir, generation) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert snapshot_covers(data_dir, generation)
    assert _state_of(server)["data_dir"] == {"path": str(data_dir), "error": None}


@pytest.mark.parametrize("stop", ["SIGTERM", "kill -9"])
def test_the_same_command_line_restarts(tmp_path: Path, endpoint: Endpoint, stop: str) -> None:
    """``--start``, the token and the signing keys given again as they were are accepted;
    a different one is refused, naming it."""
    given = [
        "--token=token-of-the-team",
        "--current-signing-key=sig_current_one",
        "--next-signing-key=sig_next_one",
    ]
    start = "2026-03-01T00:00:00Z"

    def same() -> ServerProcess:
        return ServerProcess.start(start=start, args=["--data-dir", str(tmp_path), *given])

    server = same()
    try:
        sdk = QStash(server.token, base_url=server.url, retry=False)
        later = sdk.message.publish_json(url=f"{endpoint.url}/later", body={"n": 1}, delay="1h")
        server.advance("10m")
        before = everything(server)
        kill(server) if stop == "kill -9" else server.stop()

        server = same()
        assert "restored: 1 message" in status_line(server)
        assert everything(server) == before
        assert server.messages.one(message_id=later.message_id).json() == {"n": 1}  # type: ignore[union-attr]
        server.stop()
        if stop == "kill -9":
            return  # the refusals are the same either way

        for option, refused in [
            ("--start=2026-03-02T00:00:00Z", "whose clock goes on from where it stopped"),
            ("--token=another-token", "another token than the one given"),
            ("--next-signing-key=sig_other", "another next signing key"),
        ]:
            name = option.partition("=")[0]
            args = [a for a in given if not a.startswith(name)] + [option]
            with pytest.raises(RuntimeError, match=refused):
                ServerProcess.start(
                    start=start if name != "--start" else None,
                    args=["--data-dir", str(tmp_path), *args],
                )
        server = same()  # and the same one still starts, with everything
        assert everything(server) == before
    finally:
        server.stop()


def test_a_failed_message_with_a_retry_delay_survives_a_clean_restart(
    tmp_path: Path, endpoint: Endpoint
) -> None:
    """Its parsed expression is not saved, its text is: snapshots go on succeeding, a clean
    stop is clean, the restart delivers nothing again, and the retries keep the expression's
    schedule."""
    server = serve(tmp_path)
    try:
        sdk = QStash(server.token, base_url=server.url, retry=False)
        published = sdk.message.publish_json(
            url=f"{endpoint.url}/fail", body={}, retries=2, retry_delay="5000 * (1 + retried)"
        )
        message_id = published.message_id  # type: ignore[union-attr]
        [first] = server.tick()
        assert first.status == 500
        _wait_for_snapshot(server, tmp_path)
        server.process.terminate()
        server.process.wait(timeout=20)
        log = server.output
        assert "Traceback" not in log, log
        assert "writing the state" not in log, log  # no failed write
        assert "shutdown failed" not in log.lower(), log
        server.stop()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["lock", "snapshot.sqlite"]
        delivered = [mid for mid, path in endpoint.received if path == "/fail"]
        assert delivered.count(message_id) == 1

        server = serve(tmp_path)
        assert "0 journal entries replayed" in status_line(server)
        assert server.tick() == []  # nothing redelivered
        [retry] = server.advance("5s")
        assert retry.message_id == message_id
        assert (retry.at - first.at).total_seconds() == 5
        assert server.advance("9s") == []
        [last] = server.advance("1s")  # 10 s after the retry: 5000 * (1 + 1)
        assert (last.at - retry.at).total_seconds() == 10
        assert server.messages.one(message_id=message_id).state == "FAILED"
        assert _state_of(server)["data_dir"]["error"] is None
    finally:
        server.stop()


def test_an_upgrade_keeps_every_resource(tmp_path: Path, endpoint: Endpoint) -> None:
    """A data dir written by another version (the package version it records bumped back;
    nothing else of the code's is recorded) starts with all its state."""
    server = serve(tmp_path, start="2026-06-01T00:00:00Z")
    try:
        sdk = QStash(server.token, base_url=server.url, retry=False)
        sdk.message.publish_json(url=f"{endpoint.url}/later", body={"n": 1}, delay="3h")
        sdk.schedule.create(destination=f"{endpoint.url}/cron", cron="0 0 1 1 *")
        sdk.queue.upsert("emails", parallelism=2)
        sdk.message.enqueue_json(queue="emails", url=f"{endpoint.url}/q", body={})
        sdk.url_group.upsert_endpoints(url_group="team", endpoints=[{"url": f"{endpoint.url}/a"}])
        sdk.message.publish_json(url=f"{endpoint.url}/fail", body={}, retries=0)
        server.advance("1h")
        before = everything(server)
        assert len(before["dlq"]) == 1
        server.stop()

        db = sqlite3.connect(tmp_path / "snapshot.sqlite")
        db.execute("UPDATE meta SET value = '\"0.0.1\"' WHERE key = 'version'")
        db.commit()
        db.close()
        server = serve(tmp_path)
        assert "restored: 3 messages, 1 schedule, 1 DLQ entry" in status_line(server)
        assert everything(server) == before
        assert before["state"]["now"].startswith("2026-06-01T01:00:00")
    finally:
        server.stop()


def test_the_data_dir_and_its_files_are_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    server = serve(data_dir)
    try:
        sdk = QStash(server.token, base_url=server.url, retry=False)
        sdk.message.publish_json(url="https://example.com/x", body={}, delay="1d")
        assert oct(data_dir.stat().st_mode & 0o777) == "0o700"
        files = sorted(p.name for p in data_dir.iterdir())
        assert any(name.endswith(".jsonl") for name in files), files  # the journal, in use
        for path in data_dir.iterdir():
            assert oct(path.stat().st_mode & 0o777) == "0o600", path.name
    finally:
        server.stop()
    for path in data_dir.iterdir():
        assert oct(path.stat().st_mode & 0o777) == "0o600", path.name

    data_dir.chmod(0o777)
    with pytest.raises(RuntimeError, match="can be written by other users") as refused:
        serve(data_dir)
    assert "Traceback" not in str(refused.value)


def test_an_older_schema_is_migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A data dir of the schema before (hand-edited here: its message options name their
    label ``tag``) is brought to the current one by its migration, then written in it."""
    settings = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual", start="2026-01-01")
    auth = {"Authorization": "Bearer token-1", "Upstash-Label": "billing"}

    async def write() -> str:
        app = QStashServerApp(settings, DataDir(tmp_path))
        app.startup()
        app.persistence.started(app)
        request = httpx.Request(
            "POST", "http://127.0.0.1:1/v2/publish/https://example.com/x", headers=auth
        )
        message_id = str(json.loads(app.api(request).content)["messageId"])
        await app.shutdown()
        return message_id

    message_id = asyncio.run(write())
    db = sqlite3.connect(tmp_path / "snapshot.sqlite")
    rows = db.execute("SELECT id, fields FROM message_options").fetchall()
    assert any("label" in json.loads(text) for _, text in rows)
    for n, text in rows:
        fields = json.loads(text)
        if "label" not in fields:
            continue
        fields["tag"] = fields.pop("label")
        db.execute("UPDATE message_options SET fields = ? WHERE id = ?", (json.dumps(fields), n))
    db.commit()
    db.close()

    def rename_tag(document: dict[str, Any]) -> None:
        for fields in document["kinds"]["message_options"].values():
            if "tag" in fields:
                fields["label"] = fields.pop("tag")

    monkeypatch.setattr(codec, "SCHEMA", codec.SCHEMA + 1)
    monkeypatch.setattr(codec, "MIGRATIONS", {codec.SCHEMA - 1: rename_tag})

    async def read() -> str | None:
        app = QStashServerApp(settings, DataDir(tmp_path))
        app.startup()
        app.persistence.started(app)
        label = app.fake.store.messages[message_id].label
        await app.shutdown()
        return label

    assert asyncio.run(read()) == "billing"
    assert saved(tmp_path, "SELECT value FROM meta WHERE key = 'schema'") == [str(codec.SCHEMA)]


class _Touch:
    """A pickle that, loaded, creates ``path``: what a hostile data dir would hold."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


def test_pickled_cells_run_nothing(tmp_path: Path) -> None:
    """Every cell of a data dir (each field of its snapshot's rows and of its journal's
    lines) replaced, one at a time, by a pickle that would create a file: a start refuses
    the data dir (PersistenceError, a clear sentence) or serves, with no 500; the file is
    never created."""
    settings = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual", start="2026-01-01")
    auth = {"Authorization": "Bearer token-1"}

    def publish(app: QStashServerApp, path: str, **headers: str) -> None:
        request = httpx.Request(
            "POST",
            f"http://127.0.0.1:1/v2/publish/https://example.com/{path}",
            headers={**auth, **headers},
            content=b"{}",
        )
        assert app.api(request).status_code == 200

    async def make() -> None:
        app = QStashServerApp(settings, DataDir(tmp_path / "clean"))
        app.startup()
        app.persistence.started(app)
        publish(app, "a", **{"Upstash-Retry-Delay": "1000", "Upstash-Delay": "1h"})
        await app.shutdown()  # a snapshot
        app = QStashServerApp(settings, DataDir(tmp_path / "clean"))
        app.startup()
        app.persistence.started(app)
        publish(app, "b")  # in the journal only
        shutil.copytree(
            tmp_path / "clean", tmp_path / "base", ignore=shutil.ignore_patterns("lock")
        )
        await app.shutdown()

    asyncio.run(make())
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Touch(marker))
    cells: list[tuple[str, str, str, int]] = []
    for journal_path in sorted((tmp_path / "base").glob("journal-*.jsonl")):
        lines = journal_path.read_bytes().splitlines()
        for number, line in enumerate(lines):
            cells += [(journal_path.name, "line", key, number) for key in json.loads(line)]
    assert len(cells) >= 10  # the journal's header and its one entry
    for db_path in sorted((tmp_path / "base").glob("*.sqlite")):
        db = sqlite3.connect(db_path)
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [c[1] for c in db.execute(f'PRAGMA table_info("{table}")')]
            for (rowid,) in db.execute(f'SELECT rowid FROM "{table}"').fetchall():
                cells += [(db_path.name, table, column, rowid) for column in columns]
        db.close()
    assert len(cells) > 50

    async def start(data_dir: Path) -> str:
        try:
            app = QStashServerApp(settings, DataDir(data_dir))
        except PersistenceError as exc:
            return "refused: " + str(exc)
        app.startup()
        app.persistence.started(app)
        for name in (*LISTS, "state"):
            answer = await app.control(
                httpx.Request("GET", f"http://127.0.0.1:1/_qstash/{name}", headers=auth), name
            )
            assert answer.status_code == 200, (name, answer.content)
        await app.shutdown()
        return "served"

    outcomes = set()
    for n, (file, table, column, rowid) in enumerate(cells):
        copy = tmp_path / f"copy-{n}"
        shutil.copytree(tmp_path / "base", copy)
        if table == "line":  # a journal line's field, the pickle as the text JSON can hold
            lines = (copy / file).read_bytes().splitlines()
            fields = json.loads(lines[rowid])
            fields[column] = payload.decode("latin-1")
            lines[rowid] = json.dumps(fields).encode()
            (copy / file).write_bytes(b"\n".join(lines) + b"\n")
            outcome = asyncio.run(start(copy))
            assert "\n" not in outcome
            outcomes.add(outcome.partition(":")[0])
            shutil.rmtree(copy)
            assert not marker.exists(), (file, column)
            continue
        db = sqlite3.connect(copy / file)
        try:
            db.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?', (payload, rowid))
            db.commit()
        except sqlite3.IntegrityError:  # an integer key: it holds nothing but its number
            continue
        finally:
            db.close()
        outcome = asyncio.run(start(copy))
        assert "\n" not in outcome  # one sentence, no traceback
        outcomes.add(outcome.partition(":")[0])
        shutil.rmtree(copy)
        assert not marker.exists(), (file, table, column)
    assert outcomes == {"refused", "served"}

    # A data dir of pytest-qstash 0.1 (a pickled snapshot) is refused, unread.
    old = tmp_path / "old"
    old.mkdir(mode=0o700)
    db = sqlite3.connect(old / "snapshot.sqlite")
    db.execute("CREATE TABLE snapshot (format, version, layout, journal, written_at, state)")
    db.execute("INSERT INTO snapshot VALUES (1, '0.1.0', 'x', 0, 'then', ?)", (payload,))
    db.commit()
    db.close()
    with pytest.raises(RuntimeError, match=r"written by pytest-qstash 0\.1, which kept the state"):
        serve(old)
    assert not marker.exists()


def test_a_write_that_fails_is_said_once_and_tried_again_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(persistence, "FORK", False)
    monkeypatch.setattr(persistence, "SNAPSHOT_EVERY_S", 0.0)
    settings = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual", start="2026-01-01")
    auth = {"Authorization": "Bearer token-1"}
    tries: list[int] = []
    write = snapshot.write

    def full_disk(directory: Path, state: Any, covered: int, version: str) -> None:
        tries.append(covered)
        raise OSError(28, "No space left on device")

    async def serve_on_a_full_disk() -> None:
        app = QStashServerApp(settings, DataDir(tmp_path))
        app.startup()
        app.persistence.started(app)
        data_dir = app.persistence
        assert isinstance(data_dir, DataDir)

        def step() -> None:
            # Due now, however long the last write took on a loaded machine: only the back-off
            # may hold it.
            data_dir._took = data_dir._last_taken = 0.0
            data_dir._step(app)
            if data_dir._retiring is not None:
                data_dir._retiring.join(timeout=30)

        def publish() -> None:
            request = httpx.Request(
                "POST", "http://127.0.0.1:1/v2/publish/https://example.com/x", headers=auth
            )
            app.api(request)

        async def state() -> dict[str, Any]:
            get = httpx.Request("GET", "http://127.0.0.1:1/_qstash/state", headers=auth)
            return dict(json.loads((await app.control(get, "state")).content))

        monkeypatch.setattr(snapshot, "write", full_disk)
        for _ in range(5):
            publish()
            step()
        assert len(tries) == 1  # not again before its back-off ends
        assert "No space left on device" in (await state())["data_dir"]["error"]
        data_dir._retry_at = 0.0  # the back-off is over
        publish()
        step()
        assert len(tries) == 2
        errors = [r for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1, errors  # said once
        assert "No space left on device" in errors[0].getMessage()

        monkeypatch.setattr(snapshot, "write", write)
        data_dir._retry_at = 0.0
        step()
        assert (await state())["data_dir"]["error"] is None
        assert any("works again" in r.getMessage() for r in caplog.records)
        await app.shutdown()

    asyncio.run(serve_on_a_full_disk())


def test_a_request_the_journal_cannot_take_is_not_acknowledged(tmp_path: Path) -> None:
    """A client is answered 200 only for what is journaled: when the journal cannot take a
    request, the answer is a 503 with the reason (not a 500, not a 200 a crash would lose)."""
    settings = ServerSettings("token-1", "sig_a", "sig_b", clock="virtual", start="2026-01-01")
    auth = {"Authorization": "Bearer token-1"}

    async def serve_with_a_broken_journal() -> tuple[httpx.Response, httpx.Response, Any]:
        app = QStashServerApp(settings, DataDir(tmp_path))
        app.startup()
        app.persistence.started(app)
        data_dir = app.persistence
        assert isinstance(data_dir, DataDir)
        assert data_dir._journal is not None
        data_dir._journal.close()  # what a vanished or unwritable file does
        publish = httpx.Request(
            "POST", "http://127.0.0.1:1/v2/publish/https://example.com/x", headers=auth
        )
        answer = app.api(publish)
        advance = httpx.Request(
            "POST", "http://127.0.0.1:1/_qstash/advance", headers=auth, content=b'{"by": "1s"}'
        )
        control = await app.control(advance, "advance")
        status = data_dir.status()
        await app.shutdown()
        return answer, control, status

    answer, control, status = asyncio.run(serve_with_a_broken_journal())
    assert answer.status_code == 503
    assert "could not record this request" in answer.json()["error"]
    assert control.status_code == 503
    assert status is not None
    assert "journal write failed" in status["error"]
