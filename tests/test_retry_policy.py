"""Tests for pytest_qstash.engine.retry: backoff, retry-delay expressions, Retry-After."""

from __future__ import annotations

import math
import pickle
from datetime import datetime, timezone
from email.utils import format_datetime

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_qstash.engine.retry import (
    DEFAULT_RETRIES,
    MAX_BACKOFF_MS,
    InvalidRetryDelay,
    RetryDelayExpression,
    default_backoff_ms,
    delay_before_retry_ms,
    parse_retry_after,
)

ACCEPTED = "Accepted: numbers, retried, + - * / ( ), pow exp sqrt abs floor ceil round min max"
NOW_MS = 1_445_412_420_000  # 2015-10-21 07:27:00 UTC, one minute before the HTTP date below
HTTP_DATE = "Wed, 21 Oct 2015 07:28:00 GMT"


def test_constants() -> None:
    assert DEFAULT_RETRIES == 3
    assert MAX_BACKOFF_MS == 86_400_000 == 24 * 60 * 60 * 1000


# --- default backoff ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "documented_seconds"),
    [
        (1, 12),  # 12 s
        (2, 2 * 60 + 28),  # 2 m 28 s
        (3, 30 * 60 + 8),  # 30 m 8 s
        (4, 6 * 3600 + 7 * 60 + 6),  # 6 h 7 m 6 s
    ],
)
def test_default_backoff_matches_documented_table(n: int, documented_seconds: int) -> None:
    delay = default_backoff_ms(n)
    assert delay // 1000 == documented_seconds
    assert delay == math.floor(math.exp(2.5 * n) * 1000 + 0.5)


def test_default_backoff_exact_values() -> None:
    assert [default_backoff_ms(n) for n in range(1, 5)] == [12_182, 148_413, 1_808_042, 22_026_466]


@pytest.mark.parametrize("n", [5, 6, 20, 1000, 10**400])
def test_default_backoff_is_capped_at_one_day(n: int) -> None:
    assert default_backoff_ms(n) == MAX_BACKOFF_MS


@pytest.mark.parametrize("n", [0, -1])
def test_default_backoff_rejects_non_positive_retry_number(n: int) -> None:
    with pytest.raises(ValueError, match="n must be >= 1"):
        default_backoff_ms(n)


# --- RetryDelayExpression: accepted input --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1000", [1000, 1000, 1000, 1000]),
        ("1000 * (1 + retried)", [1000, 2000, 3000, 4000]),
        ("pow(2, retried) * 1000", [1000, 2000, 4000, 8000]),
        ("max(1000, pow(2, retried) * 100)", [1000, 1000, 1000, 1000]),
    ],
)
def test_documented_examples(text: str, expected: list[int]) -> None:
    expression = RetryDelayExpression(text)
    assert [expression.delay_ms(retried) for retried in range(4)] == expected
    assert expression.text == text


def test_documented_max_example_grows_later() -> None:
    expression = RetryDelayExpression("max(1000, pow(2, retried) * 100)")
    assert expression.delay_ms(4) == 1600
    assert expression.delay_ms(10) == 102_400


@pytest.mark.parametrize(
    ("text", "retried", "expected"),
    [
        ("pow(3, 2)", 0, 9),
        ("exp(0) * 1000", 0, 1000),
        ("exp(retried)", 1, 3),  # 2.718... rounds to 3
        ("sqrt(16) * 250", 0, 1000),
        ("abs(-1500)", 0, 1500),
        ("abs(retried - 5) * 100", 2, 300),
        ("floor(1.9) * 1000", 0, 1000),
        ("floor(-1.5) + 10", 0, 8),
        ("ceil(1.1) * 1000", 0, 2000),
        ("ceil(retried / 2) * 1000", 3, 2000),
        ("round(2.5)", 0, 3),  # halves away from zero, not banker's rounding
        ("round(2.4)", 0, 2),
        ("round(-2.5) + 10", 0, 7),
        ("min(5000, retried * 1000)", 3, 3000),
        ("min(5000, retried * 1000)", 9, 5000),
        ("min(3, 2, 1, 4)", 0, 1),
        ("max(3, 2, 7, 4)", 0, 7),
        ("min(42)", 0, 42),
        ("10 / 4", 0, 3),  # 2.5 ms rounds half up
        ("10 / 3", 0, 3),
        ("1000 - retried * 100", 4, 600),
        ("-(-1000)", 0, 1000),
        ("+1000", 0, 1000),
        ("1.5e3", 0, 1500),
        (".5 * 4", 0, 2),
        ("2. * 3", 0, 6),
        ("  1000  ", 0, 1000),
        ("(((retried)))", 7, 7),
        ("pow(2, retried / 2) * 1000", 2, 2000),
    ],
)
def test_every_function_and_operator(text: str, retried: int, expected: int) -> None:
    assert RetryDelayExpression(text).delay_ms(retried) == expected


def test_text_is_kept_verbatim() -> None:
    text = "  pow(2,retried)*1000 "
    expression = RetryDelayExpression(text)
    assert expression.text == text
    assert repr(expression) == f"RetryDelayExpression({text!r})"


def test_expressions_compare_by_text() -> None:
    assert RetryDelayExpression("1000") == RetryDelayExpression("1000")
    assert RetryDelayExpression("1000") != RetryDelayExpression("1000 ")
    assert hash(RetryDelayExpression("1000")) == hash(RetryDelayExpression("1000"))
    assert RetryDelayExpression("1000") != "1000"


def test_expression_is_reusable() -> None:
    expression = RetryDelayExpression("1000 * (1 + retried)")
    assert expression.delay_ms(2) == 3000
    assert expression.delay_ms(0) == 1000
    assert expression.delay_ms(2) == 3000


def test_negative_retried_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="retried must be >= 0"):
        RetryDelayExpression("1000").delay_ms(-1)


def test_non_string_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        RetryDelayExpression(1000)  # type: ignore[arg-type]


# --- RetryDelayExpression: clamping and negatives ------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("-5", 0),
        ("1000 - retried * 1000", 0),  # at retried=3 this is -2000
        ("0", 0),
        ("0.4", 0),
        ("0.5", 1),
        ("86400000", MAX_BACKOFF_MS),
        ("86400001", MAX_BACKOFF_MS),
        ("1e300", MAX_BACKOFF_MS),
        ("pow(10, 100)", MAX_BACKOFF_MS),
        ("86399999.4", 86_399_999),
    ],
)
def test_clamping_and_negatives(text: str, expected: int) -> None:
    assert RetryDelayExpression(text).delay_ms(3) == expected


@given(st.integers(min_value=0, max_value=50))
def test_exponential_expression_property(retried: int) -> None:
    delay = RetryDelayExpression("pow(2, retried) * 1000").delay_ms(retried)
    assert delay == min(2**retried * 1000, MAX_BACKOFF_MS)
    assert delay >= 0


# --- RetryDelayExpression: refused input ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("__import__('os')", 'unknown function "__import__"'),
        ("retried.real", "attribute access is not supported"),
        ("2 ** 3", "operator ** is not supported; use pow(x, y)"),
        ("7 % 2", "operator % is not supported"),
        ("7 // 2", "operator // is not supported; use floor(x / y)"),
        ("2 ^ 3", "operator ^ is not supported"),
        ("x", 'unknown name "x"; the only variable is retried'),
        ("", "the expression is empty"),
        ("   ", "the expression is empty"),
        ("1000 +", "not a valid expression"),
        ("lambda: 1", "lambda is not supported"),
        ('"a"', "strings are not supported"),
        ("'a'", "strings are not supported"),
        ("[1][0]", "indexing (subscripts) is not supported"),
        ("[1]", "lists are not supported"),
        ("min(x=1)", "keyword arguments are not supported"),
        ("min()", "min() got 0 argument(s)"),
        ("pow(2)", "pow() got 1 argument(s); call pow(x, y)"),
        ("sqrt(1, 2)", "sqrt() got 2 argument(s); call sqrt(x)"),
        ("min(*[1, 2])", "unpacking is not supported"),
        ("retried(1)", "retried is a variable, not a function"),
        ("pow", "pow is a function; call it as pow(x, y)"),
        ("math.pow(2, 3)", "attribute access is not supported"),
        ("foo(1)", 'unknown function "foo"'),
        ("1 < 2", "comparisons are not supported"),
        ("1 and 2", "and/or are not supported"),
        ("1 if retried else 2", "conditional expressions are not supported"),
        ("[i for i in (1, 2)]", "comprehensions are not supported"),
        ("1, 2", "tuples are not supported"),
        ("not 1", "operator not is not supported"),
        ("~1", "operator ~ is not supported"),
        ("True", "True is not supported"),
        ("None", "None is not supported"),
        ("1j", "number 1j is not supported"),
        ("0x10", "number 0x10 is not supported"),
        ("1_000", "number 1_000 is not supported"),
        ("1e309", "number 1e309 is too large"),
        ("1000 # comment", "comments (#) are not supported"),
        ("\uff52etried", "only ASCII characters are accepted"),
        ("(x := 1)", "assignment (:=) is not supported"),
        ("1000; 2", "not a valid expression"),
        ("import os", "not a valid expression"),
    ],
)
def test_refused_expressions(text: str, reason: str) -> None:
    with pytest.raises(InvalidRetryDelay) as caught:
        RetryDelayExpression(text)
    message = str(caught.value)
    quoted = text.replace('"', '\\"')  # the message escapes quotes inside the expression
    assert message.startswith(f'invalid Upstash-Retry-Delay "{quoted}": ')
    assert reason in message
    assert message.endswith(ACCEPTED)
    assert caught.value.expression == text
    assert reason in caught.value.reason


def test_refusal_message_matches_the_documented_shape() -> None:
    with pytest.raises(InvalidRetryDelay) as caught:
        RetryDelayExpression("2 ** retried")
    assert str(caught.value) == (
        'invalid Upstash-Retry-Delay "2 ** retried": operator ** is not supported; '
        f"use pow(x, y). {ACCEPTED}"
    )


def test_invalid_retry_delay_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        RetryDelayExpression("2 ** 3")


def test_deep_parenthesis_nest_is_refused_cleanly() -> None:
    text = "(" * 200 + "1" + ")" * 200
    with pytest.raises(InvalidRetryDelay) as caught:
        RetryDelayExpression(text)
    message = str(caught.value)
    assert "parentheses nested more than 50 levels deep" in message
    assert ACCEPTED in message
    assert len(message) < 400  # the quoted expression is shortened


@pytest.mark.parametrize("text", ["-" * 999 + "1", "+".join(["1"] * 400), "pow(" * 40 + "1"])
def test_other_deep_nesting_is_refused_cleanly(text: str) -> None:
    with pytest.raises(InvalidRetryDelay, match="invalid Upstash-Retry-Delay"):
        RetryDelayExpression(text)


def test_huge_input_is_refused_before_parsing() -> None:
    text = "1" * 100_000
    with pytest.raises(InvalidRetryDelay) as caught:
        RetryDelayExpression(text)
    message = str(caught.value)
    assert "too long (100000 characters; at most 1000)" in message
    assert ACCEPTED in message
    assert len(message) < 400


def test_long_but_acceptable_expression() -> None:
    text = "1000" + " " * 996
    assert len(text) == 1000
    assert RetryDelayExpression(text).delay_ms(0) == 1000


# --- RetryDelayExpression: evaluation errors -----------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1/0", "division by zero"),
        ("1000 / (retried - 2)", "division by zero"),
        ("sqrt(-1)", "sqrt of a negative number"),
        ("exp(1000)", "exp(1000) is too large"),
        ("pow(2, 2000)", "is too large"),
        ("pow(0, -1)", "is undefined"),
        ("1e300 * 1e300", "not a finite number"),
        ("min(1e308 * 10, 5)", "not a finite number"),  # inf may not hide inside min()
    ],
)
def test_evaluation_errors(text: str, reason: str) -> None:
    expression = RetryDelayExpression(text)  # parses fine
    with pytest.raises(InvalidRetryDelay) as caught:
        expression.delay_ms(2)
    message = str(caught.value)
    assert message.startswith(f'invalid Upstash-Retry-Delay "{text}": ')
    assert reason in message
    assert "(when retried=2)" in message
    assert ACCEPTED not in message


def test_evaluation_error_depends_on_retried() -> None:
    expression = RetryDelayExpression("1000 / (retried - 2)")
    assert expression.delay_ms(3) == 1000
    assert expression.delay_ms(0) == 0  # -500 -> 0
    with pytest.raises(InvalidRetryDelay, match="division by zero"):
        expression.delay_ms(2)


# --- parse_retry_after ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5", 5000),
        ("0", 0),
        ("  7 ", 7000),
        ("86400", MAX_BACKOFF_MS),  # exactly one day is still honoured
        (HTTP_DATE, 60_000),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0),  # now
        ("Wed, 21 Oct 2015 07:00:00 GMT", 0),  # in the past: retry immediately
        ("Wed, 21 Oct 2015 07:28:00 -0000", 60_000),
        ("Wed, 21 Oct 2015 09:28:00 +0200", 60_000),
        ("6m5s", 365_000),
        ("1.5s", 1500),
        ("1.1s", 1100),
        ("250ms", 250),
        ("300ms", 300),
        ("2h", 7_200_000),
        ("1h30m", 5_400_000),
        ("1.5h", 5_400_000),
        ("1500\u00b5s", 2),  # MICRO SIGN; 1.5 ms rounds half up
        ("1500\u03bcs", 2),  # GREEK SMALL LETTER MU, as Go also accepts
        ("2000us", 2),
        ("3000000ns", 3),
        ("+10s", 10_000),
        ("24h", MAX_BACKOFF_MS),
    ],
)
def test_retry_after_forms(value: str, expected: int) -> None:
    assert parse_retry_after({"Retry-After": value}, NOW_MS) == expected


def test_http_date_is_relative_to_the_given_now() -> None:
    later = datetime(2015, 10, 21, 8, 0, 0, tzinfo=timezone.utc)
    header = format_datetime(later, usegmt=True)
    assert parse_retry_after({"Retry-After": header}, NOW_MS) == 33 * 60 * 1000
    assert parse_retry_after({"Retry-After": header}, NOW_MS + 1500) == 33 * 60 * 1000 - 1500


@pytest.mark.parametrize(
    "value",
    [
        "86401",
        "25h",
        "1440m1s",
        "Thu, 22 Oct 2015 07:27:01 GMT",  # one day and a second after now
        "9" * 5000,  # too many digits even for int()
    ],
)
def test_more_than_one_day_is_ignored(value: str) -> None:
    assert parse_retry_after({"Retry-After": value}, NOW_MS) is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "soon",
        "-5",
        "-1s",
        "1.5",
        "5 s",
        "5sec",
        "1d",
        "s",
        "ms5",
        "5, 10",
        "0x10",
        "NaN",
    ],
)
def test_garbage_is_ignored(value: str) -> None:
    assert parse_retry_after({"Retry-After": value}, NOW_MS) is None


def test_no_header() -> None:
    assert parse_retry_after({}, NOW_MS) is None
    assert parse_retry_after({"Content-Type": "text/plain"}, NOW_MS) is None


def test_header_precedence() -> None:
    headers = {
        "X-RateLimit-Reset-Tokens": "4",
        "X-RateLimit-Reset-Requests": "3",
        "X-RateLimit-Reset": "2",
        "Retry-After": "1",
    }
    assert parse_retry_after(headers, NOW_MS) == 1000
    del headers["Retry-After"]
    assert parse_retry_after(headers, NOW_MS) == 2000
    del headers["X-RateLimit-Reset"]
    assert parse_retry_after(headers, NOW_MS) == 3000
    del headers["X-RateLimit-Reset-Requests"]
    assert parse_retry_after(headers, NOW_MS) == 4000


def test_first_usable_header_wins() -> None:
    headers = {"Retry-After": "garbage", "X-RateLimit-Reset": "2d", "X-RateLimit-Reset-Tokens": "9"}
    assert parse_retry_after(headers, NOW_MS) == 9000
    headers = {"Retry-After": "999999", "X-RateLimit-Reset-Requests": "6m5s"}
    assert parse_retry_after(headers, NOW_MS) == 365_000


@pytest.mark.parametrize(
    "name",
    [
        "retry-after",
        "RETRY-AFTER",
        "rEtRy-AfTeR",
        "x-ratelimit-reset",
        "X-RATELIMIT-RESET-REQUESTS",
        "x-RateLimit-Reset-Tokens",
    ],
)
def test_case_insensitive_plain_dict(name: str) -> None:
    assert parse_retry_after({name: "12"}, NOW_MS) == 12_000


def test_works_with_httpx_headers() -> None:
    headers = httpx.Headers({"retry-after": "3"})
    assert parse_retry_after(headers, NOW_MS) == 3000


# --- delay_before_retry_ms -------------------------------------------------------------------


def test_next_delay_defaults_to_backoff_with_retry_number_retried_plus_one() -> None:
    for retried in range(6):
        assert delay_before_retry_ms(
            retried=retried, expression=None, response_headers=None, now_ms=NOW_MS
        ) == default_backoff_ms(retried + 1)
    assert (
        delay_before_retry_ms(retried=0, expression=None, response_headers={}, now_ms=NOW_MS)
        == 12_182
    )


def test_next_delay_uses_expression_with_retries_done_so_far() -> None:
    expression = RetryDelayExpression("1000 * (1 + retried)")
    # First attempt failed: no retry done yet, so retried=0 -> 1000 ms.
    assert (
        delay_before_retry_ms(
            retried=0, expression=expression, response_headers=None, now_ms=NOW_MS
        )
        == 1000
    )
    assert (
        delay_before_retry_ms(retried=2, expression=expression, response_headers={}, now_ms=NOW_MS)
        == 3000
    )


def test_next_delay_headers_beat_expression_and_backoff() -> None:
    expression = RetryDelayExpression("1000")
    headers = {"retry-after": "7"}
    assert (
        delay_before_retry_ms(
            retried=0, expression=expression, response_headers=headers, now_ms=NOW_MS
        )
        == 7000
    )
    assert (
        delay_before_retry_ms(retried=0, expression=None, response_headers=headers, now_ms=NOW_MS)
        == 7000
    )
    assert (
        delay_before_retry_ms(
            retried=1, expression=None, response_headers={"Retry-After": HTTP_DATE}, now_ms=NOW_MS
        )
        == 60_000
    )


def test_next_delay_unusable_headers_fall_through() -> None:
    expression = RetryDelayExpression("1000")
    for headers in ({"Retry-After": "garbage"}, {"Retry-After": "90000"}, {"Other": "1"}):
        assert (
            delay_before_retry_ms(
                retried=0, expression=expression, response_headers=headers, now_ms=NOW_MS
            )
            == 1000
        )
        assert delay_before_retry_ms(
            retried=1, expression=None, response_headers=headers, now_ms=NOW_MS
        ) == default_backoff_ms(2)


def test_next_delay_propagates_expression_errors() -> None:
    with pytest.raises(InvalidRetryDelay, match="division by zero"):
        delay_before_retry_ms(
            retried=0,
            expression=RetryDelayExpression("1 / retried"),
            response_headers=None,
            now_ms=NOW_MS,
        )


def test_next_delay_rejects_negative_retried() -> None:
    with pytest.raises(ValueError, match="retried must be >= 0"):
        delay_before_retry_ms(retried=-1, expression=None, response_headers=None, now_ms=NOW_MS)


def test_next_delay_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        delay_before_retry_ms(0, None, None, NOW_MS)  # type: ignore[call-arg]


def test_a_retry_delay_expression_pickles_as_its_text() -> None:
    # A data dir's snapshot holds messages with their expressions: the compiled closures
    # must not make it fail.
    expression = RetryDelayExpression("pow(2, retried) * 1000")
    copy = pickle.loads(pickle.dumps(expression))
    assert copy.text == expression.text
    assert copy.delay_ms(3) == expression.delay_ms(3) == 8000


def test_the_default_backoff_as_an_expression_is_the_default_backoff() -> None:
    # What a step without a retry delay shows as its retryDelay computes the same delays.
    from pytest_qstash.engine.retry import DEFAULT_RETRY_DELAY

    expression = RetryDelayExpression(DEFAULT_RETRY_DELAY)
    assert [expression.delay_ms(retried) for retried in range(12)] == [
        default_backoff_ms(retried + 1) for retried in range(12)
    ]
