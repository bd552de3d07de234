"""JSON for the server's large answers and its data dir: through orjson when it is installed
(the ``server`` extra brings it), else the standard library.

A list of 20,000 messages is 24 MB of JSON: the standard encoder takes half a second for it,
orjson a twelfth. What orjson writes is what httpx writes for ``json=`` (compact, UTF-8, not
ASCII-escaped), but for floats' exponents (``1e16`` for ``1e+16``) and NaN (null, where the
standard library refuses). What orjson cannot take (an integer beyond 64 bits, a key that is
not text, a NaN literal in a document) goes to the standard library, which answers as before.
"""

from __future__ import annotations

import json
from typing import Any

orjson: Any
try:
    import orjson
except ImportError:  # pragma: no cover - the server extra installs it
    orjson = None


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON."""
    if orjson is not None:
        try:
            encoded: bytes = orjson.dumps(value)
            return encoded
        except TypeError:  # orjson's JSONEncodeError is one
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def loads(text: str | bytes) -> Any:
    """A JSON document (``ValueError`` when it is none)."""
    if orjson is not None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)
