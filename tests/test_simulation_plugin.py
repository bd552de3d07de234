"""``@pytest.mark.qstash(simulate=N)`` and ``--qstash-simulate``: a test run under N seeded
fault schedules, each an item with fresh fixtures; a failure says the seed, the faults, the
smallest set that still fails and the command that replays it."""

from __future__ import annotations

import re

import pytest
from inner_pytest import run_inner

APP = """
import os

import httpx
import pytest
from qstash import QStash

CHARGES = []


def charge(request: httpx.Request) -> httpx.Response:
    CHARGES.append(request.headers["Upstash-Message-Id"])
    return httpx.Response(200)


@pytest.fixture
def charges():
    CHARGES.clear()  # a fresh list per schedule, as any function-scoped fixture
    return CHARGES


@pytest.fixture
def client():
    return QStash(os.environ["QSTASH_TOKEN"], retry=False)
"""

BUGGY = """
import pytest


@pytest.mark.qstash(simulate=30)
def test_charges_once(qstash, client, charges):
    qstash.mount("https://shop.test", __import__("conftest").charge)
    client.message.publish(url="https://shop.test/charge", body="order 7")
    qstash.drain()
    assert len(charges) == 1  # the bug: a redelivery charges again
"""

CORRECT = """
import pytest


@pytest.mark.qstash(simulate=30)
def test_charges_once_per_message(qstash, client, charges):
    qstash.mount("https://shop.test", __import__("conftest").charge)
    client.message.publish(url="https://shop.test/charge", body="order 7")
    qstash.drain()
    assert len(set(charges)) == 1  # idempotent: keyed on Upstash-Message-Id
    assert qstash.simulation is not None


def test_not_simulated(qstash):
    assert qstash.simulation is None
"""


def _replay_of(output: str) -> tuple[str, int]:
    match = re.search(r"replay: pytest (\S+) --qstash-simulate-seed=(\d+)", output)
    assert match is not None, output
    return match.group(1), int(match.group(2))


def test_a_redelivery_bug_is_found_shrunk_and_replayed(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(APP)
    pytester.makepyfile(test_shop=BUGGY)

    result = run_inner(pytester, "-p", "no:randomly")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] >= 1
    assert outcomes["failed"] + outcomes.get("passed", 0) == 30
    output = result.stdout.str()
    section = output.split("qstash simulation -", 1)[1]
    assert re.search(r"seed \d+, faults all: \d+ fault\(s\) injected", section)
    assert "smallest set that still fails (1):" in section
    smallest = section.split("smallest set that still fails (1):", 1)[1].splitlines()[1]
    assert smallest.strip().startswith(("duplicate msg_", "lost_ack msg_"))
    nodeid, seed = _replay_of(section)
    assert nodeid == "test_shop.py::test_charges_once"

    replayed = run_inner(pytester, nodeid, f"--qstash-simulate-seed={seed}")
    replayed.assert_outcomes(failed=1)
    assert f"test_charges_once[qstash-seed-{seed}]" in replayed.stdout.str()
    assert _replay_of(replayed.stdout.str()) == (nodeid, seed)
    # The same under xdist and in another order.
    spread = run_inner(pytester, nodeid, f"--qstash-simulate-seed={seed}", "-n", "2")
    spread.assert_outcomes(failed=1)


def test_a_correct_app_passes_every_seed(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(APP)
    pytester.makepyfile(test_shop=CORRECT)

    run_inner(pytester).assert_outcomes(passed=31)


def test_the_command_line_and_the_ini_simulate_every_test_using_the_fake(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(APP)
    pytester.makepyfile(
        test_plain="""
        def test_uses_the_fake(qstash, request):
            simulated = "[qstash-seed-" in request.node.name
            assert (qstash.simulation is not None) == simulated


        def test_does_not(charges):
            assert charges == []
        """
    )
    run_inner(pytester, "--qstash-simulate=4").assert_outcomes(passed=5)
    pytester.makeini("[pytest]\nqstash_simulate = 3\n")
    run_inner(pytester).assert_outcomes(passed=4)
    run_inner(pytester, "--qstash-simulate=0").assert_outcomes(passed=2)


def test_faults_pick_the_kinds(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(APP)
    pytester.makepyfile(
        test_kinds="""
        import pytest


        @pytest.mark.qstash(simulate=25, faults=["reorder"])
        def test_only_reorders(qstash, client, charges):
            qstash.mount("https://shop.test", __import__("conftest").charge)
            for n in range(3):
                client.message.publish(url=f"https://shop.test/{n}", body=str(n))
            qstash.drain()
            assert len(charges) == 3
            assert {f.kind for f in qstash.simulation.injected} <= {"reorder"}
        """
    )
    run_inner(pytester).assert_outcomes(passed=25)
    run_inner(pytester, "--qstash-simulate-seed=5").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("marker:simulate=-1", "invalid simulate=-1: expected a number of schedules, 0 or more"),
        ("marker:faults=['dup']", "unknown fault kind(s) 'dup'"),
        ("marker:simulate_seed='x'", "invalid simulate_seed='x': expected an integer"),
        ("cli:--qstash-simulate=-2", "invalid --qstash-simulate='-2'"),
        ("cli:--qstash-simulate-seed=1.5", "invalid --qstash-simulate-seed='1.5'"),
        ("cli:--qstash-faults=reorder,late", "unknown fault kind(s) 'late'"),
        ("ini:qstash_simulate = lots", "invalid qstash_simulate='lots'"),
    ],
)
def test_bad_options_are_refused_in_one_line(
    pytester: pytest.Pytester, where: str, expected: str
) -> None:
    kind, _, value = where.partition(":")
    marker = f"@pytest.mark.qstash({value})" if kind == "marker" else ""
    pytester.makepyfile(
        test_bad=f"""
        import pytest


        {marker}
        def test_x(qstash):
            pass
        """
    )
    args = [value] if kind == "cli" else []
    if kind == "ini":
        pytester.makeini(f"[pytest]\n{value}\n")
    result = run_inner(pytester, *args)
    assert result.ret != 0
    output = result.stdout.str() + result.stderr.str()
    assert expected in output, output
    assert "Traceback" not in output
