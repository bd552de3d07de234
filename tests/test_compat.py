"""pytest_qstash.intercept.compat reads pytest-httpx's internals: these tests pin the release line
it was read from, and fail if those internals move."""

from __future__ import annotations

from importlib.metadata import version

import httpx
import pytest
from pytest_httpx import HTTPXMock

from pytest_qstash.intercept import compat


def test_pytest_httpx_is_the_release_line_compat_knows() -> None:
    installed = version("pytest-httpx")
    assert installed.split(".")[:2] == compat.PYTEST_HTTPX_KNOWN.split("."), (
        f"pytest-httpx {installed} is installed, but pytest_qstash/intercept/compat.py was read "
        f"from {compat.PYTEST_HTTPX_KNOWN}.x: check the internals it reads, then update "
        "PYTEST_HTTPX_KNOWN and the pytest-httpx bound in pyproject.toml"
    )


def test_nothing_is_found_without_pytest_httpx() -> None:
    assert not compat.httpx_transports_patched()
    assert compat.pytest_httpx_mock() is None


def test_the_active_mock_is_found(httpx_mock: HTTPXMock) -> None:
    assert compat.httpx_transports_patched()
    assert compat.pytest_httpx_mock() is httpx_mock


def test_an_unanswered_request_comes_off_the_mocks_list(httpx_mock: HTTPXMock) -> None:
    request = httpx.Request("POST", "https://app.example.com/unmocked", content=b"{}")
    with pytest.raises(httpx.TimeoutException) as raised, httpx.Client() as client:
        client.send(request)
    assert compat.PYTEST_HTTPX_NO_RESPONSE in str(raised.value)

    compat.unrecord_in_pytest_httpx(request)

    # Left on the list, the request would fail this test at teardown ("not expected").
    assert httpx_mock.get_requests() == []


@pytest.mark.asyncio
async def test_an_unanswered_async_request_comes_off_the_mocks_list(
    httpx_mock: HTTPXMock,
) -> None:
    request = httpx.Request("POST", "https://app.example.com/unmocked", content=b"{}")
    with pytest.raises(httpx.TimeoutException):
        async with httpx.AsyncClient() as client:
            await client.send(request)

    compat.unrecord_in_pytest_httpx(request)

    assert httpx_mock.get_requests() == []
