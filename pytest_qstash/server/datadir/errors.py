"""The error a data dir that cannot be used is refused with."""

from __future__ import annotations


class PersistenceError(Exception):
    """A data dir that cannot be used: another version's, another server's, unreadable."""
