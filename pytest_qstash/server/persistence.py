"""The server's state on disk (``serve --data-dir DIR``): a snapshot and a journal, in sqlite.

- ``DIR/snapshot.sqlite`` holds the whole engine state as of one instant, pickled: the
  ``Store`` and everything it owns (messages with their attempts, the log, schedules, queues,
  URL groups, flow-control keys, the DLQ, workflow runs, the clock and its due events, the
  credentials, the seeded id generator), the fake's API-call log and armed faults, and the
  server's settings. Nothing lists the collections: whatever the store holds is saved.
- ``DIR/journal-N.sqlite`` (WAL) holds every QStash API request and control action answered
  since, appended before its answer goes out, with the clock's time and the id generator's
  position. A restart loads the snapshot and replays the journal through the same handlers
  on the same clock, so the ids an answer gave come out the same.

Deliveries are not journaled: those made after the last snapshot are made again after a
crash (QStash is at-least-once). A clean stop writes a final snapshot and redelivers nothing.
So a replayed control action runs to its end without waiting; one that delivers is a clock
move (``QStashServerApp.CLOCK_MOVES``), replayed as the clock's move alone.

Snapshots are written by a forked child, which sees the memory of one instant (copy on
write): the server does not stop for it, and the child's pickling and writing use another
core. At most one child runs; the next waits at least ``SNAPSHOT_EVERY_S``. Where ``fork``
does not exist (Windows), the state is pickled in the server and written by a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import copyreg
import dataclasses
import gc
import hashlib
import importlib.metadata
import io
import json
import logging
import os
import pickle
import signal
import sqlite3
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from ..delivery.mounts import merge_redirects
from ..state.account import Account
from ..state.clock import VirtualClock
from ..state.ids import IdGenerator
from ..state.store import Store
from .errors import ControlError

if TYPE_CHECKING:
    from ..fake import FakeQStash

#: ``app.py``'s ``ServerSettings`` (a frozen dataclass); not imported, as that module imports
#: this one.
ServerSettings = Any


class QStashServerApp(Protocol):
    """What persistence reads and replays on the server app that owns it."""

    @property
    def CLOCK_MOVES(self) -> tuple[str, ...]: ...

    settings: ServerSettings
    _resets: int
    fake: FakeQStash

    async def _act(self, request: httpx.Request, action: str) -> httpx.Response: ...


_log = logging.getLogger("pytest_qstash.server")

#: The layout of the files in a data dir; a change makes older data dirs an error.
FORMAT = 1
#: The shortest time between two snapshots (seconds), and the longest a change waits for one.
SNAPSHOT_EVERY_S = 1.0
#: Whether snapshots are written by a forked child (else: pickled here, written by a thread).
FORK = hasattr(os, "fork")
#: How long a starting server waits for a data dir another process (a snapshot child of a
#: killed server finishing its write) still holds.
LOCK_WAIT_S = 15.0

_SNAPSHOT = "snapshot.sqlite"
_JOURNAL_PREFIX = "journal-"
_JOURNAL_SCHEMA = """
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,      -- 'api': a QStash API request; 'control': a control action
    method TEXT NOT NULL,
    target TEXT NOT NULL,    -- the API request's URL, or the control action's name
    headers BLOB NOT NULL,   -- the API request's header block ('Name: value' lines)
    body BLOB NOT NULL,
    at_ms INTEGER NOT NULL,  -- the clock (unix ms) when it was answered
    drawn INTEGER NOT NULL   -- the id generator's position before it was handled
)
"""


class PersistenceError(Exception):
    """A data dir that cannot be used: another version's, another server's, unreadable."""


# -- what the state is ---------------------------------------------------------------------
# The fake's infrastructure (the dispatcher, the sender, the interception) refers to these
# three objects. They are saved by content and restored into the new fake's own objects, so
# every reference (the infrastructure's and the state's own) stays one object.
_ROOTS: dict[str, Callable[[FakeQStash], object]] = {
    "store": lambda fake: fake.store,
    "clock": lambda fake: fake.clock,
    "account": lambda fake: fake.account,
}
_ROOT_TYPES: dict[type, str] = {Store: "store", VirtualClock: "clock", Account: "account"}
_loading: dict[str, object] = {}


def _root(name: str) -> object:
    """Unpickling a reference to a root: the new fake's object of that name."""
    return _loading[name]


def _reduce_root(obj: object) -> tuple[Callable[[str], object], tuple[str]]:
    return _root, (_ROOT_TYPES[type(obj)],)


def _fake_extras(fake: FakeQStash) -> dict[str, Any]:
    """What the fake itself holds beside the store: its API-call log (kept bounded), the DLQ
    entries read, and the faults armed (their table's clock is the fake's)."""
    return {
        "api_calls": fake._api_calls,
        "dlq_read": fake._dlq_read,
        "faults": fake._faults.faults,
    }


def _restore_extras(fake: FakeQStash, extras: dict[str, Any]) -> None:
    fake._api_calls = extras["api_calls"]
    fake._dlq_read = extras["dlq_read"]
    fake._faults.faults = extras["faults"]


class _Pickler(pickle.Pickler):
    dispatch_table = {**copyreg.dispatch_table, **dict.fromkeys(_ROOT_TYPES, _reduce_root)}


class _CarefulPickler(pickle.Pickler):
    """The fallback when the state holds something pickle refuses: an exception an endpoint's
    transport raised, say. Such exceptions are kept as their type's name and message."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) in _ROOT_TYPES:
            return _reduce_root(obj)
        if isinstance(obj, BaseException):
            try:
                pickle.dumps(obj)
            except Exception:
                return SavedError, (f"{type(obj).__name__}: {obj}",)
        return NotImplemented


class SavedError(Exception):
    """An exception of a saved state that could not be saved as itself."""


def _dumps(state: dict[str, Any]) -> bytes:
    for pickler in (_Pickler, _CarefulPickler):
        buffer = io.BytesIO()
        try:
            pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(state)
        except (pickle.PicklingError, TypeError, AttributeError):
            if pickler is _CarefulPickler:
                raise
            continue
        return buffer.getvalue()
    raise AssertionError("unreachable")


def _layout() -> str:
    """A fingerprint of the code that gives the saved bytes their meaning: the state's
    modules and the versions of this package and httpx (whose headers and URLs it holds)."""
    digest = hashlib.sha256(f"{FORMAT}|{_version()}|{httpx.__version__}".encode())
    state_dir = Path(__file__).resolve().parent.parent / "state"
    for source in sorted(state_dir.glob("*.py")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def _version() -> str:
    try:
        return importlib.metadata.version("pytest-qstash")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# -- the journal's entries -------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    seq: int
    kind: str
    method: str
    target: str
    headers: bytes
    body: bytes
    at_ms: int
    drawn: int


def _header_block(headers: httpx.Headers) -> bytes:
    return b"\r\n".join(name + b": " + value for name, value in headers.raw)


def _parse_headers(block: bytes) -> list[tuple[bytes, bytes]]:
    pairs = []
    for line in block.split(b"\r\n") if block else ():
        name, _, value = line.partition(b": ")
        pairs.append((name, value))
    return pairs


class _Recording(contextlib.AbstractContextManager[None]):
    """Around one request: where the id generator was before it, and its journal entry
    written after it, before its answer goes out (also when the handler raised: what it
    changed must be replayed, and its client got no answer either way)."""

    __slots__ = ("_app", "_body", "_data_dir", "_drawn", "_headers", "_kind", "_method", "_target")

    def __init__(
        self,
        data_dir: DataDir,
        app: QStashServerApp,
        kind: str,
        method: str,
        target: str,
        headers: bytes,
        body: bytes,
    ) -> None:
        self._data_dir, self._app, self._kind = data_dir, app, kind
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
        self._data_dir.append(
            self._kind,
            self._method,
            self._target,
            self._headers,
            self._body,
            self._app.fake.clock.now_ms,
            self._drawn,
        )


# -- in memory -------------------------------------------------------------------------------
class InMemory:
    """No data dir: the state lives and dies with the process."""

    def api_call(
        self, app: QStashServerApp, request: httpx.Request
    ) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def control(
        self, app: QStashServerApp, request: httpx.Request, action: str
    ) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def load(self, app: QStashServerApp) -> None:
        pass

    def started(self, app: QStashServerApp) -> None:
        pass

    async def stopped(self, app: QStashServerApp) -> None:
        pass

    def reset(self) -> None:
        pass

    def describe(self, app: QStashServerApp) -> str:
        return "state in memory, lost when the server stops (--data-dir DIR keeps it)"


#: What the app calls: ``InMemory``, or a ``DataDir`` (which is one).
Persistence = InMemory


# -- on disk ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Snapshot:
    journal: int
    written_at: str
    state: bytes


class DataDir(InMemory):
    """A data dir in use: its lock held, a journal open, snapshots taken as the state changes.

    ``explicit`` names the settings the command line gave (``token``, the signing keys,
    ``start``): a data dir that holds state keeps its own, and refuses others.
    """

    def __init__(self, path: str | os.PathLike[str], explicit: frozenset[str] = frozenset()):
        self.path = Path(path)
        self._explicit = explicit
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PersistenceError(f"cannot use --data-dir {self.path}: {exc}") from None
        self._lock = _lock(self.path)
        self._layout = _layout()
        try:
            self._snapshot = self._read_snapshot()
        except BaseException:
            _unlock(self._lock)
            raise
        self._journal: sqlite3.Connection | None = None
        self._generation = max(self._generations(), default=0)
        self._seq = 0
        self._restored: str | None = None
        self._replayed = 0
        #: Journals written and closed to new entries, kept until a snapshot covers them.
        self._open: list[tuple[int, sqlite3.Connection]] = []
        #: The child writing a snapshot: its pid, the journal generation it covers, its start.
        self._child: tuple[int, int, float] | None = None
        self._retiring: threading.Thread | None = None
        self._task: Any = None
        self._wake: Any = None
        self._last_mark: tuple[int, ...] = ()
        self._last_taken = 0.0
        self._took = 0.0
        #: Each id generator the replay met, as it was first seen (where a rewind goes).
        self._ids_base: dict[int, tuple[IdGenerator, IdGenerator]] = {}

    # -- the hooks ----------------------------------------------------------------------------
    def api_call(
        self, app: QStashServerApp, request: httpx.Request
    ) -> contextlib.AbstractContextManager[None]:
        return _Recording(
            self,
            app,
            "api",
            request.method,
            str(request.url),
            _header_block(request.headers),
            request.content,
        )

    def control(
        self, app: QStashServerApp, request: httpx.Request, action: str
    ) -> contextlib.AbstractContextManager[None]:
        if request.method == "GET":
            return contextlib.nullcontext()  # reads change nothing
        return _Recording(self, app, "control", request.method, action, b"", request.content)

    def append(
        self,
        kind: str,
        method: str,
        target: str,
        headers: bytes,
        body: bytes,
        at_ms: int,
        drawn: int,
    ) -> None:
        assert self._journal is not None, "the journal opens when the server starts"
        self._seq += 1
        self._journal.execute(
            "INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (self._seq, kind, method, target, headers, body, at_ms, drawn),
        )

    def reset(self) -> None:
        """A reset: the next snapshot as soon as one may be taken (snapshots stay a second
        apart, even in a suite resetting before every test), so what it forgot leaves the
        disk too."""
        if self._wake is not None:
            self._wake.set()

    # -- start ----------------------------------------------------------------------------------
    def load(self, app: QStashServerApp) -> None:
        """Before the server binds: the snapshot's state into ``app`` (refusing settings that
        contradict it); the journal is replayed once the event loop runs (``started``)."""
        try:
            self._load(app)
        except BaseException:
            _unlock(self._lock)  # refused: the data dir is free for another start
            raise

    def _load(self, app: QStashServerApp) -> None:
        snapshot = self._snapshot
        if snapshot is None:
            return
        try:
            _loading.update((name, get(app.fake)) for name, get in _ROOTS.items())
            try:
                state = pickle.loads(snapshot.state)
            finally:
                _loading.clear()
        except Exception as exc:
            raise PersistenceError(
                f"cannot read the state in {self.path / _SNAPSHOT}: {type(exc).__name__}: {exc}"
            ) from None
        app.settings = self._settings(state["settings"], app.settings)
        app._resets = state["resets"]
        fake = app.fake
        for name, get in _ROOTS.items():
            target = get(fake)
            target.__dict__.clear()
            target.__dict__.update(state["roots"][name])
        _restore_extras(fake, state["fake"])
        # An attempt whose app was being called as the snapshot was taken never finished
        # (its answer came after, or never): it is due again, as an abandoned call is.
        for attempt in list(fake.store.in_flight.values()):
            if attempt.ends_ms is None:
                fake.store.requeue(attempt)
        self._restored = snapshot.written_at

    def _settings(self, stored: ServerSettings, given: ServerSettings) -> ServerSettings:
        where = f"--data-dir {self.path}"
        if given.clock != stored.clock:
            raise PersistenceError(
                f"{where} holds the state of a server on a {stored.clock} clock: start it with "
                f"--clock {stored.clock}, or use another --data-dir for a {given.clock} clock"
            )
        if "start" in self._explicit:
            raise PersistenceError(
                f"--start sets where a new server's clock starts; {where} holds a server "
                "whose clock goes on from where it stopped (leave --start out, or use another "
                "--data-dir)"
            )
        for name in ("token", "current_signing_key", "next_signing_key"):
            if name in self._explicit and getattr(given, name) != getattr(stored, name):
                option = "--" + name.replace("_", "-")
                raise PersistenceError(
                    f"{where} holds a server with another {name.replace('_', ' ')} than the "
                    f"one given ({option} or the environment): leave it out to keep the "
                    "stored one, or use another --data-dir"
                )
        # How long one attempt may take, and the region deliveries are marked with, are the
        # operator's choice at each start, not state; mounts given at this start join the
        # stored ones.
        return dataclasses.replace(
            stored,
            attempt_timeout=given.attempt_timeout,
            region=given.region,
            mounts=merge_redirects(stored.mounts, given.mounts),
        )

    def started(self, app: QStashServerApp) -> None:
        """On the server's event loop, before it serves: replay the journal, write a snapshot
        of the result (the journals then go), open a new journal, start the snapshots."""
        replayed = 0
        covered = self._snapshot.journal if self._snapshot is not None else 0
        for generation in sorted(self._generations()):
            if generation > covered:
                replayed += self._replay(app, self._journal_path(generation))
        self._write(_dumps(self._state(app)), self._generation)
        self._retirement(self._generation)()
        self._replayed = replayed
        self._open_journal()
        self._last_mark = self._mark(app)
        self._last_taken = time.monotonic()
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._snapshots(app))

    def _replay(self, app: QStashServerApp, path: Path) -> int:
        try:
            # Read-write: after a crash sqlite recovers the WAL (a torn tail is dropped there).
            db = sqlite3.connect(path)
            try:
                rows = db.execute("SELECT * FROM journal ORDER BY seq").fetchall()
            finally:
                db.close()
        except sqlite3.Error as exc:
            # Unreadable as a whole (what a crash does not do: sqlite drops a torn tail).
            _log.error("journal %s cannot be read (%s); its entries are lost", path, exc)
            return 0
        for row in rows:
            entry = Entry(*row)
            self._seq = max(self._seq, entry.seq)
            try:
                self._apply(app, entry)
            except Exception:
                _log.exception(
                    "journal entry %d (%s %s) could not be replayed; skipped",
                    entry.seq,
                    entry.method,
                    entry.target,
                )
        return len(rows)

    def _apply(self, app: QStashServerApp, entry: Entry) -> None:
        fake = app.fake
        if entry.kind == "control" and entry.target in app.CLOCK_MOVES:
            # Its deliveries are not replayed (they are made again): the clock moves to where
            # it ended, and the ids they drew are skipped by the next entry's position.
            _move_clock(fake, entry.at_ms)
            return
        self._move_ids(fake.store.ids, entry.drawn)
        if entry.kind == "api":
            _move_clock(fake, entry.at_ms)
            request = httpx.Request(
                entry.method,
                entry.target,
                headers=_parse_headers(entry.headers),
                content=entry.body,
            )
            with contextlib.suppress(httpx.TransportError):  # an injected network fault
                fake.handle(request)
            return
        body = entry.body
        if entry.target == "reset":
            # A reset picks its clock's start from the wall clock: replay it at the same one.
            fields = json.loads(body) if body.strip() else {}
            fields.setdefault("start", entry.at_ms / 1000)
            body = json.dumps(fields).encode()
        else:
            _move_clock(fake, entry.at_ms)
        request = httpx.Request(entry.method, f"http://replay/_qstash/{entry.target}", content=body)
        # One its client was refused (a bad body, say) is refused again, changing nothing.
        with contextlib.suppress(ControlError, ValueError, TypeError):
            _run_now(app._act(request, entry.target))

    def _move_ids(self, ids: IdGenerator, drawn: int) -> None:
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
            ids.__dict__.update(copy.deepcopy(base).__dict__)
        ids.skip(drawn - ids.drawn)

    # -- snapshots ------------------------------------------------------------------------------
    def _state(self, app: QStashServerApp) -> dict[str, Any]:
        fake = app.fake
        return {
            "settings": app.settings,
            "resets": app._resets,
            "roots": {name: vars(get(fake)) for name, get in _ROOTS.items()},
            "fake": _fake_extras(fake),
        }

    def _mark(self, app: QStashServerApp) -> tuple[int, ...]:
        """Changes since the last snapshot show here: journal entries, ids drawn (every
        delivery signs with a fresh one), log lines (every transition), a reset's new fake."""
        store = app.fake.store
        return (self._seq, store.ids.drawn, len(store.events), id(app.fake))

    async def _snapshots(self, app: QStashServerApp) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), SNAPSHOT_EVERY_S)
            self._wake.clear()
            try:
                self._step(app)
            except Exception:
                _log.exception("a snapshot to %s failed; the journal keeps it all", self.path)

    def _step(self, app: QStashServerApp) -> None:
        if self._child is not None and not self._child_done():
            return
        if self._retiring is not None and self._retiring.is_alive():
            return  # no fork while a thread is inside sqlite
        now = time.monotonic()
        if now - self._last_taken < max(SNAPSHOT_EVERY_S, self._took):
            return
        mark = self._mark(app)
        if mark == self._last_mark:
            return
        covered = self._generation
        self._open_journal()  # what comes next goes to a new journal
        self._last_mark, self._last_taken = mark, now
        self._take(app, covered)

    def _take(self, app: QStashServerApp, covered: int) -> None:
        if not FORK:
            blob = _dumps(self._state(app))  # no fork: pickled here, written by a thread
            retire = self._retirement(covered)

            def write_then_retire() -> None:
                self._write(blob, covered)
                retire()

            self._retiring = threading.Thread(target=write_then_retire, daemon=True)
            self._retiring.start()
            return
        with warnings.catch_warnings():
            # Python warns of fork in a process with threads (the resolver's, say): the child
            # only pickles and opens a new sqlite database, and no thread of ours is in
            # sqlite now (checked above).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _become_snapshot_child()
                self._write(_dumps(self._state(app)), covered)
                code = 0
            except BaseException:
                with contextlib.suppress(Exception):
                    os.write(2, f"snapshot failed: {traceback.format_exc()}".encode())
            finally:
                os._exit(code)
        self._child = (pid, covered, time.monotonic())

    def _child_done(self) -> bool:
        assert self._child is not None
        pid, covered, started = self._child
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            return False
        self._child = None
        self._took = time.monotonic() - started
        if os.waitstatus_to_exitcode(status) != 0:
            _log.error("writing a snapshot to %s failed; the journal keeps it all", self.path)
            self._last_mark = ()  # try again
            return True
        self._retiring = threading.Thread(target=self._retirement(covered), daemon=True)
        self._retiring.start()
        return True

    def _write(self, blob: bytes, covered: int) -> None:
        """The snapshot into a new file, synced, then renamed over the old one: a reader
        finds the old snapshot or the new one, whole."""
        temporary = self.path / f"{_SNAPSHOT}.tmp"
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        db = sqlite3.connect(temporary)
        try:
            db.execute("PRAGMA journal_mode=OFF")
            db.execute(
                "CREATE TABLE snapshot (format INTEGER NOT NULL, version TEXT NOT NULL, "
                "layout TEXT NOT NULL, journal INTEGER NOT NULL, written_at TEXT NOT NULL, "
                "state BLOB NOT NULL)"
            )
            db.execute(
                "INSERT INTO snapshot VALUES (?, ?, ?, ?, ?, ?)",
                (
                    FORMAT,
                    _version(),
                    self._layout,
                    covered,
                    time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    blob,
                ),
            )
            db.commit()
        finally:
            db.close()
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temporary, self.path / _SNAPSHOT)
        _sync_dir(self.path)

    def _read_snapshot(self) -> _Snapshot | None:
        path = self.path / _SNAPSHOT
        if not path.exists():
            return None
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                row = db.execute(
                    "SELECT format, version, layout, journal, written_at, state FROM snapshot"
                ).fetchone()
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise PersistenceError(
                f"{path} is no pytest-qstash snapshot ({exc}): use another --data-dir, or "
                "delete the directory to start empty"
            ) from None
        if row is None:
            raise PersistenceError(f"{path} holds no snapshot: delete it to start empty")
        fmt, version, layout, journal, written_at, state = row
        if fmt != FORMAT or layout != self._layout:
            raise PersistenceError(
                f"{path} was written by pytest-qstash {version} (data format {fmt}, state "
                f"layout {layout}); this is pytest-qstash {_version()} (format {FORMAT}, "
                f"layout {self._layout}), which cannot read it safely. Run the version that "
                "wrote it, or start with another --data-dir (or delete this one)"
            )
        return _Snapshot(journal, written_at, state)

    # -- journals -------------------------------------------------------------------------------
    def _journal_path(self, generation: int) -> Path:
        return self.path / f"{_JOURNAL_PREFIX}{generation:08d}.sqlite"

    def _generations(self) -> Iterator[int]:
        for path in self.path.glob(f"{_JOURNAL_PREFIX}*.sqlite"):
            digits = path.name[len(_JOURNAL_PREFIX) : -len(".sqlite")]
            if digits.isdigit():
                yield int(digits)

    def _journal_files(self, covered: int) -> list[Path]:
        """The files of the journals up to ``covered``, their WAL and index too (also those
        a deletion cut short left without their database)."""
        files = []
        for path in self.path.glob(f"{_JOURNAL_PREFIX}*"):
            digits = path.name[len(_JOURNAL_PREFIX) :].partition(".")[0]
            if digits.isdigit() and int(digits) <= covered:
                files.append(path)
        return files

    def _open_journal(self) -> None:
        self._generation += 1
        path = self._journal_path(self._generation)
        # Autocommit: each entry is its own transaction, in the WAL before the answer goes
        # out; NORMAL: no fsync per entry (a killed process loses nothing the OS was given).
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        # No checkpoints while serving (each would copy and sync on the request's path):
        # a journal lives until the next snapshot, then goes whole.
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute(_JOURNAL_SCHEMA)
        previous, self._journal = self._journal, db
        if previous is not None:
            self._open.append((self._generation - 1, previous))

    def _retirement(self, covered: int) -> Callable[[], None]:
        """What deletes the journals a snapshot in place covers. Closing one copies its WAL
        (sqlite checkpoints on close): while serving, a thread does it, off the event loop."""
        closing = [db for generation, db in self._open if generation <= covered]
        self._open = [(g, db) for g, db in self._open if g > covered]
        doomed = self._journal_files(covered)

        def retire() -> None:
            for db in closing:
                with contextlib.suppress(sqlite3.Error):
                    db.close()
            for path in doomed:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

        return retire

    # -- stop -----------------------------------------------------------------------------------
    async def stopped(self, app: QStashServerApp) -> None:
        """A clean stop: the last snapshot, written here (the server serves no more), and the
        journals go; a restart then redelivers nothing."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._child is not None:
            os.waitpid(self._child[0], 0)  # its rename must not land after ours
            self._child = None
        if self._retiring is not None:
            self._retiring.join()
        if self._journal is not None:
            self._write(_dumps(self._state(app)), self._generation)
            self._open.append((self._generation, self._journal))
            self._journal = None
            self._retirement(self._generation)()
        _unlock(self._lock)

    def describe(self, app: QStashServerApp) -> str:
        if self._restored is None and not self._replayed:
            return f"state kept in {self.path} (new)"
        store = app.fake.store
        restored = ", ".join(
            (
                _count(len(store.messages), "message", "messages"),
                _count(len(store.schedules), "schedule", "schedules"),
                _count(len(store.dlq), "DLQ entry", "DLQ entries"),
                _count(len(store.workflows.runs), "workflow run", "workflow runs"),
                _count(self._replayed, "journal entry replayed", "journal entries replayed"),
            )
        )
        return f"state kept in {self.path} (restored: {restored})"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _move_clock(fake: FakeQStash, at_ms: int) -> None:
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


def _become_snapshot_child() -> None:
    """The forked child shares the server's files and sockets: it must touch none of them.
    No collection (a finalizer of garbage could close a connection the server uses) and the
    default signal handling (the event loop's wakeup socket is the server's). It keeps the
    server's priority: a starved child would hold up the next snapshot, and a restart."""
    gc.disable()
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


def _sync_dir(path: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _lock(path: Path) -> Any:
    """Hold the data dir for this server. A killed server's snapshot child holds it until
    its write is done (the lock is shared through fork): a restart waits for it."""
    try:
        import fcntl
    except ImportError:  # Windows: no fork either, so no child to wait for
        return None
    handle = open(path / "lock", "a+")  # noqa: SIM115  # held for the server's lifetime
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > deadline:
                handle.close()
                raise PersistenceError(
                    f"--data-dir {path} is in use by another pytest-qstash serve"
                ) from None
            time.sleep(0.05)


def _unlock(handle: Any) -> None:
    if handle is not None:
        handle.close()
