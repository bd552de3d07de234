"""The data dir's snapshot: the whole engine state of one instant, as plain data in sqlite
(``persistence`` decides when one is taken and what goes in it).

``DIR/snapshot.sqlite`` holds a ``meta`` table (the data-dir schema, the version of
pytest-qstash that wrote it, the journal generation it covers, when it was written, the
server's settings), ``roots`` (name: value), and one table per kind of object, a row per
object, its fields as JSON (``datadir_codec``). Every cell is JSON text; nothing read is
executed. A snapshot is written into a new file, synced, and renamed over the old one: a
reader finds the old one or the new one, whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..control import fastjson
from . import codec as codec

NAME = "snapshot.sqlite"


#: What to do with a snapshot that cannot be read.
_START_EMPTY = "delete it to start empty, or use another --data-dir"


class SnapshotError(Exception):
    """A snapshot that cannot be read: the message says why and what to do."""


@dataclass(frozen=True)
class Snapshot:
    """A snapshot as read: its plain document (migrated to this version's schema) and what
    its ``meta`` table says."""

    #: The journal generation it covers (later ones are replayed after it).
    journal: int
    written_at: str
    document: codec.Document
    #: The settings the server had, as saved; how many resets it had.
    settings: dict[str, Any]
    resets: int
    #: The schema it was written in (older ones are migrated, then written again).
    schema: int


#: What ``write`` takes: the codec's document (``meta`` and ``roots``) and its rows by kind.
State = tuple[dict[str, Any], dict[str, list[tuple[int, str]]]]


def write(directory: Path, state: State, covered: int, version: str) -> None:
    """The snapshot into a new file, synced, then renamed over the old one."""
    document, rows = state
    temporary = directory / f"{NAME}.tmp"
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    create_private_file(temporary)
    db = sqlite3.connect(temporary)
    try:
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")  # one fsync of the whole file, below
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("CREATE TABLE roots (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        meta = {
            "schema": codec.SCHEMA,
            "version": version,
            "journal": covered,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **document["meta"],
        }
        db.executemany(
            "INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()]
        )
        db.executemany(
            "INSERT INTO roots VALUES (?, ?)",
            [(k, json.dumps(v)) for k, v in document["roots"].items()],
        )
        for kind, kind_rows in rows.items():
            # Kinds are the codec's own names: identifiers, never data.
            db.execute(f'CREATE TABLE "{kind}" (id INTEGER PRIMARY KEY, fields TEXT NOT NULL)')
            db.executemany(f'INSERT INTO "{kind}" VALUES (?, ?)', kind_rows)
        db.commit()
    finally:
        db.close()
    with open(temporary, "rb") as written:
        os.fsync(written.fileno())
    os.replace(temporary, directory / NAME)
    _sync_dir(directory)


def read(directory: Path, version: str) -> Snapshot | None:
    """The snapshot in ``directory`` (None: there is none yet); ``SnapshotError`` when it
    cannot be read, or was written in a newer schema."""
    path = directory / NAME
    if not path.exists():
        return None
    if os.name == "posix" and path.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SnapshotError(
            f"{path} can be written by other users: make it private (chmod 600), or use "
            "another --data-dir"
        )
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return _read(db, path, version)
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise SnapshotError(
            f"{path} is no pytest-qstash data dir ({exc}): use another --data-dir, or "
            "delete the directory to start empty"
        ) from None


def _read(db: sqlite3.Connection, path: Path, version: str) -> Snapshot:
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "meta" not in tables and "snapshot" in tables:
        raise SnapshotError(
            f"{path} was written by pytest-qstash 0.1, which kept the state pickled; "
            f"this is pytest-qstash {version}, which keeps it as plain data and never "
            "reads a pickle (loading one can run any code). Its state cannot be carried "
            "over: delete the directory (or use another --data-dir) to start empty"
        )
    unreadable = f"{path} holds no readable pytest-qstash state"
    if "meta" not in tables or "roots" not in tables:
        raise SnapshotError(f"{unreadable}: delete it to start empty")
    meta: dict[str, Any] = {}
    for key, value in db.execute("SELECT key, value FROM meta"):
        meta[str(key)] = _json(value, f"{unreadable} (meta {key!r})")
    schema, written_by = meta.get("schema"), meta.get("version")
    if type(schema) is not int:
        raise SnapshotError(f"{unreadable}: its schema is {schema!r}")
    if schema > codec.SCHEMA:
        raise SnapshotError(
            f"{path} was written by pytest-qstash {written_by} (data-dir schema {schema}); "
            f"this is pytest-qstash {version} (schema {codec.SCHEMA}), which cannot read a "
            "newer schema. Run that version (or a newer one), or use another --data-dir"
        )
    roots = {
        str(name): _json(value, f"{unreadable} (root {name!r})")
        for name, value in db.execute("SELECT name, value FROM roots")
    }
    kinds: dict[str, dict[int, Any]] = {}
    for table in sorted(tables - {"meta", "roots"}):
        if table.startswith("sqlite_"):
            continue
        if table not in codec.KIND_NAMES:
            raise SnapshotError(f"{unreadable}: unknown table {table!r}")
        rows = db.execute(f'SELECT id, fields FROM "{table}"').fetchall()
        ids, cells = zip(*rows, strict=True) if rows else ((), ())
        if not set(map(type, cells)) <= {str}:
            raise SnapshotError(f"{unreadable}: {table} holds cells that are not JSON")
        # One parse per table, not per row: most of a restart is reading these.
        parsed = _json("[" + ",".join(cells) + "]", f"{unreadable} ({table})")
        if len(parsed) != len(rows):
            raise SnapshotError(f"{unreadable}: {table} holds cells that are not JSON")
        kinds[table] = dict(zip(ids, parsed, strict=True))
    document: codec.Document = {"meta": meta, "roots": roots, "kinds": kinds}
    try:
        document = codec.migrate(document, schema)
    except codec.CodecError as exc:
        raise SnapshotError(f"{unreadable}: {exc}") from None
    meta = document["meta"]
    covered, written_at = meta.get("journal"), meta.get("written_at")
    settings, resets = meta.get("settings"), meta.get("resets", 0)
    if (
        type(covered) is not int
        or not isinstance(settings, dict)
        or type(resets) is not int
        or not isinstance(written_at, str)
    ):
        raise SnapshotError(f"{unreadable}: its meta table is incomplete")
    return Snapshot(covered, written_at, document, settings, resets, schema)


def _json(value: Any, where: str) -> Any:
    if not isinstance(value, str):
        raise SnapshotError(f"{where}: not JSON text; {_START_EMPTY}")
    try:
        return fastjson.loads(value)
    except (ValueError, RecursionError):  # a file cut short, say
        raise SnapshotError(f"{where}: not JSON; {_START_EMPTY}") from None


def create_private_file(path: Path) -> None:
    """Create ``path`` (if missing) readable and writable by this user only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    if os.name == "posix":
        os.chmod(path, 0o600)


def _sync_dir(path: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
