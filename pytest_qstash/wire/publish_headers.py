"""The ``Upstash-*`` publish headers, read into the ``MessageOptions`` the engine publishes
with, and refused with the reason when a value is not one QStash accepts.

This is the one module that knows the header names: publish, enqueue, batch, schedules, DLQ
retries, triggers, waits and invokes read their requests here; everything the engine publishes
itself builds its ``MessageOptions`` directly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import httpx

from ..engine.deliverable import (
    Undeliverable,
    checked_header,
    checked_url,
    encoded_headers,
    is_forwarded,
)
from ..engine.durations import parse_duration_ms
from ..engine.flow_control import MAX_PERIOD_S
from ..engine.options import (
    LATEST_MS,
    FlowControl,
    InvalidOption,
    MessageOptions,
    canonical,
    check_due_in_range,
)
from ..engine.retry import InvalidRetryDelay, RetryDelayExpression


def _checked(check: Callable[..., str], *args: str) -> str:
    try:
        return check(*args)
    except Undeliverable as exc:
        raise InvalidOption(str(exc)) from None


HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
_FORWARD = "upstash-forward-"
_CALLBACK = "upstash-callback-"
_FAILURE_CALLBACK = "upstash-failure-callback-"


def read_options(headers: Mapping[str, str], now_ms: int) -> MessageOptions:
    """A request's publish options as of ``now_ms``: every ``Upstash-*`` header read
    (``parse_options``) and the due time they give checked (not after the year 9999).
    ``InvalidOption`` says which value is wrong and what is accepted: the API answers it
    with 400, the fixture raises it as a ``ValueError``, both with its text."""
    opts = parse_options(headers)
    check_due_in_range(opts, now_ms)
    return opts


def read_overrides(headers: Mapping[str, str], now_ms: int) -> MessageOptions | None:
    """What a request's ``Upstash-*`` headers override of options stored before (a DLQ
    retry, a workflow DLQ resume or restart), read as ``read_options`` does; None when it
    names none. Its other headers (``Content-Type``, say) are not options here."""
    named = {name: value for name, value in headers.items() if name.lower().startswith("upstash-")}
    return read_options(named, now_ms) if named else None


def parse_options(headers: Mapping[str, str]) -> MessageOptions:
    """Read every ``Upstash-*`` option from ``headers`` (any case), refusing bad values."""
    opts = MessageOptions()
    forwarded: list[tuple[str, str]] = []
    content_type: str | None = None
    callback: list[tuple[str, str]] = []
    failure: list[tuple[str, str]] = []
    for raw_name, value in _items(headers):
        name = raw_name.lower()
        if name == "content-type":
            content_type = _checked(checked_header, "Content-Type", value, canonical(raw_name))
        elif name.startswith(_FORWARD):
            forwarded_name = raw_name[len(_FORWARD) :]
            value = _checked(checked_header, forwarded_name, value, canonical(raw_name))
            if is_forwarded(forwarded_name):
                forwarded.append((canonical(forwarded_name), value))
        elif name.startswith(_FAILURE_CALLBACK):
            failure.append((raw_name, value))
        elif name.startswith(_CALLBACK):
            callback.append((raw_name, value))
        elif name.startswith("upstash-"):
            _apply(opts, name, value.strip())
            field_name = _FIELDS.get(name)
            if field_name is None and name.startswith("upstash-workflow-"):
                field_name = "workflow_headers"
            if field_name is not None:
                opts.given.add(field_name)
    if opts.delay_ms is not None and opts.not_before_ms is not None:
        opts.delay_ms = None  # Upstash-Not-Before wins over Upstash-Delay
    if opts.flow_control is not None and not opts.flow_control.key:
        raise InvalidOption(
            "Upstash-Flow-Control-Value needs an Upstash-Flow-Control-Key naming the limit "
            f"({_FLOW_CONTROL_FORMAT})"
        )
    if content_type is not None:
        # A workflow run's messages forward the previous delivery's headers, Content-Type
        # among them; there QStash keeps the message's own (as the workflow SDKs rely on).
        at = len(forwarded) if opts.workflow_headers else 0
        forwarded.insert(at, ("Content-Type", content_type))
    # Otherwise a forwarded Content-Type overrides the request's own one.
    # Kept as bytes in the encoding they came in: text beyond ASCII is delivered as sent.
    encoding = headers.encoding if isinstance(headers, httpx.Headers) else "utf-8"
    opts.headers = encoded_headers(_last_wins(forwarded), encoding)
    if forwarded or content_type is not None:
        opts.given.add("headers")
    if callback:
        opts.given.update(("callback_headers", "callback_options"))
        opts.callback_headers = encoded_headers(callback, encoding)
        opts.callback_options = parse_options(_derived(opts.callback_headers, _CALLBACK))
    if failure:
        opts.given.update(("failure_callback_headers", "failure_callback_options"))
        opts.failure_callback_headers = encoded_headers(failure, encoding)
        opts.failure_callback_options = parse_options(
            _derived(opts.failure_callback_headers, _FAILURE_CALLBACK)
        )
    return opts


def _derived(prefixed: httpx.Headers | None, prefix: str) -> dict[str, str]:
    """The publish headers a callback is sent with: ``Upstash-Callback-Retries`` becomes
    ``Upstash-Retries``, ``Upstash-Callback-Forward-X`` becomes ``Upstash-Forward-X``."""
    if not prefixed:
        return {}
    out: dict[str, str] = {}
    for name, value in prefixed.multi_items():
        rest = name[len(prefix) :] if name.lower().startswith(prefix) else ""
        if rest:
            out[f"upstash-{rest}"] = value
    return out


def _items(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    if isinstance(headers, httpx.Headers):
        return headers.multi_items()
    return list(headers.items())


def _last_wins(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    latest: dict[str, tuple[str, str]] = {}
    for name, value in items:
        latest[name.lower()] = (name, value)
    return list(latest.values())


#: The option each ``Upstash-*`` header sets (what ``MessageOptions.given`` records).
_FIELDS = {
    "upstash-method": "method",
    "upstash-delay": "delay_ms",
    "upstash-not-before": "not_before_ms",
    "upstash-retries": "retries",
    "upstash-retry-delay": "retry_delay",
    "upstash-timeout": "timeout_ms",
    "upstash-callback": "callback",
    "upstash-failure-callback": "failure_callback",
    "upstash-deduplication-id": "deduplication_id",
    "upstash-content-based-deduplication": "content_based_deduplication",
    "upstash-label": "label",
    "upstash-redact-fields": "redact",
    "upstash-flow-control-key": "flow_control_key",
    "upstash-flow-control-value": "flow_control_value",
    "upstash-cron": "cron",
    "upstash-schedule-id": "schedule_id",
    "upstash-queue-name": "queue",
    "upstash-feature-set": "workflow_headers",
}


def _apply(opts: MessageOptions, name: str, value: str) -> None:
    if name == "upstash-method":
        method = value.upper()
        if method not in HTTP_METHODS:
            raise InvalidOption(
                f"invalid Upstash-Method {value!r}: expected one of {', '.join(HTTP_METHODS)}"
            )
        opts.method = method
    elif name == "upstash-delay":
        opts.delay_ms = _duration(value, "Upstash-Delay")
    elif name == "upstash-not-before":
        opts.not_before_ms = _int(value, "Upstash-Not-Before", "unix seconds") * 1000
        if opts.not_before_ms > LATEST_MS:
            raise InvalidOption(
                f"invalid Upstash-Not-Before {value!r}: that is after the year 9999. It is a unix "
                "timestamp in seconds; a timestamp in milliseconds is 1000 times too far"
            )
    elif name == "upstash-retries":
        opts.retries = _int(value, "Upstash-Retries", "a whole number of retries")
    elif name == "upstash-retry-delay":
        try:
            opts.retry_delay = RetryDelayExpression(value)
        except InvalidRetryDelay as exc:
            raise InvalidOption(str(exc)) from None
    elif name == "upstash-timeout":
        opts.timeout_ms = _duration(value, "Upstash-Timeout")
    elif name == "upstash-callback":
        opts.callback = _url(value, "Upstash-Callback")
    elif name == "upstash-failure-callback":
        opts.failure_callback = _url(value, "Upstash-Failure-Callback")
    elif name == "upstash-deduplication-id":
        opts.deduplication_id = value
    elif name == "upstash-content-based-deduplication":
        opts.content_based_deduplication = _bool(value, "Upstash-Content-Based-Deduplication")
    elif name == "upstash-label":
        opts.label = value or None
    elif name == "upstash-redact-fields":
        opts.redact = _redact(value)
    elif name == "upstash-flow-control-key":
        key = value
        if not key:
            raise InvalidOption(
                "invalid Upstash-Flow-Control-Key '': expected a non-empty key naming the limit "
                f"the messages carrying it share ({_FLOW_CONTROL_FORMAT})"
            )
        fc = opts.flow_control
        opts.flow_control = (
            FlowControl(key, fc.parallelism, fc.rate, fc.period) if fc else (FlowControl(key))
        )
    elif name == "upstash-flow-control-value":
        opts.flow_control = _flow_control(value, opts.flow_control)
    elif name == "upstash-cron":
        opts.cron = value
    elif name == "upstash-schedule-id":
        opts.schedule_id = value
    elif name == "upstash-queue-name":
        opts.queue = value
    elif name.startswith("upstash-workflow-") or name == "upstash-feature-set":
        # The feature set says how a run's trigger configures it (``engine/run_settings.py``).
        opts.workflow_headers[name] = value
    # Other Upstash-* headers (telemetry, workflow protocol, ...) are not message options.


def _duration(value: str, header: str) -> int:
    try:
        return parse_duration_ms(value, what=header)
    except (TypeError, ValueError):
        raise InvalidOption(
            f'invalid {header} {value!r}: expected a duration such as "90s", "1h30m", '
            '"7d" or "500ms" (units: ms, s, m, h, d), or a number of seconds'
        ) from None


def _int(value: str, header: str, meaning: str) -> int:
    if not re.fullmatch(r"\d+", value):
        raise InvalidOption(
            f"invalid {header} {value!r}: expected {meaning} (a non-negative integer)"
        )
    return int(value)


def _bool(value: str, header: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise InvalidOption(f"invalid {header} {value!r}: expected true or false")
    return lowered == "true"


def _url(value: str, header: str) -> str:
    return _checked(checked_url, value, header)


_REDACT = re.compile(r"body|headers?|headers?\[[^\]]+\]")


def _redact(value: str) -> tuple[str, ...]:
    fields = tuple(part.strip() for part in value.split(",") if part.strip())
    for part in fields:
        if not _REDACT.fullmatch(part):
            raise InvalidOption(
                f"invalid Upstash-Redact-Fields {value!r}: {part!r} is not one of body, header, "
                "header[Name]"
            )
    return fields


_FLOW_CONTROL_FORMAT = (
    "Upstash-Flow-Control-Value: parallelism=<int >= 1>, rate=<int >= 1>, "
    "period=<duration from 1s to 7d>, any of them, comma separated"
)


def _flow_control(value: str, current: FlowControl | None) -> FlowControl:
    fc = FlowControl(current.key if current else "")
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        name, eq, raw = part.partition("=")
        name, raw = name.strip().lower(), raw.strip()
        if not eq or name not in ("parallelism", "rate", "period"):
            raise InvalidOption(
                f"invalid Upstash-Flow-Control-Value {value!r}: {part!r} is not one of "
                f"parallelism=, rate=, period= ({_FLOW_CONTROL_FORMAT})"
            )
        if name == "period":
            fc.period = _flow_period(value, raw)
        else:
            # A rate or parallelism of 0 would hold the key's messages for ever.
            if not re.fullmatch(r"\d+", raw) or int(raw) < 1:
                raise InvalidOption(
                    f"invalid Upstash-Flow-Control-Value {value!r}: {name} must be a whole "
                    f"number of at least 1 ({_FLOW_CONTROL_FORMAT})"
                )
            setattr(fc, name, int(raw))
    return fc


def _flow_period(value: str, raw: str) -> int:
    """A rate period in whole seconds, from 1 s to the week QStash allows."""
    try:
        period_ms = parse_duration_ms(raw, what="period")
    except (TypeError, ValueError):
        period_ms = -1
    if not 1000 <= period_ms <= MAX_PERIOD_S * 1000:
        raise InvalidOption(
            f"invalid Upstash-Flow-Control-Value {value!r}: period must be a duration from 1s "
            f"to 7d, such as 30s, 1m or 1h30m, or a number of seconds ({_FLOW_CONTROL_FORMAT})"
        )
    return period_ms // 1000
