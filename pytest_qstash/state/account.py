"""The account's credentials: the API token and the two signing keys.

They default to the process environment (set once per session by the pytest plugin) because
apps read them at import time; a key rotation through the API overrides them from then on.
"""

from __future__ import annotations

import os

#: Test values, shaped like real ones (signing keys are ``sig_`` + 28 characters).
DEFAULT_TOKEN = "qstash_test_token_pytest_qstash_0000000000"
DEFAULT_CURRENT_SIGNING_KEY = "sig_pytestQstashCurrentKey000000"
DEFAULT_NEXT_SIGNING_KEY = "sig_pytestQstashNextKey000000000"

DEFAULT_ENV = {
    "QSTASH_TOKEN": DEFAULT_TOKEN,
    "QSTASH_CURRENT_SIGNING_KEY": DEFAULT_CURRENT_SIGNING_KEY,
    "QSTASH_NEXT_SIGNING_KEY": DEFAULT_NEXT_SIGNING_KEY,
}


class Account:
    def __init__(
        self,
        token: str | None = None,
        current_signing_key: str | None = None,
        next_signing_key: str | None = None,
    ) -> None:
        self._token = token
        self._current = current_signing_key
        self._next = next_signing_key

    @property
    def token(self) -> str:
        return self._token or os.environ.get("QSTASH_TOKEN") or DEFAULT_TOKEN

    @property
    def current_signing_key(self) -> str:
        return (
            self._current
            or os.environ.get("QSTASH_CURRENT_SIGNING_KEY")
            or DEFAULT_CURRENT_SIGNING_KEY
        )

    @property
    def next_signing_key(self) -> str:
        return self._next or os.environ.get("QSTASH_NEXT_SIGNING_KEY") or DEFAULT_NEXT_SIGNING_KEY

    def rotate(self, new_next: str) -> None:
        """QStash's rotation: the next key becomes current, a fresh key becomes next."""
        self._current, self._next = self.next_signing_key, new_next
