"""Which requests are QStash's: every spelling of a QStash base is intercepted by the fake, or
stopped by the network guard, and never reaches a socket (the bearer token stays in here)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from inner_pytest import run_inner
from qstash import AsyncQStash, QStash
from qstash.errors import QStashError

from pytest_qstash import FakeQStash
from pytest_qstash.intercept import sslcache
from pytest_qstash.intercept.router import NetworkGuard
from pytest_qstash.wire.hosts import ApiBase, canonical_host, is_loopback, is_upstash_qstash_host

APP = "https://app.test/jobs"
HTTPX2 = importlib.util.find_spec("httpx2") is not None

# (what QSTASH_URL or base_urls says, how a client spells the same base)
SPELLINGS = [
    pytest.param(None, "https://qstash.upstash.io.", id="trailing-dot"),
    pytest.param(None, "https://QStash.Upstash.IO", id="upper-case"),
    pytest.param(None, "https://qstash.upstash.io:443", id="explicit-port"),
    pytest.param(None, "http://qstash.upstash.io", id="plain-http"),
    pytest.param(None, "https://qstash-eu-central-1.upstash.io", id="regional"),
    pytest.param(None, "https://QSTASH-US-EAST-1.upstash.io.", id="regional-spelled"),
    pytest.param("http://qstash_dev:8080", "http://qstash_dev:8080", id="underscore"),
    pytest.param("http://qstash_dev:8080", "http://QStash_Dev.:8080", id="underscore-spelled"),
    pytest.param("http://qstash.internal.:8443", "http://qstash.internal:8443", id="fqdn-config"),
    pytest.param("http://10.0.0.7:8080", "http://10.7:8080", id="ipv4-short"),
    pytest.param("http://[2001:db8::7]:8080", "http://[2001:DB8:0:0::7]:8080", id="ipv6"),
    pytest.param("http://10.0.0.7:8080", "http://[::ffff:10.0.0.7]:8080", id="ipv4-mapped"),
    pytest.param("https://bücher.example", "https://BÜCHER.example.", id="idn"),
    pytest.param("https://bücher.example", "https://xn--bcher-kva.example", id="idn-punycode"),
    pytest.param("https://gateway.test/qstash", "https://GATEWAY.test./qstash", id="prefix"),
    pytest.param(
        "https://gateway.test/qstäsh", "https://gateway.test/qst%C3%A4sh", id="prefix-utf8"
    ),
]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every name lookup and connection attempt fails loudly and is listed: a test asserts
    the list empty (the request never left the process)."""
    attempts: list[str] = []

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            attempts.append(f"{what}{args[1:] if what.startswith('socket.') else args}")
            raise OSError(f"test: the network was asked for: {attempts[-1]}")

        return refused

    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("socket.connect_ex"))
    return attempts


@pytest.fixture
def one_tls_context() -> Iterator[None]:
    """The TLS context a fake shares between the clients built meanwhile, without a fake: the
    guard's tests build five clients each (15 ms or more of CA bundle apiece, otherwise)."""
    sslcache.acquire()
    yield
    sslcache.release()


def configure(monkeypatch: pytest.MonkeyPatch, configured: str | None) -> None:
    """QSTASH_URL set to ``configured`` (None: unset)."""
    if configured is None:
        monkeypatch.delenv("QSTASH_URL", raising=False)
    else:
        monkeypatch.setenv("QSTASH_URL", configured)


def token() -> str:
    return os.environ["QSTASH_TOKEN"]


def publish_every_way(base_url: str) -> list[Any]:
    """One publish through each client: the sync and async SDK, httpx, httpx2 (sync, async).
    Returns what each produced (an answer or the exception raised)."""
    outcomes: list[Any] = []
    url = f"{base_url}/v2/publish/{APP}"
    headers = {"Authorization": f"Bearer {token()}"}

    def attempt(call: Callable[[], Any]) -> None:
        try:
            outcomes.append(call())
        except Exception as exc:
            outcomes.append(exc)

    attempt(lambda: QStash(token(), base_url=base_url, retry=False).message.publish(url=APP))

    async def via_async_sdk() -> Any:
        return await AsyncQStash(token(), base_url=base_url, retry=False).message.publish(url=APP)

    attempt(lambda: asyncio.run(via_async_sdk()))
    attempt(lambda: httpx.post(url, headers=headers, content=b"httpx"))
    if HTTPX2:
        import httpx2

        async def via_async_httpx2() -> Any:
            async with httpx2.AsyncClient() as client:
                return await client.post(url, headers=headers, content=b"async httpx2")

        attempt(lambda: httpx2.post(url, headers=headers, content=b"httpx2"))
        attempt(lambda: asyncio.run(via_async_httpx2()))
    return outcomes


@pytest.mark.parametrize(("configured", "client_url"), SPELLINGS)
def test_every_spelling_is_answered_by_the_fake(
    monkeypatch: pytest.MonkeyPatch,
    no_network: list[str],
    configured: str | None,
    client_url: str,
) -> None:
    configure(monkeypatch, configured)
    with FakeQStash() as fake:
        outcomes = publish_every_way(client_url)

    assert no_network == []
    assert [o for o in outcomes if isinstance(o, Exception)] == []
    assert len(fake.messages) == (5 if HTTPX2 else 3)
    assert {m.url for m in fake.messages} == {APP}
    if configured is not None:  # the same base given to the fake instead of QSTASH_URL
        monkeypatch.delenv("QSTASH_URL")
        with FakeQStash(base_urls=[configured]) as by_base_urls:
            QStash(token(), base_url=client_url, retry=False).message.publish(url=APP)
        assert no_network == []
        assert len(by_base_urls.messages) == 1


@pytest.mark.parametrize(("configured", "client_url"), SPELLINGS)
@pytest.mark.usefixtures("one_tls_context")
def test_every_spelling_is_stopped_by_the_guard_without_a_fake(
    monkeypatch: pytest.MonkeyPatch,
    no_network: list[str],
    configured: str | None,
    client_url: str,
) -> None:
    guard = NetworkGuard.running()
    assert guard is not None, "the plugin's network guard runs for the whole session"
    configure(monkeypatch, configured)
    try:
        outcomes = publish_every_way(client_url)
    finally:
        refused, guard.refused = guard.refused, []  # said here, not as the test's warning

    assert no_network == []
    assert len(refused) == len(outcomes)
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            assert isinstance(outcome, QStashError)
            assert "503" in str(outcome)
        else:
            assert outcome.status_code == 503
            assert "reached QStash while no fake was active" in outcome.json()["error"]


@pytest.mark.parametrize(
    "base_url", ["http://qstash_dev:8080", "https://gateway.test/qstash", "http://[2001:db8::9]"]
)
def test_a_base_a_fake_was_given_is_guarded_after_it_stops(
    monkeypatch: pytest.MonkeyPatch, no_network: list[str], base_url: str
) -> None:
    monkeypatch.delenv("QSTASH_URL", raising=False)
    with FakeQStash(base_urls=[base_url]):
        pass
    guard = NetworkGuard.running()
    assert guard is not None
    try:
        answer = httpx.post(f"{base_url}/v2/publish/{APP}", headers={"Authorization": "Bearer t"})
    finally:
        refused, guard.refused = guard.refused, []

    assert answer.status_code == 503
    assert len(refused) == 1
    assert no_network == []


@pytest.mark.usefixtures("one_tls_context")
def test_a_bad_qstash_url_set_during_a_test_is_still_guarded(
    monkeypatch: pytest.MonkeyPatch, no_network: list[str]
) -> None:
    # Refused at start-up and by a fake, but set here, by a test without one: the SDK still
    # sends to its host (the API path lands in the query), and the guard still stops it.
    monkeypatch.setenv("QSTASH_URL", "http://qstash_dev:8080?region=eu")
    guard = NetworkGuard.running()
    assert guard is not None
    try:
        with pytest.raises(QStashError, match="503"):
            QStash(token(), retry=False).message.publish(url=APP)
    finally:
        refused, guard.refused = guard.refused, []
    assert len(refused) == 1
    assert no_network == []


def test_other_hosts_still_go_their_way(no_network: list[str]) -> None:
    # The lookalikes and other Upstash hosts are not QStash's: they reach the (refused) network.
    with FakeQStash() as fake:
        for url in ("https://qstash.upstash.io.evil.test/v2/x", "https://console.upstash.io/"):
            with pytest.raises(httpx.ConnectError, match="the network was asked for"):
                httpx.get(url)
    assert fake.api_calls == []
    assert len(no_network) == 2


# -- one spelling ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spelled", "canonical"),
    [
        ("QStash.Upstash.IO.", "qstash.upstash.io"),
        (b"qstash_dev.", "qstash_dev"),
        ("[2001:DB8:0::1]", "2001:db8::1"),
        ("10.1", "10.0.0.1"),
        ("[::FFFF:10.0.0.1]", "10.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("Bücher.Example", "xn--bcher-kva.example"),
        ("qstash%2eupstash.io", "qstash.upstash.io"),
        ("deadbeef.example", "deadbeef.example"),
    ],
)
def test_canonical_host(spelled: str | bytes, canonical: str) -> None:
    assert canonical_host(spelled) == canonical


def test_loopback_and_upstash_hosts_in_any_spelling() -> None:
    assert all(
        map(
            is_loopback,
            ["LOCALHOST.", "app.localhost", "127.1", "[::1]", "::ffff:7f00:1", "0.0.0.0"],
        )
    )
    assert not any(map(is_loopback, ["10.0.0.1", "localhost.example", "qstash.upstash.io"]))
    assert is_upstash_qstash_host("QSTASH-EU-CENTRAL-1.upstash.io.")
    assert not is_upstash_qstash_host("qstash.upstash.io.evil.test")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://qstash.test", "the scheme 'ftp' is not http or https"),
        ("https://", "it has no host"),
        ("not a url", "is not a host name or an IP address"),
        ("http://[::1/x", "Invalid IPv6 URL"),
        ("http://qstash_dev:99999", "Port out of range"),
        ("http://qstash_dev:http", "Port could not be cast"),
        ("http://qstash_dev:0", "port 0 is no port"),
        ("https://qstash.test/?region=eu", "no query or fragment"),
        ("  ", "it is empty"),
        ("", "it is empty"),
    ],
)
def test_an_unusable_base_says_what_is_wrong_and_what_is_accepted(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match="not a QStash base URL") as info:
        FakeQStash(base_urls=[url])
    assert problem in str(info.value)
    assert "expected http(s)://host[:port][/path prefix]" in str(info.value)


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://QStash_Dev.:8080/", ApiBase("qstash_dev", 8080, "")),
        ("qstash.internal.test", ApiBase("qstash.internal.test", 443, "")),
        ("https://user@gateway.test/qstash/", ApiBase("gateway.test", 443, "/qstash")),
        ("https://gateway.test/qstäsh v2", ApiBase("gateway.test", 443, "/qst%C3%A4sh%20v2")),
    ],
)
def test_a_base_in_any_spelling_is_one_base(url: str, base: ApiBase) -> None:
    assert ApiBase.parse(url) == base


def test_a_bad_qstash_url_fails_the_fake_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QSTASH_URL", "http://qstash_dev:80800")
    with pytest.raises(ValueError, match=r"QSTASH_URL is not a QStash base URL.*Port out of range"):
        FakeQStash().start()


# -- the pytest layer ------------------------------------------------------------------------
def test_a_bad_qstash_url_fails_the_run_at_configure(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QSTASH_URL", "ftp://qstash_dev:8080")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run_inner(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*pytest-qstash: QSTASH_URL is not a QStash base URL: 'ftp://qstash_dev:8080': the "
            "scheme 'ftp' is not http or https; expected http(s)://*"
        ]
    )


def test_a_bad_qstash_url_set_by_a_test_fails_its_fixture(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def broken_env(monkeypatch):
            monkeypatch.setenv("QSTASH_URL", "https://qstash.test?x=1")
        """
    )
    pytester.makepyfile("def test_it(broken_env, qstash):\n    pass\n")
    result = run_inner(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*bad qstash setting: QSTASH_URL is not a QStash base URL: *no query or fragment*"]
    )


def test_a_real_token_in_the_environment_goes_nowhere(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A developer's shell with real credentials: the plugin keeps them (the app and the fake
    # agree on them), and no call carrying them reaches a socket, fake or no fake.
    real = "eyJVc2VySUQiOiJyZWFsLXVzZXIiLCJQYXNzd29yZCI6InJlYWwifQ=="
    monkeypatch.setenv("QSTASH_TOKEN", real)
    monkeypatch.setenv("QSTASH_URL", "http://QStash_Dev.:8080")
    pytester.makeconftest(
        """
        import socket

        import pytest

        ATTEMPTS = []


        @pytest.fixture(autouse=True)
        def no_network(monkeypatch):
            def refused(*args, **kwargs):
                ATTEMPTS.append(args)
                raise OSError("network")

            for owner, name in [(socket, "getaddrinfo"), (socket, "create_connection"),
                                (socket.socket, "connect"), (socket.socket, "connect_ex")]:
                monkeypatch.setattr(owner, name, refused)
        """
    )
    pytester.makepyfile(
        f"""
        import os

        import pytest
        from qstash import QStash
        from qstash.errors import QStashError

        import conftest

        CLIENT = QStash(os.environ["QSTASH_TOKEN"], retry=False)  # as an app module does


        @pytest.fixture
        def app_started_first():
            with pytest.raises(QStashError, match="503"):
                CLIENT.message.publish(url="https://app.test/startup")


        def test_the_token_is_kept(qstash):
            assert os.environ["QSTASH_TOKEN"] == qstash.token == {real!r}


        def test_with_the_fake(qstash):
            CLIENT.message.publish(url="https://app.test/x")
            QStash(os.environ["QSTASH_TOKEN"], base_url="https://qstash.upstash.io.",
                   retry=False).message.publish(url="https://app.test/y")
            assert [m.url for m in qstash.messages] == ["https://app.test/x", "https://app.test/y"]


        def test_without_the_fake(app_started_first):
            pass


        def test_nothing_reached_a_socket():
            assert conftest.ATTEMPTS == []
        """
    )
    result = run_inner(pytester, "-p", "no:randomly", "-W", "ignore::UserWarning")
    result.assert_outcomes(passed=4)
