"""``AppProcess``: an ASGI app under uvicorn in a child process, on a free loopback port.

What an end-to-end test needs around the app under test: the socket is bound here (port 0)
and handed to uvicorn (``--fd``), so there is no race for the port; ``start`` returns once
the app answers HTTP, within a bounded wait; ``stop`` ends it for sure. The child inherits
``os.environ`` (with ``QSTASH_URL`` set by the ``qstash_server`` fixture) plus ``env``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import IO, TypeVar

from .server import end_process, output_suffix, read_log

# Not `uvicorn --fd`: uvicorn reads that socket as AF_UNIX, so asyncio leaves Nagle on and
# every response with a body waits 40 ms for the client's delayed ACK. A socket built from the
# descriptor with nothing said detects its family and protocol (TCP), and asyncio turns it off.
# It also stops when the test process ends, however it ends: no app outlives a killed run.
_LAUNCHER = """
import os, socket, sys, threading, time, uvicorn
sys.path.insert(0, "")
sock = socket.socket(fileno=int(sys.argv[2]))
config = uvicorn.Config(sys.argv[1], log_level="warning", access_log=False)
server = uvicorn.Server(config)
parent = os.getppid()
def watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    server.should_exit = True
threading.Thread(target=watch, daemon=True).start()
server.run(sockets=[sock])
"""

#: Set in the app's environment: its own base URL (what QStash should deliver to).
APP_URL_VARIABLE = "APP_URL"

_Started = TypeVar("_Started", bound="AppProcess")


class AppProcess:
    def __init__(self, process: subprocess.Popen[bytes], url: str, log: IO[bytes]) -> None:
        self.process = process
        self.url = url
        self._log = log

    @classmethod
    def start(
        cls,
        app: str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        ready_path: str = "/",
        timeout: float = 30.0,
    ) -> AppProcess:
        """Start ``app`` (``"module:attribute"``, as uvicorn takes it) and wait until it
        answers ``GET ready_path`` (any status); ``RuntimeError`` with its output if it
        exits or does not answer within ``timeout`` seconds."""
        return cls._launch(
            lambda fd: [sys.executable, "-c", _LAUNCHER, app, str(fd)],
            env=env,
            cwd=cwd,
            ready_path=ready_path,
            timeout=timeout,
        )

    @classmethod
    def _launch(
        cls: type[_Started],
        command: Callable[[int], list[str]],
        *,
        env: Mapping[str, str] | None,
        cwd: str | os.PathLike[str] | None,
        ready_path: str,
        timeout: float,
    ) -> _Started:
        """Run ``command(fd)`` with a listening socket bound here (its file descriptor ``fd``
        inherited: no race for a free port) and wait until it answers ``ready_path``."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        log = tempfile.TemporaryFile()  # noqa: SIM115  # kept for the process's lifetime
        try:
            process = subprocess.Popen(
                command(sock.fileno()),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, APP_URL_VARIABLE: url, **(env or {})},
                cwd=cwd,
                pass_fds=[sock.fileno()],
            )
        finally:
            sock.close()  # the child holds its own copy
        started = cls(process, url, log)
        try:
            started.wait_ready(ready_path, timeout)
        except BaseException:
            started.stop()
            raise
        return started

    def wait_ready(self, path: str = "/", timeout: float = 30.0) -> None:
        """Wait until the app answers ``GET path`` (any status); ``RuntimeError`` with its
        output if it exits or does not answer within ``timeout`` seconds (``start`` waits so
        before it returns)."""
        deadline = time.monotonic() + timeout
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the app exited with {self.process.returncode} before answering"
                    + self._output()
                )
            try:
                opener.open(f"{self.url}{path}", timeout=1).close()
                return
            except urllib.error.HTTPError:
                return  # it answers: any status will do
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the app did not answer within {timeout} s" + self._output())
            time.sleep(0.05)

    @property
    def output(self) -> str:
        """What the app wrote to stdout and stderr so far."""
        return read_log(self._log)

    def _output(self) -> str:
        return output_suffix(self._log)

    def stop(self) -> None:
        end_process(self.process)
        self._log.close()

    def __enter__(self) -> AppProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<AppProcess {self.url} pid={self.process.pid}>"
