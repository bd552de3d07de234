"""Server mode under slow and hanging endpoints: attempts in flight at once within their
queue's and flow-control key's limits, each bounded in real time, and the control API
answering throughout. Real processes on loopback: the server, two apps under uvicorn, the
real SDK publishing."""

from __future__ import annotations

import http.client
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from qstash import QStash

from pytest_qstash.server import AppProcess, ServerProcess
from pytest_qstash.server.cli import main
from pytest_qstash.server.control.app import MAX_BODY_BYTES, BodyTooLarge, _read_request
from pytest_qstash.server.runner.deliveries import attempt_timeout_error
from pytest_qstash.server.serving import beyond_loopback_warning

HERE = Path(__file__).parent
#: The servers' attempt timeout here: what a hanging endpoint costs a test.
BOUND_S = 1.0


@pytest.fixture(scope="module")
def apps() -> Iterator[tuple[AppProcess, AppProcess]]:
    with (
        AppProcess.start("server_timing_app:app", cwd=HERE) as one,
        AppProcess.start("server_timing_app:app", cwd=HERE) as other,
    ):
        yield one, other


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess.start(
        clock="virtual", attempt_timeout=BOUND_S, args=["--credentials-from-env"]
    ) as started:
        yield started


@pytest.fixture
def sdk(server: ServerProcess) -> QStash:
    server.reset()
    return QStash(server.token, base_url=server.url, retry=False)


def app_log(app: AppProcess, message_id: str) -> list[dict[str, Any]]:
    entries = requests.get(f"{app.url}/log", timeout=10).json()
    return [e for e in entries if e["id"] == message_id]


def most_at_once(entries: list[dict[str, Any]]) -> int:
    moments = sorted([(e["start"], 1) for e in entries] + [(e["end"], -1) for e in entries])
    running = peak = 0
    for _, step in moments:
        running += step
        peak = max(peak, running)
    return peak


def test_one_virtual_instant_starts_together_and_records_in_publish_order(
    server: ServerProcess, sdk: QStash, apps: tuple[AppProcess, AppProcess]
) -> None:
    one, other = apps
    hang = sdk.message.publish_json(url=f"{one.url}/hang", body={}, retries=1)
    short = sdk.message.publish_json(url=f"{one.url}/hang", body={}, retries=1, timeout="300ms")
    slow = sdk.message.publish_json(url=f"{other.url}/slow/200", body={})
    ok = sdk.message.publish_json(url=f"{other.url}/ok", body={})
    ids = [m.message_id for m in (hang, short, slow, ok)]  # type: ignore[union-attr]

    ticked: list[Any] = []
    ticking = threading.Thread(target=lambda: ticked.extend(server.tick()))
    ticking.start()
    try:
        # The control API answers while the round is in flight.
        server.wait_until(lambda s: s.messages.one(message_id=ids[0]).state == "ACTIVE", 10)
        assert ticking.is_alive()
    finally:
        ticking.join(30)

    # Answers came back in another order (ok, slow, the 300 ms cut, the server's bound);
    # they are recorded in the order the attempts started: publish order.
    assert [d.message_id for d in ticked] == ids
    assert [d.message_id for d in server.deliveries] == ids
    assert [d.status for d in ticked] == [None, None, 200, 200]
    assert ticked[0].error == attempt_timeout_error(BOUND_S)
    assert "context deadline exceeded" in ticked[1].error  # the message's own, shorter bound
    assert [server.messages.one(message_id=i).state for i in ids] == [
        "RETRY",
        "RETRY",
        "DELIVERED",
        "DELIVERED",
    ]
    # Every attempt was under way at once: the quick one did not wait behind the slow one,
    # nor behind the endpoint that never answers.
    [hung] = app_log(one, ids[0])
    [slowed] = app_log(other, ids[2])
    [quick] = app_log(other, ids[3])
    assert quick["end"] < slowed["end"]
    assert quick["end"] < hung["end"]


def test_queue_parallelism_one_still_delivers_one_at_a_time_in_order(
    server: ServerProcess, sdk: QStash, apps: tuple[AppProcess, AppProcess]
) -> None:
    _, other = apps
    sdk.queue.upsert("serial", parallelism=1)
    queued = [
        sdk.message.enqueue_json(queue="serial", url=f"{other.url}/slow/60", body={"n": n})
        for n in range(3)
    ]
    # The same messages outside a queue: answered only when all three are in at once.
    gate = f"{other.url}/gate/3/free-{uuid.uuid4().hex}"
    free = [sdk.message.publish_json(url=gate, body={"n": n}, retries=0) for n in range(3)]
    queued_ids = [m.message_id for m in queued]  # type: ignore[union-attr]
    free_ids = [m.message_id for m in free]  # type: ignore[union-attr]

    made = server.drain()

    assert [d.message_id for d in made if d.message_id in queued_ids] == queued_ids
    assert all(d.status == 200 for d in made), [(d.url, d.status) for d in made]
    assert {d.message_id for d in made} >= set(free_ids)  # all in flight at once: the gate
    serial = [e for i in queued_ids for e in app_log(other, i)]
    assert [e["id"] for e in sorted(serial, key=lambda e: e["start"])] == queued_ids
    assert most_at_once(serial) == 1


def test_a_flow_control_key_parallelism_holds_under_concurrency(
    server: ServerProcess, sdk: QStash, apps: tuple[AppProcess, AppProcess]
) -> None:
    _, other = apps
    published = [
        sdk.message.publish_json(
            url=f"{other.url}/slow/60", body={"n": n}, flow_control={"key": "k", "parallelism": 2}
        )
        for n in range(5)
    ]
    ids = [m.message_id for m in published]  # type: ignore[union-attr]

    made = server.drain()

    assert sorted(d.message_id for d in made) == sorted(ids)
    assert most_at_once([e for i in ids for e in app_log(other, i)]) == 2


def test_real_clock_a_hanging_endpoint_holds_only_its_own_attempts(
    apps: tuple[AppProcess, AppProcess],
) -> None:
    one, other = apps
    with ServerProcess.start(
        clock="real",
        seed="real-clock",  # ids of its own: the apps' logs are shared with the other server
        attempt_timeout=BOUND_S,
        args=["--credentials-from-env", "--log-level=info"],
    ) as server:
        sdk = QStash(server.token, base_url=server.url, retry=False)
        hang = sdk.message.publish_json(url=f"{one.url}/hang", body={}, retries=1)
        ok = sdk.message.publish_json(url=f"{other.url}/ok", body={})
        hang_id, ok_id = hang.message_id, ok.message_id  # type: ignore[union-attr]

        server.wait_until(lambda s: s.deliveries.filter(message_id=ok_id), 10)
        # Delivered while the other endpoint still hangs; the control API answers meanwhile,
        # and a tick starts nothing new and does not wait for the attempt under way.
        assert server.messages.one(message_id=hang_id).state == "ACTIVE"
        assert server.tick() == []

        # The server's bound cuts the hanging attempt: a failed attempt, retried.
        server.wait_until(lambda s: s.deliveries.filter(message_id=hang_id), 10)
        cut = server.deliveries.one(message_id=hang_id)
        assert (cut.status, cut.error) == (None, attempt_timeout_error(BOUND_S))
        assert server.messages.one(message_id=hang_id).state == "RETRY"

        # A reset does not wait for an attempt in flight either.
        again = sdk.message.publish_json(url=f"{one.url}/hang", body={})
        again_id = again.message_id  # type: ignore[union-attr]
        server.wait_until(lambda s: s.messages.one(message_id=again_id).state == "ACTIVE", 10)
        server.reset()
        assert server.messages == []

        # --log-level info: a line per request, the path without its query.
        log = server.output
    assert f"POST /v2/publish/{one.url}/hang 200" in log
    assert "GET /_qstash/messages 200" in log
    # The start-up line's dashboard link carries the token on purpose; no request line does.
    request_lines = [line for line in log.splitlines() if " /v2/" in line or " /_qstash" in line]
    assert request_lines
    assert not [line for line in request_lines if server.token in line]


def test_a_body_over_the_bound_is_refused_before_it_is_read(server: ServerProcess) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.putrequest("POST", "/v2/publish/http://127.0.0.1:9/x")
        connection.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
        connection.endheaders()  # no token, and not one byte of the body
        answer = connection.getresponse()
        assert answer.status == 413
        assert "too large" in requests.models.complexjson.loads(answer.read())["error"]
    finally:
        connection.close()


@pytest.mark.asyncio
async def test_a_streamed_body_is_cut_at_the_bound() -> None:
    chunks = [b"x" * 600, b"x" * 600, b"never read"]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": chunks.pop(0), "more_body": bool(chunks)}

    scope = {"method": "POST", "path": "/v2/batch", "headers": [], "server": ("127.0.0.1", 1)}
    with pytest.raises(BodyTooLarge, match="too large"):
        await _read_request(scope, receive, limit=1000)
    assert chunks == [b"never read"]


@pytest.mark.parametrize(
    ("address", "warned"),
    [
        ("127.0.0.1", False),
        ("127.0.0.2", False),
        ("::1", False),
        ("0.0.0.0", True),
        ("::", True),
        ("192.168.1.20", True),
    ],
)
def test_listening_beyond_loopback_says_so(address: str, warned: bool) -> None:
    warning = beyond_loopback_warning(address)
    assert (warning is not None) == warned
    if warning is not None:
        assert address in warning
        assert "any URL" in warning


def test_a_bad_attempt_timeout_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--attempt-timeout", "0"]) == 2
    assert "invalid --attempt-timeout '0'" in capsys.readouterr().err
    assert main(["serve", "--attempt-timeout", "soon"]) == 2
    assert "--attempt-timeout" in capsys.readouterr().err
