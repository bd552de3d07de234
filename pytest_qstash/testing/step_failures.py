"""The name of a workflow step that failed, which QStash itself never learns.

When a step function raises, upstash-workflow's ``serve()`` answers 500 with the error's
class and message only: a step is named to QStash when its result is published, so a
failing step has no name on the wire. The failed message's body names the step *before*
it, which reads as if that one failed. The SDK logs the exception, though, and the step it
was running is in that traceback: ``StepFailureLog`` listens on the SDK's logger while a
test runs and keeps, per run, the step that failed last, for the failure report.

Best effort by design: an SDK that logs nothing, or names its internals otherwise, leaves
the report saying "the step after ..." instead of the name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType

#: The SDK's loggers are all under this one (``upstash_workflow.serve.serve``, ...).
_SDK_LOGGER = "upstash_workflow"


@dataclass(frozen=True, slots=True)
class FailedStep:
    run_id: str
    #: The step's position as the SDK counts it: 1 for the first step after the payload.
    number: int
    name: str
    type: str


class StepFailureLog:
    """The steps that failed in one test's runs, by run id (the newest failure of each)."""

    def __init__(self) -> None:
        #: run id -> the step that failed last in that run.
        self.by_run: dict[str, FailedStep] = {}

    def listen(self) -> None:
        """Keep the failures the SDK logs from now on (into the newest log listening), until
        ``stop()``."""
        _HANDLER.logs.append(self)
        _HANDLER.install()

    def stop(self) -> None:
        if self in _HANDLER.logs:
            _HANDLER.logs.remove(self)
        if not _HANDLER.logs and not _HANDLER.held:
            _HANDLER.uninstall()

    @contextmanager
    def listening(self) -> Iterator[StepFailureLog]:
        self.listen()
        try:
            yield self
        finally:
            self.stop()


def hold() -> None:
    """Leave the handler on the SDK's logger between logs, for a pytest session (adding and
    removing it for each test was a tenth of the fixture's cost); idle while none listens."""
    _HANDLER.held = True


def unhold() -> None:
    _HANDLER.held = False
    if not _HANDLER.logs:
        _HANDLER.uninstall()


class _SdkLogHandler(logging.Handler):
    """One handler for the process, on the SDK's logger while some log listens (building a
    ``logging.Handler`` per test cost more than the rest of a fixture's bookkeeping)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.logs: list[StepFailureLog] = []
        self.held = False
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            logging.getLogger(_SDK_LOGGER).addHandler(self)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            logging.getLogger(_SDK_LOGGER).removeHandler(self)
            self._installed = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.logs:
            return
        try:
            error = record.exc_info[1] if record.exc_info else None
            found = _failed_step(error.__traceback__) if error is not None else None
        except Exception:  # a report aid must never break the app's logging
            return
        if found is not None:
            self.logs[-1].by_run[found.run_id] = found


_HANDLER = _SdkLogHandler()


def _failed_step(tb: TracebackType | None) -> FailedStep | None:
    """The innermost frame running a step (the SDK executor's ``run_single``: its
    ``lazy_step`` and ``self``), read as plain values: no frame is kept."""
    found = None
    while tb is not None:
        names = tb.tb_frame.f_locals
        step, executor = names.get("lazy_step"), names.get("self")
        if step is not None and executor is not None:
            name, type_ = getattr(step, "step_name", None), getattr(step, "step_type", None)
            number = getattr(executor, "step_count", None)
            run_id = getattr(getattr(executor, "context", None), "workflow_run_id", None)
            if (
                isinstance(name, str)
                and isinstance(type_, str)
                and isinstance(number, int)
                and isinstance(run_id, str)
            ):
                found = FailedStep(run_id, number, name, type_)
        tb = tb.tb_next
    return found
