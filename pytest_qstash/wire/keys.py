"""``GET /v2/keys`` and ``POST /v2/keys/rotate``: the signing keys."""

from __future__ import annotations

import httpx

from ..engine.store import Store
from ._http import json_response


def get_keys(store: Store, request: httpx.Request) -> httpx.Response:
    account = store.account
    return json_response({"current": account.current_signing_key, "next": account.next_signing_key})


def rotate_keys(store: Store, request: httpx.Request) -> httpx.Response:
    store.account.rotate(store.ids.signing_key())
    return get_keys(store, request)
