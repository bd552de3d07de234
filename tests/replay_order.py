"""A failing test's report says which tests ran before it in its process, and how to run
exactly that sequence again.

A test that leans on another's state (a shared server, a module-level list, a cache) fails
only after that other test. In random order under pytest-xdist, the seed alone does not bring
the sequence back: which worker runs which test depends on timing. So each process keeps the
ids it ran; on a failure they go to a file, and the ``order`` section names it with the
command that runs them in that order, in one process.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_RAN = pytest.StashKey[list[str]]()
_SHOWN = pytest.StashKey[bool]()
#: How many of the tests before the failing one the section lists (the file has them all).
_LAST = 5


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    item.config.stash.setdefault(_RAN, []).append(item.nodeid)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed or item.stash.get(_SHOWN, False):
        return
    ran = item.config.stash.get(_RAN, [])
    if len(ran) < 2:  # the first test of its process leans on no other
        return
    item.stash[_SHOWN] = True
    # From the config, not the environment: an inner pytester run in a worker is "main".
    worker = getattr(item.config, "workerinput", {}).get("workerid", "main")
    name = re.sub(r"[^\w.-]+", "_", item.nodeid)[-80:]
    path = Path(tempfile.gettempdir()) / "pytest-qstash-order" / f"{worker}-{name}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(ran) + "\n", encoding="utf-8")
    order = "file order"
    if any(arg.startswith("--random-order") for arg in item.config.invocation_params.args):
        order = f"--random-order-seed={item.config.getoption('random_order_seed')}"
    before = "\n".join(f"  {nodeid}" for nodeid in ran[-1 - _LAST : -1])
    report.sections.append(
        (
            "order",
            f"{len(ran) - 1} test(s) ran before this one in process {worker}"
            f" ({order}); the last of them:\n{before}\n"
            f"run them in that order, then this one: pytest -p no:xdist @{path}",
        )
    )
