"""The suite cannot go green by skipping: every skip in tests/ is a by-design one or a missing
environment requirement (``ci_requirements``), and in CI (``CI=true``) the second kind, and any
skip whose reason is not by design, fails the run, naming what is missing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ci_requirements import (
    BY_DESIGN,
    CHROMIUM,
    NODE,
    OPENAPI_DOCUMENTS,
    POSTGRES,
    REQUIRED,
    is_by_design,
)

TESTS = Path(__file__).resolve().parent
#: A skip taken in code: pytest.skip(...), pytest.importorskip(...), skipif(..., reason=...).
_SKIP_CALL = re.compile(r"\b(?:pytest\.skip|importorskip|mark\.skip|mark\.skipif)\(")


def _skip_sites() -> list[tuple[str, int, str]]:
    sites = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name in ("ci_requirements.py", Path(__file__).name):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if _SKIP_CALL.search(line):
                # The reason may follow on the next lines of the call.
                call = " ".join(lines[number - 1 : number + 3])
                sites.append((path.relative_to(TESTS).as_posix(), number, call))
    return sites


def test_every_skip_in_the_suite_is_by_design() -> None:
    # Anything else that may be missing goes through ci_requirements.missing(), which fails
    # in CI; a required test dependency is imported plainly.
    sites = _skip_sites()
    assert sites, "the scan found no skip at all: is the pattern still right?"
    unlisted = [f"{path}:{line}" for path, line, call in sites if "BY_DESIGN." not in call]
    assert not unlisted, f"skips not citing ci_requirements.BY_DESIGN: {unlisted}"


def test_each_by_design_reason_is_used() -> None:
    source = "\n".join(call for _path, _line, call in _skip_sites())
    unused = [name for name in vars(BY_DESIGN) if f"BY_DESIGN.{name}" not in source]
    assert not unused, f"by-design skips no test takes any more: {unused}"


def test_the_requirements_ci_provides() -> None:
    assert {r.name for r in REQUIRED} == {
        "chromium and chromedriver",
        "Node, npm and npm's registry",
        "Upstash's OpenAPI documents",
        "a Postgres cluster for the Django database tests",
    }
    assert {CHROMIUM, NODE, OPENAPI_DOCUMENTS, POSTGRES} == set(REQUIRED)
    assert is_by_design(f"Skipped: {BY_DESIGN.tzset}")
    assert not is_by_design("Skipped: missing chromium and chromedriver: not on PATH")


#: The plugin under test; it is imported already, so its asserts are not rewritten again.
_INNER_ARGS = ("-p", "ci_requirements", "-W", "ignore::pytest.PytestAssertRewriteWarning")

_INNER = """
import pytest
from ci_requirements import BY_DESIGN, NODE, missing


def test_needs_node():
    missing(NODE, "node is not installed (not found on PATH)")


def test_skips_by_design():
    pytest.skip(BY_DESIGN.tzset)


def test_skips_for_another_reason():
    pytest.skip("somelib is not installed")


def test_passes():
    assert True
"""


def test_outside_ci_a_missing_requirement_skips_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_inner=_INNER)
    result = pytester.runpytest_inprocess(*_INNER_ARGS, "-rs")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines(["*missing Node, npm and npm's registry: node is not installed*"])


def test_in_ci_a_missing_requirement_or_unexpected_skip_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(test_inner=_INNER)
    result = pytester.runpytest_inprocess(*_INNER_ARGS)
    result.assert_outcomes(passed=1, skipped=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*required in CI: missing Node, npm and npm's registry: node is not installed*",
            "*CI=true: skipped for a reason that is not by design*somelib is not installed*",
        ],
        consecutive=False,
    )


def test_in_ci_a_module_skipped_at_collection_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(
        test_documents="""
        from ci_requirements import OPENAPI_DOCUMENTS, missing

        missing(OPENAPI_DOCUMENTS, "no shared/spec/upstash-openapi/", module_level=True)


        def test_never_collected():
            pass
        """,
        test_optional="""
        import pytest

        pytest.importorskip("a_module_nobody_installed")
        """,
    )
    result = pytester.runpytest_inprocess(*_INNER_ARGS)
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        [
            "*required in CI: missing Upstash's OpenAPI documents*",
            "*not by design*a_module_nobody_installed*",
        ],
        consecutive=False,
    )
