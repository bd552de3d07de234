"""The dashboard ``pytest-qstash serve`` shows in a browser, under ``/_qstash/dashboard``.

One static page and its script (``static/``, shipped in the wheel, nothing fetched from
elsewhere: it works offline). The script polls ``data``, a snapshot of every inspection list
the control API serves (``records.LISTS``, so a list added there shows up here too), and
posts the buttons' actions to ``act/<action>``, which runs them through the control API or
the QStash API exactly as a client's request would run.

The token guards it as it guards the API: the link the server prints carries it once
(``?qstash_token=``); the answer puts it in an HttpOnly, SameSite=Strict cookie and sends the
browser on to the bare address, so the token leaves the address bar and the history. Actions
also need a header a cross-site form cannot send.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, unquote

import httpx

from .. import report
from . import records

if TYPE_CHECKING:
    from ..fake import FakeQStash


class QStashServerApp(Protocol):
    """What the dashboard asks of the server app it sits in (``app.py``'s, which builds the
    dashboard: a Protocol here keeps the two modules out of an import cycle)."""

    fake: FakeQStash

    @property
    def resets(self) -> int: ...

    def _state(self) -> dict[str, Any]: ...

    async def _control(self, request: httpx.Request, action: str) -> httpx.Response: ...

    def _api(self, request: httpx.Request) -> httpx.Response: ...


DASHBOARD_PATH = "/_qstash/dashboard"
#: The cookie's name, with the server's port: cookies do not tell ports apart, and two servers
#: on one host (one per pytest-xdist worker, say) must not sign each other's pages out.
COOKIE = "qstash_dashboard_{port}"
#: The header every action carries (set by the page's script; a plain form cannot set it).
ACTION_HEADER = "x-qstash-dashboard"
#: The newest items of each list a snapshot carries (the total is given beside them).
LIST_LIMIT = 200
#: Lists the page shows inside others (each message carries its attempts): only counted.
_COUNTED_ONLY = frozenset({"deliveries"})

_STATIC_TYPES = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}
_SECURITY_HEADERS = {
    "content-security-policy": (
        # Inline style attributes place the timeline's bars; every value in them is a number.
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def dashboard_link(base_url: str, token: str) -> str:
    """The address to open: it carries the token once."""
    return f"{base_url}{DASHBOARD_PATH}?qstash_token={quote(token, safe='')}"


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static").joinpath(name).read_bytes()


class Dashboard:
    """The dashboard's routes, over one server app (whose fake changes on every reset)."""

    def __init__(self, app: QStashServerApp) -> None:
        self.app = app
        self._actions: dict[str, Callable[[dict[str, Any]], httpx.Request]] = {
            "tick": lambda body: self._control_request("tick", {}),
            "advance": lambda body: self._control_request("advance", {"by": body.get("by")}),
            "advance_to": lambda body: self._control_request("advance_to", {"to": body.get("to")}),
            "redeliver": lambda body: self._control_request(
                "redeliver", {"message_id": body.get("message_id")}
            ),
            "retry_dlq": lambda body: self._api_request(
                "POST", f"/v2/dlq/retry/{quote(_named(body, 'dlq_id'), safe='')}"
            ),
        }

    async def handle(self, request: httpx.Request, rest: str) -> httpx.Response:
        """Answer a request for ``DASHBOARD_PATH + rest``."""
        rest = rest.strip("/")
        if request.method == "GET" and rest == "":
            return self._page(request)
        if not self._signed_in(request):
            return _error(401, "not signed in: open the dashboard link pytest-qstash serve printed")
        if request.method == "GET" and rest.startswith("static/"):
            name = rest.removeprefix("static/")
            if name not in _STATIC_TYPES:
                return _error(404, f"no such file: {name}")
            return _answer(200, _static(name), _STATIC_TYPES[name])
        if request.method == "GET" and rest == "data":
            return _json(200, self.snapshot())
        if request.method == "POST" and rest.startswith("act/"):
            return await self._act(request, rest.removeprefix("act/"))
        return _error(404, f"{request.method} {DASHBOARD_PATH}/{rest} is not a dashboard address")

    # -- signing in -------------------------------------------------------------------------
    def _valid(self, token: str | None) -> bool:
        return token is not None and secrets.compare_digest(
            token.encode(), self.app.fake.token.encode()
        )

    def _signed_in(self, request: httpx.Request) -> bool:
        return self._valid(_cookie(request, _cookie_name(request)))

    def _page(self, request: httpx.Request) -> httpx.Response:
        given = request.url.params.get("qstash_token")
        if given is not None:
            if not self._valid(given):
                return _error(401, "invalid token: it is not this server's QSTASH_TOKEN")
            response = _answer(303, b"", "text/plain")
            response.headers["location"] = DASHBOARD_PATH
            response.headers["set-cookie"] = (
                f"{_cookie_name(request)}={quote(given, safe='')}; Path={DASHBOARD_PATH}; "
                "HttpOnly; SameSite=Strict"
            )
            return response
        if not self._signed_in(request):
            # A person reads this one in the browser: plain words, not JSON.
            return _answer(
                401,
                b"Not signed in: open the dashboard link pytest-qstash serve printed "
                b"(it ends in ?qstash_token=...).\n",
                "text/plain; charset=utf-8",
            )
        return _answer(200, _static("dashboard.html"), "text/html; charset=utf-8")

    # -- what the page shows ----------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The clock and every inspection list (its newest ``LIST_LIMIT`` items, newest
        first, and its total), and each failing workflow run's failing step."""
        fake = self.app.fake
        lists: dict[str, Any] = {}
        for name, (write, _kind) in records.LISTS.items():
            items = list(getattr(fake, name))
            shown = [] if name in _COUNTED_ONLY else items[-LIST_LIMIT:]
            lists[name] = {
                "total": len(items),
                "items": [write(item) for item in reversed(shown)],
            }
        failing = {}
        for run in fake.store.workflows:
            found = report.failing_step(fake.store, run)
            if found is not None:
                message, words = found
                last = message.deliveries[-1]
                failing[run.run_id] = {
                    "message_id": message.message_id,
                    "step": words,
                    "attempts": len(message.deliveries),
                    "delivery": records.delivery(last),
                }
        return {
            "state": self.app._state(),
            "resets": self.app.resets,
            "lists": lists,
            "failing_steps": failing,
        }

    # -- the buttons ------------------------------------------------------------------------
    async def _act(self, request: httpx.Request, action: str) -> httpx.Response:
        if request.headers.get(ACTION_HEADER) != "1":
            return _error(403, f"a dashboard action needs the {ACTION_HEADER} header")
        make = self._actions.get(action)
        if make is None:
            known = ", ".join(self._actions)
            return _error(404, f"no dashboard action {action!r}; there are: {known}")
        try:
            body = json.loads(request.content or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _error(400, "expected a JSON object as the body")
        try:
            inner = make(body)
        except ValueError as exc:
            return _error(400, str(exc))
        if inner.url.path.startswith("/_qstash/"):
            action_path = inner.url.path.removeprefix("/_qstash/")
            return await self.app._control(inner, action_path)
        return self.app._api(inner)

    def _control_request(self, action: str, body: dict[str, Any]) -> httpx.Request:
        return httpx.Request(
            "POST",
            f"http://dashboard/_qstash/{action}",
            headers=self._auth(),
            content=json.dumps(body).encode(),
        )

    def _api_request(self, method: str, path: str) -> httpx.Request:
        return httpx.Request(method, f"http://dashboard{path}", headers=self._auth())

    def _auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.app.fake.token}"}


def _named(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"missing {name!r} in the JSON body: expected a non-empty string")
    return value


def _cookie_name(request: httpx.Request) -> str:
    return COOKIE.format(port=request.url.port or 80)


def _cookie(request: httpx.Request, name: str) -> str | None:
    for header in request.headers.get_list("cookie"):
        for part in header.split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return unquote(value)
    return None


def _answer(status: int, content: bytes, content_type: str) -> httpx.Response:
    return httpx.Response(
        status, content=content, headers={"content-type": content_type, **_SECURITY_HEADERS}
    )


def _json(status: int, value: Any) -> httpx.Response:
    return _answer(status, json.dumps(value).encode(), "application/json")


def _error(status: int, message: str) -> httpx.Response:
    return _json(status, {"error": message})
