"""The suite's own ``order`` report section (replay_order.py): a test that fails because of
one that ran before it can be run again after exactly the same tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from inner_pytest import run_inner

LEANING = """
state = []


def test_a_leaves_state():
    state.append(1)


def test_b_leans_on_none():
    assert state == []


def test_c_passes():
    pass
"""


def test_a_failure_names_the_tests_before_it_and_replays_them(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaning=LEANING)
    result = run_inner(pytester, "-p", "replay_order")
    result.assert_outcomes(passed=2, failed=1)
    text = result.stdout.str()
    assert "1 test(s) ran before this one in process main (file order)" in text
    assert "  test_leaning.py::test_a_leaves_state\n" in text
    [path] = re.findall(r"pytest -p no:xdist @(\S+)", text)
    assert Path(path).read_text(encoding="utf-8").splitlines() == [
        "test_leaning.py::test_a_leaves_state",
        "test_leaning.py::test_b_leans_on_none",
    ]

    again = run_inner(pytester, "-p", "replay_order", f"@{path}")
    again.assert_outcomes(passed=1, failed=1)  # the same two, in the same order


def test_the_first_test_of_a_process_gets_no_section(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_alone="def test_fails():\n    assert False\n")
    result = run_inner(pytester, "-p", "replay_order")
    result.assert_outcomes(failed=1)
    assert "ran before this one" not in result.stdout.str()
