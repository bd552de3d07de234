"""What a publish asks for (``MessageOptions``, its ``FlowControl``), beside the headers that
say it: the error a bad option raises, the names and header lists as QStash shows them, and
the range a due time must stay in.

The ``Upstash-*`` headers are read into ``MessageOptions`` at the edge, in
``wire/publish_headers.py``, the one module that knows their names; a ``Message`` keeps the
options it was published with (``models.py``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace

import httpx

from .retry import RetryDelayExpression

__all__ = [
    "LATEST_MS",
    "FlowControl",
    "InvalidOption",
    "MessageOptions",
    "canonical",
    "check_due_in_range",
    "header_lists",
]

#: The last moment a ``datetime`` can hold (9999-12-31T23:59:59.999Z): nothing is due later.
LATEST_MS = 253_402_300_799_999


@dataclass(eq=False, slots=True)
class FlowControl:
    key: str
    parallelism: int | None = None
    rate: int | None = None
    period: int = 1  # seconds, QStash's default when only a key and limits are given


@dataclass(slots=True)
class MessageOptions:
    """What a publish asks for: the one description of a message to create. The API reads it
    from a request's ``Upstash-*`` headers (``options.parse_options``); everything the engine
    publishes itself (callbacks, a wait's or an invoke's step, a retried dead letter, a
    trigger) builds one directly."""

    method: str = "POST"
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    delay_ms: int | None = None
    not_before_ms: int | None = None
    retries: int | None = None
    retry_delay: RetryDelayExpression | None = None
    timeout_ms: int | None = None
    callback: str | None = None
    failure_callback: str | None = None
    callback_headers: httpx.Headers | None = None
    failure_callback_headers: httpx.Headers | None = None
    #: What the callback messages are published with (``Upstash-Callback-Retries`` is the
    #: callback's ``retries``, ...): read from the prefixed headers with the rest.
    callback_options: MessageOptions | None = None
    failure_callback_options: MessageOptions | None = None
    deduplication_id: str | None = None
    content_based_deduplication: bool = False
    label: str | None = None
    redact: tuple[str, ...] = ()
    flow_control: FlowControl | None = None
    #: Options only schedules read.
    cron: str | None = None
    schedule_id: str | None = None
    queue: str | None = None
    #: The Upstash Workflow protocol headers (``Upstash-Workflow-*``, lower-cased names),
    #: which tie a message to a run (see ``engine/workflows.py``).
    workflow_headers: dict[str, str] = field(default_factory=dict)
    #: The fields the publish named (a DLQ retry's overrides replace only those).
    given: set[str] = field(default_factory=set, repr=False)

    def copy(self) -> MessageOptions:
        """An independent copy: publishing it twice creates two messages with their own
        headers."""
        return replace(
            self,
            headers=httpx.Headers(self.headers),
            workflow_headers=dict(self.workflow_headers),
            given=set(self.given),
        )

    def due_ms(self, now_ms: int) -> int:
        """When a message published at ``now_ms`` with these options is first due: its
        ``Upstash-Not-Before``, else ``now_ms`` plus its delay."""
        if self.not_before_ms is not None:
            return self.not_before_ms
        return now_ms + (self.delay_ms or 0)

    def republished(self) -> MessageOptions:
        """A copy for publishing the same message again (a dead letter retried, a workflow
        step resumed): what it was sent with, less when it was due, its deduplication and
        what tied it to a schedule, a queue or a workflow run (the caller says those)."""
        out = self.copy()
        out.delay_ms = out.not_before_ms = None
        out.deduplication_id, out.content_based_deduplication = None, False
        out.cron = out.schedule_id = out.queue = None
        out.workflow_headers = {}
        out.given = set()
        return out

    def overridden(
        self, given: MessageOptions, only: Collection[str] | None = None
    ) -> MessageOptions:
        """A copy with what ``given`` names (its ``given`` fields: what the request's
        ``Upstash-*`` headers set) in place of its own: a forwarded header replaces the one of
        that name, a flow-control key alone keeps the limits, callback options are overridden
        the same way. ``only``: the fields a request may override there (None: every one).
        The one override merge: DLQ retries, workflow DLQ resumes and restarts (their run's
        settings and the message they publish again) all read it."""
        out = self.copy()
        for name in given.given:
            if only is not None and name not in only:
                continue
            if name == "headers":
                for key in given.headers:
                    out.headers[key] = given.headers[key]
            elif name == "flow_control_key":
                fc, limits = given.flow_control, out.flow_control
                assert fc is not None
                if "flow_control_value" not in given.given and limits is not None:
                    fc = FlowControl(fc.key, limits.parallelism, limits.rate, limits.period)
                out.flow_control = fc
            elif name in ("callback_options", "failure_callback_options"):
                mine, theirs = getattr(out, name), getattr(given, name)
                setattr(out, name, theirs if mine is None else mine.overridden(theirs))
            elif name in ("callback_headers", "failure_callback_headers"):
                mine, theirs = getattr(out, name), getattr(given, name)
                merged = httpx.Headers(mine)
                for key in theirs:
                    merged[key] = theirs[key]
                setattr(out, name, merged)
            elif name != "flow_control_value":
                setattr(out, name, getattr(given, name))
        return out


class InvalidOption(ValueError):
    """A header's value is not one QStash accepts (the API answers 400 with this text)."""


def canonical(name: str) -> str:
    """Go's canonical header form, the one QStash shows: ``x-foo-bar`` -> ``X-Foo-Bar``."""
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def header_lists(headers: httpx.Headers) -> dict[str, list[str]]:
    """Headers as QStash shows them (callback bodies, logs): canonical names, lists of values."""
    out: dict[str, list[str]] = {}
    for name, value in headers.multi_items():
        out.setdefault(canonical(name), []).append(value)
    return out


def check_due_in_range(opts: MessageOptions, now_ms: int) -> None:
    """Refuse a delay that puts the message beyond what a datetime can show (year 9999)."""
    if opts.delay_ms is not None and opts.due_ms(now_ms) > LATEST_MS:
        raise InvalidOption(
            f"invalid Upstash-Delay of {opts.delay_ms} ms: it puts the message after the year 9999"
        )
