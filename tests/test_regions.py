"""Regions: deliveries marked with ``Upstash-Region`` as a multi-region account's are, in
process (``@pytest.mark.qstash(region=...)``) and over the server (``serve --region``), and a
multi-region qstash-js app (``QSTASH_REGION`` and the region's variables, nothing else)
publishing and verifying through the server."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from fastapi import FastAPI, Request, Response
from node_support import NODE_DIR, node_packages, publish_and_run_workflow
from qstash import AsyncQStash, QStash, Receiver

from pytest_qstash import FakeQStash, SettingError
from pytest_qstash.server import ServerProcess
from pytest_qstash.server.processes.node import NodeApp
from pytest_qstash.wire.regions import region_named

APP = "https://app.test"
US_HOST = "https://qstash-us-east-1.upstash.io"
EU_HOST = "https://qstash-eu-central-1.upstash.io"


def region_app(seen: list[dict[str, Any]]) -> FastAPI:
    """Verifies each delivery with the real Receiver and keeps its Upstash-Region."""
    app = FastAPI()
    receiver = Receiver(
        current_signing_key=os.environ["QSTASH_CURRENT_SIGNING_KEY"],
        next_signing_key=os.environ["QSTASH_NEXT_SIGNING_KEY"],
    )

    @app.post("/hook")
    async def hook(request: Request) -> Response:
        body = (await request.body()).decode()
        receiver.verify(
            signature=request.headers["upstash-signature"], body=body, url=f"{APP}/hook"
        )
        seen.append({"body": body, "region": request.headers.get("upstash-region")})
        return Response("ok")

    return app


@pytest.mark.qstash(region="us-east-1")
def test_in_process_deliveries_carry_the_region(qstash: FakeQStash) -> None:
    seen: list[dict[str, Any]] = []
    qstash.mount(APP, region_app(seen))
    # The SDK pointed at the regional host, as a multi-region app's is: still intercepted.
    client = QStash(os.environ["QSTASH_TOKEN"], base_url=US_HOST, retry=False)
    client.message.publish(url=f"{APP}/hook", body="from us")

    assert [d.status for d in qstash.tick()] == [200]
    assert seen == [{"body": "from us", "region": "US-EAST-1"}]
    assert qstash.deliveries[0].headers["Upstash-Region"] == "US-EAST-1"


@pytest.mark.qstash(region="us-east-1")
def test_setting_the_region_on_the_fake_is_refused_and_changes_nothing(
    qstash: FakeQStash,
) -> None:
    """The region is read once, where the fake is built: setting it afterwards says so."""
    seen: list[dict[str, Any]] = []
    qstash.mount(APP, region_app(seen))
    with pytest.raises(SettingError, match=r"'region' is a setting the fake was built with") as e:
        qstash.region = "eu-central-1"  # type: ignore[assignment]
    assert "@pytest.mark.qstash(region=...)" in str(e.value)
    assert isinstance(e.value, AttributeError)  # as a read-only attribute's is
    with pytest.raises(SettingError, match="'strict'"):
        qstash.strict = False  # type: ignore[misc]
    client = QStash(os.environ["QSTASH_TOKEN"], base_url=EU_HOST, retry=False)
    client.message.publish(url=f"{APP}/hook", body="still us")

    assert [d.status for d in qstash.tick()] == [200]
    assert seen == [{"body": "still us", "region": "US-EAST-1"}]
    assert qstash.region == region_named("us-east-1")


@pytest.mark.anyio
@pytest.mark.qstash(region="EU_CENTRAL_1")  # the SDKs' spelling is taken too
async def test_async_sdk_on_the_other_regional_host(qstash: FakeQStash) -> None:
    seen: list[dict[str, Any]] = []
    qstash.mount(APP, region_app(seen))
    client = AsyncQStash(os.environ["QSTASH_TOKEN"], base_url=EU_HOST, retry=False)
    await client.message.publish(url=f"{APP}/hook", body="from eu")

    await qstash.atick()
    assert seen == [{"body": "from eu", "region": "EU-CENTRAL-1"}]


def test_without_a_region_no_header(qstash: FakeQStash) -> None:
    seen: list[dict[str, Any]] = []
    qstash.mount(APP, region_app(seen))
    QStash(os.environ["QSTASH_TOKEN"], retry=False).message.publish(url=f"{APP}/hook", body="x")
    qstash.tick()
    assert seen == [{"body": "x", "region": None}]


@pytest.mark.parametrize("bad", ["mars", "us-west-2", "", 1])
def test_an_unknown_region_is_refused_naming_the_accepted(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)) as refused:
        FakeQStash(region=bad)  # type: ignore[arg-type]
    assert "us-east-1, eu-central-1" in str(refused.value)


def test_region_spellings() -> None:
    for spelling in ("us-east-1", "US_EAST_1", "US-EAST-1", " Us-East-1 "):
        region = region_named(spelling)
        assert (region.name, region.header, region.env_name) == (
            "us-east-1",
            "US-EAST-1",
            "US_EAST_1",
        )


def test_the_command_line_refuses_an_unknown_region() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_qstash", "serve", "--region", "mars"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "pytest-qstash serve: unknown region 'mars': expected one of us-east-1, eu-central-1 "
        "(or US_EAST_1, EU-CENTRAL-1 ...)"
    )


# -- over the server, with qstash-js in multi-region mode ---------------------------------------
@pytest.fixture(scope="module")
def eu_server() -> Any:
    with ServerProcess.start(clock="real", region="eu-central-1") as server:
        yield server


def test_the_server_prints_the_multi_region_variables(eu_server: ServerProcess) -> None:
    env = eu_server.env
    assert env["QSTASH_REGION"] == "EU_CENTRAL_1"
    assert env["EU_CENTRAL_1_QSTASH_URL"] == env["QSTASH_URL"] == eu_server.url
    assert env["EU_CENTRAL_1_QSTASH_TOKEN"] == env["QSTASH_TOKEN"]
    for key in ("CURRENT", "NEXT"):
        assert env[f"EU_CENTRAL_1_QSTASH_{key}_SIGNING_KEY"] == env[f"QSTASH_{key}_SIGNING_KEY"]
    assert not any(name.startswith("US_EAST_1_") for name in env)


def test_a_multi_region_qstash_js_app_publishes_and_verifies(
    eu_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    node_packages()
    # Nothing but the multi-region variables: the single-region ones would hide a miss.
    for name in list(os.environ):
        if "QSTASH" in name:
            monkeypatch.delenv(name)
    regional = {k: v for k, v in eu_server.env.items() if k.startswith(("EU_", "QSTASH_REGION"))}
    with NodeApp.start_script(NODE_DIR / "env_app.mjs", cwd=NODE_DIR, env=regional) as app:
        published, run, received = publish_and_run_workflow(app.url, eu_server, {"n": 1}, "eu")
        assert published["messageId"]
        assert run["workflowRunId"]
    assert {"hook": {"n": 1}, "verified": True, "region": "EU-CENTRAL-1"} in received, app.output
    # The workflow SDK picks the region's client and receiver by the header (and keeps the
    # header out of context.headers).
    assert {"workflow": "hello eu"} in received, app.output
    runs = [r for r in eu_server.runs if r.run_id == run["workflowRunId"]]
    assert [r.state for r in runs] == ["RUN_SUCCESS"]
