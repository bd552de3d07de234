"""httpx2 (the httpx fork): its clients are answered by the fake with the same guarantees as
httpx's, the network guard covers httpcore2, and a canary watches the installed SDKs for an
HTTP library the fake does not intercept."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import os
import sys
from pathlib import Path

import pytest
from ci_requirements import BY_DESIGN
from inner_pytest import run_inner

from pytest_qstash import FakeQStash
from pytest_qstash.intercept import httpx2_support
from pytest_qstash.intercept.httpx2_support import HTTPX2_INSTALLED

if sys.version_info < (3, 11):
    pytest.skip(BY_DESIGN.httpx2_python, allow_module_level=True)

# Required from Python 3.11 (the test extra installs httpx2 and pytest-httpx2 there).
import httpx2

PUBLISH = "https://qstash.upstash.io/v2/publish/https://app.test/jobs"


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {os.environ['QSTASH_TOKEN']}"}


def test_sync_and_async_httpx2_publishes_are_answered_by_the_fake(qstash: FakeQStash) -> None:
    answer = httpx2.post(PUBLISH, headers=auth(), json={"n": 1})
    assert isinstance(answer, httpx2.Response)
    assert answer.status_code == 200
    message_id = answer.json()["messageId"]

    async def publish() -> str:
        async with httpx2.AsyncClient() as client:
            reply = await client.post(PUBLISH, headers=auth(), content=b"two")
            return str(reply.json()["messageId"])

    second = asyncio.run(publish())
    assert [(m.message_id, m.body) for m in qstash.messages] == [
        (message_id, '{"n":1}'),
        (second, "two"),
    ]


def test_httpx2_errors_are_httpx2_types(qstash: FakeQStash) -> None:
    assert httpx2.post(PUBLISH, headers={}).status_code == 401
    qstash.fail_next(kind="network")
    with pytest.raises(httpx2.ConnectError):
        httpx2.post(PUBLISH, headers=auth(), content=b"x")
    assert qstash.messages == []


def test_regional_hosts_and_qstash_url(qstash: FakeQStash, monkeypatch: pytest.MonkeyPatch) -> None:
    regional = PUBLISH.replace("qstash.upstash.io", "qstash-eu-central-1.upstash.io")
    assert httpx2.post(regional, headers=auth(), content=b"a").status_code == 200
    monkeypatch.setenv("QSTASH_URL", "https://gateway.test/qstash")
    proxied = "https://gateway.test/qstash/v2/publish/https://app.test/b"
    assert httpx2.post(proxied, headers=auth(), content=b"b").status_code == 200
    assert [m.url for m in qstash.messages] == ["https://app.test/jobs", "https://app.test/b"]


def test_other_requests_reach_the_users_pytest_httpx2_mock(
    qstash: FakeQStash, request: pytest.FixtureRequest
) -> None:
    httpx2_mock = request.getfixturevalue("httpx2_mock")  # the user's own mock fixture
    route = httpx2_mock.get("https://partner.test/rates").respond(200, json={"eur": 1})
    assert httpx2.get("https://partner.test/rates").json() == {"eur": 1}
    assert httpx2.post(PUBLISH, headers=auth(), content=b"x").status_code == 200
    assert route.call_count == 1
    assert len(httpx2_mock.calls) == 1  # the QStash call never reached the user's mock
    assert len(qstash.messages) == 1


def test_the_fake_intercepts_httpx2_only_while_active() -> None:
    client = httpx2.Client()
    url = httpx2.URL(PUBLISH)
    with FakeQStash():
        assert client._transport_for_url(url) is not client._transport
        with FakeQStash():  # nested: the newest answers; the outer one still intercepts after
            pass
        assert client._transport_for_url(url) is not client._transport
    # Between fakes a pytest session keeps the patch, idle: the client's own transport.
    assert client._transport_for_url(url) is client._transport


def test_outside_a_pytest_session_the_patch_goes_with_the_last_fake() -> None:
    held = httpx2_support.held()
    httpx2_support.unhold()  # as in a script: no session holds the patch
    try:
        original = httpx2.Client._transport_for_url
        with FakeQStash():
            assert httpx2.Client._transport_for_url is not original
            with FakeQStash():
                pass
            assert httpx2.Client._transport_for_url is not original
        assert httpx2.Client._transport_for_url is original
    finally:
        if held:
            httpx2_support.hold()


def test_the_newest_fake_answers_httpx2() -> None:
    with FakeQStash() as outer:
        with FakeQStash() as inner:
            httpx2.post(PUBLISH, headers=auth(), content=b"x")
        httpx2.post(PUBLISH, headers=auth(), content=b"y")
    assert [m.body for m in inner.messages] == ["x"]
    assert [m.body for m in outer.messages] == ["y"]


def test_the_network_guard_stops_httpx2_calls_outside_the_fake(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os

        import httpx2

        URL = "https://qstash.upstash.io/v2/publish/https://app.test/x"


        def test_outside():
            answer = httpx2.post(URL, headers={"Authorization": "Bearer x"}, content=b"x")
            assert answer.status_code == 503
            assert "reached QStash while no fake was active" in answer.json()["error"]


        def test_other_hosts_are_not_the_guards_business():
            import respx

            with respx.mock(using="httpcore2") as mock:
                mock.get("https://partner.test/").respond(204)
                assert httpx2.get("https://partner.test/").status_code == 204
        """
    )
    result = run_inner(pytester, "-W", "error::pytest_qstash.QStashOutsideFakeWarning", "-rA")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_outside*", "*QStashOutsideFakeWarning*POST /v2/publish*"]
    )


# -- the canary ------------------------------------------------------------------------------
#: HTTP client libraries the fake does not intercept (it answers httpx and httpx2 clients).
UNINTERCEPTED = {
    "requests",
    "urllib3",
    "aiohttp",
    "niquests",
    "pycurl",
    "httplib2",
    "treq",
    "urllib.request",
    "http.client",
    "httpcore",
    "httpcore2",
    "tornado.httpclient",
}
UPSTASH_SDKS = ("qstash", "upstash_workflow", "django_qstash")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("sdk", UPSTASH_SDKS)
def test_canary_installed_sdks_use_only_http_libraries_the_fake_intercepts(sdk: str) -> None:
    spec = importlib.util.find_spec(sdk)
    assert spec is not None, f"{sdk} is not installed (the test extra installs it)"
    assert spec.origin is not None
    root = Path(spec.origin).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for name in imported_modules(path):
            library = next(
                (lib for lib in UNINTERCEPTED if name == lib or name.startswith(f"{lib}.")), None
            )
            if library is not None:
                found.append(f"{path.relative_to(root.parent)} imports {name}")
    assert not found, (
        f"the installed {sdk} imports an HTTP library pytest-qstash does not intercept (it "
        "answers httpx and httpx2 clients only): its QStash calls would not reach the fake. "
        "Intercept that library before releasing:\n  " + "\n  ".join(sorted(set(found)))
    )


def test_canary_detects_an_unintercepted_library(tmp_path: Path) -> None:
    module = tmp_path / "client.py"
    module.write_text("import httpx\nfrom aiohttp import ClientSession\nimport urllib.parse\n")
    assert imported_modules(module) == {
        "httpx",
        "aiohttp",
        "aiohttp.ClientSession",
        "urllib.parse",
    }


def test_httpx2_support_knows_httpx2_is_installed() -> None:
    assert HTTPX2_INSTALLED


def test_an_unmounted_delivery_goes_to_the_users_httpx2_mock(
    qstash: FakeQStash, request: pytest.FixtureRequest
) -> None:
    httpx2_mock = request.getfixturevalue("httpx2_mock")
    route = httpx2_mock.post("https://partner.test/hook").respond(202, text="queued")
    httpx2.post("https://qstash.upstash.io/v2/publish/https://partner.test/hook", headers=auth())

    [delivery] = qstash.tick()

    assert (delivery.status, delivery.response_body) == (202, "queued")
    assert route.call_count == 1
    assert route.calls.last.request.headers["Upstash-Signature"]


def test_an_unmounted_delivery_no_httpx2_route_matches_is_unrouted(
    qstash: FakeQStash, request: pytest.FixtureRequest
) -> None:
    from pytest_qstash import UnroutedDeliveryError

    httpx2_mock = request.getfixturevalue("httpx2_mock")
    httpx2_mock.get("https://partner.test/other").respond(200)
    httpx2.post("https://qstash.upstash.io/v2/publish/https://partner.test/hook", headers=auth())
    with pytest.raises(UnroutedDeliveryError):
        qstash.tick()
    httpx2.get("https://partner.test/other")  # the mock's route is used, as the user meant
