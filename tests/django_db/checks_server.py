"""A Django project served by pytest-django's ``live_server`` (a thread of its own, with its
own database connections) and the fake as a server (``qstash_server``): deliveries are real
HTTP requests. Run by tests/test_django_db.py in a pytest session of its own.

Another connection sees only what is committed: the test's database must be
``transactional_db`` (``live_server`` implies it), as the docs say."""

from __future__ import annotations

import json
from typing import Any

from dbproject.models import Note
from qstash import QStash

from pytest_qstash.server.processes.server import ServerProcess


# docs/how-to/django.md shows the test below.
# --8<-- [start:docs]
def test_a_served_app_sees_the_tests_rows(live_server: Any, qstash_server: ServerProcess) -> None:
    qstash_server.reset()
    Note.objects.create(text="written by the test")
    client = QStash(qstash_server.env["QSTASH_TOKEN"], base_url=qstash_server.env["QSTASH_URL"])
    client.message.publish_json(url=f"{live_server.url}/notes/", body={})

    [delivery] = qstash_server.tick()

    assert delivery.status == 200, delivery.response_body
    assert json.loads(delivery.response_body)["seen"] == ["written by the test"]
    texts = list(Note.objects.order_by("id").values_list("text", flat=True))
    assert texts == ["written by the test", "written by /notes/"]


# --8<-- [end:docs]
