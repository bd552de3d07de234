"""Retention as QStash has it: with it on, log entries, finished messages, deliveries and runs
go after the plan's log retention and DLQ entries after its DLQ retention, from the API's
answers and from what the fake holds; with it off (in-process, the default) a test's records
stay whole however far it advances. In-process through the real ``qstash`` SDK (sync and
async) and ``upstash-workflow``, and over a real ``pytest-qstash serve``."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from apps import WebApp
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError
from reliability_apps import BASE, HOOKS, apublish, make_hooks_app, publish
from workflow_apps import STOCK_URL, Journal, fastapi_workflow_app, stock_app

from pytest_qstash import FakeQStash
from pytest_qstash.engine.dedup import Deduplication
from pytest_qstash.engine.retention import Trail
from pytest_qstash.server import ServerProcess

START = "2026-01-01T00:00:00Z"
#: Free plan: logs and DLQ entries are kept 3 days.
free_with_retention = pytest.mark.qstash(start=START, plan="free", retention=True)


def _ok_and_failed(qstash: FakeQStash, client: QStash) -> tuple[str, str]:
    ok = publish(client, f"{BASE}/ok", "kept a while")
    failed = publish(client, f"{BASE}/http-500", "dead letter", retries=0)
    qstash.tick()
    return ok, failed


def _logged_ids(client: QStash) -> set[str]:
    return {log.message_id for log in client.log.list().logs}


# -- in-process, retention on ---------------------------------------------------------------
@free_with_retention
def test_logs_messages_deliveries_and_the_dlq_go_after_the_plans_retention(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    assert qstash.retention is True
    ok, failed = _ok_and_failed(qstash, client)

    qstash.advance("2d")  # within the free plan's three days: all still there
    assert _logged_ids(client) == {ok, failed}
    assert [m.dlq_id for m in client.dlq.list().messages] == [qstash.dlq[0].dlq_id]
    assert {m.message_id for m in qstash.messages} == {ok, failed}
    assert len(qstash.deliveries) == 2
    assert len(qstash.events) == 7  # CREATED, ACTIVE each, DELIVERED; ERROR and FAILED

    qstash.advance("1d")  # three days since: gone from the API and from the fake
    assert client.log.list().logs == []
    assert client.dlq.list().messages == []
    assert list(qstash.messages) == []
    assert list(qstash.deliveries) == []
    assert list(qstash.events) == []
    assert list(qstash.dlq) == []
    for message_id in (ok, failed):
        with pytest.raises(QStashError):
            client.message.get(message_id)


@free_with_retention
def test_what_is_newer_than_the_window_stays(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    old, _ = _ok_and_failed(qstash, client)
    qstash.advance("2d")
    new = publish(client, f"{BASE}/ok", "newer")
    pending = publish(client, f"{BASE}/ok", "three days away", delay="3d")
    qstash.tick()

    qstash.advance("1d12h")  # the first two are past three days; the others are not
    assert {m.message_id for m in qstash.messages} == {new, pending}
    assert [d.message_id for d in qstash.deliveries] == [new]
    assert _logged_ids(client) == {new, pending}
    assert old not in _logged_ids(client)
    assert client.message.get(pending).body == "three days away"  # pending: kept

    qstash.advance("2d")  # the delayed one is delivered now; the newer one has expired
    assert [d.message_id for d in qstash.deliveries] == [pending]


@pytest.mark.anyio
@free_with_retention
async def test_async_sdk_sees_the_same_retention(
    qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp
) -> None:
    message_id = await apublish(aclient, f"{BASE}/http-500", "async dead letter", retries=0)
    await qstash.atick()
    assert [m.message_id for m in (await aclient.dlq.list()).messages] == [message_id]
    assert {log.message_id for log in (await aclient.log.list()).logs} == {message_id}

    await qstash.aadvance("3d")
    assert (await aclient.dlq.list()).messages == []
    assert (await aclient.log.list()).logs == []
    assert list(qstash.messages) == []


@pytest.mark.qstash(start=START, plan="fixed_1m", retention=True)
def test_dlq_entries_outlive_the_logs_on_a_plan_that_keeps_them_longer(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    failed = publish(client, f"{BASE}/http-500", "thirty days", retries=0)
    qstash.tick()
    [entry] = qstash.dlq

    qstash.advance("15d")  # past the 14 days of logs, within the 30 days of DLQ
    assert client.log.list().logs == []
    assert list(qstash.deliveries) == []
    [listed] = client.dlq.list().messages
    assert listed.message_id == failed
    assert client.dlq.get(entry.dlq_id).body == "thirty days"

    qstash.advance("15d")
    assert client.dlq.list().messages == []
    with pytest.raises(QStashError):
        client.dlq.get(entry.dlq_id)


@free_with_retention
def test_a_redelivered_message_is_kept_from_its_last_delivery(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/ok", "twice")
    qstash.tick()
    qstash.advance("2d")
    qstash.redeliver(message_id)
    qstash.tick()

    qstash.advance("2d")  # four days since the first delivery, two since the second
    assert [m.message_id for m in qstash.messages] == [message_id]
    assert [d.message_id for d in qstash.deliveries] == [message_id]
    qstash.advance("1d")
    assert list(qstash.messages) == []


@free_with_retention
def test_log_cursors_stay_valid_while_older_entries_expire(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    for n in range(4):
        publish(client, f"{BASE}/ok", f"first {n}")
    qstash.tick()
    qstash.advance("2d")
    for n in range(3):
        publish(client, f"{BASE}/ok", f"second {n}")
    qstash.tick()
    page = client.log.list(count=5)  # newest first: the second batch's nine entries are newer
    assert page.cursor
    qstash.advance("1d1h")  # the first batch's entries expire under the cursor
    rest = client.log.list(cursor=page.cursor)
    kept = {message.message_id: message.body for message in qstash.messages}
    assert sorted(kept.values()) == ["second 0", "second 1", "second 2"]
    assert {log.message_id for log in rest.logs} <= set(kept)
    seen = [(log.message_id, log.state) for log in [*page.logs, *rest.logs]]
    assert len(seen) == len(set(seen)) == 9


@pytest.mark.qstash(start=START, plan="free", retention=True)
def test_a_failed_workflow_run_stays_in_the_workflow_dlq_until_its_entry_expires(
    qstash: FakeQStash, client: QStash
) -> None:
    journal = Journal()
    qstash.mount("https://shop.test", fastapi_workflow_app(journal))
    run_id = qstash.trigger("https://shop.test/fails", {"card": "4242"})
    qstash.advance("1d")
    [run] = qstash.runs
    assert run.state == "RUN_FAILED"
    [item] = qstash.workflow_dlq
    assert item.run_id == run_id
    listed = client.http.request(path="/v2/workflows/dlq", method="GET")
    assert [m["workflowRunId"] for m in listed["messages"]] == [run_id]

    qstash.advance("3d")
    assert list(qstash.workflow_dlq) == []
    assert client.http.request(path="/v2/workflows/dlq", method="GET")["messages"] == []
    assert list(qstash.runs) == []
    logs = client.http.request(path="/v2/workflows/logs", method="GET")
    assert logs["runs"] == []
    assert list(qstash.messages) == []


@pytest.mark.qstash(start=START, plan="free", retention=True)
def test_a_run_that_succeeded_goes_after_the_log_retention(qstash: FakeQStash) -> None:
    journal = Journal()
    qstash.mount("https://shop.test", fastapi_workflow_app(journal))
    qstash.mount(STOCK_URL, stock_app(journal))
    ship_at = int(qstash.now.timestamp()) + 3600
    run_id = qstash.trigger(
        "https://shop.test/order", {"order": 7, "sku": "A-1", "qty": 2, "ship_at": ship_at}
    )
    qstash.drain()
    [run] = qstash.runs
    assert (run.run_id, run.state) == (run_id, "RUN_SUCCESS")
    qstash.advance("3d")
    assert list(qstash.runs) == []
    assert list(qstash.messages) == []


@free_with_retention
def test_queues_callbacks_and_dedup_go_on_working_while_records_expire(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    qstash.mount(HOOKS, make_hooks_app().app)
    for day in range(5):
        for n in range(3):
            client.message.enqueue(
                queue="serial",
                url=f"{BASE}/ok",
                body=f"day {day} job {n}",
                callback=f"{HOOKS}/callback",
                failure_callback=f"{HOOKS}/failure",
                deduplication_id=f"job-{n}",  # the same ids each day: the window is 10 min
            )
        publish(client, f"{BASE}/http-500", f"day {day} fails", retries=0)
        qstash.advance("1d")
        kept = {message.body for message in qstash.messages if message.kind == "message"}
        # Now is the end of that day: what finished three days ago or more is gone.
        days_kept = {f"day {d}" for d in range(max(0, day - 1), day + 1)}
        assert {body.rsplit(" job", 1)[0].replace(" fails", "") for body in kept} == days_kept
        assert len(qstash.dlq) == len(days_kept)
    assert all(message.done for message in qstash.messages)
    [queue] = client.queue.list()
    assert queue.name == "serial"
    assert queue.lag == 0
    # Three jobs a day, each with its callback, and one failure, for two days: nothing older.
    assert len(qstash.messages) == 2 * (3 + 3 + 1)
    assert qstash.store.dedup.kept <= 3


# -- in-process, retention off (the default) --------------------------------------------------
@pytest.mark.qstash(start=START, plan="free")
def test_without_retention_a_year_later_everything_is_still_there(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    assert qstash.retention is False
    ok, failed = _ok_and_failed(qstash, client)
    qstash.advance("365d")
    assert _logged_ids(client) == {ok, failed}
    assert [m.message_id for m in client.dlq.list().messages] == [failed]
    assert {m.message_id for m in qstash.messages} == {ok, failed}
    assert [d.message_id for d in qstash.deliveries] == [ok, failed]
    assert len(qstash.events) == 7


def test_retention_is_validated() -> None:
    with pytest.raises(TypeError, match="retention"):
        FakeQStash(retention="yes")  # type: ignore[arg-type]


def test_a_bad_marker_value_fails_with_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.qstash(retention="always")
        def test_x(qstash):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=0, errors=1)
    result.stdout.fnmatch_lines(["*bad qstash setting: invalid retention='always'*"])


def test_the_ini_option_turns_it_on(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nqstash_retention = true\n")
    pytester.makepyfile(
        """
        def test_x(qstash):
            assert qstash.retention is True
        """
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["qstash: *, plan retention"])


# -- the building blocks ----------------------------------------------------------------------
def test_a_trail_drops_from_its_start_and_keeps_absolute_positions() -> None:
    trail: Trail[int] = Trail()
    for n in range(5000):
        trail.append(n)
    assert trail.drop_while(lambda n: n < 3000) == 3000
    assert (len(trail), trail.dropped, trail[0], trail[-1]) == (2000, 3000, 3000, 4999)
    assert list(trail)[:2] == [3000, 3001]
    assert list(reversed(trail))[:2] == [4999, 4998]
    assert trail[1:3] == [3001, 3002]
    del trail[-1]
    assert trail[-1] == 4998
    assert trail.drop_while(lambda n: n < 0) == 0
    with pytest.raises(IndexError):
        trail[len(trail)]


def test_deduplication_forgets_keys_whose_window_ended() -> None:
    dedup = Deduplication(window_ms=1000)
    for n in range(100):
        dedup.remember(f"id:{n}", f"msg_{n}", now_ms=n)
    assert dedup.kept == 100
    dedup.remember("id:late", "msg_late", now_ms=5000)
    assert dedup.kept == 1
    assert dedup.deduplicated("id:late", 5500) == "msg_late"
    assert dedup.deduplicated("id:3", 5500) is None


# -- over a real server -----------------------------------------------------------------------
class _Endpoint:
    """A loopback endpoint: /ok answers 200, anything else 500."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200 if self.path.startswith("/ok") else 500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[_Endpoint]:
    served = _Endpoint()
    yield served
    served.close()


def _server_round(server: ServerProcess, endpoint: _Endpoint) -> tuple[QStash, str, str]:
    sdk = QStash(server.token, base_url=server.url)
    ok = sdk.message.publish(url=f"{endpoint.url}/ok", body="ok").message_id  # type: ignore[union-attr]
    failed = sdk.message.publish(  # type: ignore[union-attr]
        url=f"{endpoint.url}/fail", body="failed", retries=0
    ).message_id
    server.tick()
    return sdk, ok, failed


def test_a_server_forgets_by_default(endpoint: _Endpoint) -> None:
    with ServerProcess.start(clock="virtual", start=START, args=["--plan=free"]) as server:
        sdk, ok, failed = _server_round(server, endpoint)
        server.advance("2d")
        assert {log.message_id for log in sdk.log.list().logs} == {ok, failed}
        assert [m.message_id for m in sdk.dlq.list().messages] == [failed]
        assert len(server.deliveries) == 2

        server.advance("1d")
        assert sdk.log.list().logs == []
        assert sdk.dlq.list().messages == []
        assert list(server.messages) == []
        assert list(server.deliveries) == []
        assert list(server.events) == []
        assert list(server.dlq) == []
        # A reset (to another plan) keeps the server's retention.
        server.reset(plan="pay_as_you_go")
        _server_round(server, endpoint)
        server.advance("6d")
        assert len(server.deliveries) == 2
        server.advance("1d")
        assert list(server.deliveries) == []
        sdk.http._client.close()


def test_a_server_report_since_a_mark_counts_what_retention_dropped(endpoint: _Endpoint) -> None:
    with ServerProcess.start(clock="virtual", start=START, args=["--plan=free"]) as server:
        sdk = QStash(server.token, base_url=server.url)
        for n in range(3):
            sdk.message.publish(url=f"{endpoint.url}/ok", body=f"before {n}")
        server.tick()
        server.advance("2d")
        mark = server.mark()
        server.advance("2d")  # the three deliveries before the mark expire
        sdk.message.publish(url=f"{endpoint.url}/fail", body="after the mark", retries=0)
        server.tick()
        sdk.message.publish(url=f"{endpoint.url}/ok", body="due tomorrow", delay="1d")
        report = server.report(since=mark)
        assert report is not None
        assert "after the mark" in report
        assert "due tomorrow" in report  # created since the mark, never attempted
        assert "before" not in report
        assert "1 delivery attempt" in report
        sdk.http._client.close()


def test_a_server_with_retention_off_keeps_everything(endpoint: _Endpoint) -> None:
    with ServerProcess.start(
        clock="virtual", start=START, retention=False, args=["--plan=free"]
    ) as server:
        sdk, ok, failed = _server_round(server, endpoint)
        server.advance("365d")
        assert {log.message_id for log in sdk.log.list().logs} == {ok, failed}
        assert [m.message_id for m in sdk.dlq.list().messages] == [failed]
        assert [d.message_id for d in server.deliveries] == [ok, failed]
        sdk.http._client.close()


def test_serve_refuses_an_unknown_retention_value() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_qstash", "serve", "--retention", "sometimes"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--retention" in done.stderr
    assert "'on', 'off'" in done.stderr


def test_the_server_process_refuses_a_non_bool_retention() -> None:
    with pytest.raises(TypeError, match="retention"):
        ServerProcess.start(retention="on")  # type: ignore[arg-type]
