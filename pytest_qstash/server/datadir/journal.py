"""The data dir's journal: each request a server answered since its last snapshot, appended
before its answer goes out (``Recording``), and replayed after the snapshot on a restart
(``Replay``).

``DIR/journal-NNNNNNNN.jsonl`` is JSON lines, plain data. The first line says what the file
is: ``{"journal": FORMAT, "version": ...}``. Each next line is one entry: ``seq``, ``kind``
(``"api"``: a QStash API request; ``"control"``: a control action), ``method``, ``target``
(the API request's URL, or the control action's name), ``headers`` (the request's header
block, ``Name: value`` lines, as Latin-1 text: byte for byte), ``body`` (base64), ``at_ms``
(the clock when it was answered) and ``drawn`` (the id generator's position before it).

An entry is one ``write`` of a whole line to a file opened for appending: once it returns,
the line is the operating system's, and a killed process (``kill -9``) loses nothing it was
answered for. No fsync per entry (sqlite's WAL at ``synchronous=NORMAL`` had none either): it
guards against the process dying, not against the machine losing power. A write cut short
(a full disk) is taken back, so the file stays whole lines; a last line without its newline
(a crash in the middle of a write) is dropped on reading, and said.

A publish's journal write is this one line: a sqlite insert, its own transaction, cost about
six times as much and wrote a page per entry. Journals written by earlier versions (sqlite,
``journal-N.sqlite``, one ``journal`` table of the same fields) are still read, so an upgrade
replays what a killed server left.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from ...engine.ids import IdGenerator
from ..control import fastjson
from .served import Engine, Served

_log = logging.getLogger("pytest_qstash.server")

#: The format of the lines this version writes (and the newest it reads).
FORMAT = 1
PREFIX = "journal-"
SUFFIX = ".jsonl"
#: The suffix of the journals earlier versions wrote.
SQLITE_SUFFIX = ".sqlite"


#: The fields of an entry's line.
_FIELDS = frozenset({"seq", "kind", "method", "target", "headers", "body", "at_ms", "drawn"})


class JournalError(Exception):
    """A journal that cannot be read as a whole (another program's, a newer version's)."""


class NewerJournal(JournalError):
    """A journal a newer version wrote, in a format this one does not know."""


@dataclass(frozen=True)
class Entry:
    """One answered request, as the journal keeps it."""

    seq: int
    kind: str
    method: str
    target: str
    headers: bytes
    body: bytes
    at_ms: int
    drawn: int

    def line(self) -> bytes:
        """The entry's line, its newline included."""
        fields = {
            "seq": self.seq,
            "kind": self.kind,
            "method": self.method,
            "target": self.target,
            "headers": self.headers.decode("latin-1"),
            "body": base64.b64encode(self.body).decode("ascii"),
            "at_ms": self.at_ms,
            "drawn": self.drawn,
        }
        return fastjson.dumps(fields) + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> Entry | None:
        """The entry a line holds, or None when it holds none (not written here)."""
        try:
            fields = fastjson.loads(line)
        except (ValueError, RecursionError):
            return None
        if type(fields) is not dict or not fields.keys() >= _FIELDS:
            return None
        headers, body = fields["headers"], fields["body"]
        if type(headers) is not str or type(body) is not str:
            return None
        try:
            raw_headers = headers.encode("latin-1")
            raw_body = base64.b64decode(body, validate=True)
        except ValueError:  # not Latin-1 text, not base64
            return None
        return cls.from_values(
            (
                fields["seq"],
                fields["kind"],
                fields["method"],
                fields["target"],
                raw_headers,
                raw_body,
                fields["at_ms"],
                fields["drawn"],
            )
        )

    @classmethod
    def from_values(cls, row: tuple[Any, ...]) -> Entry | None:
        """The entry of the eight values a line holds (decoded), or a row of an earlier
        version's sqlite journal; None when one of them has the wrong type."""
        if len(row) != 8:
            return None
        seq, kind, method, target, headers, body, at_ms, drawn = row
        if not all(type(v) is int for v in (seq, at_ms, drawn)):
            return None
        if not all(type(v) is str for v in (kind, method, target)):
            return None
        if not isinstance(headers, bytes) or not isinstance(body, bytes):
            return None
        return cls(seq, kind, method, target, headers, body, at_ms, drawn)


class JournalFile:
    """A journal taking entries: created private (0600) with its first line, appended to."""

    def __init__(self, path: Path, version: str) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0)
        self._fd: int | None = os.open(path, flags, 0o600)
        try:
            self._size = os.fstat(self._fd).st_size
            if self._size == 0:
                self._write(fastjson.dumps({"journal": FORMAT, "version": version}) + b"\n")
        except BaseException:
            self.close()
            raise

    def append(self, entry: Entry) -> None:
        """Write the entry's line whole, or raise ``OSError`` having written none of it."""
        self._write(entry.line())

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            raise OSError(f"{self.path.name} is closed")
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError:
            # Whatever part of the line the file took is taken back: it stays whole lines.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            raise
        self._size += written

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


@dataclass(frozen=True)
class Read:
    """What reading a journal found: its entries in order, how many lines held none, and
    whether its last line was torn (a crash in the middle of a write)."""

    entries: list[Entry]
    skipped: int
    torn: bool


def read(path: Path) -> Read:
    """The entries of a journal file, of this version or an earlier one. ``JournalError``
    when it cannot be read as a whole."""
    if path.name.endswith(SQLITE_SUFFIX):
        return _read_sqlite(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise JournalError(str(exc)) from None
    lines = data.split(b"\n")
    torn = lines[-1] != b""  # the last write's line, cut before its newline
    lines = lines[:-1]
    if not lines:
        return Read([], 0, torn)
    header = _header(lines[0])
    if header is None:
        raise JournalError("it is no pytest-qstash journal (its first line says none)")
    _refuse_newer(header)
    entries, skipped = [], 0
    for text in lines[1:]:
        entry = Entry.from_line(text)
        if entry is None:
            skipped += 1
        else:
            entries.append(entry)
    return Read(entries, skipped, torn)


def check(path: Path) -> None:
    """Refuse (``NewerJournal``, naming both versions) a journal of a newer format than this
    version reads."""
    if path.name.endswith(SQLITE_SUFFIX):
        return
    try:
        with open(path, "rb") as file:
            first = file.readline()
    except OSError:
        return
    # One with no header (another program's) is left to ``read``, which says so.
    header = _header(first) if first.endswith(b"\n") else None
    if header is not None:
        _refuse_newer(header)


def _header(first: bytes) -> dict[str, Any] | None:
    """A journal's first line, when it says what the file is (else None)."""
    try:
        header = fastjson.loads(first)
    except (ValueError, RecursionError):
        return None
    if type(header) is not dict or type(header.get("journal")) is not int:
        return None
    return header


def _refuse_newer(header: dict[str, Any]) -> None:
    if header["journal"] > FORMAT:
        raise NewerJournal(
            f"it was written by pytest-qstash {header.get('version')} in journal format "
            f"{header['journal']}; this version reads format {FORMAT} and older"
        )


def _read_sqlite(path: Path) -> Read:
    try:
        # Read-write: sqlite recovers the WAL a crash left (a torn tail is dropped there).
        db = sqlite3.connect(path)
        try:
            rows = db.execute("SELECT * FROM journal ORDER BY seq").fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise JournalError(str(exc)) from None
    entries = [entry for entry in map(Entry.from_values, rows) if entry is not None]
    return Read(entries, len(rows) - len(entries), False)


def path_of(directory: Path, generation: int) -> Path:
    return directory / f"{PREFIX}{generation:08d}{SUFFIX}"


def generations(directory: Path) -> Iterator[tuple[int, Path]]:
    """Each journal in ``directory`` (this version's or an earlier one's), by generation."""
    for path in directory.glob(f"{PREFIX}*"):
        for suffix in (SUFFIX, SQLITE_SUFFIX):
            if path.name.endswith(suffix):
                digits = path.name[len(PREFIX) : -len(suffix)]
                if digits.isdigit():
                    yield int(digits), path


def files_up_to(directory: Path, covered: int) -> list[Path]:
    """The files of the journals up to ``covered`` (an earlier version's WAL and index too,
    and those a deletion cut short left without their database)."""
    files = []
    for path in directory.glob(f"{PREFIX}*"):
        digits = path.name[len(PREFIX) :].partition(".")[0]
        if digits.isdigit() and int(digits) <= covered:
            files.append(path)
    return files


# -- what is written for a request -----------------------------------------------------------
def header_block(headers: httpx.Headers) -> bytes:
    """A request's headers as an entry keeps them: ``Name: value`` lines, byte for byte."""
    return b"\r\n".join(name + b": " + value for name, value in headers.raw)


def parse_headers(block: bytes) -> list[tuple[bytes, bytes]]:
    pairs = []
    for line in block.split(b"\r\n") if block else ():
        name, _, value = line.partition(b": ")
        pairs.append((name, value))
    return pairs


#: What appends an entry: ``(kind, method, target, headers, body, at_ms, drawn)``.
Append = Callable[[str, str, str, bytes, bytes, int, int], None]


class Recording(contextlib.AbstractContextManager[None]):
    """Around one request: where the id generator was before it, and its journal entry
    written after it, before its answer goes out (also when the handler raised: what it
    changed must be replayed, and its client got no answer either way)."""

    __slots__ = ("_app", "_append", "_body", "_drawn", "_headers", "_kind", "_method", "_target")

    def __init__(
        self,
        append: Append,
        app: Served,
        kind: str,
        method: str,
        target: str,
        headers: bytes,
        body: bytes,
    ) -> None:
        self._append, self._app, self._kind = append, app, kind
        self._method, self._target, self._headers, self._body = method, target, headers, body
        self._drawn = 0

    def __enter__(self) -> None:
        self._drawn = self._app.fake.store.ids.drawn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._append(
            self._kind,
            self._method,
            self._target,
            self._headers,
            self._body,
            self._app.fake.clock.now_ms,
            self._drawn,
        )


# -- replaying -------------------------------------------------------------------------------
class Replay:
    """Journals replayed through the server's own handlers on the same clock, so the ids an
    answer gave come out the same. Deliveries are not journaled (they are made again): a
    clock move replays as the clock's move alone."""

    def __init__(self) -> None:
        #: The highest entry number met.
        self.seq = 0
        #: Each id generator met, as it was first seen (where a rewind goes).
        self._ids_base: dict[int, tuple[IdGenerator, IdGenerator]] = {}

    def file(self, app: Served, path: Path) -> int:
        """Replay one journal file into ``app``; how many entries it held."""
        try:
            found = read(path)
        except JournalError as exc:
            # Unreadable as a whole (what a crash does not do: it tears a last line at most).
            _log.error("journal %s cannot be read (%s); its entries are lost", path, exc)
            return 0
        if found.torn:
            _log.warning(
                "%s: its last entry was cut short by a crash (its client had no answer); dropped",
                path,
            )
        for entry in found.entries:
            self.seq = max(self.seq, entry.seq)
            try:
                self.apply(app, entry)
            except Exception as exc:
                _log.error(
                    "journal entry %d (%s %s) could not be replayed (%s: %s); skipped",
                    entry.seq,
                    entry.method,
                    entry.target[:200],
                    type(exc).__name__,
                    exc,
                )
        if found.skipped:
            _log.error(
                "%s: %d entries that this server did not write were skipped", path, found.skipped
            )
        return len(found.entries)

    def apply(self, app: Served, entry: Entry) -> None:
        fake = app.fake
        if entry.kind == "control" and entry.target in app.CLOCK_MOVES:
            # Its deliveries are not replayed (they are made again): the clock moves to where
            # it ended, and the ids they drew are skipped by the next entry's position.
            _move_clock(fake, entry.at_ms)
            return
        self.move_ids(fake.store.ids, entry.drawn)
        if entry.kind == "api":
            _move_clock(fake, entry.at_ms)
            request = httpx.Request(
                entry.method,
                entry.target,
                headers=parse_headers(entry.headers),
                content=entry.body,
            )
            with contextlib.suppress(httpx.TransportError):  # an injected network fault
                fake.handle(request)
            return
        if entry.kind != "control":
            raise ValueError(f"unknown kind of entry {entry.kind[:40]!r}")
        body = entry.body
        if entry.target == "reset":
            # A reset picks its clock's start from the wall clock: replay it at the same one.
            try:
                fields = json.loads(body) if body.strip() else {}
            except ValueError:
                fields = None
            if isinstance(fields, dict):
                fields.setdefault("start", entry.at_ms / 1000)
                body = json.dumps(fields).encode()
        else:
            _move_clock(fake, entry.at_ms)
        request = httpx.Request(entry.method, f"http://replay/_qstash/{entry.target}", content=body)
        # One its client was refused (a bad body, say) is refused again, changing nothing.
        _run_now(app.answer(request, entry.target))

    def move_ids(self, ids: IdGenerator, drawn: int) -> None:
        """Put the id generator where it was before an entry was first handled: deliveries
        (which are not replayed) draw ids between entries, and a replayed request that found
        another state may have drawn a different number."""
        seen = self._ids_base.get(id(ids))
        if seen is None or seen[0] is not ids:
            seen = self._ids_base[id(ids)] = (ids, copy.deepcopy(ids))
        base = seen[1]
        if drawn < ids.drawn:
            if drawn < base.drawn:
                _log.warning("the id generator cannot go back to %d: ids may differ", drawn)
                return
            ids.restore(base)
        ids.skip(drawn - ids.drawn)


def _move_clock(fake: Engine, at_ms: int) -> None:
    if at_ms > fake.clock.now_ms:
        fake.clock.move_to(at_ms)


def _run_now(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a control action that does not wait (every one but the clock's moves) to its end,
    here and now: nothing else runs on the event loop meanwhile."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    coroutine.close()
    raise RuntimeError("the control action waited for something: it cannot be replayed")
