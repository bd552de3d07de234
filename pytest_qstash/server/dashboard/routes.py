"""The dashboard ``pytest-qstash serve`` shows in a browser, under ``/_qstash/dashboard``.

One static page and its script (``static/``, shipped in the wheel, nothing fetched from
elsewhere: it works offline). The script polls ``data``: the clock, each inspection list's
count (``records.LISTS``, so a list added there shows up here too) and one page of the list
on screen, searched and filtered on the server, with bodies clipped (``dashboard_views``).
A poll names the version it last saw, and items that have not changed since come back as
their key alone. ``item`` answers one item whole, with what links to it. The buttons post
their actions to ``act/<action>``, which runs them through the control API or the QStash API
exactly as a client's request would run.

The token guards it as it guards the API: the link the server prints carries it once
(``?qstash_token=``); the answer puts it in an HttpOnly, SameSite=Strict cookie and sends the
browser on to the bare address, so the token leaves the address bar and the history. Actions
also need a header a cross-site form cannot send.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol
from urllib.parse import quote, unquote

import httpx

from ...engine.workflows import WorkflowRun
from ...testing import report
from ...testing.fake import FakeQStash
from ..control import records
from ..control.verbs import VERBS, Verb
from ..runner.holdback import Holdback
from . import links as dashboard_links
from . import views as dashboard_views

DASHBOARD_PATH = "/_qstash/dashboard"
#: The cookie's name, with the server's port: cookies do not tell ports apart, and two servers
#: on one host (one per pytest-xdist worker, say) must not sign each other's pages out.
COOKIE = "qstash_dashboard_{port}"
#: The header every action carries (set by the page's script; a plain form cannot set it).
ACTION_HEADER = "x-qstash-dashboard"
#: Items on one page of a list.
PAGE_SIZE = 50
#: The longest search text taken.
MAX_SEARCH = 200
#: Searches whose results per item are remembered (a few tabs, a few searches each).
_SEARCHES_REMEMBERED = 8
_SEARCHED_FIELDS_FIXED = frozenset({"messages", "dlq", "events", "runs"})
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


class Host(Protocol):
    """What the dashboard needs of the server app it is part of (``app.QStashServerApp``)."""

    @property
    def fake(self) -> FakeQStash: ...

    @property
    def resets(self) -> int: ...

    def state(self) -> dict[str, Any]: ...

    async def control(self, request: httpx.Request, action: str) -> httpx.Response: ...

    def api(self, request: httpx.Request) -> httpx.Response: ...

    @property
    def holdback(self) -> Holdback: ...


class Dashboard:
    """The dashboard's routes, over one server app (whose fake changes on every reset)."""

    def __init__(self, app: Host) -> None:
        self.app = app
        #: Tells this server's versions from another's (a page left open across a restart).
        self._instance = secrets.token_hex(4)
        self._version = 0
        #: Each item a poll carried: the digest of its row and the version it changed at.
        self._seen: dict[str, tuple[str, int]] = {}
        self._resets_seen = app.resets
        self._searched: dict[tuple[str, str], dict[str, bool]] = {}
        # The control verbs with a button (``verbs.VERBS``), and one QStash API call.
        self._actions: dict[str, Callable[[dict[str, Any]], httpx.Request]] = {
            verb.name: self._verb_request(verb) for verb in VERBS.values() if verb.dashboard
        }
        self._actions.update(
            retry_dlq=lambda body: self._api_request(
                "POST", f"/v2/dlq/retry/{quote(_named(body, 'dlq_id'), safe='')}"
            ),
        )

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
            try:
                return _json(200, self.poll(_Query.read(request.url.params)))
            except ValueError as exc:
                return _error(400, str(exc))
        if request.method == "GET" and rest == "item":
            return self._item(request.url.params.get("list", ""), request.url.params.get("id", ""))
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
    def poll(self, query: _Query) -> dict[str, Any]:
        """The clock, every list's count, and one page of ``query.list``: the items that
        changed since ``query.since`` whole (bodies clipped), the others as their key."""
        fake = self.app.fake
        if self._resets_seen != self.app.resets:  # a new store: nothing seen is current
            self._resets_seen = self.app.resets
            self._seen.clear()
            self._searched.clear()
        counts = {}
        chosen: list[Any] = []
        for name in records.LISTS:
            if name in _COUNTED_ONLY:
                counts[name] = len(fake.deliveries)
                continue
            items = getattr(fake, name)
            counts[name] = len(items)
            if name == query.list:
                chosen = list(items)
        shown = dashboard_views.view(query.list)
        state_of = list(map(shown.state_of, chosen))
        states = Counter(state for state in state_of if state is not None)
        needle = query.search.lower()
        first = query.page * PAGE_SIZE
        page: list[tuple[int, Any]]
        if not needle and not query.state:  # the common case: a slice, newest first
            newest = len(chosen) - 1
            page = [
                (position, chosen[position])
                for position in range(newest - first, max(-1, newest - first - PAGE_SIZE), -1)
            ]
            matched_count = len(chosen)
        else:
            matched = self._matching(query, shown, chosen, state_of, needle)
            page = matched[first : first + PAGE_SIZE]
            matched_count = len(matched)
        since = self._since(query.since)
        changed = False
        rows = []
        for position, item in page:
            row = self._row(query.list, shown, item)
            # Items without an id of their own (log entries) are known by their place: the
            # log only grows.
            key = shown.key_of(item) if shown.key_of is not None else f"#{position}"
            digest = _digest(row)
            seen = self._seen.get(f"{query.list}/{key}")
            if seen is None or seen[0] != digest:
                if not changed:
                    self._version += 1
                    changed = True
                self._seen[f"{query.list}/{key}"] = seen = (digest, self._version)
            if since is not None and seen[1] <= since:
                rows.append({"key": key, "same": True})
            else:
                rows.append({"key": key, **row})
        opened = None
        if query.open:
            found = self._find(query.list, query.open)
            opened = {
                "id": query.open,
                "found": found is not None,
                "digest": None if found is None else _digest(self._row(query.list, shown, found)),
            }
        return {
            "version": f"{self._instance}.{self._version}",
            "state": self.app.state(),
            # What a server holding a loaded export did not send (``runner/holdback.py``).
            "held": [held.as_dict() for held in self.app.holdback.held],
            "resets": self.app.resets,
            "counts": counts,
            "list": {
                "name": query.list,
                "total": len(chosen),
                "matched": matched_count,
                "page": query.page,
                "page_size": PAGE_SIZE,
                "states": states,
                "items": rows,
            },
            "open": opened,
        }

    def _matching(
        self,
        query: _Query,
        shown: dashboard_views.View,
        chosen: list[Any],
        state_of: list[str | None],
        needle: str,
    ) -> list[tuple[int, Any]]:
        """The items (and their places) the state filter and the search let through, newest
        first."""
        # Only where what the search reads never changes (a schedule's URL may).
        remember = needle and query.list in _SEARCHED_FIELDS_FIXED
        searched = self._search_memo(query.list, needle) if remember else {}
        matched = []
        for position in range(len(chosen) - 1, -1, -1):
            if query.state and state_of[position] != query.state:
                continue
            item = chosen[position]
            if needle:
                key = shown.key_of(item) if shown.key_of is not None else f"#{position}"
                hit = searched.get(key)
                if hit is None:
                    hit = searched[key] = dashboard_views.matches(shown, item, needle)
                if not hit:
                    continue
            matched.append((position, item))
        return matched

    def _search_memo(self, name: str, needle: str) -> dict[str, bool]:
        """Whether each item matched ``needle`` before: what the search looks at (ids, URLs,
        labels, bodies) never changes, so a tab polling one search each second looks only at
        the items added since. The last few searches are remembered."""
        memo = self._searched.pop((name, needle), None)
        if memo is None:
            memo = {}
            while len(self._searched) >= _SEARCHES_REMEMBERED:
                del self._searched[next(iter(self._searched))]
        self._searched[(name, needle)] = memo  # now the newest
        return memo

    def _since(self, version: str) -> int | None:
        instance, _, number = version.partition(".")
        if instance != self._instance or not number.isdigit():
            return None  # another server (or none given): everything is new to this page
        return int(number)

    def _row(self, name: str, shown: dashboard_views.View, item: Any) -> dict[str, Any]:
        row = shown.row(item)
        if name == "runs":
            row["failing"] = self._failing(item)
        return row

    def _failing(self, run: WorkflowRun) -> dict[str, Any] | None:
        found = report.failing_step(self.app.fake.store, run)
        if found is None:
            return None
        message, words = found
        last = message.deliveries[-1]
        return {
            "message_id": message.message_id,
            "step": words,
            "attempts": len(message.deliveries),
            "status": last.status,
            "error": dashboard_views.clip_text(last.error),
            "at": records.iso_time(last.at),
            "response_body": dashboard_views.clip_bytes(last.response_content)[0],
        }

    def _find(self, name: str, key: str) -> Any:
        shown = dashboard_views.VIEWS.get(name)
        if shown is None or shown.key_of is None:
            return None
        key_of = shown.key_of
        return next((item for item in getattr(self.app.fake, name) if key_of(item) == key), None)

    def _item(self, name: str, key: str) -> httpx.Response:
        """One item whole (its bodies too), and the items it links to."""
        if name not in dashboard_views.VIEWS or dashboard_views.VIEWS[name].key_of is None:
            pages = [n for n, v in dashboard_views.VIEWS.items() if v.key_of is not None]
            return _error(
                400, f"no list {name!r} with pages of its own; there are: {', '.join(pages)}"
            )
        item = self._find(name, key)
        if item is None:
            return _error(404, f"no {records.LISTS[name][1]} {key!r} (a reset forgets everything)")
        write, _kind = records.LISTS[name]
        answer: dict[str, Any] = {"list": name, "id": key, "item": write(item)}
        answer["links"] = dashboard_links.links(self.app.fake, name, item)
        if name == "runs":
            answer["failing"] = self._failing(item)
        return _json(200, answer)

    # -- the buttons ------------------------------------------------------------------------
    async def _act(self, request: httpx.Request, action: str) -> httpx.Response:
        if request.headers.get(ACTION_HEADER) != "1":
            return _error(403, f"a dashboard action needs the {ACTION_HEADER} header")
        make = self._actions.get(action)
        if make is None:
            known = ", ".join(self._actions)
            return _error(404, f"no dashboard action {action!r}; there are: {known}")
        try:
            body = json.loads(request.content or b"{}", parse_constant=_not_json)
        except (ValueError, RecursionError):  # nested too deep, NaN, not JSON at all
            body = None
        if not isinstance(body, dict):
            return _error(400, "expected a JSON object (no NaN or Infinity) as the body")
        try:
            inner = make(body)
        except ValueError as exc:
            return _error(400, str(exc))
        if inner.url.path.startswith("/_qstash/"):
            action_path = inner.url.path.removeprefix("/_qstash/")
            return await self.app.control(inner, action_path)
        return self.app.api(inner)

    def _verb_request(self, verb: Verb) -> Callable[[dict[str, Any]], httpx.Request]:
        def request(body: dict[str, Any]) -> httpx.Request:
            return self._control_request(
                verb.name,
                {
                    arg.name: _named(body, arg.name) if arg.required else body.get(arg.name)
                    for arg in verb.args
                },
            )

        return request

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


def _digest(row: dict[str, Any]) -> str:
    return hashlib.blake2b(json.dumps(row).encode(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class _Query:
    """What one poll asks for: a page of one list, searched and filtered."""

    list: str = "messages"
    search: str = ""
    state: str = ""
    page: int = 0
    since: str = ""
    #: The item the page has open: the poll says when its row changed.
    open: str = ""

    @classmethod
    def read(cls, params: httpx.QueryParams) -> _Query:
        name = params.get("list", "messages")
        if name not in records.LISTS or name in _COUNTED_ONLY:
            shown = [n for n in records.LISTS if n not in _COUNTED_ONLY]
            raise ValueError(f"no list {name!r}; there are: {', '.join(shown)}")
        page = params.get("page", "0")
        if not page.isdigit() or len(page) > 9:
            raise ValueError(f"invalid page {page!r}: expected a whole number from 0")
        search = params.get("q", "")
        if len(search) > MAX_SEARCH:
            raise ValueError(f"the search text is {len(search)} characters: at most {MAX_SEARCH}")
        return cls(
            name,
            search,
            params.get("state", "")[:MAX_SEARCH],
            int(page),
            params.get("since", "")[:MAX_SEARCH],
            params.get("open", "")[:MAX_SEARCH],
        )


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


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
