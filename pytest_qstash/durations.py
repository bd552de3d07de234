"""QStash durations (``"1d2h3m4s"``, ``"500ms"``), seconds and timedeltas, as milliseconds."""

from __future__ import annotations

import math
import re
from datetime import timedelta

Duration = str | int | float | timedelta

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
