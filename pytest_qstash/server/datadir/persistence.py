"""The server's state on disk (``serve --data-dir DIR``): when to write it, how to load it.

- ``DIR/snapshot.sqlite`` (``snapshot``) holds the whole engine state as of one instant, as
  plain data: a row per object, its fields as JSON (``datadir_codec``). Loading it builds
  only the engine's own classes, by setting their fields: nothing in it is executed.
- ``DIR/journal-N.jsonl`` (``journal``) holds every QStash API request and control action
  answered since, a line each, appended before its answer goes out, with the clock's time
  and the id generator's position. A restart loads the snapshot and replays the journal
  through the same handlers on the same clock, so the ids an answer gave come out the same.

Deliveries are not journaled: those made after the last snapshot are made again after a
crash (QStash is at-least-once). A clean stop writes a final snapshot and redelivers nothing.
So a replayed control action runs to its end without waiting; one that delivers is a clock
move (``CLOCK_MOVES`` of the app), replayed as the clock's move alone.

Snapshots are written by a forked child, which sees the memory of one instant (copy on
write): the server does not stop for it, and the child's encoding and writing use another
core. At most one child runs; the next waits at least ``SNAPSHOT_EVERY_S``. A write that
fails is logged once, shown in ``/_qstash/state`` (``data_dir.error``) and tried again later
and later (``RETRY_MAX_S`` apart at most). Where ``fork`` does not exist (Windows), the state
is encoded in the server and written by a thread.

An upgrade keeps the state: the schema says what the data means, and an older schema is
migrated (``datadir_codec.MIGRATIONS``). A newer one is refused, naming both.

The directory is private (0700 when created here; one other users may write to is refused),
and so are its files (0600): they hold the token, the signing keys and every request's
headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import gc
import importlib.metadata
import json
import logging
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import httpx

from ...delivery.mounts import merge_redirects
from ...engine.account import Account
from ...engine.clock import VirtualClock
from ...engine.ids import IdGenerator
from ...engine.store import Store
from . import codec as codec
from . import journal, snapshot
from .journal import Entry, JournalError, JournalFile, NewerJournal
from .snapshot import Snapshot, SnapshotError

_log = logging.getLogger("pytest_qstash.server")

#: The data-dir layout this version writes (and reads, with older ones migrated).
SCHEMA = codec.SCHEMA  # read from the codec where used (a test may move it)
#: The shortest time between two snapshots (seconds), and the longest a change waits for one.
SNAPSHOT_EVERY_S = 1.0
#: The longest wait before a failed snapshot is tried again (seconds); it doubles up to this.
RETRY_MAX_S = 60.0
#: Whether snapshots are written by a forked child (else: encoded here, written by a thread).
FORK = hasattr(os, "fork")
#: After a restart that replayed a journal, the first snapshot waits this many times as long
#: as reading the data dir took: the first requests of the server's clients come first.
RESTART_SNAPSHOT_WAIT = 5.0
#: How long a starting server waits for a data dir another process (a snapshot child of a
#: killed server finishing its write) still holds.
LOCK_WAIT_S = 15.0

#: The settings a data dir keeps (the rest is the operator's choice at each start; the
#: outbound mounts are kept, and those given at a start join them).
_SETTINGS = ("token", "current_signing_key", "next_signing_key", "clock", "start", "seed", "plan")


class PersistenceError(Exception):
    """A data dir that cannot be used: another version's, another server's, unreadable."""


# -- what persistence needs of the server (it imports neither the app nor the fake) ----------
class Settings(Protocol):
    """The server's settings (a frozen dataclass)."""

    @property
    def token(self) -> str: ...
    @property
    def current_signing_key(self) -> str: ...
    @property
    def next_signing_key(self) -> str: ...
    @property
    def clock(self) -> str: ...
    @property
    def start(self) -> str | None: ...


class Engine(Protocol):
    """The fake a server serves."""

    @property
    def store(self) -> Store: ...
    @property
    def clock(self) -> VirtualClock: ...
    @property
    def account(self) -> Account: ...
    def handle(self, request: httpx.Request) -> httpx.Response: ...
    def saved_extras(self) -> dict[str, Any]: ...
    def restore_extras(self, extras: Mapping[str, Any]) -> None: ...


class Served(Protocol):
    """The server app whose state is kept."""

    @property
    def CLOCK_MOVES(self) -> tuple[str, ...]:  # the app's class constant
        """The control actions that move the clock (and deliver on the way)."""
        ...

    @property
    def fake(self) -> Engine: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def resets(self) -> int: ...
    def answer(self, request: httpx.Request, action: str) -> Coroutine[Any, Any, httpx.Response]:
        """A control action, answered without authentication or journaling."""
        ...


@dataclass(frozen=True)
class Restored:
    """What a data dir gives back to the server beside the engine's state."""

    settings: Any
    resets: int


def _roots(fake: Engine) -> dict[str, Any]:
    # The fake's infrastructure (the dispatcher, the sender, the interception) refers to
    # these: they are restored into the new fake's own objects, so every reference stays one.
    store = fake.store
    roots = {
        "store": store,
        "clock": fake.clock,
        "account": fake.account,
        "workflows": store.workflows,
    }
    if store.retention is not None:  # the clock calls it: restored into it too
        roots["retention"] = store.retention
    return roots


@functools.cache
def _version() -> str:
    try:
        return importlib.metadata.version("pytest-qstash")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# -- the journal's entries -------------------------------------------------------------------
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
        app: Served,
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
        self, app: Served, request: httpx.Request
    ) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def control(
        self, app: Served, request: httpx.Request, action: str
    ) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def load(self, app: Served) -> Restored | None:
        return None

    def started(self, app: Served) -> None:
        pass

    async def stopped(self, app: Served) -> None:
        pass

    def reset(self) -> None:
        pass

    def describe(self, app: Served) -> str:
        return "state in memory, lost when the server stops (--data-dir DIR keeps it)"

    def status(self) -> dict[str, Any] | None:
        """For ``/_qstash/state``: where the state is kept and whether writing it fails."""
        return None


#: What the app calls: ``InMemory``, or a ``DataDir`` (which is one).
Persistence = InMemory


# -- on disk ---------------------------------------------------------------------------------
class DataDir(InMemory):
    """A data dir in use: its lock held, a journal open, snapshots taken as the state changes.

    ``explicit`` names the settings the command line gave (``token``, the signing keys,
    ``start``): a data dir that holds state keeps its own, and refuses different ones.
    """

    def __init__(self, path: str | os.PathLike[str], explicit: frozenset[str] = frozenset()):
        self.path = Path(path)
        self._explicit = explicit
        _private_dir(self.path)
        self._lock = _lock(self.path)
        began = time.monotonic()
        try:
            with _collector_paused():
                self._snapshot: Snapshot | None = snapshot.read(self.path, _version())
            journals = list(journal.generations(self.path))
            for _, path in journals:
                try:
                    journal.check(path)
                except NewerJournal as exc:
                    raise PersistenceError(
                        f"{path}: {exc}. Run that version (or a newer one), or use another "
                        "--data-dir"
                    ) from None
        except SnapshotError as exc:
            _unlock(self._lock)
            raise PersistenceError(str(exc)) from None
        except BaseException:
            _unlock(self._lock)
            raise
        self._journal: JournalFile | None = None
        # Journal generations go on from the snapshot's (its journals may all be gone).
        covered = self._snapshot.journal if self._snapshot is not None else 0
        self._generation = max([covered, *(generation for generation, _ in journals)])
        self._seq = 0
        self._restored: str | None = None
        self._replayed = 0
        #: Journals written and closed to new entries, kept until a snapshot covers them.
        self._open: list[tuple[int, JournalFile]] = []
        #: The child writing a snapshot: its pid, the journal generation it covers, its start,
        #: and the pipe its error comes back on.
        self._child: tuple[int, int, float, int] | None = None
        self._retiring: threading.Thread | None = None
        self._task: Any = None
        self._wake: Any = None
        self._last_mark: tuple[int, ...] = ()
        self._last_taken = 0.0
        #: How long the last snapshot took (the next waits at least as long); before the
        #: first, how long reading one took.
        self._took = time.monotonic() - began
        self._began = began
        #: Why the last write failed (None: it did not), failures in a row, the next try.
        self.error: str | None = None
        self._failures = 0
        self._retry_at = 0.0
        #: Each id generator the replay met, as it was first seen (where a rewind goes).
        self._ids_base: dict[int, tuple[IdGenerator, IdGenerator]] = {}

    # -- the hooks ----------------------------------------------------------------------------
    def api_call(
        self, app: Served, request: httpx.Request
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
        self, app: Served, request: httpx.Request, action: str
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
        try:
            entry = Entry(self._seq, kind, method, target, headers, body, at_ms, drawn)
            self._journal.append(entry)
        except OSError as exc:
            # Its client gets no answer (an error): only what is journaled is acknowledged.
            self._failed(f"journal write failed: {exc}")
            raise PersistenceError(f"the data dir could not record this request: {exc}") from None

    def reset(self) -> None:
        """A reset: the next snapshot as soon as one may be taken (snapshots stay a second
        apart, even in a suite resetting before every test), so what it forgot leaves the
        disk too. What ``serve`` froze out of the collector's sight after the load goes back
        into it: the state a reset forgot can be freed (its objects refer to each other)."""
        gc.unfreeze()
        if self._wake is not None:
            self._wake.set()

    def status(self) -> dict[str, Any] | None:
        return {"path": str(self.path), "error": self.error}

    # -- start ----------------------------------------------------------------------------------
    def load(self, app: Served) -> Restored | None:
        """Before the server binds: the snapshot's state into ``app``'s fake (refusing
        settings that contradict it), and the settings and resets to serve with; the journal
        is replayed once the event loop runs (``started``)."""
        try:
            return self._load(app)
        except BaseException:
            _unlock(self._lock)  # refused: the data dir is free for another start
            raise

    def _load(self, app: Served) -> Restored | None:
        saved = self._snapshot
        if saved is None:
            return None
        settings = self._settings(saved.settings, app.settings)
        fake = app.fake
        try:
            with _collector_paused():
                roots = codec.decode(saved.document, _roots(fake), frozenset({"retention"}))
            extras = roots.get("extras")
            if not isinstance(extras, dict):
                raise codec.CodecError("the saved state has no fake's extras")
            fake.restore_extras(extras)
        except (codec.CodecError, ValueError) as exc:
            raise PersistenceError(
                f"cannot read the state in {self.path / snapshot.NAME}: {exc}. Use another "
                "--data-dir, or delete this one to start empty"
            ) from None
        # An attempt whose app was being called as the snapshot was taken never finished
        # (its answer came after, or never): it is due again, as an abandoned call is.
        for attempt in list(fake.store.in_flight.values()):
            if attempt.ends_ms is None:
                fake.store.requeue(attempt)
        self._restored = saved.written_at
        self._took = time.monotonic() - self._began  # reading and decoding it, all told
        return Restored(settings, saved.resets)

    def _settings(self, stored: dict[str, Any], given: Any) -> Any:
        where = f"--data-dir {self.path}"
        fields = {f.name: f for f in dataclasses.fields(given)}
        kept: dict[str, Any] = {}
        for name in _SETTINGS:
            value = stored.get(name)
            if name in fields and (value is None or type(value) in (str, int)):
                kept[name] = value
        clock = kept.get("clock", given.clock)
        if given.clock != clock:
            raise PersistenceError(
                f"{where} holds the state of a server on a {clock} clock: start it with "
                f"--clock {clock}, or use another --data-dir for a {given.clock} clock"
            )
        if "start" in self._explicit and given.start != stored.get("start"):
            raise PersistenceError(
                f"--start sets where a new server's clock starts; {where} holds a server "
                f"started with --start {stored.get('start') or '(none)'}, whose clock goes on "
                "from where it stopped (leave --start out, give that one, or use another "
                "--data-dir)"
            )
        for name in ("token", "current_signing_key", "next_signing_key"):
            if name in self._explicit and getattr(given, name) != kept.get(name):
                option = "--" + name.replace("_", "-")
                raise PersistenceError(
                    f"{where} holds a server with another {name.replace('_', ' ')} than the "
                    f"one given ({option} or the environment): leave it out to keep the "
                    "stored one, or use another --data-dir"
                )
        # How long one attempt may take, and the region deliveries are marked with, are the
        # operator's choice at each start, not state; mounts given at this start join the
        # stored ones.
        if "mounts" in fields:
            kept["mounts"] = merge_redirects(_redirects(stored.get("mounts")), given.mounts)
        return dataclasses.replace(given, **kept)

    def started(self, app: Served) -> None:
        """On the server's event loop, before it serves: replay the journal, open a new
        journal, start the snapshots (the first one ``RESTART_SNAPSHOT_WAIT`` times as long
        as the load took when the replay changed anything or the snapshot was of an older
        schema)."""
        replayed = 0
        covered = self._snapshot.journal if self._snapshot is not None else 0
        with _collector_paused():
            for generation, path in sorted(journal.generations(self.path)):
                if generation > covered:
                    replayed += self._replay(app, path)
        # Journals the snapshot covers (a deletion a crash cut short) go now.
        self._retirement(covered)()
        self._replayed = replayed
        if self._snapshot is None:
            # A new data dir: its first snapshot (an empty state, quickly written) before any
            # journal entry, so a crash at any point finds the settings the journal needs.
            snapshot.write(self.path, self._state(app), self._generation, _version())
        stale = bool(replayed) or (
            self._snapshot is not None and self._snapshot.schema != codec.SCHEMA
        )
        self._snapshot = None  # its document is in the engine now: not kept twice
        self._open_journal()
        # A stale snapshot is replaced soon, not at once: the journals keep what it lacks,
        # and a server just started has its clients' first requests to answer. The child
        # writing it would take a core for as long as the load took, and each page the
        # server touches meanwhile is copied for it: it waits RESTART_SNAPSHOT_WAIT times
        # as long as the load took (after a second of ordinary wait, at least).
        self._last_mark = () if stale else self._mark(app)
        self._last_taken = time.monotonic()
        if stale:
            self._last_taken += max(0.0, (RESTART_SNAPSHOT_WAIT - 1) * self._took)
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._snapshots(app))

    def _replay(self, app: Served, path: Path) -> int:
        try:
            found = journal.read(path)
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
            self._seq = max(self._seq, entry.seq)
            try:
                self._apply(app, entry)
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

    def _apply(self, app: Served, entry: Entry) -> None:
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
            ids.restore(base)
        ids.skip(drawn - ids.drawn)

    # -- snapshots ------------------------------------------------------------------------------
    def _mark(self, app: Served) -> tuple[int, ...]:
        """Changes since the last snapshot show here: journal entries, ids drawn (every
        delivery signs with a fresh one), log lines (every transition), a reset's new fake."""
        store = app.fake.store
        return (self._seq, store.ids.drawn, len(store.events), id(app.fake))

    async def _snapshots(self, app: Served) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), SNAPSHOT_EVERY_S)
            self._wake.clear()
            try:
                self._step(app)
            except Exception as exc:
                self._failed(f"{type(exc).__name__}: {exc}")

    def _step(self, app: Served) -> None:
        if self._child is not None and not self._child_done():
            return
        if self._retiring is not None and self._retiring.is_alive():
            return  # no fork while a thread works on the data dir's files
        now = time.monotonic()
        if now - self._last_taken < max(SNAPSHOT_EVERY_S, self._took) or now < self._retry_at:
            return
        mark = self._mark(app)
        if mark == self._last_mark:
            return
        covered = self._generation
        self._open_journal()  # what comes next goes to a new journal
        self._last_mark, self._last_taken = mark, now
        self._take(app, covered)

    def _failed(self, why: str) -> None:
        """A write failed: said once (until one succeeds), tried again later and later."""
        self._failures += 1
        self._retry_at = time.monotonic() + min(RETRY_MAX_S, 2.0**self._failures)
        self._last_mark = ()  # the state is not on disk: the next try writes it
        if self.error is None:
            _log.error(
                "writing the state to %s failed (%s); the server goes on in memory and "
                "tries again later (the dashboard and /_qstash/state show it until it works)",
                self.path,
                why,
            )
        self.error = why

    def _succeeded(self) -> None:
        if self.error is not None:
            _log.warning("writing the state to %s works again", self.path)
        self.error, self._failures, self._retry_at = None, 0, 0.0

    def _state(self, app: Served) -> tuple[dict[str, Any], dict[str, list[tuple[int, str]]]]:
        fake = app.fake
        roots = {**_roots(fake), "extras": fake.saved_extras()}
        values, rows = codec.encode(roots)
        settings = app.settings
        kept = {name: getattr(settings, name, None) for name in _SETTINGS}
        kept["mounts"] = [list(pair) for pair in getattr(settings, "mounts", ())]
        meta = {
            "settings": kept,
            "resets": app.resets,
        }
        return {"roots": values, "meta": meta}, rows

    def _take(self, app: Served, covered: int) -> None:
        if not FORK:
            state = self._state(app)  # no fork: encoded here, written by a thread
            retire = self._retirement(covered)

            def write_then_retire() -> None:
                try:
                    snapshot.write(self.path, state, covered, _version())
                except Exception as exc:
                    self._failed(f"{type(exc).__name__}: {exc}")
                    return
                self._succeeded()
                retire()

            self._retiring = threading.Thread(target=write_then_retire, daemon=True)
            self._retiring.start()
            return
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(reader)
                _become_snapshot_child()
                snapshot.write(self.path, self._state(app), covered, _version())
                code = 0
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    os.write(writer, f"{type(exc).__name__}: {exc}"[:2000].encode())
            finally:
                os._exit(code)
        os.close(writer)
        self._child = (pid, covered, time.monotonic(), reader)

    def _child_done(self) -> bool:
        assert self._child is not None
        pid, covered, started, reader = self._child
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            return False
        self._child = None
        self._took = time.monotonic() - started
        try:
            why = os.read(reader, 4096).decode(errors="replace")
        finally:
            os.close(reader)
        if os.waitstatus_to_exitcode(status) != 0:
            self._failed(why or f"the writing process ended with status {status}")
            return True
        self._succeeded()
        self._retiring = threading.Thread(target=self._retirement(covered), daemon=True)
        self._retiring.start()
        return True

    # -- journals -------------------------------------------------------------------------------
    def _open_journal(self) -> None:
        self._generation += 1
        opened = JournalFile(journal.path_of(self.path, self._generation), _version())
        previous, self._journal = self._journal, opened
        if previous is not None:
            self._open.append((self._generation - 1, previous))

    def _retirement(self, covered: int) -> Callable[[], None]:
        """What deletes the journals a snapshot in place covers (while serving, a thread
        does it, off the event loop: deleting a large file takes the file system a while)."""
        closing = [file for generation, file in self._open if generation <= covered]
        self._open = [(g, file) for g, file in self._open if g > covered]
        doomed = journal.files_up_to(self.path, covered)

        def retire() -> None:
            for file in closing:
                with contextlib.suppress(OSError):
                    file.close()
            for path in doomed:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

        return retire

    # -- stop -----------------------------------------------------------------------------------
    async def stopped(self, app: Served) -> None:
        """A clean stop: the last snapshot, written here (the server serves no more), and the
        journals go; a restart then redelivers nothing. When it cannot be written, the
        journals stay (a restart replays them) and the log says why."""
        try:
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            if self._child is not None:
                _, status = os.waitpid(self._child[0], 0)  # its rename must not land after ours
                os.close(self._child[3])
                self._child = None
                if os.waitstatus_to_exitcode(status) != 0:
                    self._last_mark = ()  # what it was writing is not on disk
            if self._retiring is not None:
                self._retiring.join()
            if self._journal is not None:
                journal, self._journal = self._journal, None
                self._open.append((self._generation, journal))
                # Nothing changed since the last snapshot (written whole): it is the last
                # one, and the journal opened after it is empty. A large state that was only
                # read stops at once.
                unchanged = self.error is None and self._last_mark == self._mark(app)
                try:
                    if not unchanged:
                        snapshot.write(self.path, self._state(app), self._generation, _version())
                except Exception as exc:
                    _log.error(
                        "the last snapshot to %s failed (%s: %s); the journals keep what "
                        "changed, and the next start replays them",
                        self.path,
                        type(exc).__name__,
                        exc,
                    )
                    for _, file in self._open:
                        with contextlib.suppress(OSError):
                            file.close()
                    return
                self._retirement(self._generation)()
        finally:
            _unlock(self._lock)

    def describe(self, app: Served) -> str:
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


def _redirects(value: Any) -> tuple[tuple[str, str], ...]:
    """Stored outbound mounts: [prefix, target] pairs of text (anything else: none)."""
    if not isinstance(value, list):
        return ()
    return tuple(
        (pair[0], pair[1])
        for pair in value
        if isinstance(pair, list) and len(pair) == 2 and all(type(p) is str for p in pair)
    )


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


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


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a state is read and built: it allocates hundreds
    of thousands of objects that all stay, and each collection those allocations trigger
    would walk everything built so far (half the time of a load)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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


# -- the directory and its files ---------------------------------------------------------------
def _private_dir(path: Path) -> None:
    """Create the directory 0700; refuse one other users may write to (they could put a
    state there for this server to load, or swap its files)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        mode = path.stat().st_mode
    except OSError as exc:
        raise PersistenceError(f"cannot use --data-dir {path}: {exc}") from None
    if os.name == "posix" and mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PersistenceError(
            f"--data-dir {path} can be written by other users (mode {stat.S_IMODE(mode):o}): "
            f"it holds the token and signing keys, and what it holds is loaded. Make it "
            f"private (chmod 700 {path}), or use another --data-dir"
        )


def _lock(path: Path) -> Any:
    """Hold the data dir for this server. A killed server's snapshot child holds it until
    its write is done (the lock is shared through fork): a restart waits for it."""
    try:
        import fcntl
    except ImportError:  # Windows: no fork either, so no child to wait for
        return None
    lock = path / "lock"
    try:
        snapshot.create_private_file(lock)
    except OSError as exc:
        raise PersistenceError(f"cannot use --data-dir {path}: {exc}") from None
    handle = open(lock, "a+")  # noqa: SIM115  # held for the server's lifetime
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
