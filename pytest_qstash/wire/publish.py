"""Publishing: `/v2/publish/{destination}`, `/v2/enqueue/{queue}/{destination}`, `/v2/batch`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from ..engine.deliverable import HOP_BY_HOP, INVALID_DESTINATION
from ..engine.invocations import unwrap as unwrap_invocation
from ..engine.models import Invoker, Message
from ..engine.options import InvalidOption, MessageOptions
from ..engine.store import Published, Store, UnknownDestination
from ._http import ApiError, cause_of, json_response, read_json
from .publish_headers import parse_options, read_options, read_overrides
from .workflows import refuse_ended_run


def publish(store: Store, request: httpx.Request, destination: str) -> httpx.Response:
    opts = _checked_options(store, _request_options(request))
    # A workflow's context.invoke: the invoked run starts with the body inside the envelope.
    try:
        content, invoker = unwrap_invocation(opts.workflow_headers, request.content)
        if invoker is not None:
            # What resumes the invoker must be publishable: now, or 400.
            invoker = invoker.resumed_with(parse_options(_invoker_resume_headers(invoker)))
    except InvalidOption as exc:
        raise ApiError(400, str(exc)) from None
    store.check_message(opts, content)
    results = _publish(
        store, destination, opts, content, queue=None, daily=True, cause=cause_of(request)
    )
    if invoker is not None:
        # The run an invoke started remembers its invoker (not a run that existed already).
        store.record_invoker(
            [item.message for item in results[0] if not item.deduplicated], invoker
        )
    return _answer(results)


def enqueue(store: Store, request: httpx.Request, queue: str, destination: str) -> httpx.Response:
    check_name(queue, "queue name")
    opts = _checked_options(store, _request_options(request))
    store.check_message(opts, request.content)
    store.check_queues([queue])
    return _answer(
        _publish(
            store,
            destination,
            opts,
            request.content,
            queue=queue,
            daily=True,
            cause=cause_of(request),
        )
    )


def batch(store: Store, request: httpx.Request) -> httpx.Response:
    items = read_json(request)
    if not isinstance(items, list):
        raise ApiError(400, "invalid batch request: expected a JSON array of messages")
    # Validate every item before creating any, so a bad item loses nothing already accepted.
    prepared = [_batch_item(store, index, item) for index, item in enumerate(items)]
    store.check_queues([queue for *_, queue in prepared])
    store.count_daily(len(prepared))
    answers: list[Any] = []
    cause = cause_of(request)
    for destination, opts, content, queue in prepared:
        results = _publish(store, destination, opts, content, queue=queue, cause=cause)
        answers.append(_shape(results))
    return json_response(answers)


# -- internals ------------------------------------------------------------------------------
def _invoker_resume_headers(invoker: Invoker) -> dict[str, str]:
    """The publish headers of the step that resumes ``invoker``: the envelope's, as a step
    of its run."""
    headers = dict(invoker.headers)
    for name in [
        k for k in headers if k.lower() in ("upstash-workflow-init", "upstash-workflow-calltype")
    ]:
        del headers[name]
    headers.update(
        {
            "Upstash-Workflow-Init": "false",
            "Upstash-Workflow-CallType": "step",
            "Upstash-Workflow-RunId": invoker.run_id,
        }
    )
    return headers


#: Headers of the publish request itself, never forwarded in webhook mode.
_NOT_FORWARDED = HOP_BY_HOP | {
    "authorization",
    "accept",
    "accept-encoding",
    "user-agent",
    "content-type",
}


def _request_options(request: httpx.Request) -> httpx.Headers:
    """The publish options of a request: its headers, plus the webhook conveniences QStash
    offers senders that cannot set headers: ``?upstash-retries=3``-style query parameters, and
    ``Upstash-Header-Forward: true`` to forward every incoming header without the prefix."""
    headers = httpx.Headers(request.headers)
    for name, value in request.url.params.multi_items():
        if name.lower().startswith("upstash-") and name not in headers:
            headers[name] = value
    if headers.get("upstash-header-forward", "").lower() == "true":
        for name, value in request.headers.multi_items():
            lowered = name.lower()
            if lowered not in _NOT_FORWARDED and not lowered.startswith("upstash-"):
                headers.setdefault(f"upstash-forward-{name}", value)
    return headers


Results = tuple[list[Published], bool]  # what was published, whether to a URL group


def _publish(
    store: Store,
    destination: str,
    opts: MessageOptions,
    content: bytes,
    *,
    queue: str | None,
    daily: bool = False,
    cause: Message | None = None,
) -> Results:
    destination = store.checked_destination(destination, group_needs_endpoints=True)
    if daily:
        store.count_daily(1)  # a batch counts all its messages before creating any
    try:
        return store.publish(destination, content, opts, queue=queue, cause=cause)
    except UnknownDestination:
        raise ApiError(400, INVALID_DESTINATION) from None


def _checked_options(store: Store, headers: Mapping[str, str]) -> MessageOptions:
    """A publish's options, refused with 400 when invalid (or for a workflow run that ended)."""
    opts = publish_options(store, headers)
    refuse_ended_run(store, opts)
    return opts


def publish_options(store: Store, headers: Mapping[str, str]) -> MessageOptions:
    """The ``Upstash-*`` options of a publish (or a schedule's), 400 when one is invalid:
    callback options are read now too (``parse_options``), not when the callback is due."""
    try:
        return read_options(headers, store.clock.now_ms)
    except InvalidOption as exc:
        raise ApiError(400, str(exc)) from None


def override_options(store: Store, headers: Mapping[str, str]) -> MessageOptions | None:
    """What a request's ``Upstash-*`` headers override (a DLQ retry, a workflow DLQ resume
    or restart), None when it names none; 400 before anything is acted on when one is not a
    valid option."""
    try:
        return read_overrides(headers, store.clock.now_ms)
    except InvalidOption as exc:
        raise ApiError(400, str(exc)) from None


def _shape(results: Results) -> Any:
    items, is_group = results
    shaped = []
    for item in items:
        entry: dict[str, Any] = {"messageId": item.message.message_id}
        if item.endpoint_url is not None:
            entry["url"] = item.endpoint_url
        if item.deduplicated:
            entry["deduplicated"] = True
        shaped.append(entry)
    return shaped if is_group else shaped[0]


def _answer(results: Results) -> httpx.Response:
    # QStash answers 202 when the publish was deduplicated into an earlier message.
    all_deduplicated = all(item.deduplicated for item in results[0])
    return json_response(_shape(results), 202 if all_deduplicated else 200)


def _batch_item(
    store: Store, index: int, item: Any
) -> tuple[str, MessageOptions, bytes, str | None]:
    if not isinstance(item, dict) or not isinstance(item.get("destination"), str):
        raise ApiError(400, f"invalid batch item {index}: expected an object with a destination")
    headers = item.get("headers") or {}
    body = item.get("body")
    queue = item.get("queue")
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise ApiError(400, f"invalid batch item {index}: headers must map names to strings")
    if body is not None and not isinstance(body, str):
        raise ApiError(400, f"invalid batch item {index}: body must be a string")
    if queue is not None:
        if not isinstance(queue, str):
            raise ApiError(400, f"invalid batch item {index}: queue must be a string")
        check_name(queue, "queue name")
    destination = item["destination"]
    opts = _checked_options(store, headers)
    content = (body or "").encode()
    store.check_message(opts, content)
    destination = store.checked_destination(destination, group_needs_endpoints=True)
    return destination, opts, content, queue


def check_name(name: str, what: str) -> None:
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ApiError(
            400, f"invalid {what} {name!r}: only letters, digits, '-', '_' and '.' are allowed"
        )
