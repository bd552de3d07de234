"""What the dashboard's poll costs and carries, over HTTP: one page of one list, bodies
clipped (whole when an item is opened), only what changed since the last poll, search,
state filters and paging on the server, and the links between related items.

A real server process, the real ``qstash`` SDK and an app under uvicorn (``dashboard_app``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from qstash import QStash

from pytest_qstash.server import AppProcess, ServerProcess
from pytest_qstash.server.dashboard.routes import DASHBOARD_PATH, PAGE_SIZE, dashboard_link
from pytest_qstash.server.dashboard.views import CLIP

HERE = Path(__file__).parent
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def app(qstash_server: ServerProcess) -> Iterator[AppProcess]:
    with AppProcess.start("dashboard_app:app", cwd=HERE) as started:
        yield started


@pytest.fixture(autouse=True)
def _fresh(qstash_server: ServerProcess) -> None:
    qstash_server.reset()


@pytest.fixture
def sdk(qstash_server: ServerProcess) -> QStash:
    return QStash(qstash_server.token, base_url=qstash_server.url, retry=False)


class Page:
    """A signed-in browser's view of the dashboard's two read addresses."""

    def __init__(self, server: ServerProcess) -> None:
        self.base = f"{server.url}{DASHBOARD_PATH}"
        self.session = requests.Session()
        self.session.get(dashboard_link(server.url, server.token), timeout=10).raise_for_status()

    def raw(self, **params: Any) -> requests.Response:
        return self.session.get(f"{self.base}/data", params=params, timeout=30)

    def poll(self, **params: Any) -> dict[str, Any]:
        answer = self.raw(**params)
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    def item(self, name: str, key: str) -> dict[str, Any]:
        answer = self.session.get(f"{self.base}/item", params={"list": name, "id": key}, timeout=30)
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found


def test_large_bodies_are_clipped_and_a_poll_stays_small(
    qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    body = "x" * MIB
    ids = [
        sdk.message.publish(url=f"{app.url}/jobs/ok", body=body, delay="1h").message_id  # type: ignore[union-attr]
        for _ in range(100)
    ]
    page = Page(qstash_server)
    answer = page.raw()
    assert len(answer.content) < 2_000_000, len(answer.content)  # 100 MiB of bodies stored
    rows = answer.json()["list"]["items"]
    assert len(rows) == PAGE_SIZE
    assert {len(row["body"]) for row in rows} == {CLIP}
    assert {row["body_size"] for row in rows} == {MIB}
    # Opened, the message is whole.
    opened = page.item("messages", ids[0])
    assert opened["item"]["body"] == body


def test_a_poll_carries_only_what_changed(
    qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    first = sdk.message.publish_json(url=f"{app.url}/jobs/ok", body={"n": 1}, delay="1m")
    sdk.message.publish_json(url=f"{app.url}/jobs/ok", body={"n": 2}, delay="1h")
    page = Page(qstash_server)
    before = page.poll()
    assert all("same" not in row for row in before["list"]["items"])
    unchanged = page.poll(since=before["version"])
    assert [row.get("same") for row in unchanged["list"]["items"]] == [True, True]

    third = sdk.message.publish_json(url=f"{app.url}/jobs/ok", body={"n": 3}, delay="1h")
    qstash_server.advance("1m")  # the first is delivered
    after = page.poll(since=unchanged["version"])
    changed = {row["key"] for row in after["list"]["items"] if not row.get("same")}
    assert changed == {first.message_id, third.message_id}  # type: ignore[union-attr]
    # A version from another server (or none) gets everything.
    again = page.poll(since="elsewhere.1")
    assert all("same" not in row for row in again["list"]["items"])


def test_a_failing_row_says_what_went_wrong(
    qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    failing = sdk.message.publish_json(url=f"{app.url}/jobs/fail", body={}, retries=1)
    qstash_server.tick()
    page = Page(qstash_server)
    [row] = page.poll()["list"]["items"]
    assert row["state"] == "RETRY"
    assert row["last"]["status"] == 500
    assert "card declined" in row["last"]["response_body"]
    # One attempt of two, in the row and in the opened message alike.
    assert (row["attempts"], row["max_attempts"]) == (1, 2)
    opened = page.item("messages", failing.message_id)  # type: ignore[union-attr]
    assert len(opened["item"]["deliveries"]) == 1
    assert opened["item"]["deliveries"][0]["retried"] == 0  # the first attempt
    assert [line["state"] for line in opened["links"]["log"]][:2] == ["CREATED", "ACTIVE"]


def test_search_filters_and_pages(
    qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    for n in range(2 * PAGE_SIZE + 10):
        sdk.message.publish_json(url=f"{app.url}/jobs/ok", body={"n": n}, delay="1h")
    labelled = sdk.message.publish_json(
        url=f"{app.url}/jobs/ok", body={"needle": "haystack-42"}, delay="1h", label="billing"
    )
    failing = sdk.message.publish_json(url=f"{app.url}/jobs/fail", body={}, retries=0)
    qstash_server.tick()
    page = Page(qstash_server)
    everything = page.poll()
    assert everything["list"]["total"] == 2 * PAGE_SIZE + 12
    assert everything["list"]["states"] == {"CREATED": 2 * PAGE_SIZE + 11, "FAILED": 1}
    last = page.poll(page=2)["list"]
    assert len(last["items"]) == 12
    assert page.poll(page=3)["list"]["items"] == []

    for needle in ("BILLING", "haystack-42", labelled.message_id[-12:]):  # type: ignore[union-attr]
        found = page.poll(q=needle)["list"]
        assert [row["message_id"] for row in found["items"]] == [labelled.message_id], needle  # type: ignore[union-attr]
        assert found["matched"] == 1
    assert page.poll(q="/jobs/fail")["list"]["matched"] == 1
    only_failed = page.poll(state="FAILED")["list"]
    assert [row["message_id"] for row in only_failed["items"]] == [failing.message_id]  # type: ignore[union-attr]
    assert page.poll(state="FAILED", q="billing")["list"]["items"] == []


def test_related_items_link_to_each_other(
    qstash_server: ServerProcess, app: AppProcess, sdk: QStash
) -> None:
    failing = sdk.message.publish_json(url=f"{app.url}/jobs/fail", body={}, retries=0)
    origin = failing.message_id  # type: ignore[union-attr]
    qstash_server.tick()
    page = Page(qstash_server)
    [entry] = page.poll(list="dlq")["list"]["items"]
    assert entry["response_status"] == 500
    assert "card declined" in entry["response_body"]  # the failing answer, in the list
    assert page.item("messages", origin)["links"]["dlq"] == [entry["dlq_id"]]
    retried = page.session.post(
        f"{page.base}/act/retry_dlq",
        json={"dlq_id": entry["dlq_id"]},
        headers={"X-QStash-Dashboard": "1"},
        timeout=10,
    )
    assert retried.status_code == 201, retried.text
    copy = retried.json()["messageId"]
    assert page.item("messages", copy)["links"]["retried_from"] == origin
    assert page.item("messages", origin)["links"]["retried_as"] == [copy]
    [copy_row] = [r for r in page.poll()["list"]["items"] if r["message_id"] == copy]
    assert copy_row["retried_from"] == origin

    run_id = qstash_server.trigger(f"{app.url}/workflow/declined", {}, retries=0)
    qstash_server.drain()
    run = page.item("runs", run_id)
    assert run["failing"]["status"] == 500
    assert run["links"]["dlq"] == run["item"]["dlq_id"]
    step_messages = run["links"]["messages"]
    assert step_messages
    assert page.item("messages", step_messages[0])["links"]["run"] == run_id
    [row] = page.poll(list="runs")["list"]["items"]
    assert row["failing"]["step"].startswith("step 2")


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"list": "nope"}, "no list 'nope'"),
        ({"list": "deliveries"}, "no list 'deliveries'"),
        ({"page": "-1"}, "invalid page"),
        ({"page": "1e9"}, "invalid page"),
        ({"q": "x" * 201}, "at most 200"),
    ],
)
def test_bad_polls_are_a_400(qstash_server: ServerProcess, params: Any, expected: str) -> None:
    answer = Page(qstash_server).raw(**params)
    assert answer.status_code == 400
    assert expected in answer.json()["error"]


def test_opening_what_is_not_there(qstash_server: ServerProcess) -> None:
    page = Page(qstash_server)
    for params, status in (
        ({"list": "messages", "id": "msg_nope"}, 404),
        ({"list": "events", "id": "1"}, 400),
        ({"list": "nope", "id": "1"}, 400),
    ):
        answer = page.session.get(f"{page.base}/item", params=params, timeout=10)
        assert answer.status_code == status, answer.text
        assert answer.json()["error"]
