"""Every duration the fake reads, as milliseconds: QStash durations (``"1d2h3m4s"``,
``"500ms"``), seconds and timedeltas from tests and headers, and Go durations from responses."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from fractions import Fraction

Duration = str | int | float | timedelta

#: How far ahead ``drain()`` delivers by default (the fixture, ``Client``, the server's verb).
DRAIN_WITHIN = "30d"

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_ACCEPTED = (
    'a QStash duration such as "90s", "1h30m", "7d" or "500ms" (units: ms, s, m, h, d), '
    "a number of seconds, or a datetime.timedelta"
)


def parse_duration_ms(value: Duration, *, what: str = "duration") -> int:
    """Return ``value`` in whole milliseconds; ``ValueError`` names what is accepted.

    Negative durations are refused: QStash has none, and time in the fake never goes back.
    """
    if isinstance(value, bool):  # bool is an int; True seconds is surely a mistake
        raise ValueError(f"invalid {what} {value!r}: expected {_ACCEPTED}")
    if isinstance(value, timedelta):
        ms = value / timedelta(milliseconds=1)
    elif isinstance(value, (int, float)):
        ms = value * 1000
    elif isinstance(value, str):
        ms = _parse_text(value.strip(), what)
    else:
        raise TypeError(f"invalid {what} {value!r}: expected {_ACCEPTED}")
    if not math.isfinite(ms):
        raise ValueError(f"invalid {what} {value!r}: it is not finite; expected {_ACCEPTED}")
    if ms < 0:
        raise ValueError(f"invalid {what} {value!r}: it is negative, and time only moves forward")
    return round(ms)


def _parse_text(text: str, what: str) -> float:
    if text.startswith("-"):
        raise ValueError(f"invalid {what} {text!r}: it is negative, and time only moves forward")
    if re.fullmatch(r"\d+(?:\.\d+)?", text):  # a bare number is seconds
        return float(text) * 1000
    pos = 0
    total = 0.0
    for part in _PART.finditer(text):
        if part.start() != pos:
            break
        total += float(part.group(1)) * _UNIT_MS[part.group(2)]
        pos = part.end()
    if pos != len(text) or not text:
        raise ValueError(f"invalid {what} {text!r}: expected {_ACCEPTED}")
    return total


_GO_UNIT_NS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
# Longest unit spellings first so that "ms" is not read as "m" followed by garbage.
_GO_UNIT = "|".join(sorted(map(re.escape, _GO_UNIT_NS), key=len, reverse=True))
_GO_PART = re.compile(rf"(\d+(?:\.\d*)?|\.\d+)({_GO_UNIT})")
_GO_DURATION = re.compile(rf"\+?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:{_GO_UNIT}))+")


def go_duration_ms(value: str) -> int | None:
    """A Go duration (what QStash's servers read: ``6m5s``, ``1.5h``, ``300ms``) in
    milliseconds, None when it is not one: ``6m5s`` -> 365000; exact arithmetic (Fraction),
    so ``1.1s`` is 1100 ms, not 1099."""
    if not _GO_DURATION.fullmatch(value):
        return None
    total_ns = sum(
        (Fraction(number) * _GO_UNIT_NS[unit] for number, unit in _GO_PART.findall(value)),
        Fraction(0),
    )
    return math.floor(total_ns / 1_000_000 + Fraction(1, 2))
