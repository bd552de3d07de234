"""``python -m pytest_qstash serve``: the same as the ``pytest-qstash`` command."""

from __future__ import annotations

import sys

from .server.cli import main

if __name__ == "__main__":
    sys.exit(main())
