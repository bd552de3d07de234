"""The fixture's verbs over HTTP.

Each ``Verb`` is a control endpoint (``POST /_qstash/<name>``, ``GET`` for the read-only
ones; the outbound mounts are three verbs on one route, ``/_qstash/mounts``): its arguments
(the JSON body's keys, and the ``Client`` method's parameters) and what it does on the
server's fake. A verb the fixture has with parameters (``trigger``, ``notify``, ...) is
declared once, by its dataclass in ``state.verb_specs``: the fixture's method, ``Client``'s,
its arguments here and its handler (the fixture's method, called with them) all come from
it. The control API's routes are this table (``QStashServerApp.act``), ``Client``'s methods
send what it declares (``Client._verb`` refuses a name it does not have), the dashboard's
buttons post the verbs marked ``dashboard``, and the clock moves are dispatched here alone.
The inspection lists are the other half of the control API: ``records.MODELS``.

The handlers run on the server's event loop with what ``Host`` offers; this module imports
nothing of the app.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from ...engine.durations import DRAIN_WITHIN
from ...engine.verb_specs import SPECS, fields
from . import records, reports

if TYPE_CHECKING:  # for the annotations only: Client reads this table without the engine
    from ...engine.models import Delivery
    from ...testing.fake import FakeQStash
    from ..runner.holdback import Holdback


class Host(Protocol):
    """What a verb may use of the server app."""

    fake: FakeQStash
    #: How many resets the server has had (each starts a fresh store).
    resets: int
    #: The deliveries held back (a server holding a loaded export).
    holdback: Holdback

    def state(self) -> dict[str, Any]: ...

    async def move(self, action: str, start: ClockMove) -> list[Delivery]: ...

    async def reset(self, args: dict[str, Any]) -> None: ...

    def wake_up(self) -> None: ...

    async def load(self, document: Any, start: Any) -> dict[str, Any]: ...

    def mount(self, prefix: str, to: str) -> tuple[str, str]: ...

    def unmount(self, prefix: str) -> bool: ...

    @property
    def mounts(self) -> list[dict[str, str]]: ...


class MissingArgument(ValueError):
    """A required argument is not in the body (answered 400)."""


@dataclasses.dataclass(frozen=True)
class Arg:
    """One argument: its key in the JSON body, the ``Client`` parameter that sends it
    (``param``, by default the same name), and whether the body must have it."""

    name: str
    required: bool = False
    #: The value taken when the body does not have the key (or has null).
    default: Any = None
    param: str = ""

    @property
    def parameter(self) -> str:
        return self.param or self.name


Handler = Callable[[Host, dict[str, Any]], Awaitable[Any]]
#: A clock move on the fake, its arguments given: what ``Host.move`` runs under its lock.
ClockMove = Callable[["FakeQStash"], Awaitable[list["Delivery"]]]


@dataclasses.dataclass(frozen=True)
class Verb:
    name: str
    args: tuple[Arg, ...]
    #: What it does, in a line (what the docs' control API table says).
    does: str
    run: Handler
    method: str = "POST"
    #: Whether the dashboard has a button for it.
    dashboard: bool = False
    #: Its route under ``/_qstash/`` when that is not its name (verbs on one resource).
    path: str = ""
    #: A POST that changes nothing (what ``--read-only`` still answers).
    reads: bool = False
    #: The argument a body that does not have its key is, whole (``load``'s document).
    whole: str = ""

    @property
    def route(self) -> str:
        return self.path or self.name

    def arguments(self, body: dict[str, Any]) -> dict[str, Any]:
        """The handler's arguments from a request body: every declared one, defaults
        filled in; keys it does not declare are ignored, as they always were."""
        if self.whole and self.whole not in body:
            body = {self.whole: body}
        out: dict[str, Any] = {}
        for arg in self.args:
            if arg.required and arg.name not in body:
                raise MissingArgument(f"missing {arg.name!r} in the JSON body")
            value = body.get(arg.name)
            out[arg.name] = arg.default if value is None else value
        return out


# -- what each one does on the fake --------------------------------------------------------------
async def _state(host: Host, args: dict[str, Any]) -> Any:
    return host.state()


async def _mark(host: Host, args: dict[str, Any]) -> Any:
    return reports.Mark.of(host.fake.store, host.resets).json()


def _mover(action: str, start: Callable[[FakeQStash, dict[str, Any]], Awaitable[Any]]) -> Handler:
    async def move(host: Host, args: dict[str, Any]) -> Any:
        made = await host.move(action, lambda fake: start(fake, args))
        return {"deliveries": [records.DELIVERY.render(d) for d in made], **host.state()}

    return move


async def _drain(fake: FakeQStash, args: dict[str, Any]) -> Any:
    within = args["within"]
    return await (fake.adrain() if within is None else fake.adrain(within))


def _calling(name: str, render: Callable[[Any], Any]) -> Handler:
    """The fixture's method ``name`` called with the body's arguments (by their names: the
    fields of the verb's spec), its answer rendered as JSON."""

    async def call(host: Host, args: dict[str, Any]) -> Any:
        made = getattr(host.fake, name)(**args)
        host.wake_up()
        return render(made)

    return call


def _declared(name: str) -> tuple[Arg, ...]:
    """The arguments of a verb declared in ``state.verb_specs``: its spec's fields."""
    return tuple(
        Arg(field, required=required, default=default)
        for field, required, default in fields(SPECS[name])
    )


def _fault(fault: Any) -> dict[str, Any]:
    return {
        "endpoint": fault.endpoint,
        "kind": fault.kind,
        "status": fault.status,
        "times": fault.times,
    }


async def _reset(host: Host, args: dict[str, Any]) -> Any:
    await host.reset(args)
    return host.state()


async def _clear_faults(host: Host, args: dict[str, Any]) -> Any:
    host.fake.clear_faults()
    return {}


async def _mounts(host: Host, args: dict[str, Any]) -> Any:
    return host.mounts


async def _mount(host: Host, args: dict[str, Any]) -> Any:
    prefix, to = host.mount(args["prefix"], args["to"])
    return {"prefix": prefix, "to": to}


async def _unmount(host: Host, args: dict[str, Any]) -> Any:
    return {"removed": host.unmount(args["prefix"])}


def simulation_json(simulation: Any) -> dict[str, Any] | None:
    """A simulation as the control API answers it (None outside simulation)."""
    if simulation is None:
        return None
    return {
        "seed": simulation.seed,
        "faults": list(simulation.kinds),
        "injected": [
            {
                "kind": fault.kind,
                "message_id": fault.message_id,
                "at": fault.at.isoformat(),
                "description": fault.description,
                "key": fault.key,
            }
            for fault in simulation.injected
        ],
    }


async def _simulate(host: Host, args: dict[str, Any]) -> Any:
    from ...engine.simulation import OVER_HTTP, check_seed, fault_kinds, over_http

    seed = check_seed(args["seed"], "seed")
    faults = args["faults"]
    kinds = OVER_HTTP if faults is None else over_http(fault_kinds(faults))
    return simulation_json(host.fake.simulate(seed, kinds))


async def _simulation(host: Host, args: dict[str, Any]) -> Any:
    return simulation_json(host.fake.simulation)


async def _load(host: Host, args: dict[str, Any]) -> Any:
    return await host.load(args["document"], args["start"])


async def _held(host: Host, args: dict[str, Any]) -> Any:
    return [held.as_dict() for held in host.holdback.held]


async def _retry_held(host: Host, args: dict[str, Any]) -> Any:
    retried = host.holdback.retry(args["message_id"])
    host.wake_up()
    return {"retried": retried}


async def _report(host: Host, args: dict[str, Any]) -> Any:
    mark = args["since"]
    since = None if mark is None else reports.Mark.read(mark)
    return {"text": reports.since(host.fake.store, since, host.resets)}


_RUN = records.RUN.render

VERBS: dict[str, Verb] = {
    verb.name: verb
    for verb in (
        Verb("state", (), "the clock, its mode, the next due moment and the plan", _state, "GET"),
        Verb("mark", (), "where the server's histories stand now, for report", _mark, "GET"),
        Verb(
            "tick",
            (),
            "delivers everything due now",
            _mover("tick", lambda fake, args: fake.atick()),
            dashboard=True,
        ),
        Verb(
            "advance",
            (Arg("by", required=True, param="duration"),),
            "moves the clock, delivering each message at its own time",
            _mover("advance", lambda fake, args: fake.aadvance(args["by"])),
            dashboard=True,
        ),
        Verb(
            "advance_to",
            (Arg("to", required=True, param="moment"),),
            "the same, up to a moment",
            _mover("advance_to", lambda fake, args: fake.aadvance_to(args["to"])),
            dashboard=True,
        ),
        Verb(
            "drain",
            (Arg("within", default=DRAIN_WITHIN),),
            "delivers everything pending; the clock stops at the last delivery",
            _mover("drain", _drain),
        ),
        Verb(
            "reset",
            (Arg("start"), Arg("keep"), Arg("plan")),
            "forgets everything but the credentials (and what keep names)",
            _reset,
        ),
        Verb(
            "fail_next",
            _declared("fail_next"),
            "makes the next API calls matching endpoint fail",
            _calling("fail_next", _fault),
        ),
        Verb("clear_faults", (), "disarms the faults not fired yet", _clear_faults),
        Verb(
            "simulate",
            (Arg("seed", required=True), Arg("faults")),
            "injects the faults QStash's at-least-once contract allows, on a seed, until a "
            "reset; answers the simulation",
            _simulate,
        ),
        Verb(
            "simulation",
            (),
            "the seed and fault kinds simulated, and every fault injected so far (null: none)",
            _simulation,
            "GET",
        ),
        Verb(
            "redeliver",
            (Arg("message_id", required=True),),
            "delivers a DELIVERED message once more; answers the message",
            _calling("redeliver", records.MESSAGE.render),
            dashboard=True,
        ),
        Verb(
            "resume_run",
            _declared("resume_run"),
            "a failed run's new run from the step that failed; answers the run",
            _calling("resume_run", _RUN),
        ),
        Verb(
            "restart_run",
            _declared("restart_run"),
            "a failed run's new run from the start; answers the run",
            _calling("restart_run", _RUN),
        ),
        Verb(
            "retry_failure_function",
            (Arg("dlq_id", required=True),),
            "calls a failed run's failure function again; answers the run",
            _calling("retry_failure_function", _RUN),
        ),
        Verb(
            "report",
            (Arg("since"),),
            "the failure report of what the server saw since a mark",
            _report,
            reads=True,
        ),
        Verb(
            "load",
            (Arg("document", required=True, param="source"), Arg("start")),
            "takes in an export of a QStash account (the body: the export's JSON document, "
            "all of it or nothing); answers how many of each resource it took in",
            _load,
            whole="document",
        ),
        Verb(
            "held",
            (),
            "the deliveries held back (a loaded export's URLs that are not on this machine "
            "nor mounted): message_id, url, reason, held_at, kind",
            _held,
            "GET",
        ),
        Verb(
            "retry_held",
            (Arg("message_id"),),
            "plans the held-back deliveries again, due now (or the one named): a mounted "
            "URL goes to its mount; answers the ids planned",
            _retry_held,
            dashboard=True,
            path="held/retry",
        ),
        Verb(
            "trigger",
            _declared("trigger"),
            "starts an Upstash Workflow run; answers its run id",
            _calling("trigger", lambda run_id: {"run_id": run_id}),
        ),
        Verb(
            "notify",
            _declared("notify"),
            "notifies the runs waiting for an event; answers the NotifyResponses",
            _calling("notify", lambda answers: answers),
        ),
        Verb("mounts", (), "the outbound mounts", _mounts, "GET"),
        Verb(
            "mount",
            (Arg("prefix", required=True), Arg("to", required=True)),
            "sends the outbound requests under prefix to to; answers the mount as kept",
            _mount,
            path="mounts",
        ),
        Verb(
            "unmount",
            (Arg("prefix", required=True),),
            "removes an outbound mount; answers whether there was one",
            _unmount,
            "DELETE",
            path="mounts",
        ),
    )
}

#: Each verb by its method and route.
ROUTES: dict[tuple[str, str], Verb] = {(verb.method, verb.route): verb for verb in VERBS.values()}

#: The verbs that move the clock (and deliver on the way).
CLOCK_MOVES = ("tick", "advance", "advance_to", "drain")
