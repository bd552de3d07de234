"""The account's credentials: the API token and the two signing keys.

They default to the process environment (set once per session by the pytest plugin) because
apps read them at import time; a key rotation through the API overrides them from then on.
"""

from __future__ import annotations

import base64
import binascii
import json
import os

from .saved import Saved, saved_as


def make_token(user_id: str, password: str) -> str:
    """A token shaped as QStash's: standard base64 of ``{"UserID": ..., "Password": ...}``,
    which the TypeScript Workflow SDK decodes for the user id in a webhook's URL."""
    payload = json.dumps({"UserID": user_id, "Password": password}, separators=(",", ":"))
    return base64.b64encode(payload.encode()).decode("ascii")


def user_id_of(token: str) -> str | None:
    """The user id a QStash-shaped token carries; None for a token of another shape."""
    try:
        payload = json.loads(base64.b64decode(token, validate=True))
    except (binascii.Error, ValueError):
        return None
    user_id = payload.get("UserID") if isinstance(payload, dict) else None
    return user_id if isinstance(user_id, str) and user_id else None


#: The user id of the default token.
DEFAULT_USER_ID = "00000000-0000-4000-8000-pytestqstash"
#: Test values, shaped like real ones (the token decodes to a user id, as QStash's does;
#: signing keys are ``sig_`` + 28 characters).
DEFAULT_TOKEN = make_token(DEFAULT_USER_ID, "pytest-qstash-test-password-0000")
DEFAULT_CURRENT_SIGNING_KEY = "sig_pytestQstashCurrentKey000000"
DEFAULT_NEXT_SIGNING_KEY = "sig_pytestQstashNextKey000000000"

DEFAULT_ENV = {
    "QSTASH_TOKEN": DEFAULT_TOKEN,
    "QSTASH_CURRENT_SIGNING_KEY": DEFAULT_CURRENT_SIGNING_KEY,
    "QSTASH_NEXT_SIGNING_KEY": DEFAULT_NEXT_SIGNING_KEY,
}


class Account(Saved):
    SAVED = saved_as("_token _current _next")

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

    @property
    def user_id(self) -> str | None:
        """The user id the token carries (None when the token is not QStash-shaped): what a
        webhook URL (``/v2/workflows/hooks/{userId}/...``) names."""
        return user_id_of(self.token)

    def rotate(self, new_next: str) -> None:
        """QStash's rotation: the next key becomes current, a fresh key becomes next."""
        self._current, self._next = self.next_signing_key, new_next
