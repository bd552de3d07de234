"""Node apps against the server: their packages installed from the lockfile, the app started.

A test of a Node workflow app (the TypeScript SDKs, ``@upstash/workflow`` and
``@upstash/qstash``) needs two things around ``qstash_server``: the app's ``node_modules``,
installed on first use with ``npm ci`` from its ``package-lock.json`` (once, under a file lock,
however many pytest-xdist workers ask), and the app in a child process on a free port
(``NodeApp``, an ``AppProcess`` whose command is ``node``). Where Node or npm is missing, or the
registry cannot be reached, ``NodeUnavailable`` says so in one line, for the test to skip with.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from .apps import AppProcess

#: Written into node_modules once ``npm ci`` succeeded: the lockfile's hash it installed.
_STAMP = ".pytest-qstash-lock-hash"

#: What npm prints when it cannot reach the registry (no network, a proxy, DNS).
_OFFLINE_SIGNS = (
    "ENOTFOUND",
    "EAI_AGAIN",
    "ECONNREFUSED",
    "ECONNRESET",
    "ETIMEDOUT",
    "ENETUNREACH",
    "EHOSTUNREACH",
    "network request",
    "request to http",
    "SELF_SIGNED_CERT",
    "UNABLE_TO_GET_ISSUER_CERT",
)


class NodeUnavailable(RuntimeError):
    """Node or npm is missing, or the npm registry cannot be reached: the reason, one line."""


def node_executable() -> str:
    """The ``node`` on ``PATH``; ``NodeUnavailable`` when there is none."""
    found = shutil.which("node")
    if found is None:
        raise NodeUnavailable("node is not installed (not found on PATH)")
    return found


def install_node_packages(directory: str | os.PathLike[str], *, timeout: float = 600) -> Path:
    """Install the packages of ``directory``'s ``package-lock.json`` into its ``node_modules``
    with ``npm ci``, unless that lockfile is what is installed already; returns the directory.

    Safe to call from every pytest-xdist worker at once: one installs, the others wait for it
    (a file lock) and find it done. ``NodeUnavailable`` when ``node``/``npm`` is missing or
    the registry cannot be reached; ``RuntimeError`` with npm's output for any other failure.
    """
    root = Path(directory).resolve()
    lockfile = root / "package-lock.json"
    if not lockfile.is_file():
        raise RuntimeError(f"{lockfile} is missing: commit the lockfile next to package.json")
    node_executable()
    npm = shutil.which("npm")
    if npm is None:
        raise NodeUnavailable("npm is not installed (not found on PATH)")
    wanted = hashlib.sha256(lockfile.read_bytes()).hexdigest()
    stamp = root / "node_modules" / _STAMP
    if _read(stamp) == wanted:
        return root
    with _file_lock(root / ".npm-ci.lock"):
        if _read(stamp) == wanted:  # another worker installed it while this one waited
            return root
        command = [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"]
        try:
            done = subprocess.run(
                command,
                cwd=root,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise NodeUnavailable(
                f"npm ci in {root} did not finish within {timeout:.0f} s (registry unreachable?)"
            ) from None
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip()
            if any(sign in output for sign in _OFFLINE_SIGNS):
                first = next((line for line in output.splitlines() if line.strip()), "")
                raise NodeUnavailable(f"npm ci cannot reach the registry: {first.strip()}")
            raise RuntimeError(f"npm ci failed in {root} (exit {done.returncode}):\n{output}")
        stamp.write_text(wanted)
    return root


class NodeApp(AppProcess):
    """A Node HTTP app in a child process, serving on a socket bound here (no race for a
    port): ``node <script> <fd> [args...]``, the script listening on that file descriptor
    (``server.listen({fd})``). It inherits ``os.environ`` (``QSTASH_URL`` and the credentials
    that ``qstash_server`` set) plus ``env`` and ``APP_URL``, its own base URL."""

    @classmethod
    def start_script(
        cls,
        script: str | os.PathLike[str],
        *,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        ready_path: str = "/",
        timeout: float = 30.0,
    ) -> NodeApp:
        """Start ``script`` with ``node`` and wait until it answers ``GET ready_path``."""
        node = node_executable()
        return cls._launch(
            lambda fd: [node, os.fspath(script), str(fd), *args],
            env=env,
            cwd=cwd,
            ready_path=ready_path,
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"<NodeApp {self.url} pid={self.process.pid}>"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` across processes, held for the block."""
    with open(path, "a+b") as handle:
        if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
            import msvcrt

            handle.seek(0)
            msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)
            try:
                yield
            finally:
                handle.seek(0)
                msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
        else:
            import fcntl

            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
