"""Seeded fault simulation: what a simulated test costs, and how small its failure shrinks.

    python benchmarks/simulation_cost.py           # both figures; exits 1 over budget
    python benchmarks/simulation_cost.py --smoke   # a few tests: proves it runs, judges nothing

Cost: one pytest session runs a test that publishes 10 messages with the real SDK
(``QStash(token, retry=False)``) into a mounted idempotent handler and drains, as ``n`` plain
copies (parametrized ``n`` ways) and as ``@pytest.mark.qstash(simulate=n)``, taking turns
after a few warm-up items of each. Hooks inside that session time each item's set-up, call and
tear-down (CPU time of the test's thread, where the mounted callable runs too). The figure is
the ratio of the totals, simulated over plain: at most 1.3x. Every item passes (the app is
correct), so nothing is shrunk. The faults are work of their own (each duplicate and lost
acknowledgement is one more delivery: about 17 deliveries for 10 messages), so the same
session also runs plain copies publishing ``MATCHED`` messages, about as many deliveries, for
information: what the simulation costs beyond the deliveries it adds.

Shrinking: a test whose failure needs one particular fault among about ten. One session runs a
correct test under ``SEARCHED`` seeds and records what each injects; the seed picked injects as
close to ten faults as any, with a message that exactly one of them delivers twice (a
``duplicate`` or a ``lost_ack`` of it; the latest such fault in the schedule when there are
several). A second session runs that test again, under that seed only (its replay command),
now asserting that message was delivered once: it fails, and the plugin shrinks it. Its report
must say it shrank in at most 20 re-runs to that one fault. Both sessions run the same test
(message ids are seeded by the test's node id, and the schedule by the ids).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixture_cost import Report, timing_hooks

#: Simulated tests may cost at most so many times their plain copies, in total.
COST_BUDGET = 1.3
#: What a shrink may take, and the smallest failing set it must reach.
MAX_RERUNS = 20
SMALLEST = 1
#: Messages each test publishes; faults the shrink figure wants injected (about).
MESSAGES = 10
WANTED_FAULTS = 10
#: Messages of the plain copies that deliver about as much as a simulated test does.
MATCHED = 17
#: Seeds the shrink figure searches for its schedule.
SEARCHED = 40
#: Items of each kind run first and left out of the totals (imports, first calls).
WARM_UP = 3
#: The kinds of timed item in the cost session, taking turns in this order.
KINDS = ("test_plain[", "test_simulated[", "test_matched[")

_CONFTEST = (
    """
import gc, json, os, time

import httpx
import pytest
from qstash import QStash

#: What each test says of itself (deliveries, faults), by item name.
RECORD = {}
KINDS = {kinds}
"""
    + timing_hooks("setup", "call", "teardown")
    + """

def pytest_collection_modifyitems(items):
    # The warm-up items first, then the timed kinds taking turns (ABCABC...).
    kinds = [[i for i in items if i.name.startswith(kind)] for kind in KINDS]
    if all(kinds):
        timed = {id(i) for kind in kinds for i in kind}
        rest = [i for i in items if id(i) not in timed]
        items[:] = rest + [i for turn in zip(*kinds, strict=True) for i in turn]


def pytest_collection_finish(session):
    # The heap the session holds (pytest, the web stacks, the SDKs) is left out of the
    # collector's full passes, and each item starts with an empty young generation: a full
    # pass over that heap costs some 50 ms (a dozen tests) and would land on whichever item
    # crossed its threshold.
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    gc.collect()
    yield


def pytest_sessionfinish(session):
    with open(os.environ["BENCH_OUT"], "w") as out:
        json.dump({"spent": _SPENT, "record": RECORD}, out)


class Orders:
    # The app: takes each order once, keyed on Upstash-Message-Id (idempotent).

    def __init__(self):
        self.taken = {}
        self.deliveries = {}

    def __call__(self, request):
        message_id = request.headers["Upstash-Message-Id"]
        self.deliveries[message_id] = self.deliveries.get(message_id, 0) + 1
        self.taken.setdefault(message_id, request.content)
        return httpx.Response(200)


def publish_and_drain(qstash, messages):
    orders = Orders()
    qstash.mount("https://shop.test", orders)
    client = QStash(os.environ["QSTASH_TOKEN"], retry=False)
    sent = [
        client.message.publish(url="https://shop.test/order", body=f"order {n}").message_id
        for n in range(messages)
    ]
    qstash.drain()
    assert [orders.taken[m] for m in sent] == [f"order {n}".encode() for n in range(messages)]
    return orders, sent


def record(request, qstash, orders, sent, faults=False):
    simulation = qstash.simulation
    injected = [] if simulation is None else simulation.injected
    RECORD[request.node.name] = {
        "deliveries": sum(orders.deliveries.values()),
        "injected": len(injected),
        "faults": [[f.kind, f.message_id] for f in injected] if faults else [],
        "sent": sent if faults else [],
    }
"""
).replace("{kinds}", repr(KINDS))

_COST_TESTS = """
import pytest
from conftest import publish_and_drain, record


@pytest.mark.parametrize("copy", range({warm_up}))
def test_warm_up_plain(qstash, copy):
    publish_and_drain(qstash, {messages})


@pytest.mark.qstash(simulate={warm_up})
def test_warm_up_simulated(qstash):
    publish_and_drain(qstash, {messages})


@pytest.mark.parametrize("copy", range({n}))
def test_plain(qstash, request, copy):
    record(request, qstash, *publish_and_drain(qstash, {messages}))


@pytest.mark.qstash(simulate={n})
def test_simulated(qstash, request):
    record(request, qstash, *publish_and_drain(qstash, {messages}))


@pytest.mark.parametrize("copy", range({n}))
def test_matched(qstash, request, copy):
    record(request, qstash, *publish_and_drain(qstash, {matched}))
"""

_SHRINK_TESTS = """
import os

import pytest
from conftest import publish_and_drain, record


@pytest.mark.qstash(simulate={seeds})
def test_each_order_is_taken_once(qstash, request):
    orders, sent = publish_and_drain(qstash, {messages})
    record(request, qstash, orders, sent, faults=True)
    target = os.environ.get("BENCH_TARGET")
    if target is not None:  # the app's bug: one order must not come twice, the others may
        assert orders.deliveries[sent[int(target)]] == 1
"""


def _session(
    root: Path, *args: str, env: dict[str, str] | None = None, failing: bool = False
) -> tuple[dict[str, Any], str]:
    """Run the pytest session of ``root`` (a ``test_simulation.py`` written there): what its
    hooks recorded, its output."""
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(_CONFTEST)
    out = root / "spent.json"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    completed = subprocess.run(
        [*command, "-p", "no:random_order", *args],
        cwd=root,
        env={**os.environ, **(env or {}), "BENCH_OUT": str(out)},
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != (1 if failing else 0):
        raise RuntimeError(f"pytest exited {completed.returncode}: {completed.stdout[-800:]}")
    data: dict[str, Any] = json.loads(out.read_text())
    return data, completed.stdout


# -- the cost of a simulated test -----------------------------------------------------------
@dataclass
class Cost:
    n: int
    #: Per kind: CPU seconds of all its items; deliveries per item.
    spent: dict[str, float]
    deliveries: dict[str, float]
    #: Faults injected per simulated item.
    faults: float

    @property
    def ratio(self) -> float:
        return self.spent["simulated"] / self.spent["plain"]

    def per_test(self, kind: str) -> str:
        return f"{self.spent[kind] / self.n * 1e3:.2f} ms/test"


def measure_cost(n: int) -> Cost:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tests = _COST_TESTS.format(n=n, warm_up=WARM_UP, messages=MESSAGES, matched=MATCHED)
        (root / "test_simulation.py").write_text(tests)
        data, _ = _session(root)
    spent: dict[str, float] = data["spent"]
    record: dict[str, dict[str, Any]] = data["record"]
    cost = Cost(n, {}, {}, 0.0)
    for prefix in KINDS:
        kind = prefix[len("test_") : -1]
        names = [name for name in spent if name.startswith(prefix)]
        if len(names) != n:
            raise RuntimeError(f"expected {n} {kind} items, timed {len(names)}")
        cost.spent[kind] = sum(spent[name] for name in names)
        cost.deliveries[kind] = statistics.mean(record[name]["deliveries"] for name in names)
        if kind == "simulated":
            cost.faults = statistics.mean(record[name]["injected"] for name in names)
    return cost


def check_cost(report: Report, n: int, sessions: int = 1) -> None:
    """The figures as rows of ``benchmarks/run.py``'s table: the session of the median ratio
    of ``sessions`` sessions."""
    costs = sorted((measure_cost(n) for _ in range(sessions)), key=lambda cost: cost.ratio)
    cost = costs[len(costs) // 2]
    of = "" if sessions == 1 else f", median of {sessions} sessions"
    simulated = (
        f"{cost.per_test('simulated')} ({cost.deliveries['simulated']:.1f} deliveries, "
        f"{cost.faults:.1f} faults)"
    )
    report.check(
        f"12. simulate={n} vs {n} plain copies, per test via pytest, CPU ({MESSAGES} "
        f"publishes{of})",
        simulated,
        f"{cost.per_test('plain')} plain ({cost.deliveries['plain']:.0f} deliveries)",
        cost.ratio,
        f"<= {COST_BUDGET:g}x",
        cost.ratio <= COST_BUDGET,
    )
    matched = cost.spent["simulated"] / cost.spent["matched"]
    report.check(
        f"12. the same vs plain copies delivering as much ({MATCHED} publishes)",
        simulated,
        f"{cost.per_test('matched')} plain ({cost.deliveries['matched']:.0f} deliveries)",
        matched,
        "info",
        None,
    )


# -- shrinking a failure to its one fault ---------------------------------------------------
@dataclass
class Pick:
    seed: int
    injected: int
    #: The message delivered twice, by publish order; the one fault that does it.
    target: int
    culprit: str
    #: Where that fault is in the schedule (1 is the first injected).
    position: int


@dataclass
class Shrunk:
    pick: Pick
    injected: int
    reruns: int
    smallest: int
    #: The faults kept, as "kind message_id".
    kept: list[str]


_REDELIVERING = ("duplicate", "lost_ack")


def pick_schedule(searched: dict[str, dict[str, Any]]) -> Pick:
    """Of the schedules the correct test ran under, the one the shrink figure fails under
    (the module's docstring says which)."""
    found: list[tuple[tuple[int, int, int], Pick]] = []
    for name, seen in searched.items():
        seed = int(name.rpartition("qstash-seed-")[2].rstrip("]"))
        faults: list[list[str]] = seen["faults"]
        for target, message_id in enumerate(seen["sent"]):
            twice = [
                (position, f"{kind} {message_id}")
                for position, (kind, touched) in enumerate(faults, 1)
                if touched == message_id and kind in _REDELIVERING
            ]
            if len(twice) == 1:
                position, culprit = twice[0]
                pick = Pick(seed, len(faults), target, culprit, position)
                found.append(((abs(len(faults) - WANTED_FAULTS), -position, seed), pick))
    if not found:
        raise RuntimeError("no schedule searched delivers one message twice by one fault")
    return min(found, key=lambda entry: entry[0])[1]


def measure_shrink(seeds: int) -> Shrunk:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "test_simulation.py").write_text(
            _SHRINK_TESTS.format(seeds=seeds, messages=MESSAGES)
        )
        searched, _ = _session(root)
        pick = pick_schedule(searched["record"])
        _, output = _session(
            root,
            f"--qstash-simulate-seed={pick.seed}",
            env={"BENCH_TARGET": str(pick.target)},
            failing=True,
        )
    injected = re.search(r"seed \d+, faults all: (\d+) fault\(s\) injected", output)
    reruns = re.search(r"shrunk in (\d+) re-run\(s\) with fresh fixtures", output)
    smallest = re.search(r"smallest set that still fails \((\d+)\):\n((?:  .*\n)*)", output)
    if injected is None or reruns is None or smallest is None:
        raise RuntimeError(f"no shrunk simulation in the report: {output[-800:]}")
    kept = [line.strip().split(" at ", 1)[0] for line in smallest.group(2).splitlines()]
    return Shrunk(pick, int(injected.group(1)), int(reruns.group(1)), int(smallest.group(1)), kept)


def check_shrink(report: Report, seeds: int) -> None:
    """The figure as a row of ``benchmarks/run.py``'s table. Judged besides: the fault kept is
    the one that fails the test, in the schedule the search saw (as many faults)."""
    shrunk = measure_shrink(seeds)
    pick = shrunk.pick
    right = shrunk.kept == [pick.culprit] and shrunk.injected == pick.injected
    kind = pick.culprit.split()[0]
    report.check(
        f"12. shrinking: seed {pick.seed} of {seeds}, {shrunk.injected} faults injected, "
        f"the failing one {ordinal(pick.position)} ({kind})",
        f"{shrunk.reruns} re-runs, {shrunk.smallest} fault kept"
        + ("" if right else f" (expected {pick.culprit} of {pick.injected})"),
        "-",
        None,
        f"<= {MAX_RERUNS} re-runs, {SMALLEST} fault",
        shrunk.reruns <= MAX_RERUNS and shrunk.smallest == SMALLEST and right,
    )


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class _Printed:
    failed = False

    def check(self, figure: str, ours: str, baseline: str, ratio: float | None, *rest: Any) -> None:
        budget, ok = rest
        status = "INFO" if ok is None else "PASS" if ok else "FAIL"
        self.failed = self.failed or ok is False
        shown = "" if ratio is None else f" = {ratio:.2f}x"
        print(f"{figure}: {ours} vs {baseline}{shown} (budget {budget}) {status}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few tests, judges nothing")
    parser.add_argument("-n", type=int, default=50, help="tests of each kind")
    parser.add_argument("--sessions", type=int, default=3, help="cost sessions (median)")
    args = parser.parse_args()
    report = _Printed()
    check_cost(report, 5 if args.smoke else args.n, 1 if args.smoke else args.sessions)
    check_shrink(report, 10 if args.smoke else SEARCHED)
    return 0 if args.smoke or not report.failed else 1


if __name__ == "__main__":
    sys.exit(main())
