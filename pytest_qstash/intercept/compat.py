"""What the plugin relies on in pytest-httpx beyond its public API, in one place.

pytest-httpx has no API for either need below, so both read how it works inside, as of the
release line named in ``PYTEST_HTTPX_KNOWN``; ``tests/test_compat.py`` fails when the installed
pytest-httpx is another release line or its internals moved, and says so. Should they move
anyway, both fall back to doing nothing rather than failing a user's test.
"""

from __future__ import annotations

import httpx

#: The pytest-httpx release line whose internals this module was read from and is tested with
#: (``pytest-httpx<0.37`` in the ``test`` extra keeps CI on it).
PYTEST_HTTPX_KNOWN = "0.36"

# pytest-httpx (and any other transport-level mock) replaces these methods while it is active.
_ORIGINAL_HANDLE_REQUEST = httpx.HTTPTransport.handle_request
_ORIGINAL_HANDLE_ASYNC_REQUEST = httpx.AsyncHTTPTransport.handle_async_request


#: What pytest-httpx's error says when no response is registered for a request.
PYTEST_HTTPX_NO_RESPONSE = "No response can be found"


def httpx_transports_patched() -> bool:
    """Whether httpx's transports are patched, as pytest-httpx's ``httpx_mock`` does while a
    test uses it: a request nothing else answers then goes to that mock, not the network."""
    return (
        httpx.HTTPTransport.handle_request is not _ORIGINAL_HANDLE_REQUEST
        or httpx.AsyncHTTPTransport.handle_async_request is not _ORIGINAL_HANDLE_ASYNC_REQUEST
    )


def unrecord_in_pytest_httpx(request: httpx.Request) -> None:
    """pytest-httpx keeps every request it could not answer, to fail the test at teardown. The
    fake only asked whether anything would answer this one: the answer (no) is the fake's
    UnroutedDeliveryError, so the request comes off pytest-httpx's list. Its mock is found in
    the closure of the transport method it patched; if that ever changes, nothing is done."""
    mock = pytest_httpx_mock()
    if mock is None:
        return
    not_matched = getattr(mock, "_requests_not_matched", None)
    if isinstance(not_matched, list) and any(r is request for r in not_matched):
        not_matched[:] = [r for r in not_matched if r is not request]
        seen = getattr(mock, "_requests", None)
        if isinstance(seen, list):
            seen[:] = [entry for entry in seen if entry[1] is not request]


def pytest_httpx_mock() -> object | None:
    """The active ``HTTPXMock``, found in the closure of the transport method it patched, or
    None when pytest-httpx is not active (or keeps it elsewhere)."""
    for patched in (
        httpx.HTTPTransport.handle_request,
        httpx.AsyncHTTPTransport.handle_async_request,
    ):
        for cell in getattr(patched, "__closure__", None) or ():
            try:
                candidate: object = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(getattr(candidate, "_requests_not_matched", None), list):
                return candidate
    return None
