"""The error a control request is refused with, shared by the server app and what replays its
control requests (``datadir/journal.py``) without either importing the other."""

from __future__ import annotations


class ControlError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
