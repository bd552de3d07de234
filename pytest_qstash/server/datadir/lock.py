"""The data dir's directory and its lock: private to the user, held by one server at a time."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

from . import snapshot
from .errors import PersistenceError

#: How long a starting server waits for a data dir another process (a snapshot child of a
#: killed server finishing its write) still holds.
LOCK_WAIT_S = 15.0


def private_dir(path: Path) -> None:
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


def lock(path: Path) -> Any:
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


def unlock(handle: Any) -> None:
    if handle is not None:
        handle.close()
