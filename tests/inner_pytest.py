"""Running an inner pytest session (pytester) the way our plugin tests need it."""

from __future__ import annotations

import pytest


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """``pytester.runpytest`` without the plugins these inner suites do not use: hypothesis'
    and schemathesis' would re-import them for every inner run (pytester restores
    sys.modules after each), a second each for nothing."""
    return pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:hypothesispytest",
        "-p",
        "no:schemathesis",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
        *args,
    )
