"""Writes ``release-0.1.0/``: a data dir as pytest-qstash 0.1.0 (data-dir schema 2) leaves it,
a snapshot and a journal after it, for ``tests/test_datadir_upgrade.py``. Run once with that
release installed (``python tests/datadirs/write_release_0_1_0.py``); the result is committed,
and this script is kept to say how it was made."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from qstash import QStash
from qstash.message import FlowControl

from pytest_qstash.server import ServerProcess

#: Every byte, once: a body that is not UTF-8.
BINARY = bytes(range(256))
HERE = Path(__file__).parent / "release-0.1.0"


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(500 if self.path == "/fail" else 200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{http.server_address[1]}"
    work = Path(tempfile.mkdtemp()) / "data"
    args = ["--data-dir", str(work)]
    server = ServerProcess.start(clock="virtual", start="2026-06-01T00:00:00Z", args=args)
    sdk = QStash(server.token, base_url=server.url, retry=False)
    sdk.message.publish(url=f"{url}/binary", body=BINARY, delay="1d")  # type: ignore[arg-type]
    sdk.message.publish_json(
        url=f"{url}/fail", body={"n": 1}, retries=2, retry_delay="5000 * (1 + retried)"
    )
    sdk.schedule.create(destination=f"{url}/cron", cron="0 0 1 1 *", body="tick")
    sdk.queue.upsert("emails", parallelism=2)
    sdk.message.enqueue_json(queue="emails", url=f"{url}/q", body={"to": "a@example.com"})
    sdk.url_group.upsert_endpoints(url_group="team", endpoints=[{"url": f"{url}/a"}])
    sdk.message.publish_json(
        url=f"{url}/flow", body={}, delay="2h", flow_control=FlowControl(key="tenant-1", rate=3)
    )
    sdk.message.publish_json(url=f"{url}/fail", body={"dead": True}, retries=0, label="billing")
    server.tick()
    server.trigger(f"{url}/workflow", {"order": 7})
    server.advance("1m")
    server.stop()  # a clean stop: the snapshot

    server = ServerProcess.start(clock="virtual", args=args)
    sdk = QStash(server.token, base_url=server.url, retry=False)
    sdk.message.publish(url=f"{url}/binary-2", body=BINARY[::-1], delay="1d")  # type: ignore[arg-type]
    sdk.queue.upsert("emails", parallelism=3)
    os.kill(server.process.pid, signal.SIGKILL)  # what followed the snapshot: in the journal
    server.process.wait(timeout=10)
    server.stop()
    http.shutdown()

    shutil.rmtree(HERE, ignore_errors=True)
    HERE.mkdir()
    for path in sorted(work.iterdir()):
        if path.name != "lock":
            shutil.copy(path, HERE / path.name)
    print("\n".join(sorted(p.name for p in HERE.iterdir())))


if __name__ == "__main__":
    main()
