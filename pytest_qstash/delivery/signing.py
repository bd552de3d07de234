"""The ``Upstash-Signature`` JWT, made with PyJWT: the library ``qstash.Receiver`` verifies it
with."""

from __future__ import annotations

import base64
import hashlib
import warnings

import jwt

#: QStash tokens live five minutes.
TOKEN_LIFETIME_S = 300

#: PyJWT (2.10 and later) warns on every HS256 token made with a shorter key (RFC 7518 3.2).
_MIN_KEY_BYTES = 32


def body_hash(content: bytes) -> str:
    """base64url (padded) of the SHA-256 of the exact bytes sent."""
    return base64.urlsafe_b64encode(hashlib.sha256(content).digest()).decode("ascii")


def sign(*, content: bytes, url: str, key: str, iat: int, jti: str) -> str:
    """An HS256 token for one delivery of ``content`` to ``url``, issued at ``iat`` (unix s)."""
    claims = {
        "iss": "Upstash",
        "sub": url,
        "iat": iat,
        "nbf": iat,
        "exp": iat + TOKEN_LIFETIME_S,
        "jti": jti,
        "body": body_hash(content),
    }
    if len(key.encode()) >= _MIN_KEY_BYTES:
        return jwt.encode(claims, key, algorithm="HS256")
    # A short key is the test's own choice (QStash's keys are 32 bytes): the app's Receiver
    # warns about it when it verifies, so the fake does not add a warning of its own per
    # delivery (an error under -W error, raised from tick() instead of the app).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # InsecureKeyLengthWarning, where PyJWT has it
        return jwt.encode(claims, key, algorithm="HS256")
