"""``pytest-qstash serve`` under bad input and idle connections: deeply nested JSON and numbers
out of range get a 4xx saying what is accepted, connections that send no request are closed,
and running out of descriptors costs a log line, not a traceback per accept.

Real server processes on loopback, reached with ``requests`` and raw sockets.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import typing
from collections.abc import Iterator

import pytest
import requests
from ci_requirements import BY_DESIGN

from pytest_qstash.server import ServerProcess
from pytest_qstash.server.cli import DEFAULT_IDLE_TIMEOUT_S, main, parser
from pytest_qstash.server.dashboard.routes import DASHBOARD_PATH, dashboard_link

NESTED = "[" * 100_000 + "]" * 100_000
#: Deep enough to pass the JSON parser and trip whatever reads the value next.
HALF_NESTED = "[" * 900 + "]" * 900


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess.start(clock="virtual", args=["--idle-timeout=1s"]) as started:
        yield started


def _control(server: ServerProcess, action: str, body: str) -> requests.Response:
    return requests.post(
        f"{server.url}/_qstash/{action}",
        data=body,
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=30,
    )


def _dashboard(server: ServerProcess) -> requests.Session:
    session = requests.Session()
    session.get(dashboard_link(server.url, server.token), timeout=10).raise_for_status()
    session.headers["X-QStash-Dashboard"] = "1"
    return session


@pytest.mark.parametrize("nested", [NESTED, HALF_NESTED], ids=["100000-deep", "900-deep"])
def test_nested_json_is_a_400(server: ServerProcess, nested: str) -> None:
    session = _dashboard(server)
    for action in ("tick", "advance", "advance_to", "redeliver", "retry_dlq"):
        answer = session.post(f"{server.url}{DASHBOARD_PATH}/act/{action}", data=nested)
        assert answer.status_code == 400, (action, answer.text[:200])
        assert "expected a JSON object" in answer.json()["error"]
        if action != "tick":  # the one action that takes no field
            body = f'{{"by": {nested}, "to": {nested}, "message_id": {nested}, "dlq_id": 1}}'
            answer = session.post(f"{server.url}{DASHBOARD_PATH}/act/{action}", data=body)
            assert answer.status_code == 400, (action, answer.text[:200])
            assert answer.json()["error"]
    fields = ("by", "to", "start", "url", "event_id", "message_id", "dlq_id", "keep", "endpoint")
    every_field = "{" + ", ".join(f'"{name}": {nested}' for name in fields) + "}"
    for action in ("reset", "advance", "advance_to", "fail_next", "trigger", "notify"):
        answer = _control(server, action, nested)
        assert answer.status_code == 400, (action, answer.text[:200])
        answer = _control(server, action, every_field)
        assert 400 <= answer.status_code < 500, (action, answer.text[:200])
        assert answer.json()["error"]


@pytest.mark.parametrize("number", ["1e308", "-1e308", "NaN", "Infinity", "-Infinity", "1e400"])
def test_numbers_out_of_range_are_a_400(server: ServerProcess, number: str) -> None:
    for action, name in (("reset", "start"), ("advance_to", "to"), ("advance", "by")):
        answer = _control(server, action, f'{{"{name}": {number}}}')
        assert answer.status_code == 400, (action, answer.text)
        error = answer.json()["error"]
        # Says what is accepted: a moment, a duration, or what JSON is.
        assert "expected" in error or "not JSON" in error, error
    state = requests.get(
        f"{server.url}/_qstash/state",
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=10,
    )
    assert state.status_code == 200  # still serving
    session = _dashboard(server)
    answer = session.post(f"{server.url}{DASHBOARD_PATH}/act/advance", data=f'{{"by": {number}}}')
    assert answer.status_code == 400


def test_dashboard_actions_say_which_types_they_take(server: ServerProcess) -> None:
    session = _dashboard(server)
    for action, body in (
        ("advance", '{"by": ["1m"]}'),
        ("advance_to", '{"to": {"at": 1}}'),
        ("redeliver", '{"message_id": 7}'),
        ("retry_dlq", '{"dlq_id": true}'),
    ):
        answer = session.post(f"{server.url}{DASHBOARD_PATH}/act/{action}", data=body)
        assert answer.status_code == 400, (action, answer.text)
        assert "expected a non-empty string" in answer.json()["error"]


#: How long a test waits for the server to act before it fails: a guard against hanging, not
#: a measure (the bound under test is 1 s; a loaded machine may take far longer to act on it).
PATIENCE_S = 60


def _closed(sock: socket.socket) -> bool:
    """Whether the server closes ``sock``, waiting for it at most ``PATIENCE_S``."""
    sock.settimeout(PATIENCE_S)
    try:
        while True:
            if sock.recv(4096) == b"":
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _bound_passed_for_earlier_connections(server: ServerProcess) -> None:
    """Returns once the bound has passed for every connection opened before this call: a new,
    silent connection is closed by it, and the server arms its timers in the order
    connections arrive."""
    with _connect(server.url) as later:
        assert _closed(later), "a silent connection stayed open"


def test_connections_without_a_request_are_closed(server: ServerProcess) -> None:
    silent = _connect(server.url)
    half = _connect(server.url)
    half.sendall(b"GET /_qstash/state HTTP/1.1\r\nHost: x\r\n")  # the head never ends
    after_answer = _connect(server.url)
    after_answer.sendall(b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
    after_answer.recv(4096)  # one answer, then silence
    for sock in (silent, half, after_answer):
        with sock:
            assert _closed(sock), "the idle connection stayed open"


def test_a_head_slower_than_the_bound_is_closed_unanswered(server: ServerProcess) -> None:
    # --idle-timeout bounds the time to send a request's head: one that is still arriving
    # when the bound passes is cut, whatever it has sent so far.
    with _connect(server.url) as slow:
        slow.sendall(b"GET /_qstash/state HTTP/1.1\r\nHost: x\r\n")
        _bound_passed_for_earlier_connections(server)
        try:
            slow.sendall(f"Authorization: Bearer {server.token}\r\n\r\n".encode())
        except (BrokenPipeError, ConnectionResetError):
            return  # refused outright: unanswered
        slow.settimeout(PATIENCE_S)
        try:
            answer = slow.recv(4096)
        except ConnectionResetError:
            answer = b""
        assert answer == b"", answer[:200]


def test_a_request_whose_head_arrived_is_answered_however_slow_its_body(
    server: ServerProcess,
) -> None:
    # The bound is on the head only: once it has arrived, the body (and the handling) may
    # take longer than the bound, and the request is answered.
    body = b'{"by": "1s"}'
    head = (
        "POST /_qstash/advance HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {server.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with _connect(server.url) as slow:
        slow.sendall(head.encode() + body[:3])
        _bound_passed_for_earlier_connections(server)
        slow.sendall(body[3:])
        slow.settimeout(PATIENCE_S)
        assert slow.recv(4096).startswith(b"HTTP/1.1 200")


def test_the_default_bound_and_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert 0 < DEFAULT_IDLE_TIMEOUT_S <= 30
    assert parser().parse_args(["serve"]).idle_timeout == f"{DEFAULT_IDLE_TIMEOUT_S:g}s"
    for bad in ("0s", "soon", "-1s"):
        assert main(["serve", "--port=0", f"--idle-timeout={bad}"]) == 2  # before binding
        assert "--idle-timeout" in capsys.readouterr().err


def _wait_for_line(log: typing.BinaryIO, text: str) -> None:
    """Returns once ``text`` is in the ``log`` a child process writes (within PATIENCE_S)."""
    deadline = time.monotonic() + PATIENCE_S
    while text.encode() not in os.pread(log.fileno(), 1 << 20, 0):
        assert time.monotonic() < deadline, f"no {text!r} in the server's log"
        time.sleep(0.05)


@pytest.mark.skipif(sys.platform != "linux", reason=BY_DESIGN.linux_descriptors)
def test_running_out_of_descriptors_is_one_log_line() -> None:
    limit = 64

    def lower_the_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest_qstash",
                "serve",
                "--port=0",
                "--clock=virtual",
                "--idle-timeout=3s",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=lower_the_limit,  # in the child, before it serves
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert process.stdout is not None
            env = {}
            for _ in range(4):  # the four NAME=value lines
                name, _, value = process.stdout.readline().decode().strip().partition("=")
                env[name] = value
            url, token = env["QSTASH_URL"], env["QSTASH_TOKEN"]
            sockets = [_connect(url) for _ in range(3 * limit)]  # the backlog takes the rest
            _wait_for_line(log, "cannot accept connections")
            # The bound closes the idle ones, a few at a time: it answers again.
            deadline = time.monotonic() + 40
            while True:
                try:
                    answer = requests.get(
                        f"{url}/_qstash/state",
                        headers={"Authorization": f"Bearer {token}"},
                        timeout=5,
                    )
                    break
                except requests.RequestException:
                    assert time.monotonic() < deadline, "the server no longer answers"
                    time.sleep(0.2)
            assert answer.status_code == 200
            for sock in sockets:
                sock.close()
        finally:
            process.terminate()
            process.wait(timeout=30)
        log.seek(0)
        stderr = log.read().decode(errors="replace")
    assert len(stderr) < 5000, stderr[:5000]
    assert "Traceback" not in stderr
    assert stderr.count("cannot accept connections") == 1, stderr
