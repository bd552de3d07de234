"""``pytest-qstash ...`` run as a user runs it, for the tests of its commands: in a child
process, with this test session's ``QSTASH_*`` variables left out, and the ones the command
should see given."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping


def run_command(
    *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest_qstash ARGS``; ``env``: the variables set on top (``QSTASH_TOKEN``,
    a signing key)."""
    child = {k: v for k, v in os.environ.items() if not k.startswith("QSTASH_")}
    child.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest_qstash", *args],
        capture_output=True,
        text=True,
        env=child,
        timeout=120,
    )
