"""What a test asks of the fake, as data: each verb's parameters and defaults, declared once.

A test asks the same things of the fake in-process (``FakeQStash.trigger``, ...) and of a
server (``Client.trigger``, ``POST /_qstash/trigger``, the dashboard's buttons). Each such
verb's parameters are the fields of one dataclass here, in order, with their defaults. The
fixture's and ``Client``'s methods are made from it by ``verb`` (typed by the dataclass's own
signature: type checkers and IDEs show each method's parameters), the control API's JSON
keys are its fields (``server.verbs``), and the engine takes the dataclass itself
(``trigger.trigger_run``). Adding a parameter is adding a field here.

Nothing is checked here: the engine says what is wrong with a value, as before.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Trigger:
    """A workflow run started as a workflow client's ``trigger`` does (``qstash.trigger``)."""

    #: Where the workflow's ``serve()`` answers.
    url: str
    #: The initial payload: ``str``/``bytes`` as is, anything else as JSON.
    body: Any = None
    #: Reach the route function as request headers.
    headers: dict[str, str] | None = None
    _: dataclasses.KW_ONLY
    #: The run's id (by default one is made).
    run_id: str | None = None
    retries: int | None = None
    #: ``False``: none (by default the workflow URL, for the first delivery only).
    failure_url: str | Literal[False] | None = None
    #: ``"a,b"``: the labels ``a`` and ``b``.
    label: str | None = None


@dataclasses.dataclass(frozen=True)
class Notify:
    """An event sent to the runs waiting for it (``POST /v2/notify/...``)."""

    event_id: str
    #: ``str``/``bytes`` as is, anything else as JSON.
    data: Any = None
    _: dataclasses.KW_ONLY
    #: One run only (its notify is kept when it is not waiting yet).
    run_id: str | None = None


@dataclasses.dataclass(frozen=True)
class ContinueRun:
    """A failed workflow run resumed or restarted from its workflow DLQ entry."""

    dlq_id: str
    _: dataclasses.KW_ONLY
    retries: int | None = None
    #: ``Upstash-*`` overrides of the run's settings.
    headers: dict[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class FailNext:
    """The next QStash API calls matching ``endpoint`` made to fail."""

    endpoint: str = "publish"
    _: dataclasses.KW_ONLY
    status: int | None = None
    kind: str | None = None
    times: int = 1


#: Every verb's parameters, by the verb's name (verbs with the same parameters share one).
SPECS: dict[str, type[Any]] = {
    "trigger": Trigger,
    "notify": Notify,
    "resume_run": ContinueRun,
    "restart_run": ContinueRun,
    "fail_next": FailNext,
}


def verb(spec: Callable[P, S]) -> Callable[[Callable[[T, S], R]], Callable[Concatenate[T, P], R]]:
    """Make a method taking ``spec``'s parameters from one taking a ``spec`` instance: the
    method is called as ``obj.name(*args, **kwargs)``, with the signature of ``spec``'s
    constructor (what ``help()`` and ``inspect.signature`` show, and what type checkers
    read), and its body gets ``spec(*args, **kwargs)``."""
    parameters = list(inspect.signature(spec).parameters.values())

    def make(body: Callable[[T, S], R]) -> Callable[Concatenate[T, P], R]:
        def method(self: T, /, *args: P.args, **kwargs: P.kwargs) -> R:
            __tracebackhide__ = True
            try:
                call = spec(*args, **kwargs)
            except TypeError as exc:  # said of the method, of the class it was called on
                made = f"{getattr(spec, '__name__', '')}.__init__()"
                said = f"{type(self).__name__}.{body.__name__}()"
                raise TypeError(str(exc).replace(made, said)) from None
            return body(self, call)

        method.__name__ = body.__name__
        method.__qualname__ = body.__qualname__
        method.__module__ = body.__module__
        method.__doc__ = body.__doc__
        itself = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
        returns = inspect.signature(body).return_annotation
        method.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [itself, *parameters], return_annotation=returns
        )
        return method

    return make


def fields(spec: type[Any]) -> list[tuple[str, bool, Any]]:
    """A spec's parameters: each one's name, whether it must be given, and its default."""
    out = []
    for field in dataclasses.fields(spec):
        required = field.default is dataclasses.MISSING
        out.append((field.name, required, None if required else field.default))
    return out


def values(call: Any) -> dict[str, Any]:
    """A spec instance's values by parameter name."""
    return {field.name: getattr(call, field.name) for field in dataclasses.fields(call)}
