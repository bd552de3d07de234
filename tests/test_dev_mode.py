"""Dev mode: ``pytest-qstash serve --dev`` (or ``QSTASH_DEV=true``) is what the TypeScript
SDKs' dev mode looks for, so an app configured by nothing but ``QSTASH_DEV=true`` publishes,
verifies and runs workflows through it, and the SDK never downloads Upstash's binary. A port
already in use is one line naming it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ci_requirements import BY_DESIGN
from node_support import NODE_DIR, node_packages, publish_and_run_workflow

from pytest_qstash.server import AppProcess, ServerProcess
from pytest_qstash.server.cli import (
    DEV_CURRENT_SIGNING_KEY,
    DEV_NEXT_SIGNING_KEY,
    DEV_TOKEN,
    UsageError,
    dev_mode_from_env,
    dev_port_from_env,
)
from pytest_qstash.server.processes.node import NodeApp

HERE = Path(__file__).parent
SERVE = [sys.executable, "-m", "pytest_qstash", "serve", "--stop-with-parent"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def without_qstash_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No QSTASH_* variable reaches the apps started after this (the plugin sets some)."""
    for name in list(os.environ):
        if "QSTASH" in name:
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def dev_server() -> Iterator[ServerProcess]:
    with ServerProcess.start(dev=True, clock="real", port=free_port()) as server:
        yield server


# -- the mode's settings ------------------------------------------------------------------------
def test_qstash_dev_as_the_sdks_read_it() -> None:
    assert dev_mode_from_env({}) is False
    assert dev_mode_from_env({"QSTASH_DEV": ""}) is False
    assert dev_mode_from_env({"QSTASH_DEV": "false"}) is False
    assert dev_mode_from_env({"QSTASH_DEV": "0"}) is False
    assert dev_mode_from_env({"QSTASH_DEV": "true"}) is True
    assert dev_mode_from_env({"QSTASH_DEV": "1"}) is True
    with pytest.raises(UsageError, match="invalid QSTASH_DEV 'yes'"):
        dev_mode_from_env({"QSTASH_DEV": "yes"})
    assert dev_port_from_env({}) == 8080
    assert dev_port_from_env({"QSTASH_DEV_PORT": "9123"}) == 9123
    with pytest.raises(UsageError, match="invalid QSTASH_DEV_PORT 'x'"):
        dev_port_from_env({"QSTASH_DEV_PORT": "x"})


def read_lines(process: subprocess.Popen[str], count: int) -> list[str]:
    assert process.stdout is not None
    return [process.stdout.readline().strip() for _ in range(count)]


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param([], {"QSTASH_DEV": "1"}, id="QSTASH_DEV=1"),
        pytest.param([], {"QSTASH_DEV": "true"}, id="QSTASH_DEV=true"),
        pytest.param(["--dev"], {}, id="--dev"),
    ],
)
def test_dev_mode_answers_with_the_public_dev_credentials(
    args: list[str], env: dict[str, str]
) -> None:
    port = free_port()
    child_env = {k: v for k, v in os.environ.items() if "QSTASH" not in k}
    child_env.update(env, QSTASH_DEV_PORT=str(port))
    with subprocess.Popen(
        [*SERVE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env, text=True
    ) as process:
        try:
            lines = read_lines(process, 6)
            assert lines == [
                f"QSTASH_URL=http://127.0.0.1:{port}",
                f"QSTASH_TOKEN={DEV_TOKEN}",
                f"QSTASH_CURRENT_SIGNING_KEY={DEV_CURRENT_SIGNING_KEY}",
                f"QSTASH_NEXT_SIGNING_KEY={DEV_NEXT_SIGNING_KEY}",
                "QSTASH_DEV=true",
                f"QSTASH_DEV_PORT={port}",
            ]
            # What the SDKs' dev-mode probe asks before it would download anything.
            keys = httpx.get(
                f"http://127.0.0.1:{port}/v2/keys",
                headers={"Authorization": f"Bearer {DEV_TOKEN}"},
                trust_env=False,
            )
            assert keys.json() == {"current": DEV_CURRENT_SIGNING_KEY, "next": DEV_NEXT_SIGNING_KEY}
            clock = httpx.get(
                f"http://127.0.0.1:{port}/_qstash/state",
                headers={"Authorization": f"Bearer {DEV_TOKEN}"},
                trust_env=False,
            ).json()
            assert clock["clock"] == "real"  # a real clock unless told otherwise
        finally:
            process.terminate()
            process.communicate(timeout=30)


def test_dev_mode_listens_on_8080_by_default() -> None:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", 8080))
        except OSError:
            pytest.skip(BY_DESIGN.port_8080_taken)
    env = {k: v for k, v in os.environ.items() if "QSTASH" not in k}
    env["QSTASH_DEV"] = "true"
    with subprocess.Popen(
        SERVE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    ) as process:
        try:
            first = read_lines(process, 1)
            if not first[0] and "already in use" in (
                process.stderr.read() if process.stderr else ""
            ):
                pytest.skip(f"{BY_DESIGN.port_8080_taken}: taken meanwhile")
            assert first == ["QSTASH_URL=http://127.0.0.1:8080"]
        finally:
            process.terminate()
            process.communicate(timeout=30)


def test_dev_mode_keeps_its_state_in_a_data_dir(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "qstash")]
    with ServerProcess.start(dev=True, clock="real", args=data) as server:
        assert server.token == DEV_TOKEN
        client = httpx.Client(base_url=server.url, trust_env=False)
        answer = client.post(
            "/v2/publish/http://127.0.0.1:9/later",
            content="kept",
            headers={"Authorization": f"Bearer {DEV_TOKEN}", "Upstash-Delay": "1h"},
        )
        message_id = answer.json()["messageId"]
        client.close()
    with ServerProcess.start(dev=True, clock="real", args=data) as again:
        assert [m.message_id for m in again.messages] == [message_id]
        assert again.env["QSTASH_TOKEN"] == DEV_TOKEN


def test_dev_mode_refuses_other_credentials() -> None:
    done = subprocess.run(
        [*SERVE, "--dev", "--token", "mine"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "leave out --token" in done.stderr
    env = {**os.environ, "QSTASH_DEV": "yes"}
    done = subprocess.run(SERVE, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2
    assert "invalid QSTASH_DEV 'yes'" in done.stderr


@pytest.mark.parametrize("dev", [True, False], ids=["dev", "plain"])
def test_a_port_in_use_is_one_line_naming_it(dev: bool) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if "QSTASH" not in k}
        args = [*SERVE, "--port", str(port)]
        if dev:
            env.update(QSTASH_DEV="true", QSTASH_DEV_PORT=str(port))
            args = SERVE
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert f"port {port} is already in use" in done.stderr


# -- apps configured by QSTASH_DEV alone ----------------------------------------------------------
def test_a_node_app_with_only_qstash_dev(
    dev_server: ServerProcess, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    node_packages()
    without_qstash_env(monkeypatch)
    # The SDK keeps its downloaded binary under the home directory's cache: a fresh home
    # shows whether it tried.
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "QSTASH_DEV": "true",
        "QSTASH_DEV_PORT": dev_server.env["QSTASH_DEV_PORT"],
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    with NodeApp.start_script(NODE_DIR / "env_app.mjs", cwd=NODE_DIR, env=env) as app:
        published, _, received = publish_and_run_workflow(
            app.url, dev_server, {"hello": "dev"}, "dev"
        )
        output = app.output
    assert {"hook": {"hello": "dev"}, "verified": True, "region": None} in received, output
    assert {"workflow": "hello dev"} in received, output
    assert [m.message_id for m in dev_server.messages if m.url.endswith("/hook")] == [
        published["messageId"]
    ]
    # The SDK's probe (GET /v2/keys with the dev token) found this server: no download.
    url = f"http://127.0.0.1:{dev_server.env['QSTASH_DEV_PORT']}"
    assert f"Server already running at {url}" in output
    assert not (home / ".cache" / "upstash").exists()


def test_a_python_app_pointing_qstash_url_at_it(
    dev_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_qstash_env(monkeypatch)
    env = {
        "QSTASH_URL": dev_server.url,
        "QSTASH_TOKEN": DEV_TOKEN,
        "QSTASH_CURRENT_SIGNING_KEY": DEV_CURRENT_SIGNING_KEY,
        "QSTASH_NEXT_SIGNING_KEY": DEV_NEXT_SIGNING_KEY,
    }
    with AppProcess.start("server_app:app", cwd=HERE, env=env) as app:
        answer = httpx.post(f"{app.url}/asignup", json={"user": "ada"}, trust_env=False)
        message_id = answer.json()["message_id"]
        deadline = time.monotonic() + 30
        received: list[dict[str, Any]] = []
        while not received and time.monotonic() < deadline:
            got = httpx.get(f"{app.url}/received", trust_env=False).json()
            received = [r for r in got if r["message_id"] == message_id]
            time.sleep(0.1)
    # server_app verifies with the Receiver and answers 401 otherwise: it kept it, so it passed.
    assert [r["name"] for r in received] == ["welcome"]
    assert [d.status for d in dev_server.deliveries if d.message_id == message_id] == [200]


def test_the_fixture_offers_dev_mode_and_a_region(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The inner run imports this checkout's package, whatever the environment installed.
    monkeypatch.setenv("PYTHONPATH", str(HERE.parent))
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture(scope="session")
        def qstash_server_options():
            return {"dev": True, "region": "us-east-1"}
        """
    )
    pytester.makepyfile(
        f"""
        import os

        import httpx


        def test_an_app_configured_by_qstash_dev_finds_it(qstash_server):
            assert os.environ["QSTASH_DEV"] == "true"
            port = os.environ["QSTASH_DEV_PORT"]
            assert os.environ["QSTASH_URL"] == f"http://127.0.0.1:{{port}}" == qstash_server.url
            assert os.environ["QSTASH_TOKEN"] == {DEV_TOKEN!r}
            keys = httpx.get(
                f"http://127.0.0.1:{{port}}/v2/keys",
                headers={{"Authorization": "Bearer " + {DEV_TOKEN!r}}},
                trust_env=False,
            ).json()
            assert keys["current"] == {DEV_CURRENT_SIGNING_KEY!r}
            assert keys["next"] == {DEV_NEXT_SIGNING_KEY!r}
            assert qstash_server.clock == "virtual"  # the fixture's, as ever
            assert os.environ["QSTASH_REGION"] == "US_EAST_1"
            assert os.environ["US_EAST_1_QSTASH_URL"] == qstash_server.url


        def test_a_test_without_it_does_not_see_dev_mode():
            assert "QSTASH_DEV" not in os.environ
            assert "QSTASH_REGION" not in os.environ
            assert "US_EAST_1_QSTASH_URL" not in os.environ
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
