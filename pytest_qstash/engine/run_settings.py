"""A workflow run's own settings: what its trigger (the init publish) set for every step.

Upstash Workflow keeps the retries, retry delay, timeout, failure URL (and the failure
callback's headers), labels and flow control a run was started with, and applies them to each
later step of the run that does not set its own: the workflow clients announce this with the
``WF_TriggerOnConfig`` feature (``@upstash/workflow`` sends it with every run; a later step
then carries only what its ``serve()`` options say). Labels are kept on the run whatever the
feature set: they are what the logs, the workflow DLQ and bulk cancel filter on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from .models import split_labels
from .options import FlowControl, MessageOptions
from .retry import RetryDelayExpression

#: The feature a workflow client sends when its trigger's configuration is the run's.
TRIGGER_ON_CONFIG = "WF_TriggerOnConfig"
FEATURE_SET = "upstash-feature-set"


#: The options a run's later steps inherit from its trigger.
INHERITED = (
    "retries",
    "retry_delay",
    "timeout_ms",
    "failure_callback",
    "failure_callback_headers",
    "failure_callback_options",
    "label",
    "flow_control",
)


#: What a workflow DLQ resume or restart may override (the request's ``Upstash-Retries``,
#: ``-Delay``, ``-Retry-Delay``, ``-Flow-Control-Key``/``-Value``, ``-Label``,
#: ``-Failure-Callback``): of the run's settings, and of the message it publishes again.
RESUME_OVERRIDES = (
    "retries",
    "delay_ms",
    "retry_delay",
    "flow_control_key",
    "flow_control_value",
    "label",
    "failure_callback",
)


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What a run's later steps inherit (None: not set at trigger): the ``INHERITED``
    fields of ``options``, the options its trigger was published with."""

    options: MessageOptions = field(default_factory=MessageOptions)
    #: Whether later steps inherit these (the init announced ``WF_TriggerOnConfig``).
    run_wide: bool = False

    @classmethod
    def of(cls, opts: MessageOptions) -> RunSettings:
        """The settings an init publish gives its run."""
        features = opts.workflow_headers.get(FEATURE_SET, "")
        return cls(
            opts.copy(),
            run_wide=TRIGGER_ON_CONFIG in (part.strip() for part in features.split(",")),
        )

    @property
    def retries(self) -> int | None:
        return self.options.retries

    @property
    def retry_delay(self) -> RetryDelayExpression | None:
        return self.options.retry_delay

    @property
    def timeout_ms(self) -> int | None:
        return self.options.timeout_ms

    @property
    def failure_callback(self) -> str | None:
        return self.options.failure_callback

    @property
    def failure_callback_headers(self) -> httpx.Headers | None:
        return self.options.failure_callback_headers

    @property
    def failure_callback_options(self) -> MessageOptions | None:
        return self.options.failure_callback_options

    @property
    def label(self) -> str | None:
        return self.options.label

    @property
    def flow_control(self) -> FlowControl | None:
        return self.options.flow_control

    @property
    def labels(self) -> tuple[str, ...]:
        return split_labels(self.label)

    @property
    def flow_control_key(self) -> str | None:
        fc = self.flow_control
        return fc.key if fc is not None and fc.key else None

    def with_options(self, **changes: Any) -> RunSettings:
        """These settings with some of the inherited options changed."""
        opts = self.options.copy()
        for name, value in changes.items():
            if name not in INHERITED:
                raise ValueError(f"{name!r} is no option a run's steps inherit")
            setattr(opts, name, value)
        return replace(self, options=opts)

    def fill(self, opts: MessageOptions) -> None:
        """Give a later step of the run what it does not set itself (its own options win)."""
        if not self.run_wide:
            return
        if opts.retries is None:
            opts.retries = self.retries
        if opts.retry_delay is None:
            opts.retry_delay = self.retry_delay
        if opts.timeout_ms is None:
            opts.timeout_ms = self.timeout_ms
        if opts.failure_callback is None and self.failure_callback is not None:
            opts.failure_callback = self.failure_callback
            opts.failure_callback_headers = self.failure_callback_headers
            opts.failure_callback_options = self.failure_callback_options
        if opts.label is None:
            opts.label = self.label
        if opts.flow_control is None:
            opts.flow_control = self.flow_control

    def overridden(self, given: MessageOptions, *, run_wide: bool) -> RunSettings:
        """These settings with a resume's or restart's overrides (``RESUME_OVERRIDES`` that
        ``given`` names, merged as ``MessageOptions.overridden`` merges; a delay is the
        published message's, not the run's). ``run_wide``: whether the request named any
        option; overrides are for the remaining steps, so they then hold run-wide whatever
        the trigger said."""
        inherited = [name for name in RESUME_OVERRIDES if name != "delay_ms"]
        options = self.options.overridden(given, only=inherited)
        return replace(self, options=options, run_wide=self.run_wide or run_wide)
