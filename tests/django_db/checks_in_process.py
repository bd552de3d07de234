"""Deliveries into a Django project that reads and writes its database, inside each way Django
tests hold the database. Run by tests/test_django_db.py in a pytest session of its own, with
pytest-django, once per database and ``ATOMIC_REQUESTS`` setting.

Each delivery must see the row the test wrote before it, the test must see the row the delivery
wrote, on its connection, still open and still in its transaction, which is rolled back (or the
tables flushed) at the end as usual: the last test here looks."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from dbproject import tasks
from dbproject.asgi import application as asgi_application
from dbproject.models import Note
from dbproject.wsgi import application as wsgi_application
from django.db import connection, connections
from django.test import TestCase, TransactionTestCase
from django_qstash.results.models import TaskResult
from qstash import QStash

from pytest_qstash import FakeQStash

BASE = "https://django.test"
APPS = {"wsgi": wsgi_application, "asgi": asgi_application}
#: What a delivery goes to: plain views (sync and async) and django-qstash tasks.
TARGETS = ["view", "async-view", "task", "async-task"]
ATOMIC_REQUESTS = connection.settings_dict["ATOMIC_REQUESTS"]


def deliver_and_check(qstash: FakeQStash, app: str, target: str, *, in_transaction: bool) -> None:
    qstash.mount(BASE, APPS[app])  # the handler itself, as the docs mount it
    Note.objects.create(text="written by the test")

    if target == "task":
        tasks.add_note.delay("written by the task")
    elif target == "async-task":
        tasks.add_note_async.delay("written by the task")
    else:
        path = "/notes/" if target == "view" else "/async-notes/"
        QStash(os.environ["QSTASH_TOKEN"]).message.publish_json(url=f"{BASE}{path}", body={})
    [delivery] = qstash.tick()

    assert delivery.status == 200, delivery.response_body
    answer: dict[str, Any] = json.loads(delivery.response_body)
    # The delivery saw the test's row...
    assert answer.get("seen", answer.get("result")) == ["written by the test"]
    if target == "view":
        assert answer["in_transaction"] is (in_transaction or ATOMIC_REQUESTS)
    # ...and the test sees the delivery's, on its own connection, open and in its transaction.
    written = "written by the task" if "task" in target else f"written by {path}"
    assert list(Note.objects.order_by("id").values_list("text", flat=True)) == [
        "written by the test",
        written,
    ]
    assert connection.connection is not None
    assert connection.is_usable()
    assert connection.in_atomic_block is in_transaction
    if "task" in target:  # django-qstash's results app stored the task's result
        assert TaskResult.objects.get(task_id=delivery.message_id).status == "SUCCESS"
    # A second delivery on the same connection works as well.
    QStash(os.environ["QSTASH_TOKEN"]).message.publish_json(url=f"{BASE}/notes/", body={})
    [again] = qstash.tick()
    assert again.status == 200, again.response_body
    assert Note.objects.count() == 3


@pytest.mark.django_db
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("app", sorted(APPS))
def test_django_db(qstash: FakeQStash, app: str, target: str) -> None:
    deliver_and_check(qstash, app, target, in_transaction=True)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("app", sorted(APPS))
def test_django_db_transaction(qstash: FakeQStash, app: str, target: str) -> None:
    deliver_and_check(qstash, app, target, in_transaction=False)


def test_transactional_db_fixture(qstash: FakeQStash, transactional_db: None) -> None:
    deliver_and_check(qstash, "asgi", "view", in_transaction=False)


class _Deliveries:
    """One test method per app and target, in Django's own test case classes."""

    in_transaction: bool
    qstash: FakeQStash

    @pytest.fixture(autouse=True)
    def _fake(self, qstash: FakeQStash) -> None:
        self.qstash = qstash

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for app in sorted(APPS):
            for target in TARGETS:

                def test(self: _Deliveries, app: str = app, target: str = target) -> None:
                    deliver_and_check(self.qstash, app, target, in_transaction=self.in_transaction)

                setattr(cls, f"test_{app}_{target.replace('-', '_')}", test)


class TestInTestCase(_Deliveries, TestCase):
    in_transaction = True


class TestInTransactionTestCase(_Deliveries, TransactionTestCase):
    in_transaction = False


def test_everything_written_is_gone_at_the_end(django_db_blocker: Any) -> None:
    # Run last: pytest-django orders the tests that use no database after the others.
    with django_db_blocker.unblock():
        assert Note.objects.count() == 0
        assert TaskResult.objects.count() == 0
        assert connection.is_usable()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("app", sorted(APPS))
async def test_an_async_test_with_a_transactional_database(qstash: FakeQStash, app: str) -> None:
    """An async test's ORM calls and its deliveries use other threads' connections: with
    ``transaction=True`` each side sees what the other committed."""
    from qstash import AsyncQStash

    qstash.mount(BASE, APPS[app])
    await Note.objects.acreate(text="written by the test")
    await AsyncQStash(os.environ["QSTASH_TOKEN"]).message.publish_json(
        url=f"{BASE}/notes/", body={}
    )

    [delivery] = await qstash.atick()

    assert delivery.status == 200, delivery.response_body
    assert json.loads(delivery.response_body)["seen"] == ["written by the test"]
    texts = [note.text async for note in Note.objects.order_by("id")]
    assert texts == ["written by the test", "written by /notes/"]
    # The connection the ORM opened for this test's own calls, on asgiref's thread: closed,
    # or Postgres cannot drop the test database at the end.
    await sync_to_async(connections.close_all)()
