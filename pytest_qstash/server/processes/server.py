"""A server in a child process: started with a free port, read back, stopped for sure.

A child process rather than a thread: the server keeps its own real clock while the test
process's is frozen on a fixture's virtual time, and no httpx mock of the test reaches it.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import tempfile
import threading
from types import TracebackType
from typing import IO, Any

from ...wire.regions import REGIONS, region_named
from ..control.client import Client

#: The lines the server prints, in order, before it serves.
ENV_NAMES = ("QSTASH_URL", "QSTASH_TOKEN", "QSTASH_CURRENT_SIGNING_KEY", "QSTASH_NEXT_SIGNING_KEY")
#: The lines dev mode prints after those.
DEV_ENV_NAMES = ("QSTASH_DEV", "QSTASH_DEV_PORT")


def region_env_names(region: str) -> tuple[str, ...]:
    """The lines a server in ``region`` prints after the others."""
    return tuple(region_named(region).env("", "", "", ""))


#: Every variable a server may print: what the fixture sets for a test and restores after.
ALL_ENV_NAMES = tuple(
    dict.fromkeys([*ENV_NAMES, *DEV_ENV_NAMES, *(n for r in REGIONS for n in region_env_names(r))])
)


class ServerProcess(Client):
    """``pytest-qstash serve`` in a child process, with the ``Client`` verbs and lists.

    ``ServerProcess.start(clock="virtual")`` returns once it listens; ``stop()`` (or leaving
    a ``with`` block) ends it. ``env`` holds the four variables an app needs (and, in dev
    mode or a region, the variables the SDKs read there)."""

    def __init__(self, process: subprocess.Popen[bytes], env: dict[str, str], log: IO[bytes]):
        super().__init__(env["QSTASH_URL"], env["QSTASH_TOKEN"])
        self.process = process
        self.env = env
        self._log = log

    @classmethod
    def start(
        cls,
        *,
        clock: str = "virtual",
        host: str = "127.0.0.1",
        port: int = 0,
        start: str | None = None,
        seed: int | str = 0,
        attempt_timeout: float | str | None = None,
        retention: bool | None = None,
        args: list[str] | tuple[str, ...] = (),
        timeout: float = 30.0,
        dev: bool = False,
        region: str | None = None,
        simulate: int | None = None,
        faults: list[str] | tuple[str, ...] | None = None,
    ) -> ServerProcess:
        """``attempt_timeout``: the real-time bound on one delivery attempt (seconds or a
        duration such as ``"500ms"``; the server's default is 30 s). ``retention``: whether
        the plan's retention forgets old records (``serve --retention on|off``; None: the
        server's default, on). ``dev``: dev mode (Upstash's public dev credentials; ``env``
        adds ``QSTASH_DEV`` and ``QSTASH_DEV_PORT``). ``region``: deliveries marked with it
        (``env`` adds ``QSTASH_REGION`` and the region's variables). ``simulate``: a seed;
        the server injects the faults QStash's at-least-once contract allows on its schedule
        (``faults`` picks kinds)."""
        if retention is not None and not isinstance(retention, bool):
            raise TypeError(f"invalid retention={retention!r}: expected True or False")
        wanted = [*ENV_NAMES, *(DEV_ENV_NAMES if dev else ())]
        if region is not None:
            wanted += region_env_names(region)
        command = [
            sys.executable,
            "-m",
            "pytest_qstash",
            "serve",
            f"--clock={clock}",
            f"--host={host}",
            f"--port={port}",
            f"--seed={seed}",
            *([f"--start={start}"] if start is not None else []),
            *(
                [f"--attempt-timeout={_duration(attempt_timeout)}"]
                if attempt_timeout is not None
                else []
            ),
            *([f"--retention={'on' if retention else 'off'}"] if retention is not None else []),
            *(["--dev"] if dev else []),
            *([f"--region={region}"] if region is not None else []),
            *([f"--simulate={simulate}"] if simulate is not None else []),
            *([f"--faults={','.join(faults)}"] if faults is not None else []),
            *args,
        ]
        # Dev mode is asked for by ``dev`` alone: a QSTASH_DEV of the calling process (an app's
        # own dev setup) must not turn a server into another.
        child_env = {k: v for k, v in os.environ.items() if k not in DEV_ENV_NAMES}
        log = tempfile.TemporaryFile()  # noqa: SIM115  # kept for the process's lifetime
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            env={**child_env, "PYTHONUNBUFFERED": "1"},
        )
        assert process.stdout is not None
        lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
        env: dict[str, str] = {}
        try:
            while len(env) < len(wanted):
                try:
                    line = lines.get(timeout=timeout).decode().strip()
                except queue.Empty:
                    raise RuntimeError(
                        f"pytest-qstash serve did not start within {timeout} s" + output_suffix(log)
                    ) from None
                if not line:  # end of output: the process ended
                    raise RuntimeError(
                        f"pytest-qstash serve exited with {process.wait()}" + output_suffix(log)
                    )
                name, _, value = line.partition("=")
                if name in wanted:
                    env[name] = value
        except BaseException:
            end_process(process)
            log.close()
            raise
        return cls(process, env, log)

    @property
    def output(self) -> str:
        """What the server wrote to stderr so far (its log)."""
        return read_log(self._log).strip()

    def stop(self) -> None:
        end_process(self.process)
        self._log.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<pytest_qstash ServerProcess {self.url} pid={self.process.pid}>"


def _duration(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:g}s"


def _read_lines(stream: IO[bytes], lines: queue.Queue[bytes]) -> None:
    for line in iter(stream.readline, b""):
        lines.put(line)
    lines.put(b"")


def read_log(log: IO[bytes]) -> str:
    """What a child process wrote to its log file so far ("" once the file is closed)."""
    if log.closed:
        return ""
    log.flush()
    log.seek(0)
    text = log.read().decode("utf-8", errors="replace")
    # The child writes through the same open file, sharing its offset: leave it at the end,
    # where the child's next line goes.
    log.seek(0, os.SEEK_END)
    return text


def output_suffix(log: IO[bytes]) -> str:
    """The log, to end an error message with (nothing when it is empty)."""
    text = read_log(log)
    return f"; its output:\n{text}" if text else ""


def end_process(process: subprocess.Popen[Any]) -> None:
    """Stop a child process: politely, then for good; never left running."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    if process.stdout is not None:
        process.stdout.close()
