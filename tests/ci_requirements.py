"""What the suite needs from its environment, and the only skips it takes by design.

Two kinds of missing things, decided here and nowhere else:

- **Environment requirements** (``REQUIRED``): tools and documents ``.ci/run`` installs or CI
  lays beside the checkout -- chromium and its chromedriver, Node with npm's registry, Upstash's
  OpenAPI documents, a Postgres cluster. On a developer's machine a test that lacks one skips,
  naming it; in CI (``CI=true``) the same test fails, naming it, so a run cannot go green by
  skipping.
- **By-design skips** (``BY_DESIGN``): a platform or a Python version where the thing tested
  does not exist, a port someone else holds, a parameter that is not a case. These skip
  everywhere, CI included. Every ``pytest.skip`` and ``skipif`` in tests/ uses one of them
  (``test_suite_rules.py`` holds it to that).

In CI, this module's hooks (a plugin of the suite, named in ``conftest.py``) also fail any other
skip, from a test or at collection: one whose reason is none of these is, there, something
missing that should not be (a library skipping for want of a tool, a broken install).

Required test dependencies (django, django-qstash, pytest-xdist, trio, selenium...) are not
requirements of this kind: they are imported plainly, and a broken install fails at import.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import dataclass
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """CI sets CI=true (and .ci/run exports it): environment requirements must be met there."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class Requirement:
    """Something the environment provides: what it is, and how CI provides it."""

    name: str
    provided_by: str


CHROMIUM = Requirement(
    "chromium and chromedriver",
    "apt-get install chromium chromium-driver (.ci/run's first step)",
)
NODE = Requirement(
    "Node, npm and npm's registry",
    "node and npm on PATH, the registry reachable (npm ci from tests/node/package-lock.json)",
)
OPENAPI_DOCUMENTS = Requirement(
    "Upstash's OpenAPI documents",
    "shared/spec/upstash-openapi/{qstash,workflow}.yaml beside the checkout",
)
POSTGRES = Requirement(
    "a Postgres cluster for the Django database tests",
    "apt-get install postgresql; .ci/run starts a throwaway cluster and sets "
    "PYTEST_QSTASH_POSTGRES to its DSN",
)
REQUIRED = (CHROMIUM, NODE, OPENAPI_DOCUMENTS, POSTGRES)

#: The reason a missing requirement's skip starts with (and its failure in CI).
MISSING = "missing"


def missing(requirement: Requirement, detail: str, *, module_level: bool = False) -> NoReturn:
    """Skip (on a developer's machine) or fail (in CI) for want of ``requirement``."""
    reason = f"{MISSING} {requirement.name}: {detail}"
    if in_ci():
        pytest.fail(
            f"required in CI: {reason} (provided by: {requirement.provided_by})", pytrace=False
        )
    pytest.skip(f"{reason} (required in CI)", allow_module_level=module_level)


@dataclass(frozen=True)
class _ByDesign:
    """The permanent skips: each reason, as the skip gives it (a skip may add detail after)."""

    tzset: str = "time.tzset is Unix-only: the process's local zone cannot be switched"
    linux_descriptors: str = "descriptor limits as Linux sets them (RLIMIT_NOFILE in a child)"
    httpx2_python: str = "httpx2 needs Python 3.11 or newer"
    port_8080_taken: str = "port 8080 is taken on this machine (another program holds it)"
    docs_generated: str = "a generated page: its length is its generator's"
    sample_not_run: str = "a documentation sample marked not-run"
    django_set_up_elsewhere: str = "Django is already set up in this process with"

    def reasons(self) -> tuple[str, ...]:
        return tuple(vars(self).values())


BY_DESIGN = _ByDesign()


def is_by_design(reason: str) -> bool:
    """Whether a skip's reason (pytest's ``Skipped: `` prefix or not) is a by-design one."""
    reason = reason.removeprefix("Skipped: ")
    return any(reason.startswith(known) for known in BY_DESIGN.reasons())


# -- in CI, a skip that is not by design is a failure -----------------------------------------
def _unexpected_skip(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return None
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
    return None if is_by_design(reason) else reason


def _fail_unexpected_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = _unexpected_skip(report)
    if reason is not None:
        report.outcome = "failed"
        report.longrepr = (
            f"CI=true: skipped for a reason that is not by design (ci_requirements.BY_DESIGN): "
            f"{reason}"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _fail_unexpected_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail_unexpected_skip(report)
    return report
