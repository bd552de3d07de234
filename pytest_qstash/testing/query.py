"""The lists a test reads (``qstash.messages``, ``qstash.deliveries``, ...), with lookups.

They are plain lists, so ``== []``, ``len()`` and unpacking work as usual; ``filter`` and
``one`` pick items by their fields, and ``one`` fails with the candidates and how each one
differs, which says more than an ``IndexError`` or a bare ``assert any(...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

#: How many candidates a failed ``one()`` lists.
_SHOWN = 10


class Found(list[T]):
    """A list of items of one kind, in creation order."""

    def __init__(self, items: Iterable[T] = (), kind: str = "item") -> None:
        super().__init__(items)
        self.kind = kind

    def filter(self, predicate: Callable[[T], bool] | None = None, /, **fields: Any) -> Found[T]:
        """The items whose fields equal the values given (a callable value is a test of
        the field: ``state=lambda s: s != "DELIVERED"``), and for which ``predicate`` holds.
        A field that is a method, such as ``json``, is called: ``json={"id": 7}``."""
        return Found(
            (item for item in self if not _differences(item, fields, predicate)), self.kind
        )

    def one(self, predicate: Callable[[T], bool] | None = None, /, **fields: Any) -> T:
        """The one item matching (as ``filter``); ``AssertionError`` naming the candidates
        and what differs when there is none or more than one."""
        __tracebackhide__ = True
        matches = self.filter(predicate, **fields)
        if len(matches) == 1:
            return matches[0]
        wanted = _describe(fields, predicate)
        if matches:
            lines = [f"expected one {self.kind} with {wanted}, found {len(matches)}:"]
            lines += [f"  {item!r}" for item in matches[:_SHOWN]]
        else:
            lines = [f"expected one {self.kind} with {wanted}, found none among {len(self)}"]
            for item in self[:_SHOWN]:
                differs = _differences(item, fields, predicate)
                lines.append(f"  {item!r}: " + "; ".join(differs))
        if len(self) > _SHOWN and not (matches and len(matches) <= _SHOWN):
            lines.append(f"  ... and {len(self) - _SHOWN} more")
        raise AssertionError("\n".join(lines))


def _differences(
    item: Any, fields: dict[str, Any], predicate: Callable[[Any], bool] | None
) -> list[str]:
    differs = []
    for name, wanted in fields.items():
        actual = _field(item, name)
        if isinstance(actual, _Unreadable):
            differs.append(f"{name}={actual!r}")  # no value to compare or to test
        elif callable(wanted) and not isinstance(wanted, type):
            if not wanted(actual):
                differs.append(f"{name}={actual!r} fails the test given")
        elif actual != wanted:
            differs.append(f"{name}={actual!r}, not {wanted!r}")
    if predicate is not None and not predicate(item):
        differs.append("the predicate is false")
    return differs


def _field(item: Any, name: str) -> Any:
    try:
        value = getattr(item, name)
    except AttributeError:
        fields = sorted(n for n in dir(item) if not n.startswith("_"))
        raise TypeError(
            f"{type(item).__name__} has no field {name!r}; it has: {', '.join(fields)}"
        ) from None
    if not callable(value):
        return value
    try:
        return value()
    except Exception as exc:  # json() of a body that is no JSON: a mismatch, not a crash
        return _Unreadable(f"<{name}() raised {type(exc).__name__}>")


class _Unreadable(str):
    """A field that could not be read: equal to nothing but itself, shown as what failed."""

    def __repr__(self) -> str:
        return str(self)


def _describe(fields: dict[str, Any], predicate: Callable[..., bool] | None) -> str:
    parts = [
        f"{name}=<test>" if callable(v) and not isinstance(v, type) else f"{name}={v!r}"
        for name, v in fields.items()
    ]
    if predicate is not None:
        parts.append("the predicate")
    return ", ".join(parts) or "no condition"
