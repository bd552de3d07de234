"""A readable account of what the fake saw, shown when a test that used it fails."""

from __future__ import annotations

from .state.models import Message, ms_to_datetime
from .state.store import Store

_MAX_MESSAGES = 30


def timeline(store: Store, deliveries_total: int) -> str:
    lines = [
        f"virtual time now: {ms_to_datetime(store.clock.now_ms).isoformat()}",
        f"{len(store.messages)} message(s), {deliveries_total} delivery attempt(s), "
        f"{len(store.dlq)} in the DLQ",
    ]
    messages = list(store.messages.values())
    refused = False
    for message in messages[:_MAX_MESSAGES]:
        lines.append(_message_line(message))
        for delivery in message.deliveries:
            outcome = (
                f"-> {delivery.status}" if delivery.status is not None else f"-> {delivery.error}"
            )
            detail = ""
            if delivery.error and delivery.status is not None:
                detail = f" ({delivery.error})"
            elif delivery.status is not None and not delivery.ok and delivery.response_content:
                detail = f" {_short(delivery.response_body)}"
            lines.append(
                f"    {delivery.at.isoformat()} attempt retried={delivery.retried} "
                f"{outcome}{detail}"
            )
            refused = refused or delivery.status in (400, 401, 403)
    if len(messages) > _MAX_MESSAGES:
        lines.append(f"... and {len(messages) - _MAX_MESSAGES} more message(s)")
    for run in store.workflows:
        steps = ", ".join(f"{step.name} ({step.type})" for step in run.steps) or "none yet"
        lines.append(f"  workflow run {run.run_id} at {run.url} {run.state}; steps: {steps}")
    if refused:
        lines.append(_SIGNATURE_HINT)
    return "\n".join(lines)


# A refused delivery is most often a signature the app could not verify.
_SIGNATURE_HINT = (
    "hint: a delivery was refused (400/401/403). If the app verifies Upstash-Signature: the "
    "token's `sub` is the exact URL called (scheme, host, path and query: pass that URL to "
    "Receiver.verify), it is signed with QSTASH_CURRENT_SIGNING_KEY as the fake reads it, and "
    "its iat/exp follow qstash.now (the app's clock too, unless freeze_time=False). An "
    "Upstash Workflow route also answers 400 when its route function returns before reaching "
    "any step."
)


def _message_line(message: Message) -> str:
    extras = []
    if message.queue:
        extras.append(f"queue={message.queue}")
    if message.url_group:
        extras.append(f"url_group={message.url_group}")
    if message.callback_for:
        extras.append(f"callback for {message.callback_for}")
    extra = f" [{', '.join(extras)}]" if extras else ""
    return (
        f"  {message.message_id} {message.method} {message.url} {message.state} "
        f"retried={message.retried}/{message.max_retries} "
        f"due={message.not_before.isoformat()}{extra} body={_short(message.body)}"
    )


def _short(text: str, limit: int = 80) -> str:
    text = text.replace("\n", " ")
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
