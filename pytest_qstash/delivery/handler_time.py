"""How much virtual time a handler takes: set at mount (``duration=``) or with
``qstash.handler_takes(url_or_pattern, duration)``.

An attempt with a duration is in flight from its start to its end on the virtual clock; one
without (the default) starts and ends at the same instant and costs nothing more here than one
emptiness check.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from ..engine.durations import Duration, parse_duration_ms
from .mounts import normalize_base_url

#: A duration, or a function of the (signed) request returning one (None: no time).
HandlerDuration = Duration | Callable[[httpx.Request], "Duration | None"]


def _matches_base(base_url: str, url: str) -> bool:
    if not url.startswith(base_url):
        return False
    rest = url[len(base_url) :]
    return not rest or base_url.endswith("/") or rest[0] in "/?#"


def _checked(spec: HandlerDuration, what: str) -> HandlerDuration:
    if callable(spec):
        return spec
    parse_duration_ms(spec, what=what)  # refuse a bad duration now, not at the delivery
    return spec


@dataclass(slots=True)
class _Rule:
    target: str | re.Pattern[str]
    spec: HandlerDuration
    #: How many more attempts it applies to; None: all.
    times: int | None

    def matches(self, url: str) -> bool:
        if isinstance(self.target, re.Pattern):
            return self.target.search(url) is not None
        return _matches_base(self.target, url)


class HandlerTimes:
    def __init__(self) -> None:
        self._mounted: dict[str, HandlerDuration] = {}
        self._rules: list[_Rule] = []

    def set_mount(self, base_url: str, spec: HandlerDuration | None) -> None:
        base_url = normalize_base_url(base_url)
        if spec is None:
            self._mounted.pop(base_url, None)
        else:
            self._mounted[base_url] = _checked(spec, "duration")

    def add(self, target: str | re.Pattern[str], spec: HandlerDuration, times: int | None) -> None:
        if isinstance(target, str):
            if not target.startswith(("http://", "https://")):
                raise ValueError(
                    f"invalid target {target!r}: expected an http(s) URL prefix, such as "
                    "'https://app.test/slow', or a compiled re.Pattern"
                )
            target = normalize_base_url(target)
        elif not isinstance(target, re.Pattern):
            raise TypeError(
                f"invalid target {target!r}: expected an http(s) URL prefix or a re.Pattern"
            )
        if times is not None and (isinstance(times, bool) or not isinstance(times, int)):
            raise TypeError(f"invalid times={times!r}: expected a whole number or None")
        if times is not None and times < 1:
            raise ValueError(f"invalid times={times!r}: expected at least 1, or None for all")
        self._rules.append(_Rule(target, _checked(spec, "handler duration"), times))

    def clear(self) -> None:
        self._rules.clear()

    def duration_ms(self, request: httpx.Request) -> int:
        """How long the attempt carrying ``request`` takes; 0 when nothing says."""
        if not self._rules and not self._mounted:
            return 0
        url = str(request.url)
        spec: HandlerDuration | None = None
        for position in range(len(self._rules) - 1, -1, -1):  # the newest rule wins
            rule: _Rule = self._rules[position]
            if rule.matches(url):
                spec = rule.spec
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times == 0:
                        del self._rules[position]
                break
        if spec is None:
            longest = max(
                (base for base in self._mounted if _matches_base(base, url)), key=len, default=None
            )
            if longest is None:
                return 0
            spec = self._mounted[longest]
        value = spec(request) if callable(spec) else spec
        if value is None:
            return 0
        return parse_duration_ms(value, what=f"duration returned for {url}")
