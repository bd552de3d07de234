"""The ``Upstash-Signature`` JWT, exactly as ``qstash.Receiver`` checks it."""

from __future__ import annotations

import base64
import hashlib

import jwt

#: QStash tokens live five minutes.
TOKEN_LIFETIME_S = 300


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
    return jwt.encode(claims, key, algorithm="HS256")
