"""The server's state on disk (``serve --data-dir DIR``): when to write it, how to load it.

- ``DIR/snapshot.sqlite`` (``snapshot``) holds the whole engine state as of one instant, as
  plain data: a row per object, its fields as JSON (``datadir_codec``). Loading it builds
  only the engine's own classes, by setting their fields: nothing in it is executed.
- ``DIR/journal-N.jsonl`` (``journal``) holds every QStash API request and control action
  answered since, a line each, appended before its answer goes out, with the clock's time
  and the id generator's position. A restart loads the snapshot and replays the journal
  (``journal.Replay``) through the same handlers on the same clock, so the ids an answer gave
  come out the same.

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
headers (``lock``, which also holds it for one server). The settings a data dir keeps meet
those a start gives in ``settings``; what the data dir needs of the server is ``served``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib.metadata
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ...engine.ids import IdGenerator
from . import codec as codec
from . import journal, snapshot
from .errors import PersistenceError
from .journal import Entry, JournalFile, NewerJournal
from .lock import lock as _lock
from .lock import private_dir as _private_dir
from .lock import unlock as _unlock
from .served import Engine, Served
from .settings import kept, reconcile
from .snapshot import Snapshot, SnapshotError

__all__ = ["DataDir", "InMemory", "Persistence", "PersistenceError", "Restored"]

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
        self._replayer = journal.Replay()

    # -- the hooks ----------------------------------------------------------------------------
    def api_call(
        self, app: Served, request: httpx.Request
    ) -> contextlib.AbstractContextManager[None]:
        return journal.Recording(
            self.append,
            app,
            "api",
            request.method,
            str(request.url),
            journal.header_block(request.headers),
            request.content,
        )

    def control(
        self, app: Served, request: httpx.Request, action: str
    ) -> contextlib.AbstractContextManager[None]:
        if request.method == "GET":
            return contextlib.nullcontext()  # reads change nothing
        return journal.Recording(
            self.append, app, "control", request.method, action, b"", request.content
        )

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
        settings = reconcile(saved.settings, app.settings, self._explicit, self.path)
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
                    replayed += self._replayer.file(app, path)
        self._seq = max(self._seq, self._replayer.seq)
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

    def _move_ids(self, ids: IdGenerator, drawn: int) -> None:
        """Where the replay puts the id generator before an entry (``journal.Replay``)."""
        self._replayer.move_ids(ids, drawn)

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
        meta = {
            "settings": kept(app.settings),
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


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


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
