"""A data dir served read-only (``serve --read-only --data-dir DIR``): its state is read as a
restart reads it (the snapshot, then its journals replayed), and nothing is ever written
back: no journal, no snapshot, not even at a clean stop. The lock is held all the same, so
no other server changes the files while this one shows them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import journal
from .errors import PersistenceError
from .lock import unlock
from .persistence import DataDir, InMemory
from .served import Served


class ReadOnlyDataDir(DataDir):
    """``DataDir`` that reads and never writes."""

    def __init__(self, path: str | os.PathLike[str], explicit: frozenset[str] = frozenset()):
        if not Path(path).is_dir():
            raise PersistenceError(
                f"--read-only serves the state --data-dir {path} holds, and there is no such "
                "directory: give the data dir of a server that ran"
            )
        super().__init__(path, explicit)

    # Nothing journaled, nothing reset on disk: as when no data dir is used.
    api_call = InMemory.api_call
    control = InMemory.control
    reset = InMemory.reset

    def started(self, app: Served) -> None:
        """Replay the journals the snapshot does not cover, in memory."""
        covered = self._snapshot.journal if self._snapshot is not None else 0
        for generation, path in sorted(journal.generations(self.path)):
            if generation > covered:
                self._replayed += self._replayer.file(app, path)
        self._snapshot = None

    async def stopped(self, app: Served) -> None:
        unlock(self._lock)

    def status(self) -> dict[str, Any] | None:
        return {"path": str(self.path), "error": None, "read_only": True}

    def describe(self, app: Served) -> str:
        said = super().describe(app).replace("state kept in", "state read from", 1)
        return f"{said}; read-only: nothing is written back"
