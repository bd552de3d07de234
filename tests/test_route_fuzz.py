"""Every route, API and control, driven with generated input: in-process (the server's ASGI
app, which hands API calls to ``FakeQStash.handle``, with headers of any bytes) and over a real
``pytest-qstash serve``. For every request: no 5xx (but 501, "not implemented yet"), an error
answer is JSON with an ``error`` text (not the last-resort guard's, which would hide a bug),
and a refused request changes nothing stored.

Derandomized and bounded: the same examples every run; a failure prints the request that
replays it (``note``) and Hypothesis's falsifying example.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from pytest_qstash.server import ServerProcess
from pytest_qstash.server.control.app import QStashServerApp, ServerSettings
from pytest_qstash.server.control.records import LISTS
from pytest_qstash.wire.api import _TABLE as API_TABLE

TOKEN = "fuzz-token"
KEYS = ("sig_fuzz_current", "sig_fuzz_next")
#: Where each test's clock starts: far from a year's end, as the seeded state needs (a message
#: due in ten years, a yearly cron).
START = "2026-06-01T00:00:00Z"
#: Deliveries go nowhere but loopback: a port bound here for the module's life and never
#: listened on refuses at once (no assumption that a well-known port such as 9 is free).
_SINK_SOCKET = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
_SINK_SOCKET.bind(("127.0.0.1", 0))
SINK = f"http://127.0.0.1:{_SINK_SOCKET.getsockname()[1]}"
STATE_LISTS = ("messages", "dlq", "schedules", "queues", "url_groups", "runs")


def _route_templates() -> list[tuple[str, str]]:
    """(method, path) of every API route, each path parameter as ``{name}``."""
    out = []
    for method, pattern, _ in API_TABLE:
        path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern)
        path = re.sub(r"\(\?:[^)]*\)\?", "", path).replace("/?", "")
        path = re.sub(r"\(\?:([^|)]*)\|[^)]*\)", r"\1", path)  # (?:logs|events): logs
        out.append((method, path))
    return out


API_ROUTES = _route_templates()
CONTROL_ROUTES = [("GET", f"/_qstash/{name}") for name in LISTS] + [
    ("GET", "/_qstash/state"),
    *[
        ("POST", f"/_qstash/{action}")
        for action in (
            "tick",
            "advance",
            "advance_to",
            "drain",
            "fail_next",
            "clear_faults",
            "trigger",
            "unknown",
        )
    ],
]

odd_text = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12
) | st.sampled_from(["", " ", "..", "%", "%zz", "ü", "a/b", "\x00", "\r\n", "9" * 30])
urls = st.sampled_from(
    [
        f"{SINK}/x",
        SINK.replace("http://", "HTTP://") + "/up",
        "http://[::1/x",
        "http://127.0.0.1:99999/",
        "http://127.0.0.1:0/",
        "http://",
        "https://",
        "http://127.0.0.1\x00.x/",
        "http:// /",
        "ftp://127.0.0.1/",
        "http://xn--/",
        "group",
    ]
)
option_names = st.sampled_from(
    [
        "Upstash-Method",
        "Upstash-Delay",
        "Upstash-Not-Before",
        "Upstash-Retries",
        "Upstash-Retry-Delay",
        "Upstash-Timeout",
        "Upstash-Callback",
        "Upstash-Failure-Callback",
        "Upstash-Deduplication-Id",
        "Upstash-Content-Based-Deduplication",
        "Upstash-Redact-Fields",
        "Upstash-Flow-Control-Key",
        "Upstash-Flow-Control-Value",
        "Upstash-Cron",
        "Upstash-Schedule-Id",
        "Upstash-Queue-Name",
        "Upstash-Forward-Name",
        "Upstash-Forward-Transfer-Encoding",
        "Upstash-Forward-Content-Length",
        "Upstash-Forward-Host",
        "Upstash-Callback-Forward-X",
        "Upstash-Workflow-RunId",
        "Upstash-Header-Forward",
        "Content-Type",
    ]
)
option_values = (
    odd_text
    | urls
    | st.sampled_from(["0 0 1 1 *", "1", "-1", "10s", "99999999999999", "true", "pow(2, 99)"])
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | odd_text | urls,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd_text, inner, max_size=3),
    max_leaves=8,
)
control_keys = st.sampled_from(
    ["by", "to", "within", "endpoint", "status", "kind", "times", "url", "body", "headers"]
)
bodies = st.one_of(
    st.just(b""),
    st.binary(max_size=16),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(control_keys, json_values, max_size=3).map(lambda v: json.dumps(v).encode()),
    st.lists(
        st.fixed_dictionaries(
            {"destination": urls},
            optional={"headers": st.dictionaries(option_names, option_values, max_size=2)},
        ),
        max_size=2,
    ).map(lambda v: json.dumps(v).encode()),
    st.just(b"[" * 5000 + b"]" * 5000),
    st.just(b'{"a":' * 5000 + b"1" + b"}" * 5000),
)


@st.composite
def requests(draw: st.DrawFn, routes: list[tuple[str, str]], wide_headers: bool) -> httpx.Request:
    method, template = draw(st.sampled_from(routes))
    if draw(st.booleans()):
        method = draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]))

    def fill(match: re.Match[str]) -> str:
        if match.group(1) == "destination":  # sent as is, but what a path cannot hold
            return quote(draw(urls), safe="/:[]@!$&'()*+,;=?%")
        return quote(draw(odd_text), safe="") or "x"

    path = re.sub(r"\{(\w+)\}", fill, template)
    headers: list[tuple[bytes, bytes]] = []
    auth = draw(st.sampled_from(["good"] * 6 + ["bad", "none", "scheme"]))
    if auth == "good":
        headers.append((b"authorization", f"Bearer {TOKEN}".encode()))
    elif auth == "bad":
        headers.append((b"authorization", b"Bearer " + draw(odd_text).encode()))
    elif auth == "scheme":
        headers.append((b"authorization", f"Basic {TOKEN}".encode()))
    for name, value in draw(st.lists(st.tuples(option_names, option_values), max_size=3)):
        raw = value.encode()
        if not wide_headers:  # a real client sends no control characters
            raw = bytes(b for b in raw if 0x20 <= b < 0x7F or b >= 0x80 or b == 9).strip()
        headers.append((name.encode(), raw))
    query = draw(st.sampled_from(["", "?count=x", "?cursor=-1", "?label=a,b", "?zz=1"]))
    return httpx.Request(
        method, f"http://fuzz.test{path}{query}", headers=headers, content=draw(bodies)
    )


BASE = "http://fuzz.test"
#: Control routes that move the clock, delivering on the way.
CLOCK_MOVES = {f"/_qstash/{name}" for name in ("tick", "advance", "advance_to", "drain")}


def seed_state(call: Callable[[httpx.Request], httpx.Response]) -> None:
    """What every example must leave intact when refused: one of each resource."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for method, path, headers, body in [
        ("POST", "/v2/queues", {}, json.dumps({"queueName": "kept"}).encode()),
        ("POST", "/v2/topics/group/endpoints", {}, json.dumps({"endpoints": [{"url": SINK}]})),
        ("POST", f"/v2/publish/{SINK}/later", {"Upstash-Delay": "3650d"}, b"kept"),
        ("POST", f"/v2/schedules/{SINK}/s", {"Upstash-Cron": "0 0 1 1 *"}, b""),
    ]:
        request = httpx.Request(
            method, f"http://fuzz.test{path}", headers={**auth, **headers}, content=body
        )
        assert call(request).status_code == 200


class Harness:
    """Sends requests and checks each answer; remembers what was stored after the last
    accepted one (only an accepted request may change it)."""

    def call(self, request: httpx.Request) -> httpx.Response:
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        return {
            name: self.call(httpx.Request("GET", f"{BASE}/_qstash/{name}", headers=auth)).json()
            for name in STATE_LISTS
        }

    def fresh(self) -> None:
        """Back to the seeded state at ``START``: each route's examples then meet the same
        state whichever routes' examples ran before them (a DELETE, a clock moved to 9999)."""
        auth = {"Authorization": f"Bearer {TOKEN}"}
        reset = json.dumps({"start": START}).encode()
        answer = self.call(
            httpx.Request("POST", f"{BASE}/_qstash/reset", headers=auth, content=reset)
        )
        assert answer.status_code == 200, answer.text
        seed_state(self.call)
        self.stored = self.snapshot()

    def check(self, request: httpx.Request) -> None:
        note(f"replay: {request.method} {request.url} headers={request.headers.raw!r}")
        note(f"body={request.content[:200]!r}")
        auth = {"Authorization": f"Bearer {TOKEN}"}
        # A fault an earlier example armed (fail_next) would answer this one: disarm it.
        self.call(httpx.Request("POST", f"{BASE}/_qstash/clear_faults", headers=auth))
        response = self.call(request)
        status = response.status_code
        if status >= 400 and request.url.path.rstrip("/") in CLOCK_MOVES:
            # A move refused part way (a delivery loop stopped, say) has delivered what fell
            # due before it: what is stored changed by deliveries, not by the refused input.
            self.stored = self.snapshot()
        if status < 400:
            if request.method != "GET":  # a read changes nothing: no need to look again
                self.stored = self.snapshot()
            return
        if status == 501:
            assert "not implemented" in response.json()["error"]
            return
        assert status < 500, response.text
        if request.method != "HEAD":  # an answer to HEAD has no body, by HTTP
            error = response.json()["error"]
            assert isinstance(error, str)
            assert error
            assert "a bug in pytest-qstash" not in error  # answered by the last-resort guard
        assert self.snapshot() == self.stored, "a refused request changed what was stored"


#: Examples per route (in-process; over HTTP, each costs a round trip or several).
IN_PROCESS_EXAMPLES = 10
SERVER_EXAMPLES = 3
ROUTES = API_ROUTES + CONTROL_ROUTES
FUZZ = settings(
    max_examples=IN_PROCESS_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# -- in-process: the server's ASGI app, driven on one event loop -----------------------------
class InProcess(Harness):
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.app = QStashServerApp(ServerSettings(TOKEN, *KEYS, clock="virtual"))
        transport = httpx.ASGITransport(app=self.app)
        self.client = httpx.AsyncClient(transport=transport, base_url="http://fuzz.test")

    def call(self, request: httpx.Request) -> httpx.Response:
        return self.loop.run_until_complete(self.client.send(request))

    def snapshot(self) -> dict[str, Any]:
        # What the control lists would answer, read without a request each.
        fake = self.app.fake
        return {
            name: [LISTS[name][0](item) for item in getattr(fake, name)] for name in STATE_LISTS
        }

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.run_until_complete(self.app.shutdown())
        self.loop.close()


@pytest.fixture(scope="module")
def in_process() -> Iterator[InProcess]:
    harness = InProcess()
    yield harness
    harness.close()


@pytest.mark.parametrize("route", ROUTES, ids=" ".join)
def test_every_route_in_process(in_process: InProcess, route: tuple[str, str]) -> None:
    @FUZZ
    @given(request=requests([route], wide_headers=True))
    def examples(request: httpx.Request) -> None:
        in_process.check(request)

    in_process.fresh()
    examples()


# -- over a real server -------------------------------------------------------------------
class OverHttp(Harness):
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.client = httpx.Client(base_url=server.url, timeout=30)

    def call(self, request: httpx.Request) -> httpx.Response:
        url = self.server.url + request.url.raw_path.decode("ascii")
        sent = httpx.Request(
            request.method,
            url,
            headers=[(k, v) for k, v in request.headers.raw if k != b"host"],
            content=request.content,
        )
        return self.client.send(sent)


@pytest.fixture(scope="module")
def over_http() -> Iterator[OverHttp]:
    with ServerProcess.start(
        clock="virtual",
        args=[
            "--token",
            TOKEN,
            "--current-signing-key",
            KEYS[0],
            "--next-signing-key",
            KEYS[1],
        ],
    ) as server:
        harness = OverHttp(server)
        yield harness
        harness.client.close()


@pytest.mark.parametrize("route", ROUTES, ids=" ".join)
def test_every_route_over_the_server(over_http: OverHttp, route: tuple[str, str]) -> None:
    @settings(FUZZ, max_examples=SERVER_EXAMPLES)
    @given(request=requests([route], wide_headers=False))
    def examples(request: httpx.Request) -> None:
        # The client itself may refuse to send it: then nothing reached the server.
        with contextlib.suppress(httpx.LocalProtocolError):
            over_http.check(request)

    over_http.fresh()
    examples()
