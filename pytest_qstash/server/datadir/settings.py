"""The settings a data dir keeps, and how they meet those a start gives: the stored ones win,
and a start that names different ones (a token, signing keys, a clock, a start time) is
refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ...delivery.mounts import merge_redirects
from .errors import PersistenceError

#: The settings a data dir keeps (the rest is the operator's choice at each start; the
#: outbound mounts are kept, and those given at a start join them).
KEPT = ("token", "current_signing_key", "next_signing_key", "clock", "start", "seed", "plan")


def kept(settings: Any) -> dict[str, Any]:
    """What a snapshot keeps of the server's settings: plain data."""
    values = {name: getattr(settings, name, None) for name in KEPT}
    values["mounts"] = [list(pair) for pair in getattr(settings, "mounts", ())]
    values["loaded"] = bool(getattr(settings, "loaded", False))  # holds a loaded export
    return values


def reconcile(stored: dict[str, Any], given: Any, explicit: frozenset[str], path: Path) -> Any:
    """The settings to serve with: ``given`` (the start's, a frozen dataclass) with the stored
    ones in place of its own. ``explicit`` names those the command line gave: one that differs
    from the stored one is refused (``PersistenceError``), as is another clock."""
    where = f"--data-dir {path}"
    fields = {f.name: f for f in dataclasses.fields(given)}
    values: dict[str, Any] = {}
    for name in KEPT:
        value = stored.get(name)
        if name in fields and (value is None or type(value) in (str, int)):
            values[name] = value
    clock = values.get("clock", given.clock)
    if given.clock != clock:
        raise PersistenceError(
            f"{where} holds the state of a server on a {clock} clock: start it with "
            f"--clock {clock}, or use another --data-dir for a {given.clock} clock"
        )
    if "start" in explicit and given.start != stored.get("start"):
        raise PersistenceError(
            f"--start sets where a new server's clock starts; {where} holds a server "
            f"started with --start {stored.get('start') or '(none)'}, whose clock goes on "
            "from where it stopped (leave --start out, give that one, or use another "
            "--data-dir)"
        )
    for name in ("token", "current_signing_key", "next_signing_key"):
        if name in explicit and getattr(given, name) != values.get(name):
            option = "--" + name.replace("_", "-")
            raise PersistenceError(
                f"{where} holds a server with another {name.replace('_', ' ')} than the "
                f"one given ({option} or the environment): leave it out to keep the "
                "stored one, or use another --data-dir"
            )
    # How long one attempt may take, and the region deliveries are marked with, are the
    # operator's choice at each start, not state; mounts given at this start join the
    # stored ones.
    if "mounts" in fields:
        values["mounts"] = merge_redirects(_redirects(stored.get("mounts")), given.mounts)
    # A state that holds a loaded export keeps holding back its deliveries (runner/holdback).
    if "loaded" in fields:
        values["loaded"] = stored.get("loaded") is True or given.loaded
    return dataclasses.replace(given, **values)


def _redirects(value: Any) -> tuple[tuple[str, str], ...]:
    """Stored outbound mounts: [prefix, target] pairs of text (anything else: none)."""
    if not isinstance(value, list):
        return ()
    return tuple(
        (pair[0], pair[1])
        for pair in value
        if isinstance(pair, list) and len(pair) == 2 and all(type(p) is str for p in pair)
    )
