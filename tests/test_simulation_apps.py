"""Planted at-least-once bugs in real apps, found by ``@pytest.mark.qstash(simulate=N)``.

Each case is a user's project in an inner pytest session: a FastAPI, Flask or Django app (with
django-qstash) mounted on the fake, publishing through the real ``qstash`` SDK. A job that
charges per delivery, a consumer that counts on publish order, a callback that mails per call,
a django-qstash task that charges per run: each fails some of 50 seeded schedules (and passes
the others), and a failure's report names a fault kind QStash's contract allows, shrinks it
to that one fault and prints a replay command that fails the same way. The same apps written
as Upstash's docs ask (idempotent on ``Upstash-Message-Id``, a queue of parallelism 1, a
deduplicated publish) pass 200 schedules, under faults of the kinds that broke them.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

import pytest
from inner_pytest import run_inner

# -- the user's project: apps, fixtures, tests ------------------------------------------------

#: What every inner project's conftest has: the faults each test's schedules injected, printed
#: at the end of the run, so that a passing run shows it was not passing on the happy path.
FAULT_COUNTS = """
from collections import Counter, defaultdict

import pytest

INJECTED = defaultdict(Counter)


@pytest.fixture(autouse=True)
def count_faults(request, qstash):
    yield
    for fault in qstash.simulation.injected:
        INJECTED[request.node.nodeid.partition("[")[0]][fault.kind] += 1


def pytest_terminal_summary(terminalreporter):
    for test, kinds in sorted(INJECTED.items()):
        counts = " ".join(f"{kind}={count}" for kind, count in sorted(kinds.items()))
        terminalreporter.write_line(f"injected in {test}: {counts}")
"""

CONFTEST = (
    FAULT_COUNTS
    + """

import os

from qstash import QStash


@pytest.fixture
def client():
    return QStash(os.environ["QSTASH_TOKEN"], retry=False)


def mounted(qstash, module):
    module.reset()  # each schedule starts afresh, as with any function-scoped fixture
    qstash.mount(module.BASE, module.app)
    return module


@pytest.fixture
def shop(qstash):
    import fastapi_shop

    return mounted(qstash, fastapi_shop)


@pytest.fixture
def orders(qstash):
    import flask_orders

    return mounted(qstash, flask_orders)


@pytest.fixture
def shipping(qstash):
    import shipping_app

    return mounted(qstash, shipping_app)
"""
)

# A FastAPI shop: POST /orders publishes a charge job; the job charges the order.
FASTAPI_SHOP = """
import os

from fastapi import FastAPI, Request
from qstash import QStash

BASE = "https://shop.example.com"
app = FastAPI()
qstash_client = QStash(os.environ["QSTASH_TOKEN"], retry=False)
charges: list[str] = []
charged_messages: set[str] = set()


def reset() -> None:
    charges.clear()
    charged_messages.clear()


@app.post("/orders")
async def place_order(request: Request) -> dict[str, str]:
    body = await request.json()
    qstash_client.message.publish_json(url=f"{BASE}{body['job']}", body={"order": body["order"]})
    return {"order": body["order"]}


@app.post("/jobs/charge")
async def charge(request: Request) -> dict[str, bool]:
    charges.append((await request.json())["order"])  # the bug: each delivery charges
    return {"ok": True}


@app.post("/jobs/charge-once")
async def charge_once(request: Request) -> dict[str, bool]:
    message_id = request.headers["Upstash-Message-Id"]
    if message_id not in charged_messages:  # one charge per QStash message
        charged_messages.add(message_id)
        charges.append((await request.json())["order"])
    return {"ok": True}
"""

FASTAPI_TEST = """
import pytest
from fastapi.testclient import TestClient


@pytest.mark.qstash(simulate={simulate})
def test_an_order_is_charged_once(qstash, shop):
    TestClient(shop.app).post("/orders", json={{"order": "o-7", "job": "{job}"}})
    qstash.drain()
    assert shop.charges == ["o-7"]
"""

# A Flask consumer of an order's events: idempotent, it applies each message once, in the
# order they arrive.
FLASK_ORDERS = """
import os

from flask import Flask, request
from qstash import Receiver

BASE = "https://orders.example.com"
app = Flask(__name__)
app.testing = True  # a bug in a route raises out of drain() instead of hiding as a 500
receiver = Receiver(
    current_signing_key=os.environ["QSTASH_CURRENT_SIGNING_KEY"],
    next_signing_key=os.environ["QSTASH_NEXT_SIGNING_KEY"],
)
timeline: list[str] = []
handled: set[str] = set()


def reset() -> None:
    timeline.clear()
    handled.clear()


@app.post("/orders/<int:order>/events")
def order_event(order: int) -> dict[str, bool]:
    receiver.verify(
        signature=request.headers["Upstash-Signature"],
        body=request.get_data(as_text=True),
        url=request.url,
    )
    message_id = request.headers["Upstash-Message-Id"]
    if message_id not in handled:
        handled.add(message_id)
        timeline.append(request.get_json()["event"])
    return {"ok": True}
"""

FLASK_BUG_TEST = """
import pytest


@pytest.mark.qstash(simulate=50)
def test_the_events_apply_in_publish_order(qstash, client, orders):
    for event in ("created", "paid"):
        client.message.publish_json(url=f"{orders.BASE}/orders/7/events", body={"event": event})
    qstash.drain()
    assert orders.timeline == ["created", "paid"]  # the bug: QStash promises no such order
"""

FLASK_FIXED_TEST = """
import pytest


@pytest.mark.qstash(simulate=200)
def test_the_events_apply_in_publish_order(qstash, client, orders):
    client.queue.upsert("order-7", parallelism=1)  # one at a time, in order
    for event in ("created", "paid"):
        client.message.enqueue_json(
            queue="order-7", url=f"{orders.BASE}/orders/7/events", body={"event": event}
        )
    qstash.drain()
    assert orders.timeline == ["created", "paid"]
"""

# Shipping with a callback: QStash calls /shipped with each attempt's outcome; a 200 mails the
# customer.
SHIPPING_APP = """
from fastapi import FastAPI, Request

BASE = "https://shipping.example.com"
app = FastAPI()
mails: list[str] = []
mailed_for: set[str] = set()


def reset() -> None:
    mails.clear()
    mailed_for.clear()


@app.post("/ship")
async def ship() -> dict[str, bool]:
    return {"shipped": True}


@app.post("/shipped")
async def shipped(request: Request) -> dict[str, bool]:
    outcome = await request.json()
    if outcome["status"] == 200:  # the bug: a mail per callback call
        mails.append(request.headers["Upstash-Message-Id"])
    return {"ok": True}


@app.post("/shipped-once")
async def shipped_once(request: Request) -> dict[str, bool]:
    outcome = await request.json()
    source = outcome["sourceMessageId"]
    if outcome["status"] == 200 and source not in mailed_for:  # one mail per shipment
        mailed_for.add(source)
        mails.append(request.headers["Upstash-Message-Id"])
    return {"ok": True}
"""

CALLBACK_TEST = """
import pytest


@pytest.mark.qstash(simulate={simulate})
def test_the_customer_gets_one_mail(qstash, client, shipping):
    client.message.publish_json(
        url=f"{{shipping.BASE}}/ship", body={{"order": 7}}, callback=f"{{shipping.BASE}}{route}"
    )
    qstash.drain()
    assert len(shipping.mails) == 1, f"callback message(s) {{sorted(set(shipping.mails))}}"
"""

APPS = {"fastapi_shop": FASTAPI_SHOP, "flask_orders": FLASK_ORDERS, "shipping_app": SHIPPING_APP}
BUGS = {
    "test_fastapi_bug": FASTAPI_TEST.format(simulate=50, job="/jobs/charge"),
    "test_flask_bug": FLASK_BUG_TEST,
    "test_callback_bug": CALLBACK_TEST.format(simulate=50, route="/shipped"),
}
FIXED = {
    "test_fastapi_fixed": FASTAPI_TEST.format(simulate=200, job="/jobs/charge-once"),
    "test_flask_fixed": FLASK_FIXED_TEST,
    "test_callback_fixed": CALLBACK_TEST.format(simulate=200, route="/shipped-once"),
}

# A Django project whose tasks run through django-qstash: `.delay()` publishes with
# django-qstash's own QStash client (the SDK's default, which sends a publish again when its
# answer is lost), the webhook runs the task.
DJANGO_PROJECT = {
    "__init__.py": "",
    "settings.py": """
import os

SECRET_KEY = "not-a-secret"
ALLOWED_HOSTS = ["shop.example.com"]
ROOT_URLCONF = "shop_project.urls"
INSTALLED_APPS = ["django_qstash"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
USE_TZ = True
TIME_ZONE = "UTC"
LOGGING_CONFIG = None
QSTASH_TOKEN = os.environ["QSTASH_TOKEN"]
QSTASH_CURRENT_SIGNING_KEY = os.environ["QSTASH_CURRENT_SIGNING_KEY"]
QSTASH_NEXT_SIGNING_KEY = os.environ["QSTASH_NEXT_SIGNING_KEY"]
DJANGO_QSTASH_DOMAIN = "https://shop.example.com"
DJANGO_QSTASH_WEBHOOK_PATH = "/qstash/webhook/"
""",
    "urls.py": """
from django.urls import include, path

urlpatterns = [path("qstash/webhook/", include("django_qstash.urls"))]
""",
    "tasks.py": """
from django_qstash import stashed_task

charges: list[int] = []
charged_messages: set[str] = set()


def reset() -> None:
    charges.clear()
    charged_messages.clear()


@stashed_task
def charge(order: int) -> None:
    charges.append(order)  # the bug: each run charges


@stashed_task(bind=True)
def charge_per_message(self, order: int) -> None:
    if self.request.id not in charged_messages:  # idempotent on the QStash message id...
        charged_messages.add(self.request.id)
        charges.append(order)  # ...but .delay() may publish twice: a second message


@stashed_task(bind=True, deduplicated=True)  # QStash answers a publish sent again
def charge_once(self, order: int) -> None:
    if self.request.id not in charged_messages:
        charged_messages.add(self.request.id)
        charges.append(order)
""",
}

DJANGO_CONFTEST = (
    """
import os

import django

os.environ["DJANGO_SETTINGS_MODULE"] = "shop_project.settings"
django.setup()
"""
    + FAULT_COUNTS
    + """

@pytest.fixture
def shop(qstash):
    from django.conf import settings
    from django.core.wsgi import get_wsgi_application

    from shop_project import tasks

    tasks.reset()
    qstash.mount(settings.DJANGO_QSTASH_DOMAIN, get_wsgi_application())
    return tasks
"""
)

DJANGO_TEST = """
import pytest


@pytest.mark.qstash(simulate=50)
def test_charge_runs_once(qstash, shop):
    shop.charge.delay(7)
    qstash.drain()
    assert shop.charges == [7]


@pytest.mark.qstash(simulate=50)
def test_charge_per_message_runs_once(qstash, shop):
    shop.charge_per_message.delay(7)
    qstash.drain()
    assert shop.charges == [7]


@pytest.mark.qstash(simulate=200)
def test_charge_once_runs_once(qstash, shop):
    shop.charge_once.delay(7)
    qstash.drain()
    assert shop.charges == [7]
"""


# -- reading what the inner session reported -------------------------------------------------
@dataclass(frozen=True)
class Fault:
    """One fault as a report lists it (its virtual time left out: the clock starts at the
    wall clock's time, which a replay does not share)."""

    kind: str
    message_id: str
    description: str


@dataclass(frozen=True)
class Failure:
    """A failed simulated item, as its report says."""

    item: str
    #: The first ``E`` line of its traceback: what the test's assertion said.
    error: str
    seed: int
    injected: tuple[Fault, ...]
    smallest: tuple[Fault, ...]
    #: The report's header of the smallest set, e.g. "smallest set that still fails (1):".
    smallest_header: str
    replay_nodeid: str
    replay_seed: int
    #: The whole of the failure's report.
    text: str


#: A failure's header in the report: "____ test_x[qstash-seed-7] ____".
_HEADER = re.compile(r"^_+ (\S+\[\S+\]) _+$", re.M)
_SECTION = re.compile(r"^-+ qstash simulation -+$\n(?P<body>.*?^replay: .*?$)", re.M | re.S)
_FAULT = re.compile(r"^ +(?:\d+\. )?(\w+) (msg_\w+) at \S+: (.*)$")


def _fault(line: str) -> Fault:
    match = _FAULT.match(line)
    assert match is not None, line
    return Fault(*match.groups())


def failures(result: pytest.RunResult) -> list[Failure]:
    """Every failure the session's output reports, with its "qstash simulation" section."""
    output = result.stdout.str()
    if "= FAILURES =" not in output:
        return []
    report = output.split("= FAILURES =", 1)[1].split("= short test summary info =", 1)[0]
    headers = list(_HEADER.finditer(report))
    found = []
    ends = [header.start() for header in headers[1:]] + [len(report)]
    for header, end in zip(headers, ends, strict=True):
        text = report[header.end() : end]
        error = re.search(r"^E +(.*)$", text, re.M)
        section = _SECTION.search(text)
        assert error is not None, text
        assert section is not None, f"no qstash simulation section:\n{text}"
        lines = section.group("body").splitlines()
        summary = re.fullmatch(r"seed (\d+), faults all: (\d+) fault\(s\) injected", lines[0])
        assert summary is not None, lines[0]
        count = int(summary.group(2))
        injected = tuple(_fault(line) for line in lines[1 : 1 + count])
        smallest_header = lines[1 + count]
        shrunk = re.fullmatch(r"smallest set that still fails \((\d+)\):", smallest_header)
        assert shrunk is not None, section.group("body")
        smallest = tuple(
            _fault(line) for line in lines[2 + count : 2 + count + int(shrunk.group(1))]
        )
        assert len(smallest) == int(shrunk.group(1)), section.group("body")
        replay = re.fullmatch(r"replay: pytest (\S+) --qstash-simulate-seed=(\d+)", lines[-1])
        assert replay is not None, lines[-1]
        found.append(
            Failure(
                item=header.group(1),
                error=error.group(1),
                seed=int(summary.group(1)),
                injected=injected,
                smallest=smallest,
                smallest_header=smallest_header,
                replay_nodeid=replay.group(1),
                replay_seed=int(replay.group(2)),
                text=text,
            )
        )
    return found


def faults_injected(result: pytest.RunResult) -> dict[str, dict[str, int]]:
    """What the inner conftest's summary says each test's schedules injected, by kind."""
    counts: dict[str, dict[str, int]] = {}
    for test, kinds in re.findall(r"^injected in (\S+): (.*)$", result.stdout.str(), re.M):
        counts[test] = {kind: int(n) for kind, n in (pair.split("=") for pair in kinds.split())}
    return counts


def outcomes(result: pytest.RunResult, module: str, test: str) -> dict[int, str]:
    """Each schedule's outcome (PASSED, FAILED) of ``module::test``, from the summary that
    ``-rfp`` asks for, by seed."""
    pattern = rf"^(PASSED|FAILED) {module}\.py::{test}\[qstash-seed-(\d+)\]"
    return {int(seed): outcome for outcome, seed in re.findall(pattern, result.stdout.str(), re.M)}


def check_found(
    result: pytest.RunResult, module: str, test: str, kinds: Collection[str], *, seeds: int = 50
) -> list[Failure]:
    """The planted bug in ``module::test`` fails at least one of its ``seeds`` schedules, and
    each failure's report is whole: its own seed, a smallest failing set of the faults
    injected, of the ``kinds`` that bug is open to, and a replay command for that item."""
    by_seed = outcomes(result, module, test)
    assert sorted(by_seed) == list(range(seeds)), result.stdout.str()
    failed = {seed for seed, outcome in by_seed.items() if outcome == "FAILED"}
    assert failed, result.stdout.str()
    assert len(failed) < seeds  # the schedules that inject nothing it is open to pass
    found = [f for f in failures(result) if f.item.startswith(f"{test}[")]
    assert {f.seed for f in found} == failed
    for failure in found:
        assert failure.item == f"{test}[qstash-seed-{failure.seed}]"
        assert failure.injected, failure.text  # the happy path passes
        assert set(failure.smallest) <= set(failure.injected), failure.text
        assert {fault.kind for fault in failure.smallest} <= set(kinds), failure.text
        assert failure.replay_nodeid == f"{module}.py::{test}"
        assert failure.replay_seed == failure.seed
    return found


def shrunk_to_one(found: list[Failure], kind: str) -> Failure:
    """The first failure shrunk to a single fault of ``kind``."""
    for failure in found:
        one = failure.smallest_header == "smallest set that still fails (1):"
        if one and failure.smallest[0].kind == kind:
            return failure
    raise AssertionError(f"no failure shrunk to one {kind}: {[f.smallest for f in found]}")


def check_replay(replayed: pytest.RunResult, failure: Failure) -> None:
    """The replay command fails the same item the same way: its seed, its faults, its error."""
    replayed.assert_outcomes(failed=1)
    [again] = failures(replayed)
    assert again.item == failure.item
    assert (again.seed, again.error) == (failure.seed, failure.error)
    assert again.injected == failure.injected
    assert (again.smallest_header, again.smallest) == (failure.smallest_header, failure.smallest)


def write_project(pytester: pytest.Pytester, tests: dict[str, str]) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**APPS, **tests)


# -- the planted bugs, found -----------------------------------------------------------------
def test_a_fastapi_job_charging_per_delivery_is_found_as_duplicate_or_lost_ack(
    pytester: pytest.Pytester,
) -> None:
    write_project(pytester, {"test_fastapi_bug": BUGS["test_fastapi_bug"]})
    result = run_inner(pytester, "-rfp")

    found = check_found(
        result, "test_fastapi_bug", "test_an_order_is_charged_once", {"duplicate", "lost_ack"}
    )
    for kind in ("duplicate", "lost_ack"):
        failure = shrunk_to_one(found, kind)
        assert failure.error.startswith("AssertionError: assert ['o-7', 'o-7"), failure.error
        replayed = run_inner(
            pytester, failure.replay_nodeid, f"--qstash-simulate-seed={failure.replay_seed}"
        )
        check_replay(replayed, failure)


def test_a_flask_consumer_counting_on_publish_order_is_found_as_reorder(
    pytester: pytest.Pytester,
) -> None:
    write_project(pytester, {"test_flask_bug": BUGS["test_flask_bug"]})
    result = run_inner(pytester, "-rfp")

    # The consumer is idempotent: the duplicates and lost acknowledgements injected never
    # break it, only a later message delivered first.
    found = check_found(
        result, "test_flask_bug", "test_the_events_apply_in_publish_order", {"reorder"}
    )
    injected = faults_injected(result)["test_flask_bug.py::test_the_events_apply_in_publish_order"]
    assert {"duplicate", "lost_ack", "reorder"} <= set(injected), injected
    failure = shrunk_to_one(found, "reorder")
    assert failure.error == "AssertionError: assert ['paid', 'created'] == ['created', 'paid']"
    [reorder] = failure.smallest
    assert reorder.description.startswith("due at the same moment as msg_")
    assert reorder.message_id not in reorder.description  # it overtook the other message
    replayed = run_inner(
        pytester, failure.replay_nodeid, f"--qstash-simulate-seed={failure.replay_seed}"
    )
    check_replay(replayed, failure)


def test_a_callback_mailing_per_call_is_found_as_a_duplicated_callback(
    pytester: pytest.Pytester,
) -> None:
    write_project(pytester, {"test_callback_bug": BUGS["test_callback_bug"]})
    result = run_inner(pytester, "-rfp")

    found = check_found(
        result, "test_callback_bug", "test_the_customer_gets_one_mail", {"duplicate", "lost_ack"}
    )
    # Among them a schedule where the callback message itself (the one the customer was
    # mailed for) is delivered once more.
    duplicated_callbacks = [
        f
        for f in found
        if len(f.smallest) == 1
        and f.smallest[0].kind == "duplicate"
        and f.error == f"AssertionError: callback message(s) ['{f.smallest[0].message_id}']"
    ]
    assert duplicated_callbacks, [(f.error, f.smallest) for f in found]
    failure = duplicated_callbacks[0]
    assert "smallest set that still fails (1):" in failure.text
    replayed = run_inner(
        pytester, failure.replay_nodeid, f"--qstash-simulate-seed={failure.replay_seed}"
    )
    check_replay(replayed, failure)


# Django's settings are per process (and tests/test_django.py sets Django up in this one): the
# Django project runs in a pytest process of its own.
def run_django(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:django",  # Django is set up by the conftest, as docs/how-to/django.md shows
        "-p",
        "no:hypothesispytest",
        "-p",
        "no:schemathesis",
        "-p",
        "no:faker",
        "-p",
        "no:xdist",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
        *args,
    )


def test_django_qstash_tasks_charging_per_run_are_found_and_the_fixed_one_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # the outer run's options are its own
    project = pytester.mkpydir("shop_project")
    for name, source in DJANGO_PROJECT.items():
        (project / name).write_text(source, encoding="utf-8")
    pytester.makeconftest(DJANGO_CONFTEST)
    pytester.makepyfile(test_django_shop=DJANGO_TEST)

    result = run_django(pytester, "-rfp")

    # A task that charges per run: a redelivery, a lost acknowledgement, and a publish whose
    # answer was lost (django-qstash's client sends it again: a second message) each charge
    # twice.
    per_run = check_found(
        result,
        "test_django_shop",
        "test_charge_runs_once",
        {"duplicate", "lost_ack", "publish_lost_answer"},
    )
    # Idempotent on the message id, it still charges twice for a publish sent again.
    per_message = check_found(
        result,
        "test_django_shop",
        "test_charge_per_message_runs_once",
        {"publish_lost_answer"},
    )
    fixed = outcomes(result, "test_django_shop", "test_charge_once_runs_once")
    assert fixed == dict.fromkeys(range(200), "PASSED")
    assert result.parseoutcomes()["failed"] == len(per_run) + len(per_message)
    injected = faults_injected(result)["test_django_shop.py::test_charge_once_runs_once"]
    assert {"duplicate", "lost_ack", "publish_lost_answer"} <= set(injected), injected

    # Each of the three alone charges twice...
    for kind in ("duplicate", "lost_ack", "publish_lost_answer"):
        assert shrunk_to_one(per_run, kind).error.startswith("assert [7, 7")
    # ...and each planted bug's replay fails the same way (one Django process each).
    for failure in (
        shrunk_to_one(per_run, "duplicate"),
        shrunk_to_one(per_message, "publish_lost_answer"),
    ):
        assert failure.error.startswith("assert [7, 7"), failure.error
        replayed = run_django(
            pytester, failure.replay_nodeid, f"--qstash-simulate-seed={failure.replay_seed}"
        )
        check_replay(replayed, failure)


# -- the same apps, written correctly --------------------------------------------------------
def test_the_same_apps_written_correctly_pass_200_schedules(pytester: pytest.Pytester) -> None:
    write_project(pytester, FIXED)
    result = run_inner(pytester, "-rfp")

    result.assert_outcomes(passed=600)
    injected = faults_injected(result)
    # Each passed every schedule, under faults of the kinds its planted bug fell to.
    for module, test, kinds in [
        ("test_fastapi_fixed", "test_an_order_is_charged_once", {"duplicate", "lost_ack"}),
        ("test_flask_fixed", "test_the_events_apply_in_publish_order", {"reorder"}),
        ("test_callback_fixed", "test_the_customer_gets_one_mail", {"duplicate", "lost_ack"}),
    ]:
        assert outcomes(result, module, test) == dict.fromkeys(range(200), "PASSED")
        assert kinds <= set(injected[f"{module}.py::{test}"]), injected
