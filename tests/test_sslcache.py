"""While a fake is active, httpx clients built with the default TLS settings share one context
(building one loads the CA bundle, about 15 ms); any other client gets what it asks for."""

from __future__ import annotations

import os
import ssl
import warnings
from pathlib import Path
from typing import Any

import certifi
import httpx
import pytest
from qstash import AsyncQStash, QStash

from pytest_qstash import FakeQStash
from pytest_qstash.intercept import sslcache


def context_of(client: httpx.Client | httpx.AsyncClient) -> ssl.SSLContext:
    context = client._transport._pool._ssl_context  # type: ignore[attr-defined]
    assert isinstance(context, ssl.SSLContext)
    return context


@pytest.fixture
def no_tls_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_tls_env")
def test_default_clients_share_one_context_while_a_fake_is_active() -> None:
    with FakeQStash():
        first, second = httpx.Client(), httpx.AsyncClient()
        sdk = QStash("token")
        assert context_of(first) is context_of(second)
        assert context_of(sdk.http._client) is context_of(first)  # type: ignore[attr-defined]
    outside = httpx.Client()
    assert context_of(outside) is not context_of(first)


@pytest.mark.usefixtures("no_tls_env")
def test_the_shared_context_is_the_one_httpx_builds_by_default() -> None:
    with FakeQStash():
        shared = context_of(httpx.Client())
    own = context_of(httpx.Client())
    assert shared is not own
    for attribute in ("verify_mode", "check_hostname", "options", "minimum_version", "protocol"):
        assert getattr(shared, attribute) == getattr(own, attribute), attribute
    assert shared.get_ca_certs() == own.get_ca_certs()
    assert len(own.get_ca_certs()) > 10  # certifi's bundle, not an empty store


@pytest.mark.usefixtures("no_tls_env")
def test_http2_and_http1_transports_never_share() -> None:
    # httpcore sets the ALPN protocols on the context before each handshake.
    with FakeQStash():
        plain = httpx.HTTPTransport()
        h2 = httpx.HTTPTransport(http2=True)
        plain_again = httpx.HTTPTransport()
    assert plain._pool._ssl_context is plain_again._pool._ssl_context
    assert plain._pool._ssl_context is not h2._pool._ssl_context


@pytest.mark.usefixtures("no_tls_env")
def test_clients_with_their_own_tls_settings_get_exactly_those() -> None:
    custom = ssl.create_default_context(cafile=certifi.where())
    with FakeQStash():
        default = context_of(httpx.Client())
        unverified = context_of(httpx.Client(verify=False))
        given = context_of(httpx.AsyncClient(verify=custom))
        positional = httpx.HTTPTransport(True)._pool._ssl_context
    assert unverified is not default
    assert unverified.verify_mode == ssl.CERT_NONE
    assert given is custom
    assert positional is not default  # positional arguments: left entirely alone


@pytest.mark.usefixtures("no_tls_env")
def test_a_client_certificate_is_loaded_as_without_the_fake(tmp_path: Path) -> None:
    missing = str(tmp_path / "client.pem")

    def failure() -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # cert= is deprecated in 0.28
            with pytest.raises(Exception) as caught:  # whatever httpx raises
                httpx.Client(cert=missing)
        return type(caught.value).__name__

    without = failure()
    with FakeQStash():
        assert failure() == without  # not silently given the shared, certificate-less context


def test_tls_environment_is_read_at_each_construction(
    no_tls_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bundle = (
        certifi.contents() if hasattr(certifi, "contents") else Path(certifi.where()).read_text()
    )
    first_cert = bundle[: bundle.index("-----END CERTIFICATE-----") + 26]
    one_ca = tmp_path / "one-ca.pem"
    one_ca.write_text(first_cert)
    with FakeQStash():
        default = context_of(httpx.Client())
        monkeypatch.setenv("SSL_CERT_FILE", str(one_ca))
        from_env = context_of(httpx.Client())
        ignoring_env = context_of(httpx.Client(trust_env=False))
        monkeypatch.delenv("SSL_CERT_FILE")
        default_again = context_of(httpx.Client())
    assert len(from_env.get_ca_certs()) == 1
    assert from_env is not default
    assert ignoring_env is not from_env
    assert len(ignoring_env.get_ca_certs()) == len(default.get_ca_certs()) > 1
    assert default_again is default


@pytest.mark.usefixtures("no_tls_env")
def test_sharing_lasts_while_any_fake_is_active() -> None:
    with FakeQStash():
        with FakeQStash():
            inner = context_of(httpx.Client())
        assert context_of(httpx.Client()) is inner  # the outer fake is still active
    # A pytest session may hold the patch between fakes, idle: nothing is shared.
    assert context_of(httpx.Client()) is not context_of(httpx.Client())
    assert not sslcache.active()


@pytest.mark.usefixtures("no_tls_env")
def test_outside_a_pytest_session_the_patch_goes_with_the_last_fake() -> None:
    held = sslcache.held()
    sslcache.unhold()  # as in a script: no session holds the patch
    try:
        original = httpx.HTTPTransport.__init__
        assert not hasattr(original, "__wrapped__")
        with FakeQStash():
            assert httpx.HTTPTransport.__init__ is not original
        assert httpx.HTTPTransport.__init__ is original
    finally:
        if held:
            sslcache.hold()  # as the session had it (the next fake patches again)


@pytest.mark.usefixtures("no_tls_env")
def test_a_differently_shaped_httpx_gets_todays_behaviour(monkeypatch: pytest.MonkeyPatch) -> None:
    def create_ssl_context(*, ssl_options: Any = None) -> ssl.SSLContext:  # a future signature
        raise AssertionError("never called")

    monkeypatch.setattr(httpx._config, "create_ssl_context", create_ssl_context)
    with FakeQStash():
        # Unpatched (a patch a pytest session held from an earlier fake is taken off).
        assert not hasattr(httpx.AsyncHTTPTransport.__init__, "__wrapped__")
        assert not hasattr(httpx.HTTPTransport.__init__, "__wrapped__")
        assert context_of(httpx.Client()) is not context_of(httpx.Client())


@pytest.mark.usefixtures("no_tls_env")
def test_a_context_that_cannot_be_built_is_left_to_the_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeQStash():
        real = httpx._config.create_ssl_context

        def failing(**kwargs: Any) -> ssl.SSLContext:
            raise OSError("no CA bundle")

        monkeypatch.setattr(httpx._config, "create_ssl_context", failing)
        monkeypatch.setenv("SSL_CERT_DIR", os.fspath(Path(certifi.where()).parent))  # a new key
        client = httpx.Client()  # built by httpx itself, as without the fake
        monkeypatch.setattr(httpx._config, "create_ssl_context", real)
    assert isinstance(context_of(client), ssl.SSLContext)


@pytest.mark.usefixtures("qstash")
def test_the_workflow_sdks_throwaway_clients_share_the_context() -> None:
    # What upstash-workflow's serve() builds on every request.
    first = AsyncQStash(base_url="disabled-client", token="disabled-client")
    second = AsyncQStash(base_url="disabled-client", token="disabled-client")
    assert context_of(first.http._client) is context_of(second.http._client)  # type: ignore[attr-defined]
