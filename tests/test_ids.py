"""Message ids: seeded per test, so each test's ids repeat run after run but differ across
tests, as real ids do (apps that skip message ids they already processed rely on that)."""

from __future__ import annotations

import re

import pytest

from pytest_qstash import FakeQStash

TWO_TESTS = """
import os

from qstash import QStash


def publish():
    response = QStash(os.environ["QSTASH_TOKEN"]).message.publish(url="https://app.test/x")
    print("ID", response.message_id)


def test_one(qstash):
    publish()


def test_two(qstash):
    publish()
"""


def _ids(pytester: pytest.Pytester) -> list[str]:
    result = pytester.runpytest("-p", "no:cacheprovider", "-s")
    result.assert_outcomes(passed=2)
    return re.findall(r"ID (msg_\w+)", result.stdout.str())


def test_each_test_has_its_own_ids_and_they_repeat_across_runs(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(TWO_TESTS)

    first_run = _ids(pytester)
    second_run = _ids(pytester)

    assert len(first_run) == 2
    assert first_run[0] != first_run[1]
    assert second_run == first_run


def test_the_seed_option_fixes_the_ids() -> None:
    def first_id(seed: int) -> str:
        with FakeQStash(seed=seed) as qstash:
            return qstash.store.ids.message_id()

    assert first_id(7) == first_id(7)
    assert first_id(7) != first_id(8)


def test_a_generator_goes_back_to_a_copy_taken_before() -> None:
    # What a data dir's replay does when a request drew fewer ids than the first time.
    import copy

    from pytest_qstash.engine.ids import IdGenerator

    ids = IdGenerator("seed")
    ids.message_id()
    earlier = copy.deepcopy(ids)
    expected = [ids.message_id(), ids.jwt_id()]
    ids.message_id()
    ids.restore(earlier)
    assert ids.drawn == earlier.drawn
    assert [ids.message_id(), ids.jwt_id()] == expected
