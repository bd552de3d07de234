"""Moments a test names (where the clock starts, ``advance_to``'s target) as unix milliseconds."""

from __future__ import annotations

import math
import re
import time
from datetime import datetime, timezone

from ..engine.options import LATEST_MS


def start_ms(value: datetime | str | float | None) -> int:
    if value is None:
        # The real time, to the whole second: the workflow SDK rounds sleep_until targets to
        # seconds, so a start with milliseconds made `advance("1d")` after a one-day
        # sleep_until fall short or not depending on the moment the test ran.
        return int(time.time()) * 1000
    return moment_ms(value)


_NUMBER = re.compile(r"\d+(\.\d+)?")
_MOMENT_FORMS = 'an ISO 8601 date-time such as "2026-01-01T00:00:00Z", a datetime, or unix seconds'


def moment_ms(value: datetime | str | float) -> int:
    """A moment as unix milliseconds, between 1970 and the end of 9999 (what QStash's times
    and a datetime can both hold); naive datetimes are read as UTC."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # In milliseconds: 1e308 seconds is a float, but not as milliseconds.
        if isinstance(value, float) and not math.isfinite(value * 1000):
            raise ValueError(f"invalid moment {value!r}: expected {_MOMENT_FORMS}")
        ms = round(value * 1000)
    else:
        if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            return moment_ms(float(value))  # unix seconds, as an ini file spells them
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"invalid moment {value!r}: expected {_MOMENT_FORMS}") from None
        if not isinstance(value, datetime):
            raise TypeError(f"invalid moment {value!r}: expected {_MOMENT_FORMS}")
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)  # naive moments are read as UTC
        ms = round(value.timestamp() * 1000)
    if not 0 <= ms <= LATEST_MS:
        raise ValueError(
            f"invalid moment {value!r}: it is outside 1970-01-01 to 9999-12-31 (did you pass "
            "milliseconds where unix seconds are taken?)"
        )
    return ms
