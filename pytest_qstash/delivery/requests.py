"""The one place a delivery's request is built: a message as QStash sends it to its app.

``delivery_request`` is what the delivery loop sends for each attempt (``Dispatcher``) and
what the workflow deploy check sends as a probe (``testing/deploy_check.py``): the message's
body (for a workflow run's ``step`` message, the run's steps so far) and headers, QStash's own
delivery headers, and a fresh ``Upstash-Signature`` over the body for the URL it goes to.
"""

from __future__ import annotations

from datetime import datetime, timezone

import httpx

from ..engine.models import Message
from ..engine.store import Store
from .signing import sign
from .workflow_body import workflow_delivery

USER_AGENT = "Upstash-QStash"

#: Parsed destination URLs: parsing is half the cost of building a delivery request. Bounded
#: (unique URLs per message must not pile up); the parse of a string never changes.
_URLS: dict[str, httpx.URL] = {}
_MAX_URLS = 1024


def delivery_request(
    store: Store,
    message: Message,
    *,
    signing_key: str,
    region: str | None,
    jwt_id: str,
    url: str | None = None,
) -> httpx.Request:
    """The signed request delivering ``message`` now: to ``url`` when given (the same
    message sent elsewhere, e.g. the app's local copy), else to the message's own URL.

    ``region``: ``Upstash-Region``'s value (``US-EAST-1``), or None for no header; ``jwt_id``:
    the signature's ``jti``, unique per delivery."""
    body = message.content
    if message.workflow_run_id is not None:
        # A workflow run's message: a step delivery carries the run's steps so far.
        body, headers = workflow_delivery(store.workflows, message)
    else:
        headers = httpx.Headers(message.headers)
    headers["User-Agent"] = USER_AGENT
    headers["Upstash-Message-Id"] = message.message_id
    headers["Upstash-Retried"] = str(message.retried)
    if message.url_group:
        headers["Upstash-Topic-Name"] = message.url_group
    if message.schedule_id:
        headers["Upstash-Schedule-Id"] = message.schedule_id
    headers["Upstash-Caller-Ip"] = message.caller_ip
    if region is not None:
        headers["Upstash-Region"] = region
    address = message.url if url is None else url
    # Issued on the clock the app verifies with, read as PyJWT (every Receiver's verifier)
    # reads it: the virtual one while the fake moves the app's clock, the real one with
    # freeze_time=False, and a test's own freezer's when one (a @freeze_time decorator,
    # say) overrides ours, even one whose tz_offset shifts aware now() (freezegun's bug).
    iat = int(datetime.now(timezone.utc).timestamp())
    headers["Upstash-Signature"] = sign(
        content=body, url=address, key=signing_key, iat=iat, jti=jwt_id
    )
    content = body if body or message.method != "GET" else None
    parsed = _URLS.get(address)
    if parsed is None:
        if len(_URLS) >= _MAX_URLS:
            _URLS.clear()
        parsed = _URLS[address] = httpx.URL(address)
    # The attempt's deadline, for a real server's answer (a mounted app's is bounded on the
    # virtual clock): httpx's own default would cut it after 5 s.
    timeout = httpx.Timeout(store.deadline_ms(message) / 1000).as_dict()
    return httpx.Request(
        message.method, parsed, headers=headers, content=content, extensions={"timeout": timeout}
    )
