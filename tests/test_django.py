"""Django (WSGI and ASGI) and django-qstash, end to end through the fake.

Django is configured here, without pytest-django: the settings module is named in the
environment and ``django.setup()`` runs once, when this module is imported. The test project
lives in ``tests/django_project``; its views verify with the real ``qstash.Receiver`` and its
tasks are real ``@stashed_task``s published by django-qstash's own QStash client.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import django
import pytest
from ci_requirements import BY_DESIGN
from django.apps import apps
from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application
from django.test import AsyncClient as DjangoAsyncClient
from django.test import Client as DjangoClient
from django.test import override_settings
from qstash import AsyncQStash, QStash
from zones import START, app_clock, zone

from pytest_qstash import FakeQStash

# "django_project" or "tests.django_project", whichever way pytest imported this module.
PROJECT = ".".join([*__name__.split(".")[:-1], "django_project"])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", f"{PROJECT}.settings")


def _setup_django_once() -> None:
    if apps.ready:
        return
    tz = os.environ.get("TZ")
    django.setup()
    # Django copies TIME_ZONE into the process environment (where time.tzset exists); the
    # other test modules keep the zone they started with.
    if hasattr(time, "tzset"):
        if tz is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = tz
        time.tzset()


_setup_django_once()
OUR_SETTINGS = f"{PROJECT}.settings"
if settings.SETTINGS_MODULE != OUR_SETTINGS:
    # Django's settings are per process: this session set Django up for another project first
    # (as `pytest examples tests` does with the Django example's).
    pytest.skip(
        f"{BY_DESIGN.django_set_up_elsewhere} {settings.SETTINGS_MODULE}: run tests/ in a pytest "
        "session of its own",
        allow_module_level=True,
    )
# Imported only now: django-qstash creates its QStash client from the settings at import.
tasks: Any = importlib.import_module(f"{PROJECT}.tasks")
views: Any = importlib.import_module(f"{PROJECT}.views")

BASE = "https://django.test"
WEBHOOK = f"{BASE}/qstash/webhook/"
APPS = {
    "wsgi": get_wsgi_application(),
    "asgi": get_asgi_application(),
    # Django's test clients (one per test, as pytest-django's), mounted: each delivery goes
    # through the client, as the test's own requests do.
    "client": DjangoClient,
    "async-client": DjangoAsyncClient,
}
CLIENTS = ("client", "async-client")
FIRST_BACKOFF = timedelta(milliseconds=12_182)  # QStash's first retry: e^2.5 s


@pytest.fixture(autouse=True)
def _fresh_project_state() -> Iterator[None]:
    def clear() -> None:
        views.received.clear()
        views.scripted_statuses.clear()
        tasks.ran.clear()
        tasks.flaky_failures_left[0] = 0

    clear()
    yield
    clear()


@pytest.fixture(params=sorted(APPS))
def kind(request: pytest.FixtureRequest, qstash: FakeQStash) -> str:
    """Mounts the project as an ASGI app, a WSGI app, then through Django's test clients."""
    name: str = request.param
    qstash.mount(BASE, APPS[name]() if name in CLIENTS else APPS[name])
    return name


# --- a plain Django view, verifying the signature itself ------------------------------------


def test_mounted_apps_are_detected_as_wsgi_and_asgi(qstash: FakeQStash, kind: str) -> None:
    mount = qstash.mounts.resolve(f"{BASE}/hook/")
    assert mount is not None
    assert mount.kind == ("client" if kind in CLIENTS else kind)
    # Django's own handlers get deliveries as its test client makes requests.
    assert mount.django is (kind not in CLIENTS)


@pytest.mark.parametrize("path", ["/hook/", "/async-hook/"])
def test_view_verifies_the_signature_and_reads_the_body(
    qstash: FakeQStash, client: QStash, kind: str, path: str
) -> None:
    published = client.message.publish_json(url=f"{BASE}{path}", body={"order": 42, "ok": True})

    assert views.received == []  # nothing is delivered before the test says so
    [delivery] = qstash.tick()

    assert delivery.status == 200, delivery.response_body
    [got] = views.received
    assert got.view == ("async" if path.startswith("/async") else "sync")
    assert got.url == f"{BASE}{path}"  # build_absolute_uri() is what QStash signed
    assert got.body == {"order": 42, "ok": True}
    assert got.message_id == published.message_id
    assert got.retried == 0
    assert got.at == qstash.now  # Django's clock reads the fake's
    [message] = qstash.messages
    assert message.state == "DELIVERED"


def test_a_500_is_a_failed_attempt_retried_after_the_backoff(
    qstash: FakeQStash, client: QStash, kind: str
) -> None:
    views.scripted_statuses.append(500)
    client.message.publish_json(url=f"{BASE}/hook/", body={"n": 1})

    assert [d.status for d in qstash.tick()] == [500]
    [message] = qstash.messages
    assert message.state == "RETRY"
    assert qstash.advance(FIRST_BACKOFF - timedelta(seconds=1)) == []

    assert [d.status for d in qstash.advance(2)] == [200]
    assert [r.retried for r in views.received] == [0, 1]
    assert views.received[1].at - views.received[0].at == FIRST_BACKOFF
    assert message.state == "DELIVERED"


def test_a_bad_signature_is_refused_by_the_view(
    qstash: FakeQStash, client: QStash, kind: str
) -> None:
    # Two rotations leave the app's configured keys both stale: its Receiver must refuse.
    client.signing_key.rotate()
    client.signing_key.rotate()
    client.message.publish_json(url=f"{BASE}/hook/", body={"n": 1}, retries=0)

    [delivery] = qstash.tick()

    assert delivery.status == 401
    assert "signature" in delivery.response_body.lower()
    assert views.received == []
    [entry] = qstash.dlq
    assert entry.response_status == 401


def test_django_turns_a_view_exception_into_a_500(
    qstash: FakeQStash, client: QStash, kind: str
) -> None:
    client.message.publish_json(url=f"{BASE}/boom/", body={})

    if kind in CLIENTS:
        # Django's test clients re-raise a view's exception (raise_request_exception), for
        # deliveries as for the test's own requests.
        with pytest.raises(RuntimeError, match="boom from the Django view"):
            qstash.tick()
        [delivery] = qstash.deliveries
    else:
        [delivery] = qstash.tick()  # Django answered the exception itself: nothing to re-raise

    assert delivery.status == 500
    assert qstash.messages[0].state == "RETRY"


def test_a_propagated_view_exception_is_raised_from_tick(
    qstash: FakeQStash, client: QStash, kind: str
) -> None:
    client.message.publish_json(url=f"{BASE}/boom/", body={})

    with (
        override_settings(DEBUG_PROPAGATE_EXCEPTIONS=True),
        pytest.raises(RuntimeError, match="boom from the Django view"),
    ):
        qstash.tick()

    [delivery] = qstash.deliveries
    assert delivery.status == 500  # still an attempt QStash will retry
    assert qstash.messages[0].state == "RETRY"


@pytest.mark.asyncio
async def test_asgi_app_on_the_test_loop(qstash: FakeQStash, aclient: AsyncQStash) -> None:
    qstash.mount(BASE, APPS["asgi"])
    views.scripted_statuses.append(503)
    await aclient.message.publish_json(url=f"{BASE}/async-hook/", body={"from": "async"})
    await aclient.message.publish_json(url=f"{BASE}/hook/", body={"from": "sync"})

    first = await qstash.atick()

    assert [(d.url, d.status) for d in first] == [
        (f"{BASE}/async-hook/", 503),
        (f"{BASE}/hook/", 200),
    ]
    assert await qstash.aadvance(FIRST_BACKOFF - timedelta(milliseconds=1)) == []
    [retry] = await qstash.aadvance(timedelta(milliseconds=1))
    assert (retry.url, retry.status) == (f"{BASE}/async-hook/", 200)
    assert [(r.view, r.body, r.retried) for r in views.received] == [
        ("async", {"from": "async"}, 0),
        ("sync", {"from": "sync"}, 0),
        ("async", {"from": "async"}, 1),
    ]


@pytest.mark.asyncio
async def test_wsgi_app_from_an_async_test(qstash: FakeQStash, aclient: AsyncQStash) -> None:
    qstash.mount(BASE, APPS["wsgi"])
    await aclient.message.publish_json(url=f"{BASE}/hook/", body=[1, 2, 3])

    [delivery] = await qstash.atick()

    assert delivery.status == 200
    assert [r.body for r in views.received] == [[1, 2, 3]]


@pytest.mark.asyncio
@pytest.mark.parametrize("name", CLIENTS)
async def test_a_test_client_from_an_async_test(
    qstash: FakeQStash, aclient: AsyncQStash, name: str
) -> None:
    # The AsyncClient on the test's loop; the sync Client in a worker thread.
    qstash.mount(BASE, APPS[name]())
    await aclient.message.publish_json(url=f"{BASE}/async-hook/?page=2", body={"n": 7})

    [delivery] = await qstash.atick()

    assert delivery.status == 200, delivery.response_body
    [got] = views.received
    assert (got.url, got.body) == (f"{BASE}/async-hook/?page=2", {"n": 7})


# --- django-qstash: tasks published by its client, run by its webhook view ------------------


def test_delay_publishes_and_the_webhook_runs_the_task(qstash: FakeQStash, kind: str) -> None:
    result = tasks.greet.delay("Ada", punctuation="?")

    [message] = qstash.messages
    assert result.id == message.message_id
    assert message.url == WEBHOOK
    assert message.json()["function"] == "greet"
    assert tasks.ran == []

    [delivery] = qstash.tick()

    assert delivery.status == 200, delivery.response_body
    assert json.loads(delivery.response_body) == {
        "status": "success",
        "task_name": "greet",
        "result": "Hello, Ada?",
    }
    assert tasks.ran == [("greet", "Hello, Ada?")]
    assert message.state == "DELIVERED"


def test_coroutine_task(qstash: FakeQStash, kind: str) -> None:
    tasks.greet_async.delay("Cy")

    [delivery] = qstash.tick()

    assert delivery.status == 200, delivery.response_body
    assert json.loads(delivery.response_body)["result"] == "Hi, Cy"
    assert tasks.ran == [("greet_async", "Cy")]


def test_countdown_waits_for_virtual_time(qstash: FakeQStash, kind: str) -> None:
    published_at = qstash.now
    tasks.greet.apply_async(args=("Bob",), countdown=30)

    assert qstash.tick() == []
    assert qstash.advance(29) == []
    assert tasks.ran == []

    [delivery] = qstash.advance(1)

    assert delivery.at == published_at + timedelta(seconds=30)
    assert tasks.ran == [("greet", "Hello, Bob!")]


def test_eta_waits_for_virtual_time(qstash: FakeQStash, kind: str) -> None:
    eta = qstash.now + timedelta(hours=2)
    tasks.greet.apply_async(args=("Eve",), eta=eta)

    assert qstash.advance("1h59m") == []
    assert tasks.ran == []
    assert [d.status for d in qstash.advance("1m")] == [200]
    assert tasks.ran == [("greet", "Hello, Eve!")]


def test_a_failing_task_is_retried_by_qstash(qstash: FakeQStash, kind: str) -> None:
    tasks.flaky_failures_left[0] = 1
    tasks.flaky.delay("x")

    [failed] = qstash.tick()
    assert failed.status == 422  # django-qstash's answer for a task that raised
    assert json.loads(failed.response_body)["error_type"] == "TaskError"

    [retried] = qstash.advance(FIRST_BACKOFF)

    assert retried.status == 200
    assert retried.headers["Upstash-Retried"] == "1"
    assert tasks.ran == [("flaky", "x"), ("flaky", "x")]


def test_self_retry_publishes_from_inside_the_webhook(qstash: FakeQStash, kind: str) -> None:
    tasks.poll.delay(2)

    # The webhook re-enqueues through the same intercepted client, mid-delivery.
    assert [d.status for d in qstash.tick()] == [200]
    assert tasks.ran == [("poll", 0)]
    assert len(qstash.messages) == 2
    retry_message = qstash.messages[1]
    assert retry_message.url == WEBHOOK
    assert retry_message.not_before == qstash.now + timedelta(seconds=10)

    assert qstash.advance(9) == []
    qstash.advance(1)
    assert tasks.ran == [("poll", 0), ("poll", 1)]
    qstash.advance(10)
    assert tasks.ran == [("poll", 0), ("poll", 1), ("poll", 2)]
    assert [m.state for m in qstash.messages] == ["DELIVERED"] * 3
    assert qstash.next_due() is None


__all__ = ["app_clock", "zone"]  # fixtures, imported to be found


def test_tasks_verify_in_other_zones_across_daylight_saving(
    app_clock: str, qstash: FakeQStash
) -> None:
    # Django's own default TIME_ZONE is America/Chicago: its process zone must not shift the
    # tokens django-qstash's webhook verifies, on any backend, before or after the change.
    qstash.mount(BASE, APPS["wsgi"])
    tasks.greet.delay("Now")
    tasks.greet.apply_async(args=("Later",), countdown=30 * 86400)

    deliveries = qstash.advance("30d")

    assert [d.status for d in deliveries] == [200, 200], deliveries
    assert [d.at for d in deliveries] == [START, START + timedelta(days=30)]
    assert tasks.ran == [("greet", "Hello, Now!"), ("greet", "Hello, Later!")]


def test_webhook_refuses_a_stale_signature(qstash: FakeQStash, client: QStash, kind: str) -> None:
    client.signing_key.rotate()  # the app's "next" key now signs: still accepted
    tasks.greet.delay("One")
    assert [d.status for d in qstash.tick()] == [200]

    client.signing_key.rotate()  # neither of the app's keys signs any more
    tasks.greet.apply_async(args=("Two",), retries=0)
    [refused] = qstash.tick()

    assert refused.status == 400
    assert json.loads(refused.response_body)["error_type"] == "SignatureError"
    assert tasks.ran == [("greet", "Hello, One!")]


@pytest.mark.asyncio
async def test_django_qstash_through_asgi_on_the_test_loop(qstash: FakeQStash) -> None:
    qstash.mount(BASE, APPS["asgi"])
    tasks.greet.delay("Dee")
    tasks.greet_async.apply_async(args=("Fay",), countdown=5)

    [now] = await qstash.atick()
    assert now.status == 200, now.response_body
    assert tasks.ran == [("greet", "Hello, Dee!")]

    [later] = await qstash.aadvance(5)
    assert later.status == 200, later.response_body
    assert tasks.ran == [("greet", "Hello, Dee!"), ("greet_async", "Fay")]
