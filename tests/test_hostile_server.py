"""Hostile input over a real ``pytest-qstash serve``: the same classes as in-process
(test_hostile_input.py), sent over HTTP by the real SDK where it can send them and by a raw
client where it cannot, and delivered over HTTP to a loopback endpoint that keeps the bytes."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from qstash import QStash
from qstash.errors import QStashError

from pytest_qstash.server import ServerError, ServerProcess


class Inbox:
    """A loopback HTTP endpoint answering 200 that keeps each request's raw header pairs."""

    def __init__(self) -> None:
        self.seen: list[list[tuple[bytes, bytes]]] = []
        inbox = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                # http.server reads header bytes as latin-1: encoding back gives them as sent.
                inbox.seen.append(
                    [
                        (k.lower().encode("latin-1"), v.encode("latin-1"))
                        for k, v in self.headers.items()
                    ]
                )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with ServerProcess.start(clock="virtual") as started:
        yield started


@pytest.fixture(scope="module")
def inbox() -> Iterator[Inbox]:
    endpoint = Inbox()
    yield endpoint
    endpoint.close()


@pytest.fixture(autouse=True)
def _fresh(server: ServerProcess, inbox: Inbox) -> None:
    server.reset()
    server.clear_faults()
    inbox.seen.clear()


@pytest.fixture(scope="module")
def sdk(server: ServerProcess) -> Iterator[QStash]:
    client = QStash(server.token, base_url=server.url)  # default retries: none must happen
    yield client
    client.http._client.close()  # its keep-alive connections, before the server stops


@pytest.fixture
def api(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}
    ) as client:
        yield client


def test_utf8_header_values_are_delivered_intact(
    server: ServerProcess, inbox: Inbox, api: httpx.Client
) -> None:
    response = api.post(
        f"/v2/publish/{inbox.url}/p",
        content=b"hi",
        headers=[
            (b"Upstash-Forward-Name", "Zoë".encode()),
            (b"Upstash-Forward-Transfer-Encoding", b"chunked"),
            (b"Upstash-Forward-Content-Length", b"999"),
            (b"Upstash-Forward-Host", b"evil.test"),
            (b"Upstash-Forward-Connection", b"upgrade"),
        ],
    )
    assert response.status_code == 200, response.text
    [delivery] = server.tick()
    assert delivery.status == 200
    [headers] = inbox.seen
    assert (b"name", "Zoë".encode()) in headers
    assert dict(headers)[b"content-length"] == b"2"
    assert dict(headers)[b"host"] == inbox.url.removeprefix("http://").encode()
    assert b"transfer-encoding" not in dict(headers)
    assert server.messages.one().headers["Name"] == "Zoë"


def test_utf8_in_a_batch_from_the_sdk_is_delivered_intact(
    server: ServerProcess, inbox: Inbox, sdk: QStash
) -> None:
    sdk.message.batch_json([{"url": f"{inbox.url}/b", "headers": {"Name": "Zoë"}}])
    server.tick()
    assert (b"name", "Zoë".encode()) in inbox.seen[0]


def test_utf8_on_a_schedule_is_kept(server: ServerProcess, api: httpx.Client) -> None:
    response = api.post(
        "/v2/schedules/http://127.0.0.1:9/s",
        headers=[(b"Upstash-Cron", b"0 0 1 1 *"), (b"Upstash-Forward-Name", "Zoë".encode())],
    )
    assert response.status_code == 200, response.text
    assert api.get("/v2/schedules").json()[0]["header"]["Name"] == ["Zoë"]


@pytest.mark.parametrize(
    "url", ["http://[::1/x", "http://127.0.0.1:99999/x", "http://", "http://127.0.0.1:0/"]
)
def test_undeliverable_destinations_are_refused(
    server: ServerProcess, sdk: QStash, url: str
) -> None:
    with pytest.raises(QStashError, match="400") as info:
        sdk.message.publish(url=url, body="x")
    assert "destination url" in str(info.value)
    assert server.messages == []


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"X": "a\r\nb: c"}, "Upstash-Forward-X"),
        ({"X": "a\x00b"}, "Upstash-Forward-X"),
        ({"A B": "x"}, "invalid header name"),
    ],
)
def test_undeliverable_headers_are_refused(
    server: ServerProcess, sdk: QStash, headers: dict[str, str], said: str
) -> None:
    with pytest.raises(QStashError, match="400") as info:
        sdk.message.batch([{"url": "http://127.0.0.1:9/x", "headers": headers}])
    assert said in str(info.value)
    assert server.messages == []


@pytest.mark.parametrize("destination", ["http://127.0.0.1\x00.x/", "http:///x", "http://[::1/x"])
def test_undeliverable_batch_destinations_are_refused(
    server: ServerProcess, api: httpx.Client, destination: str
) -> None:
    good = {"destination": "http://127.0.0.1:9/ok"}
    response = api.post("/v2/batch", json=[good, {"destination": destination}])
    assert response.status_code == 400
    assert "destination url" in response.json()["error"]
    assert server.messages == []


def test_an_upper_case_scheme_is_delivered(
    server: ServerProcess, inbox: Inbox, sdk: QStash
) -> None:
    sdk.message.publish(url=inbox.url.replace("http://", "HTTP://") + "/up", body="x")
    [delivery] = server.tick()
    assert delivery.status == 200
    assert len(inbox.seen) == 1


def test_json_nested_deeply_is_a_400(server: ServerProcess, api: httpx.Client) -> None:
    deep = "[" * 5000 + "]" * 5000
    for path in ("/v2/batch", "/v2/queues", "/_qstash/advance", "/_qstash/fail_next"):
        response = api.post(path, content=deep)
        assert response.status_code == 400, path
        assert response.json()["error"]


def test_a_schedule_whose_next_run_is_after_9999_is_refused(
    server: ServerProcess, sdk: QStash
) -> None:
    server.reset(start="9999-12-31T23:00:00Z")
    with pytest.raises(QStashError, match="after the year 9999"):
        sdk.schedule.create(destination="http://127.0.0.1:9/s", cron="0 0 1 1 *")
    assert server.schedules == []


def test_a_queue_named_in_unicode_is_created_read_and_deleted(
    server: ServerProcess, sdk: QStash
) -> None:
    sdk.queue.upsert("köln")
    assert sdk.queue.get("köln").name == "köln"
    sdk.queue.delete("köln")
    assert server.queues == []


def test_a_fault_waits_for_a_caller_with_the_token(
    server: ServerProcess, api: httpx.Client
) -> None:
    server.fail_next("publish", status=503)
    url = f"{server.url}/v2/publish/http://127.0.0.1:9/x"
    for auth in ("Bearer wrong", "Bearer Zoë", "Basic x"):
        answer = httpx.post(url, headers=[(b"Authorization", auth.encode())])
        assert answer.status_code == 401
        assert answer.json()["error"]
    assert api.post("/v2/publish/http://127.0.0.1:9/x").status_code == 503
    assert api.post("/v2/publish/http://127.0.0.1:9/x").status_code == 200


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("fail_next", {"endpoint": 5}),
        ("fail_next", {"times": "many"}),
        ("advance", {"by": "forever"}),
        ("advance", {"by": 1e308}),
        ("advance_to", {"to": "year 10000"}),
        ("drain", {"within": [1]}),
        ("trigger", {"url": "http://[::1/x"}),
        ("trigger", {"url": "http://127.0.0.1:9/", "headers": {"X": "a\nb"}}),
        ("reset", {"start": {"a": 1}}),
    ],
)
def test_control_routes_answer_bad_input_with_a_400(
    server: ServerProcess, action: str, body: dict[str, object]
) -> None:
    answer = httpx.post(
        f"{server.url}/_qstash/{action}",
        content=json.dumps(body),
        headers={"Authorization": f"Bearer {server.token}"},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]


def test_the_control_client_says_what_was_refused(server: ServerProcess) -> None:
    with pytest.raises(ServerError) as info:
        server.trigger("http://127.0.0.1:99999/")
    assert info.value.status == 400
    assert "workflow url" in info.value.message


def test_a_network_fault_breaks_the_connection_rather_than_answering_500(
    server: ServerProcess, api: httpx.Client
) -> None:
    server.fail_next("publish", kind="network")
    with pytest.raises(httpx.TransportError):
        api.post("/v2/publish/http://127.0.0.1:9/x")
    assert api.post("/v2/publish/http://127.0.0.1:9/x").status_code == 200


@pytest.mark.parametrize("target", [b"*", b"http://elsewhere.test/v2/queues"])
def test_a_request_target_that_is_no_path_is_a_400(server: ServerProcess, target: bytes) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(
            b"GET "
            + target
            + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + server.token.encode()
            + b"\r\nConnection: close\r\n\r\n"
        )
        answer = b""
        while chunk := connection.recv(4096):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400")
    assert json.loads(body)["error"].startswith("invalid request target")
