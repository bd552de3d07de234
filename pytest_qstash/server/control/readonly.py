"""``serve --read-only``: which requests a read-only server answers, decided for every request
before it is routed (``QStashServerApp.__call__``), never by the handlers.

It serves a state (a loaded export, a data dir's) to be read: the QStash API's reads (``GET``),
the control API's (``GET``, and the verbs the table marks ``reads``) and the dashboard's pages
and polls. Everything else would change the state (a publish, a schedule, a DLQ retry, a
workflow's trigger, a clock move, a reset, a load, a dashboard button) and is refused with
403 and one sentence; the clock does not deliver either (the server starts no delivery).
"""

from __future__ import annotations

import httpx

from ..dashboard.routes import DASHBOARD_PATH
from .verbs import ROUTES

#: The methods that only read, in the QStash API and in the control API.
READS = frozenset({"GET", "HEAD"})


def refusal(method: str, path: str, control_prefix: str) -> httpx.Response | None:
    """The 403 a read-only server answers a request with, or None when it serves it."""
    if method in READS:
        return None
    if path.startswith(f"{control_prefix}/") and not path.startswith(f"{DASHBOARD_PATH}/"):
        verb = ROUTES.get((method, path[len(control_prefix) :].strip("/")))
        if verb is not None and verb.reads:
            return None
    what = f"{method} {path}"
    return httpx.Response(
        403,
        json={
            "error": f"the server is read-only (--read-only), so it refuses {what}: it serves "
            "its state to be read (the QStash API's and the control API's lists, the "
            "dashboard) and changes nothing, delivers nothing; start it without --read-only "
            "to publish, retry, trigger or move the clock"
        },
    )
