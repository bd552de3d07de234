"""Loopback ports with a known state, for tests of what happens when an endpoint is down."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections while the block runs: bound here and never
    listened on, so nothing answers there and no other program can take it meanwhile (no
    assumption that a well-known port such as 9 is free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]
