"""Loading an export into a server: at start (``serve --load FILE``) and while it serves
(``POST /_qstash/load``, ``Client.load``). The export is read and applied by ``wire/load.py``,
all or nothing; this module says where the clock stands for it.

On a virtual clock a load is the fixture's ``load``: a server that holds nothing yet, whose
start was not chosen (``--start``, a reset's ``start``), starts its clock at the export's
``exported_at``, so schedules fire and runs resume as they would have from that moment; one
that holds state keeps its clock; ``start`` moves it there first. On
a real clock (``serve``'s default) the clock is the wall clock: the export's time is not used,
and what the export holds that is due is due now.

A server that loaded an export holds back the deliveries to its URLs unless they are on this
machine or mounted (``runner/holdback.py``; ``--allow-outbound`` lets them go).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...engine.models import ms_to_datetime
from ...testing.fake import FakeQStash
from ...wire.export_entries import read_document
from ...wire.load import Loaded, export_start_ms, load_export

__all__ = ["read_document", "start_of", "take_in"]


def start_of(document: Mapping[str, Any], clock: str, start: str | None) -> str | None:
    """Where a server's clock starts for ``serve --load``: ``--start`` if given, else on a
    virtual clock the export's ``exported_at`` (None when it has none: now), and on a real
    clock the wall clock (None)."""
    if start is not None or clock != "virtual":
        return start
    at = export_start_ms(document)
    return None if at is None else ms_to_datetime(at).isoformat().replace("+00:00", "Z")


def take_in(fake: FakeQStash, clock: str, document: Any, start: Any) -> Loaded:
    """Load ``document`` (the export's parsed JSON) into ``fake`` as the clock mode says
    (``LoadError``, a ``ValueError``, for what cannot be loaded: nothing is)."""
    if not isinstance(document, Mapping):
        raise ValueError(
            f"cannot load a JSON {_json_type(document)}: the document is the export's JSON "
            "object, as pytest-qstash export writes it (docs/how-to/export.md)"
        )
    if clock == "virtual":
        return fake.load(document, start=start)
    if start is not None:
        raise ValueError(
            "start sets where a virtual clock stands for a load; this server's clock is the "
            "wall clock (--clock real), which a load leaves alone: leave start out"
        )
    return load_export(fake.store, document)


def _json_type(value: Any) -> str:
    names = {str: "string", list: "array", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
