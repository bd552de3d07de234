"""Outbound mounts on the server (``serve --mount PREFIX=TO``, ``POST /_qstash/mounts``,
``Client.mount``): the requests the server makes under a prefix reach a local app instead,
method, headers and body unchanged, while records, logs and signatures keep the original URL.
Published through the real ``qstash`` SDK; the mounted app runs under uvicorn on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from qstash import QStash, Receiver
from qstash.chat import openai

from pytest_qstash.delivery.mounts import check_redirect, merge_redirects, redirect
from pytest_qstash.server import AppProcess, ServerError, ServerProcess

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def target() -> Iterator[AppProcess]:
    with AppProcess.start("mount_target_app:app", cwd=HERE, ready_path="/_seen") as started:
        yield started


@pytest.fixture(autouse=True)
def _fresh(qstash_server: ServerProcess) -> Iterator[None]:
    qstash_server.reset()
    yield
    for prefix in qstash_server.mounts:
        qstash_server.unmount(prefix)


@pytest.fixture
def sdk(qstash_server: ServerProcess) -> Iterator[QStash]:
    client = QStash(qstash_server.token, base_url=qstash_server.url, retry=False)
    yield client
    client.http._client.close()  # its pooled connection, closed now rather than by the GC


def seen(target: AppProcess) -> list[dict[str, Any]]:
    """What reached the mounted app since the last call (each call forgets it)."""
    answer: list[dict[str, Any]] = httpx.delete(f"{target.url}/_seen", trust_env=False).json()
    return answer


def test_a_delivery_goes_to_the_mount_and_keeps_its_url_everywhere_else(
    qstash_server: ServerProcess, target: AppProcess, sdk: QStash
) -> None:
    seen(target)
    qstash_server.mount("https://shop.example.com/hooks", f"{target.url}/shop")
    url = "https://shop.example.com/hooks/orders?id=7"

    published = sdk.message.publish_json(
        url=url, body={"order": 7}, headers={"X-Shop": "north"}, method="PUT"
    )
    [delivery] = qstash_server.drain()

    [request] = seen(target)
    assert request["method"] == "PUT"
    assert request["path"] == "/shop/orders?id=7"
    assert request["body"] == '{"order": 7}'
    headers = request["headers"]
    assert headers["host"] == "shop.example.com"  # the headers as QStash sends them
    assert headers["x-shop"] == "north"
    assert headers["upstash-message-id"] == published.message_id  # type: ignore[union-attr]
    receiver = Receiver(
        current_signing_key=qstash_server.env["QSTASH_CURRENT_SIGNING_KEY"],
        next_signing_key=qstash_server.env["QSTASH_NEXT_SIGNING_KEY"],
    )
    # Signed for the URL the message was published to, not the one it reached.
    receiver.verify(signature=headers["upstash-signature"], body=request["body"], url=url)
    assert delivery.url == url
    assert delivery.status == 200
    assert json.loads(delivery.response_body) == {"answered": "/shop/orders?id=7"}
    assert qstash_server.messages.one().url == url
    logged = {log.url for log in sdk.log.list().logs}
    assert logged == {url}


def test_callbacks_and_failure_callbacks_go_to_their_mounts(
    qstash_server: ServerProcess, target: AppProcess, sdk: QStash
) -> None:
    seen(target)
    qstash_server.mount("https://api.partner.test", f"{target.url}/partner")
    qstash_server.mount("https://hooks.example.com", f"{target.url}/hooks")
    sdk.message.publish_json(
        url="https://api.partner.test/v1/quotes",
        body={"q": 1},
        callback="https://hooks.example.com/quote-done",
    )
    sdk.message.publish_json(
        url="https://api.partner.test/v1/status/503",
        body={"q": 2},
        retries=0,
        failure_callback="https://hooks.example.com/quote-failed",
    )
    qstash_server.drain()

    paths = sorted(request["path"] for request in seen(target))
    assert paths == [
        "/hooks/quote-done",
        "/hooks/quote-failed",
        "/partner/v1/quotes",
        "/partner/v1/status/503",
    ]
    urls = {d.url: d.status for d in qstash_server.deliveries}
    assert urls == {
        "https://api.partner.test/v1/quotes": 200,
        "https://api.partner.test/v1/status/503": 503,
        "https://hooks.example.com/quote-done": 200,
        "https://hooks.example.com/quote-failed": 200,
    }
    [dead] = sdk.dlq.list().messages
    assert dead.url == "https://api.partner.test/v1/status/503"


def test_an_llm_publish_reaches_the_mounted_openai_fake(
    qstash_server: ServerProcess, target: AppProcess, sdk: QStash
) -> None:
    seen(target)
    qstash_server.mount("https://api.openai.com", f"{target.url}/openai")
    sdk.message.publish_json(
        api={"name": "llm", "provider": openai("sk-test")},
        body={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    )
    [delivery] = qstash_server.drain()

    [request] = seen(target)
    assert request["path"] == "/openai/v1/chat/completions"
    assert request["headers"]["authorization"] == "Bearer sk-test"
    assert json.loads(request["body"])["model"] == "gpt-4o"
    assert delivery.url == "https://api.openai.com/v1/chat/completions"


def test_mounts_are_listed_replaced_removed_and_outlive_a_reset(
    qstash_server: ServerProcess,
) -> None:
    with qstash_server.mount("HTTPS://Api.OpenAI.com:443/", "http://127.0.0.1:9000/") as made:
        assert (made.prefix, made.to) == ("https://api.openai.com", "http://127.0.0.1:9000")
        qstash_server.mount("https://api.openai.com", "http://127.0.0.1:9001")  # replaces it
        qstash_server.mount("https://partner.test/v2", "http://127.0.0.1:9002/partner")
        qstash_server.reset()
        assert qstash_server.mounts == {
            "https://api.openai.com": "http://127.0.0.1:9001",
            "https://partner.test/v2": "http://127.0.0.1:9002/partner",
        }
        assert qstash_server.unmount("https://partner.test/v2/") is True
        assert qstash_server.unmount("https://partner.test/v2") is False
    assert qstash_server.mounts == {}  # the block's end unmounted it


@pytest.mark.parametrize(
    ("prefix", "to", "words"),
    [
        ("api.openai.com", "http://127.0.0.1:9000", "prefix 'api.openai.com'"),
        ("/v1", "http://127.0.0.1:9000", "absolute http:// or https:// URL with a host"),
        ("https://api.openai.com", "ftp://127.0.0.1", "to 'ftp://127.0.0.1'"),
        ("https://api.openai.com", "127.0.0.1:9000", "absolute http:// or https://"),
        ("https://api.openai.com?x=1", "http://127.0.0.1:9000", "without a query or fragment"),
        ("https://api.openai.com", 9000, "expected a URL"),
    ],
)
def test_a_bad_mount_is_a_400_saying_what_is_accepted(
    qstash_server: ServerProcess, prefix: Any, to: Any, words: str
) -> None:
    with pytest.raises(ServerError) as refused:
        qstash_server.mount(prefix, to)
    assert refused.value.status == 400
    assert words in refused.value.message
    assert qstash_server.mounts == {}


def test_the_control_api_answers_json(qstash_server: ServerProcess) -> None:
    auth = {"Authorization": f"Bearer {qstash_server.token}"}
    endpoint = f"{qstash_server.url}/_qstash/mounts"
    with httpx.Client(headers=auth, trust_env=False) as http:
        made = http.post(endpoint, json={"prefix": "https://a.test", "to": "http://127.0.0.1:1"})
        assert made.json() == {"prefix": "https://a.test", "to": "http://127.0.0.1:1"}
        assert http.get(endpoint).json() == [
            {"prefix": "https://a.test", "to": "http://127.0.0.1:1"}
        ]
        missing = http.post(endpoint, json={"prefix": "https://a.test"})
        assert missing.status_code == 400
        assert missing.json() == {"error": "missing 'to' in the JSON body"}
        removed = http.request("DELETE", endpoint, json={"prefix": "https://a.test"})
        assert removed.json() == {"removed": True}
        assert http.put(endpoint, json={}).status_code == 404
        assert httpx.get(endpoint, trust_env=False).status_code == 401


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("POST", b"[1]"),
        ("POST", b"{"),
        ("POST", b'{"prefix": {"a": 1}, "to": "http://127.0.0.1:1"}'),
        ("POST", b'{"prefix": "http://[::1/x", "to": "http://127.0.0.1:1"}'),
        ("POST", b'{"prefix": "https://a.test", "to": "http://127.0.0.1:99999"}'),
        ("POST", b'{"prefix": "https://a.test", "to": "http://127.0.0.1:port"}'),
        ("POST", rb'{"prefix": "https://a.test/\u0000", "to": "http://127.0.0.1:1"}'),
        ("POST", b'{"prefix": "https://", "to": "http://127.0.0.1:1"}'),
        ("DELETE", b"{}"),
        ("DELETE", b'{"prefix": null}'),
    ],
)
def test_hostile_mount_requests_are_a_400_never_a_500(
    qstash_server: ServerProcess, method: str, body: bytes
) -> None:
    answer = httpx.request(
        method,
        f"{qstash_server.url}/_qstash/mounts",
        content=body,
        headers={"Authorization": f"Bearer {qstash_server.token}"},
        trust_env=False,
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]
    assert qstash_server.mounts == {}


def test_prefixes_match_at_a_path_boundary_and_the_longest_wins() -> None:
    mounts = merge_redirects(
        (),
        [
            check_redirect("https://api.test", "http://127.0.0.1:1"),
            check_redirect("https://api.test/v1/chat", "http://127.0.0.1:2/chat"),
        ],
    )
    assert redirect("https://api.test/v1/x?q=1", mounts) == "http://127.0.0.1:1/v1/x?q=1"
    assert redirect("https://api.test/v1/chat/go", mounts) == "http://127.0.0.1:2/chat/go"
    assert redirect("https://api.test/v1/chats", mounts) == "http://127.0.0.1:1/v1/chats"
    assert redirect("https://api.test.example/x", mounts) is None
    assert redirect("http://api.test/x", mounts) is None  # another scheme, another origin


def test_the_command_line_mounts_and_refuses_a_bad_mount(target: AppProcess) -> None:
    command = [sys.executable, "-m", "pytest_qstash", "serve", "--port", "0"]
    for option, words in (
        ("https://api.openai.com", "expected PREFIX=TO"),
        ("api.openai.com=http://127.0.0.1:9000", "absolute http:// or https://"),
        ("https://api.openai.com=file:///tmp", "to 'file:///tmp'"),
    ):
        refused = subprocess.run(
            [*command, "--mount", option], capture_output=True, text=True, timeout=60
        )
        assert refused.returncode == 2
        assert refused.stderr.count("\n") == 1  # one line, no traceback
        assert f"invalid --mount {option!r}" in refused.stderr
        assert words in refused.stderr

    # On a real clock: deliveries go out on their own, through the same mounts.
    args = ["--mount", f"https://a.test={target.url}/a", "--mount", f"https://b.test={target.url}"]
    with ServerProcess.start(clock="real", args=args) as server:
        assert server.mounts == {"https://a.test": f"{target.url}/a", "https://b.test": target.url}
        assert f"pytest-qstash: mount https://a.test -> {target.url}/a" in status_line(server)
        sdk = QStash(server.token, base_url=server.url, retry=False)
        seen(target)
        sdk.message.publish_json(url="https://a.test/ping", body={})
        sdk.http._client.close()
        server.wait_until(lambda s: len(s.deliveries) == 1)
        assert server.deliveries.one().url == "https://a.test/ping"
        assert [r["path"] for r in seen(target)] == ["/a/ping"]


def test_a_mount_survives_a_restart_with_a_data_dir(tmp_path: Path) -> None:
    args = ["--data-dir", str(tmp_path), "--mount", "https://a.test=http://127.0.0.1:1"]
    with ServerProcess.start(args=args) as server:
        server.mount("https://b.test", "http://127.0.0.1:2")
        server.unmount("https://a.test")
    # Restarted with a mount of its own: it joins those the data dir kept.
    args = ["--data-dir", str(tmp_path), "--mount", "https://c.test=http://127.0.0.1:3"]
    with ServerProcess.start(args=args) as server:
        assert server.mounts == {
            "https://b.test": "http://127.0.0.1:2",
            "https://c.test": "http://127.0.0.1:3",
        }


def test_a_mount_made_just_before_a_crash_is_kept(tmp_path: Path) -> None:
    server = ServerProcess.start(args=["--data-dir", str(tmp_path)])
    server.mount("https://a.test", "http://127.0.0.1:1")
    os.kill(server.process.pid, signal.SIGKILL)  # before any snapshot: the journal has it
    server.process.wait(timeout=10)
    server.stop()
    with ServerProcess.start(args=["--data-dir", str(tmp_path)]) as restarted:
        assert restarted.mounts == {"https://a.test": "http://127.0.0.1:1"}


def status_line(server: ServerProcess) -> str:
    """What the server printed on stderr once it serves."""
    deadline = time.monotonic() + 10
    while "dashboard at" not in server.output and time.monotonic() < deadline:
        time.sleep(0.01)
    return server.output
