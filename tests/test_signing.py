"""The Upstash-Signature token is PyJWT's, and a short key of the test's own raises nothing in
the fake (the app's Receiver is where a short key is warned about)."""

from __future__ import annotations

import warnings

import httpx
import jwt
import pytest
from qstash import QStash

from pytest_qstash import FakeQStash
from pytest_qstash.delivery.signing import body_hash, sign


def test_the_token_is_what_jwt_encode_makes() -> None:
    key = "sig_pytestQstashCurrentKey000000"
    token = sign(content=b'{"a":1}', url="https://app.example.com/x", key=key, iat=1, jti="j")
    claims = {
        "iss": "Upstash",
        "sub": "https://app.example.com/x",
        "iat": 1,
        "nbf": 1,
        "exp": 301,
        "jti": "j",
        "body": body_hash(b'{"a":1}'),
    }
    assert token == jwt.encode(claims, key, algorithm="HS256")
    assert jwt.get_unverified_header(token) == {"alg": "HS256", "typ": "JWT"}


def test_a_short_key_raises_no_warning_from_the_fake() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        token = sign(content=b"x", url="https://app.example.com/", key="short", iat=1, jti="j")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyJWT warns on decoding with a short key
        decoded = jwt.decode(token, "short", algorithms=["HS256"], options={"verify_exp": False})
    assert decoded["body"] == body_hash(b"x")


# What an earlier test left to the garbage collector (a socket it did not close) is reported
# whenever collection runs: not a warning of this test's.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("error")
def test_a_delivery_signed_with_a_short_key_under_warnings_as_errors(
    qstash: FakeQStash, client: QStash, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QSTASH_CURRENT_SIGNING_KEY", "test-key")
    received: list[httpx.Request] = []
    qstash.mount("https://app.example.com", lambda request: received.append(request) or 200)

    client.message.publish(url="https://app.example.com/job", body="x")
    [delivery] = qstash.tick()

    assert delivery.status == 200
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jwt.decode(
            received[0].headers["Upstash-Signature"],
            "test-key",
            algorithms=["HS256"],
            options={"verify_exp": False, "verify_nbf": False, "verify_iat": False},
        )
