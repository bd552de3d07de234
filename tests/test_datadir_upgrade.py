"""A data dir written by pytest-qstash 0.1.0 (``tests/datadirs/release-0.1.0``: a snapshot and a
journal after it, made by ``write_release_0_1_0.py`` in that directory) starts a server of this
version with all its state: an upgrade keeps a user's state."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from qstash import QStash

from pytest_qstash.server import ServerProcess
from pytest_qstash.server.datadir import codec as codec

RELEASE_0_1_0 = Path(__file__).parent / "datadirs" / "release-0.1.0"
BINARY = bytes(range(256))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def upgraded(data_dir: Path) -> Iterator[ServerProcess]:
    shutil.copytree(RELEASE_0_1_0, data_dir)
    data_dir.chmod(0o700)  # as a data dir is kept (git keeps no modes)
    for path in data_dir.iterdir():
        path.chmod(0o600)
    server = ServerProcess.start(clock="virtual", args=["--data-dir", str(data_dir)])
    try:
        yield server
    finally:
        server.stop()


def test_a_release_0_1_0_data_dir_loads_with_every_resource(upgraded: ServerProcess) -> None:
    server = upgraded
    assert "Traceback" not in server.output
    sdk = QStash(server.token, base_url=server.url, retry=False)

    # The snapshot's binary body and the journal's (published after it), byte for byte.
    binary = server.messages.one(url=lambda url: url.endswith("/binary"))
    assert binary.content == BINARY
    later = server.messages.one(url=lambda url: url.endswith("/binary-2"))
    assert later.content == BINARY[::-1]

    failing = server.messages.filter(url=lambda url: url.endswith("/fail"))
    retried = [m for m in failing if m.options.retries == 2]
    assert [m.retry_delay for m in retried] == ["5000 * (1 + retried)"]
    assert sorted(e.message.json().get("dead", False) for e in server.dlq) == [False, True]
    dead = server.dlq.one(message_id=lambda mid: mid not in {m.message_id for m in retried})
    assert dead.message.label == "billing"

    [schedule] = sdk.schedule.list()
    assert schedule.cron == "0 0 1 1 *"
    assert server.schedules.one().body == "tick"
    assert sdk.queue.get("emails").parallelism == 3  # the journal's upsert
    assert [e.url.rsplit("/", 1)[1] for e in sdk.url_group.get("team").endpoints] == ["a"]
    [key] = server.flow_keys
    assert (key.key, key.rate) == ("tenant-1", 3)
    [run] = server.runs
    assert run.json() == {"order": 7}


def test_the_upgraded_data_dir_is_written_in_the_current_schema(
    upgraded: ServerProcess, data_dir: Path
) -> None:
    message_ids = {m.message_id for m in upgraded.messages}
    upgraded.stop()  # a clean stop: a snapshot in this version's schema
    db = sqlite3.connect(f"file:{data_dir / 'snapshot.sqlite'}?mode=ro", uri=True)
    try:
        [schema] = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        [store] = db.execute("SELECT fields FROM store").fetchone()
    finally:
        db.close()
    assert json.loads(schema) == codec.SCHEMA > 2
    assert "generation" in json.loads(store)  # a public name, where 0.1.0 wrote "_generation"
    assert not any(key.startswith("_") for key in json.loads(store))

    again = ServerProcess.start(clock="virtual", args=["--data-dir", str(data_dir)])
    try:
        assert {m.message_id for m in again.messages} == message_ids
        assert again.messages.one(url=lambda url: url.endswith("/binary")).content == BINARY
    finally:
        again.stop()
