"""Retries as QStash makes them: how many, when (virtual time), and what ends them.

Every test publishes through the real SDK into a real app that fails the way apps fail; timing
is asserted on ``Delivery.at`` against the documented formulas.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import httpx
import pytest
import respx
from apps import WebApp
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError
from reliability_apps import (
    BASE,
    apublish,
    backoff_ms,
    gaps_ms,
    make_app,
    make_flask_app,
    publish,
)

from pytest_qstash import FakeQStash

DAY_MS = 86_400_000


def attempt_times(qstash: FakeQStash, message_id: str) -> list[datetime]:
    return [d.at for d in qstash.deliveries if d.message_id == message_id]


# -- how many, and when ----------------------------------------------------------------------
def test_http_500_is_retried_three_times_on_the_default_backoff(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/http-500", "order 1")

    qstash.advance("1d")

    deliveries = qstash.deliveries
    assert [d.status for d in deliveries] == [500] * 4  # 1 attempt + 3 retries
    assert gaps_ms([d.at for d in deliveries]) == [backoff_ms(1), backoff_ms(2), backoff_ms(3)]
    # 12 s, 2 m 28 s, 30 m 8 s as the docs' table says
    assert [g // 1000 for g in gaps_ms([d.at for d in deliveries])] == [12, 148, 1808]
    assert [hit.retried for hit in shop.hits] == [0, 1, 2, 3]
    assert shop.inbox.signature_errors == []
    # The app saw the virtual time of each attempt on its own clock.
    assert [hit.now for hit in shop.hits] == [d.at for d in deliveries]
    [message] = qstash.messages
    assert (message.message_id, message.state) == (message_id, "FAILED")
    assert (message.retried, message.max_retries) == (3, 3)
    [entry] = qstash.dlq
    assert entry.message_id == message_id
    assert entry.response_status == 500
    assert entry.response_body == '{"detail":"database unavailable"}'
    assert entry.retried == 3


@pytest.mark.asyncio
async def test_async_http_500_retries_on_the_default_backoff(
    qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp
) -> None:
    message_id = await apublish(aclient, f"{BASE}/http-500", "order 1")

    first = await qstash.atick()
    assert [d.status for d in first] == [500]
    # Nothing more happens until the first backoff has passed, to the millisecond.
    assert await qstash.aadvance(timedelta(milliseconds=backoff_ms(1) - 1)) == []
    [second] = await qstash.aadvance(timedelta(milliseconds=1))
    assert second.retried == 1
    await qstash.aadvance("1d")

    assert gaps_ms(attempt_times(qstash, message_id)) == [backoff_ms(n) for n in (1, 2, 3)]
    assert qstash.messages[0].state == "FAILED"
    assert [e.message_id for e in qstash.dlq] == [message_id]


@pytest.mark.parametrize("retries", [0, 1, 5])
def test_upstash_retries_counts_retries_after_the_first_attempt(
    qstash: FakeQStash, client: QStash, shop: WebApp, retries: int
) -> None:
    message_id = publish(client, f"{BASE}/http-500", retries=retries)

    qstash.advance("10d")

    times = attempt_times(qstash, message_id)
    assert len(times) == 1 + retries
    # From the fifth retry on, the backoff is capped at one day.
    assert gaps_ms(times) == [min(backoff_ms(n), DAY_MS) for n in range(1, retries + 1)]
    assert qstash.messages[0].max_retries == retries
    assert client.dlq.list().messages[0].max_retries == retries


@pytest.mark.qstash(default_retries=1)
def test_default_retries_is_configurable(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    publish(client, f"{BASE}/http-500")

    qstash.advance("1d")

    assert len(qstash.deliveries) == 2
    assert qstash.messages[0].max_retries == 1


def test_flaky_endpoint_is_delivered_once_it_recovers(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/flaky?fail=2", "eventually")

    qstash.advance("1d")

    assert [d.status for d in qstash.deliveries] == [503, 503, 200]
    assert [d.response_body for d in qstash.deliveries] == ["not yet", "not yet", "done"]
    assert gaps_ms(attempt_times(qstash, message_id)) == [backoff_ms(1), backoff_ms(2)]
    assert qstash.messages[0].state == "DELIVERED"
    assert qstash.dlq == []
    assert [hit.retried for hit in shop.hits] == [0, 1, 2]


def test_wsgi_app_retries_the_same_way(qstash: FakeQStash, client: QStash) -> None:
    flask_app = make_flask_app()
    qstash.mount(BASE, flask_app.app)
    publish(client, f"{BASE}/flaky?fail=1")
    publish(client, f"{BASE}/http-500", retries=1)

    qstash.advance("1h")

    by_url = {d.url: [] for d in qstash.deliveries}  # type: dict[str, list[int | None]]
    for delivery in qstash.deliveries:
        by_url[delivery.url].append(delivery.status)
    assert by_url == {f"{BASE}/flaky?fail=1": [503, 200], f"{BASE}/http-500": [500, 500]}
    assert flask_app.inbox.signature_errors == []
    assert [m.state for m in qstash.messages] == ["DELIVERED", "FAILED"]


# -- an exception out of the handler ---------------------------------------------------------
@pytest.mark.qstash(raise_app_exceptions=False)
def test_crashing_handler_counts_as_a_500_and_is_retried(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/crash", retries=2)

    qstash.advance("1h")

    deliveries = qstash.deliveries
    assert [d.status for d in deliveries] == [500, 500, 500]
    assert all(d.error == "RuntimeError: handler bug" for d in deliveries)
    assert gaps_ms(attempt_times(qstash, message_id)) == [backoff_ms(1), backoff_ms(2)]
    assert [e.response_status for e in qstash.dlq] == [500]


def test_crashing_handler_is_reraised_but_still_retried(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    publish(client, f"{BASE}/crash", retries=1)

    with pytest.raises(RuntimeError, match="handler bug"):
        qstash.tick()
    # The attempt was recorded and the retry planned before the error surfaced.
    assert qstash.messages[0].state == "RETRY"
    with pytest.raises(RuntimeError, match="handler bug"):
        qstash.advance(timedelta(milliseconds=backoff_ms(1)))
    assert qstash.messages[0].state == "FAILED"
    assert len(qstash.dlq) == 1


@pytest.mark.asyncio
@pytest.mark.qstash(raise_app_exceptions=False)
async def test_async_crashing_handler_is_retried(
    qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp
) -> None:
    await apublish(aclient, f"{BASE}/crash", retries=1)

    await qstash.aadvance("1m")

    assert [d.status for d in qstash.deliveries] == [500, 500]
    assert qstash.messages[0].state == "FAILED"


# -- non-retryable ---------------------------------------------------------------------------
def test_489_with_nonretryable_header_goes_to_the_dlq_at_once(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/reject", "bad", retries=5)

    qstash.advance("7d")

    [delivery] = qstash.deliveries
    assert delivery.status == 489
    [message] = qstash.messages
    assert (message.state, message.retried) == ("FAILED", 0)
    [entry] = client.dlq.list().messages
    assert (entry.message_id, entry.response_status, entry.response_body) == (
        message_id,
        489,
        "bad payload",
    )
    assert entry.response_headers is not None
    assert entry.response_headers["Upstash-Nonretryable-Error"] == ["true"]
    states = [e.state for e in qstash.events]
    assert states == ["CREATED", "ACTIVE", "ERROR", "FAILED"]


@pytest.mark.asyncio
async def test_async_489_without_the_header_is_an_ordinary_failure(
    qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp
) -> None:
    await apublish(aclient, f"{BASE}/plain-489", retries=2)

    await qstash.aadvance("1h")

    assert [d.status for d in qstash.deliveries] == [489, 489, 489]
    assert qstash.messages[0].state == "FAILED"


# -- Upstash-Retry-Delay ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expression", "expected_gaps"),
    [
        ("1000", [1000, 1000, 1000]),
        ("1000 * (1 + retried)", [1000, 2000, 3000]),
        ("pow(2, retried) * 1000", [1000, 2000, 4000]),
        ("max(1500, retried * 10000)", [1500, 10000, 20000]),
        ("0", [0, 0, 0]),
    ],
)
def test_retry_delay_expression_sets_the_gaps(
    qstash: FakeQStash, client: QStash, shop: WebApp, expression: str, expected_gaps: list[int]
) -> None:
    message_id = publish(client, f"{BASE}/http-500", retry_delay=expression)

    qstash.advance("1m")

    assert gaps_ms(attempt_times(qstash, message_id)) == expected_gaps
    assert client.dlq.list().messages[0].retry_delay_expression == expression


@pytest.mark.asyncio
async def test_async_retry_delay_expression(
    qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp
) -> None:
    message_id = await apublish(aclient, f"{BASE}/flaky?fail=3", retry_delay="500 * (retried + 1)")

    await qstash.aadvance("10s")

    assert gaps_ms(attempt_times(qstash, message_id)) == [500, 1000, 1500]
    assert qstash.messages[0].state == "DELIVERED"


@pytest.mark.parametrize(
    "expression",
    ["__import__('os').system('true')", "retried ** 2", "9 ** 9 ** 9", "foo(1)", "", "1000 +"],
)
def test_invalid_retry_delay_is_refused_at_publish(
    qstash: FakeQStash, client: QStash, expression: str
) -> None:
    with pytest.raises(QStashError, match="status: 400") as caught:
        client.message.publish(url=f"{BASE}/ok", body="x", retry_delay=expression)

    assert "Upstash-Retry-Delay" in str(caught.value)
    assert qstash.messages == []


def test_invalid_retry_delay_in_a_batch_item_stores_nothing(
    qstash: FakeQStash, client: QStash
) -> None:
    with pytest.raises(QStashError, match="status: 400"):
        client.message.batch(
            [
                {"url": f"{BASE}/ok", "body": "fine"},
                {"url": f"{BASE}/ok", "body": "bad", "retry_delay": "os.system"},
            ]
        )

    assert qstash.messages == []


@pytest.mark.asyncio
async def test_async_invalid_callback_retry_delay_is_refused(
    qstash: FakeQStash, aclient: AsyncQStash
) -> None:
    # callback_headers={"Retry-Delay": ...} arrives as Upstash-Callback-Retry-Delay.
    with pytest.raises(QStashError, match="status: 400"):
        await aclient.message.publish(
            url=f"{BASE}/ok",
            body="x",
            callback="https://hooks.example.com/callback",
            callback_headers={"Retry-Delay": "import os"},
        )
    assert qstash.messages == []


# -- server-directed timing on the app's answer ----------------------------------------------
@pytest.mark.parametrize(
    ("header", "value", "gap_ms"),
    [
        ("Retry-After", "30", 30_000),
        ("Retry-After", "0", 0),
        ("X-RateLimit-Reset", "6m5s", 365_000),
        ("X-RateLimit-Reset-Requests", "1.5s", 1_500),
        ("X-RateLimit-Reset-Tokens", "250ms", 250),
    ],
)
def test_retry_after_headers_on_the_answer_set_the_next_attempt(
    qstash: FakeQStash, client: QStash, shop: WebApp, header: str, value: str, gap_ms: int
) -> None:
    url = f"{BASE}/throttled?fail=1&retry_after={value}&header={header}"
    # The response header wins over the message's own Upstash-Retry-Delay.
    message_id = publish(client, url, retry_delay="999999")

    qstash.advance("1h")

    assert [d.status for d in qstash.deliveries] == [429, 200]
    assert gaps_ms(attempt_times(qstash, message_id)) == [gap_ms]


def test_retry_after_as_an_http_date(qstash: FakeQStash, client: QStash, shop: WebApp) -> None:
    when = format_datetime(qstash.now.replace(microsecond=0) + timedelta(minutes=5), usegmt=True)
    message_id = publish(client, f"{BASE}/throttled?fail=1&retry_after={when}")

    qstash.advance("1h")

    [first, second] = attempt_times(qstash, message_id)
    assert second == first.replace(microsecond=0) + timedelta(minutes=5)


def test_retry_after_beyond_one_day_is_ignored(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/throttled?fail=1&retry_after=86401")

    qstash.advance("1h")

    assert gaps_ms(attempt_times(qstash, message_id)) == [backoff_ms(1)]


@pytest.mark.asyncio
async def test_async_retry_after(qstash: FakeQStash, aclient: AsyncQStash, shop: WebApp) -> None:
    message_id = await apublish(aclient, f"{BASE}/throttled?fail=2&retry_after=7")

    await qstash.aadvance("1m")

    assert gaps_ms(attempt_times(qstash, message_id)) == [7000, 7000]
    assert qstash.messages[0].state == "DELIVERED"


# -- what each attempt carries ---------------------------------------------------------------
def test_each_attempt_is_signed_and_carries_upstash_retried(
    qstash: FakeQStash, client: QStash, shop: WebApp
) -> None:
    message_id = publish(client, f"{BASE}/http-500?order=7", '{"order": 7}')

    qstash.advance("1d")

    assert shop.inbox.signature_errors == []
    assert [hit.headers["upstash-retried"] for hit in shop.hits] == ["0", "1", "2", "3"]
    assert {hit.message_id for hit in shop.hits} == {message_id}
    assert {hit.body for hit in shop.hits} == {'{"order": 7}'}
    # A fresh token per attempt, minted at that attempt's (virtual) time.
    assert len({hit.headers["upstash-signature"] for hit in shop.hits}) == 4


# -- no response at all ----------------------------------------------------------------------
def test_unreachable_destination_is_retried_and_dead_lettered_with_status_0(
    qstash: FakeQStash, client: QStash
) -> None:
    with respx.mock(assert_all_called=False) as user_routes:
        user_routes.post("https://down.example.com/hook").mock(
            side_effect=httpx.ConnectError("connection refused")
        )
        message_id = publish(client, "https://down.example.com/hook", retries=1)

        qstash.advance("1m")

    deliveries = qstash.deliveries
    assert [(d.status, d.error) for d in deliveries] == [
        (None, "ConnectError: connection refused")
    ] * 2
    [entry] = qstash.dlq
    assert entry.response_status is None
    listed = client.dlq.get(entry.dlq_id)
    assert (listed.message_id, listed.response_status) == (message_id, 0)


def test_started_at_a_fixed_moment_attempts_land_on_exact_instants(client: QStash) -> None:
    start = datetime(2026, 3, 1, tzinfo=timezone.utc)
    with FakeQStash(start=start) as fake:
        fake.mount(BASE, make_app().app)
        publish(client, f"{BASE}/http-500", retries=2)

        fake.advance("1h")

        assert [d.at for d in fake.deliveries] == [
            start,
            start + timedelta(milliseconds=backoff_ms(1)),
            start + timedelta(milliseconds=backoff_ms(1) + backoff_ms(2)),
        ]
