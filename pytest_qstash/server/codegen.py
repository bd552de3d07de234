"""The functions written once per class from the field registry, as ``dataclasses`` writes
``__init__``: a record's renderer (``records``) and a data-dir row's filler
(``datadir_codec``). A list renders thousands of items and a restart fills every object of
a large state: a loop over a plan per field cost most of each. The code is made of the
registry's own field names, each checked to be an identifier; nothing of an item or a row is
in it. This is the one module that writes code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .forms import Bytes, bytes_as_text


def _split(value: Any) -> Any:
    raise AssertionError("bytes are written by the renderer's own code")


#: The writer that stands for bytes: written as two fields (``forms.Bytes``).
SPLIT: Callable[[Any], Any] = _split

#: One rendered field: its name, reader (an attribute's name or a function), writer (None:
#: the value is its own JSON) and the nested field and key it is moved out of.
Step = tuple[
    str, "str | Callable[[Any], Any]", "Callable[[Any], Any] | None", "tuple[str, str] | None"
]


def renderer(
    kind: str, plan: tuple[Step, ...], without: frozenset[str]
) -> Callable[[Any], dict[str, Any]]:
    """``render(item)`` for a record of ``kind``: per field of ``plan`` not in ``without``,
    the item's value written by its writer (``records.Model._plan``)."""
    namespace: dict[str, Callable[[Any], Any]] = {}
    lines = ["def render(item):", "    out = {}"]
    for i, (name, read, write, hoisted_from) in enumerate(plan):
        if name in without:
            continue
        indent = "    "
        if hoisted_from is not None:
            lines += [
                f"    nested = out.get({hoisted_from[0]!r})",
                "    if nested is not None:",
                f"        out[{name!r}] = nested.pop({hoisted_from[1]!r})",
                "    else:",
            ]
            indent = "        "
        if isinstance(read, str):
            if not read.isidentifier():
                raise ValueError(f"{kind}: no attribute can be named {read!r}")
            lines.append(f"{indent}v = item.{read}")
        else:
            namespace[f"R{i}"] = read
            lines.append(f"{indent}v = R{i}(item)")
        if write is SPLIT:
            namespace["split"] = bytes_as_text
            encoded = name + Bytes.suffix
            lines += [
                f"{indent}if v is None:",
                f"{indent}    out[{name!r}] = out[{encoded!r}] = None",
                f"{indent}else:",
                f"{indent}    out[{name!r}], out[{encoded!r}] = split(v)",
            ]
        elif write is None:
            lines.append(f"{indent}out[{name!r}] = v")
        else:
            namespace[f"W{i}"] = write
            lines.append(f"{indent}out[{name!r}] = None if v is None else W{i}(v)")
    lines.append("    return out")
    exec("\n".join(lines), namespace)  # the model's own field names only
    made: Callable[[Any], dict[str, Any]] = namespace["render"]
    return made


def filler(
    cls: type,
    plan: tuple[tuple[str, str, Any, Callable[[], Any] | None], ...],
    missing: Any,
    scalars: frozenset[type],
    missing_field: type[Exception],
) -> Callable[[Any, Mapping[str, Any], Callable[[Any], Any]], None]:
    """``fill(obj, row, value)`` for a dataclass, from its ``Kind.field_defaults``: per field,
    the row's value under its key (through ``value`` unless it is a scalar), else its
    default, set on its attribute. ``missing`` marks a field a row leaves out; a row without
    one that has no default raises ``missing_field`` with its key."""
    frozen = cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    namespace: dict[str, Any] = {
        "MISSING": missing,
        "SCALARS": scalars,
        "MissingField": missing_field,
        "set_field": object.__setattr__,
    }
    lines = ["def fill(obj, row, value):", "    get = row.get"]
    for i, (key, name, shared, make) in enumerate(plan):
        if not name.isidentifier():  # a dataclass field always is: never trust, though
            raise ValueError(f"{cls.__qualname__} has a field named {name!r}")
        lines.append(f"    v = get({key!r}, MISSING)")
        if shared is not missing:
            namespace[f"D{i}"] = shared
            lines.append(f"    if v is MISSING: v = D{i}")
        elif make is not None:
            namespace[f"F{i}"] = make
            lines.append(f"    if v is MISSING: v = F{i}()")
        else:
            lines.append(f"    if v is MISSING: raise MissingField({key!r})")
        lines.append("    elif v is not None and type(v) not in SCALARS: v = value(v)")
        if frozen:
            lines.append(f"    set_field(obj, {name!r}, v)")
        else:
            lines.append(f"    obj.{name} = v")
    exec("\n".join(lines), namespace)  # our own field names only, as dataclasses does
    filler: Callable[[Any, Mapping[str, Any], Callable[[Any], Any]], None] = namespace["fill"]
    return filler
