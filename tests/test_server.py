"""Server mode: ``pytest-qstash serve`` in a child process, an app under uvicorn in another,
real HTTP on loopback between them, the real SDKs, ``requests`` and curl as clients."""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from ports import closed_port
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError

from pytest_qstash import FakeQStash, UnroutedDeliveryError
from pytest_qstash.server import AppProcess, Client, ServerError, ServerProcess
from pytest_qstash.server.processes.server import ENV_NAMES

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def app(qstash_server: ServerProcess) -> Iterator[AppProcess]:
    with AppProcess.start("server_app:app", cwd=HERE) as started:
        yield started


@pytest.fixture(autouse=True)
def _fresh(qstash_server: ServerProcess) -> None:
    qstash_server.reset()


@pytest.fixture
def sdk(qstash_server: ServerProcess) -> Iterator[QStash]:
    client = QStash(qstash_server.token, base_url=qstash_server.url, retry=False)
    yield client
    # The SDK has no close(): its pooled connection to the server would be left for the
    # garbage collector, an unclosed-socket warning in whichever test runs then.
    client.http._client.close()


def received(app: AppProcess, message_id: str) -> list[dict[str, Any]]:
    answer = requests.get(f"{app.url}/received", timeout=10).json()
    return [r for r in answer if r["message_id"] == message_id]


def test_the_fixture_points_app_processes_at_the_server(
    qstash_server: ServerProcess, app: AppProcess
) -> None:
    assert os.environ["QSTASH_URL"] == qstash_server.url
    assert qstash_server.url.startswith("http://127.0.0.1:")
    assert requests.get(app.url, timeout=10).json() == {"qstash_url": qstash_server.url}
    # The session's credentials: app modules imported before the server started keep working.
    assert qstash_server.token == os.environ["QSTASH_TOKEN"]


def test_an_app_publishes_and_is_delivered_to_in_virtual_time(
    qstash_server: ServerProcess, app: AppProcess
) -> None:
    answer = requests.post(f"{app.url}/signup", json={"user_id": 42}, timeout=10)
    message_id = answer.json()["message_id"]

    assert qstash_server.tick() == []  # due in ten minutes of virtual time
    message = qstash_server.messages.one(message_id=message_id)
    assert message.state == "CREATED"
    assert message.json() == {"user_id": 42}
    assert message.url == f"{app.url}/jobs/welcome"

    [delivery] = qstash_server.advance("10m")
    assert delivery.status == 200  # the app's Receiver verified the signature
    assert delivery.json() == {"user_id": 42}
    assert delivery.at == message.not_before
    assert delivery.headers["Upstash-Signature"]
    assert qstash_server.messages.one(message_id=message_id).state == "DELIVERED"
    [seen] = received(app, message_id)
    assert seen["body"] == '{"user_id":42}' or seen["body"] == '{"user_id": 42}'


def test_targets_long_and_repeated_are_each_read_as_sent(
    qstash_server: ServerProcess, sdk: QStash
) -> None:
    # The server keeps the URLs of short targets it has read: a repeated target, and one too
    # long to keep, must each reach the API exactly as sent.
    short = "https://app.test/orders?n=1"
    long = "https://app.test/orders?q=" + "x" * 3000
    ids = [
        sdk.message.publish(url=url, body=str(i)).message_id
        for i, url in enumerate([short, short, long, long])
    ]
    assert len(set(ids)) == 4
    assert [qstash_server.messages.one(message_id=i).url for i in ids] == [short, short, long, long]


def test_async_sdk_and_a_publish_from_inside_a_delivery(
    qstash_server: ServerProcess, app: AppProcess
) -> None:
    async def publish() -> str:
        client = AsyncQStash(qstash_server.token, base_url=qstash_server.url, retry=False)
        result = await client.message.publish_json(url=f"{app.url}/jobs/chain", body={"n": 1})
        await client.http._client.aclose()  # as the sdk fixture closes its client
        return result.message_id  # type: ignore[union-attr]

    message_id = asyncio.run(publish())
    deliveries = qstash_server.tick()  # the chained message is due at the same instant
    assert [(d.url, d.status) for d in deliveries] == [
        (f"{app.url}/jobs/chain", 200),
        (f"{app.url}/jobs/chained", 200),
    ]
    assert deliveries[0].message_id == message_id
    assert len(qstash_server.messages) == 2

    # The app's own async SDK client, on its event loop.
    answer = requests.post(f"{app.url}/asignup", json={"user_id": 7}, timeout=10)
    [delivery] = qstash_server.tick()
    assert delivery.message_id == answer.json()["message_id"]
    assert delivery.status == 200


def test_failures_retry_and_land_in_the_dlq(
    qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    result = sdk.message.publish_json(url=f"{app.url}/jobs/fail", body={"x": 1}, retries=1)
    deliveries = qstash_server.drain()
    assert [(d.status, d.retried) for d in deliveries] == [(500, 0), (500, 1)]
    assert deliveries[0].response_body == "failing on purpose"
    [entry] = qstash_server.dlq
    assert entry.message_id == result.message_id  # type: ignore[union-attr]
    assert entry.response_status == 500
    states = [e.state for e in qstash_server.events.filter(message_id=entry.message_id)]
    assert states[0] == "CREATED"
    assert states[-1] == "FAILED"
    assert qstash_server.next_due() is None


def test_requests_and_curl_work_unchanged(qstash_server: ServerProcess, app: AppProcess) -> None:
    answer = requests.post(
        f"{qstash_server.url}/v2/publish/{app.url}/jobs/plain",
        headers={"Authorization": f"Bearer {qstash_server.token}", "Upstash-Delay": "5s"},
        data="from requests",
        timeout=10,
    )
    assert answer.ok, answer.text
    from_requests = answer.json()["messageId"]
    ids = [from_requests]
    if shutil.which("curl"):
        output = subprocess.run(
            [
                "curl",
                "-sS",
                "-X",
                "POST",
                f"{qstash_server.url}/v2/publish/{app.url}/jobs/plain",
                "-H",
                f"Authorization: Bearer {qstash_server.token}",
                "-d",
                "from curl",
            ],
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
        ids.append(requests.models.complexjson.loads(output)["messageId"])
    delivered = qstash_server.advance("5s")
    assert sorted(d.message_id for d in delivered) == sorted(ids)
    assert all(d.status == 200 for d in delivered)
    assert qstash_server.messages.one(message_id=from_requests).body == "from requests"


def test_only_the_printed_token_is_answered(qstash_server: ServerProcess) -> None:
    url = f"{qstash_server.url}/v2/publish/http://127.0.0.1:9/x"
    missing = requests.post(url, data="x", timeout=10)
    wrong = requests.post(url, data="x", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert "error" in missing.json()
    assert "invalid token" in wrong.json()["error"]
    with pytest.raises(ServerError) as refused:
        Client(qstash_server.url, "nope").tick()
    assert refused.value.status == 401
    assert qstash_server.messages == []  # nothing was stored


def test_inspection_lists(qstash_server: ServerProcess, app: AppProcess, sdk: QStash) -> None:
    sdk.queue.upsert("emails", parallelism=2)
    sdk.url_group.upsert_endpoints(
        url_group="team", endpoints=[{"url": f"{app.url}/jobs/team", "name": "a"}]
    )
    schedule_id = sdk.schedule.create(destination=f"{app.url}/jobs/cron", cron="*/5 * * * *")
    assert qstash_server.queues.one(name="emails").parallelism == 2
    [endpoint] = qstash_server.url_groups.one(name="team").endpoints
    assert (endpoint.url, endpoint.name) == (f"{app.url}/jobs/team", "a")
    schedule = qstash_server.schedules.one(schedule_id=schedule_id)
    assert schedule.cron == "*/5 * * * *"
    assert schedule.next_run == qstash_server.next_due()
    delivered = qstash_server.advance("5m")
    assert [d.url for d in delivered] == [f"{app.url}/jobs/cron"]
    with pytest.raises(AssertionError, match="expected one queue with name='nope'"):
        qstash_server.queues.one(name="nope")


def test_workflow_trigger_reaches_the_app(qstash_server: ServerProcess, app: AppProcess) -> None:
    run_id = qstash_server.trigger(f"{app.url}/jobs/workflow", {"a": 1})
    assert qstash_server.runs.one(run_id=run_id).state == "RUN_STARTED"
    [delivery] = qstash_server.tick()
    assert delivery.headers["Upstash-Workflow-RunId"] == run_id


def test_faults_over_http(qstash_server: ServerProcess, sdk: QStash) -> None:
    qstash_server.fail_next("publish", status=500)
    with pytest.raises(QStashError):
        sdk.message.publish_json(url="http://127.0.0.1:9/x", body={})
    sdk.message.publish_json(url="http://127.0.0.1:9/x", body={})  # the fault fired once
    assert len(qstash_server.messages) == 1


def test_bad_control_requests_say_what_is_accepted(qstash_server: ServerProcess) -> None:
    with pytest.raises(ServerError) as bad:
        qstash_server.advance("7x")
    assert bad.value.status == 400
    assert "7x" in bad.value.message
    with pytest.raises(ServerError) as backwards:
        qstash_server.advance_to("2000-01-01T00:00:00Z")
    assert backwards.value.status == 400
    with pytest.raises(ServerError) as unknown:
        qstash_server._call("POST", "rewind", {})
    assert unknown.value.status == 404
    assert "POST advance_to" in unknown.value.message  # what there is instead


def test_an_endpoint_that_is_down_is_a_failed_attempt(
    qstash_server: ServerProcess, sdk: QStash
) -> None:
    with closed_port() as down:
        sdk.message.publish_json(url=f"http://127.0.0.1:{down}/x", body={}, retries=1)
        [delivery] = qstash_server.tick()
    assert delivery.status is None
    assert delivery.error.startswith("ConnectError")
    assert qstash_server.messages[0].state == "RETRY"


def test_output_is_what_the_process_logged() -> None:
    # The log as the process wrote it (it said "; its output:" first, an error message's tail).
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stderr.write('listening\\n')"], stderr=log
        )
        process.wait(timeout=30)
        env = dict.fromkeys(ENV_NAMES, "x") | {"QSTASH_URL": "http://127.0.0.1:9"}
        server = ServerProcess(process, env, log)

        assert server.output == "listening"
        log.write(b"more\n")  # what the process writes next lands after what was read
        assert server.output == "listening\nmore"


def test_reset_forgets_everything_and_starts_the_clock_afresh(
    qstash_server: ServerProcess, sdk: QStash
) -> None:
    before = sdk.message.publish_json(url="http://127.0.0.1:9/x", body={}, delay="1h")
    qstash_server.advance("400d")
    qstash_server.reset()
    assert qstash_server.messages == []
    assert qstash_server.deliveries == []
    # Now, as a fresh server: the next test does not start where this one moved the clock.
    assert abs(qstash_server.now - datetime.now(timezone.utc)) < timedelta(minutes=5)
    # Apps outlive a reset: a message after it never reuses an id one of them saw before.
    after = sdk.message.publish_json(url="http://127.0.0.1:9/x", body={}, delay="1h")
    assert after.message_id != before.message_id  # type: ignore[union-attr]


def test_real_clock_delivers_on_its_own(app: AppProcess) -> None:
    with ServerProcess.start(clock="real", args=["--credentials-from-env"]) as server:
        assert server.clock == "real"
        sdk = QStash(server.token, base_url=server.url, retry=False)
        first = sdk.message.publish_json(url=f"{app.url}/jobs/now", body={"n": 1})
        later = sdk.message.publish_json(url=f"{app.url}/jobs/later", body={"n": 2}, delay="1s")
        server.wait_until(lambda s: len(s.deliveries) == 2, timeout=20)
        deliveries = server.deliveries
        assert [d.message_id for d in deliveries] == [
            first.message_id,  # type: ignore[union-attr]
            later.message_id,  # type: ignore[union-attr]
        ]
        assert all(d.status == 200 for d in deliveries)
        assert (deliveries[1].at - deliveries[0].at).total_seconds() >= 0.9
        with pytest.raises(ServerError) as refused:
            server.advance("1h")
        assert refused.value.status == 409
        assert "--clock virtual" in refused.value.message
        sdk.http._client.close()  # as the sdk fixture closes its client


def test_command_line_refuses_bad_options() -> None:
    run = [sys.executable, "-m", "pytest_qstash", "serve"]
    port = subprocess.run([*run, "--port", "70000"], capture_output=True, text=True, timeout=60)
    assert port.returncode == 2
    assert "invalid --port 70000" in port.stderr
    start = subprocess.run(
        [*run, "--clock", "virtual", "--start", "soon"], capture_output=True, text=True, timeout=60
    )
    assert start.returncode == 2
    assert "invalid moment 'soon'" in start.stderr
    real = subprocess.run(
        [*run, "--start", "2027-01-01T00:00:00Z"], capture_output=True, text=True, timeout=60
    )
    assert real.returncode == 2
    assert "--clock virtual" in real.stderr


class _Proxy(http.server.BaseHTTPRequestHandler):
    """An HTTP proxy on loopback that answers every request itself (200), keeping its request
    line: what a server configured with it sends beyond loopback ends here."""

    seen: list[str]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.seen.append(self.requestline)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_server_delivers_beyond_loopback_through_the_environments_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No test of ours reaches beyond loopback: the proxy the server's environment names is a
    # loopback one that answers for the app itself.
    seen: list[str] = []
    handler = type("Recording", (_Proxy,), {"seen": seen})
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as proxy:
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        for name in (
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "https_proxy",
            "all_proxy",
            "NO_PROXY",
        ):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy.server_address[1]}")
        monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")  # the SDK reaches the server
        try:
            with ServerProcess.start(clock="virtual") as server:
                sdk = QStash(server.token, base_url=server.url, retry=False)
                sdk.message.publish_json(url="http://app.example.com/hook", body={"n": 1})
                [delivery] = server.tick()
        finally:
            proxy.shutdown()
    assert (delivery.status, delivery.response_body) == (200, "ok")
    assert seen == ["POST http://app.example.com/hook HTTP/1.1"]


def test_in_process_a_delivery_beyond_loopback_is_unrouted() -> None:
    with FakeQStash() as in_process:
        QStash(in_process.token, retry=False).message.publish_json(
            url="https://app.example.com/hook", body={}
        )
        with pytest.raises(UnroutedDeliveryError):
            in_process.tick()


def test_one_server_per_xdist_worker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import json
        import os

        from qstash import QStash


        def test_each_worker_has_its_own(qstash_server, worker_id):
            QStash(os.environ["QSTASH_TOKEN"], retry=False).message.publish(
                url="http://127.0.0.1:9/x", body=worker_id
            )
            assert [m.body for m in qstash_server.messages] == [worker_id]
            out = os.path.join(os.path.dirname(__file__), f"{worker_id}.json")
            with open(out, "w") as f:
                json.dump({"url": os.environ["QSTASH_URL"], "pid": qstash_server.process.pid}, f)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "each")
    result.assert_outcomes(passed=2)
    servers = [json.loads((pytester.path / f"gw{n}.json").read_text()) for n in (0, 1)]
    assert servers[0]["url"] != servers[1]["url"]
    assert servers[0]["pid"] != servers[1]["pid"]


def test_a_suite_on_the_session_server_does_not_lean_on_test_order(
    pytester: pytest.Pytester,
) -> None:
    # The documented pattern: a session server started at a fixed moment, reset before each
    # test. Whatever a test does to the clock, the next one starts at that moment.
    pytester.makepyfile(
        """
        from datetime import datetime, timezone

        import pytest

        START = datetime(2020, 1, 1, tzinfo=timezone.utc)


        @pytest.fixture(scope="session")
        def qstash_server_options():
            return {"start": START.isoformat()}


        @pytest.fixture(autouse=True)
        def _fresh(qstash_server):
            qstash_server.reset()


        def test_a_moves_the_clock_a_year(qstash_server):
            assert qstash_server.now == START
            qstash_server.advance("365d")


        def test_b_starts_at_the_start(qstash_server):
            assert qstash_server.now == START
            qstash_server.reset(start="9999-12-31T23:00:00Z")


        def test_c_starts_at_the_start_too(qstash_server):
            assert qstash_server.now == START
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_only_the_tests_that_use_the_server_see_its_url(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server lives for the session; its QSTASH_URL must not leak into the tests after
    # (in random order or under xdist, a later test's QStash calls went to its port).
    pytester.makepyfile(
        """
        import os

        import pytest


        @pytest.fixture(scope="module")
        def app_env(qstash_server):
            return os.environ["QSTASH_URL"]  # a fixture of the test sees it too


        def test_a_uses_it(qstash_server, app_env):
            assert os.environ["QSTASH_URL"] == qstash_server.url == app_env


        def test_b_does_not():
            assert "QSTASH_URL" not in os.environ


        def test_c_uses_it_again(qstash_server):
            assert os.environ["QSTASH_URL"] == qstash_server.url


        def test_d_does_not_either():
            assert "QSTASH_URL" not in os.environ
        """
    )
    monkeypatch.delenv("QSTASH_URL", raising=False)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


def test_no_server_or_app_outlives_a_killed_test_run(tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text(
        "import os\n"
        "from pytest_qstash.server import AppProcess, ServerProcess\n"
        "server = ServerProcess.start(args=['--stop-with-parent'])\n"
        f"app = AppProcess.start('server_app:app', cwd={str(HERE)!r})\n"
        "print(server.process.pid, app.process.pid, flush=True)\n"
        "os._exit(0)  # no cleanup, as when the run is killed\n"
    )
    output = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    pids = [int(pid) for pid in output.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pids):
        assert time.monotonic() < deadline, "a child process outlived its parent"
        time.sleep(0.1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not yet reaped by init) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_a_binary_body_reads_back_byte_exact_through_the_fixture(
    qstash_server: ServerProcess, sdk: QStash
) -> None:
    body = bytes(range(256))  # every byte: no UTF-8
    published = sdk.message.publish(url="https://example.com/hook", body=body, delay="1h")  # type: ignore[arg-type]
    message_id = published.message_id  # type: ignore[union-attr]
    assert qstash_server.messages.one(message_id=message_id).content == body
    assert Client(qstash_server.url, qstash_server.token).messages.one().content == body
    # The QStash API says it as QStash does: base64 beside no text.
    got = httpx.get(
        f"{qstash_server.url}/v2/messages/{message_id}",
        headers={"Authorization": f"Bearer {qstash_server.token}"},
    ).json()
    assert "body" not in got
    assert base64.b64decode(got["bodyBase64"]) == body
