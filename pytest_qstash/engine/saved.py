"""What a data dir keeps of an engine table that is no dataclass, declared by the table itself.

The store and its tables (the clock, the id generator, the DLQ...) hold their state in
attributes they are free to rename. Each declares here, once, the fields a data dir keeps,
each under a public name (the data dir's schema), and the data dir reads and restores them
through these methods only: it never names an attribute, so renaming one changes nothing
saved and needs no migration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar


def saved_as(attributes: str) -> dict[str, str]:
    """Public name to attribute for ``attributes`` (names apart by spaces, as
    ``namedtuple`` takes them): each saved under its name without a leading ``_``
    (``"_heap"`` is kept as ``heap``)."""
    return {attribute.lstrip("_"): attribute for attribute in attributes.split()}


def _none() -> None:
    return None


#: What an attribute that is not saved is after a restore, when it had no value before: a
#: callback its owner sets again, a choice made for one run of the server.
UNSET: Callable[[], Any] = _none


class Saved:
    """A table whose fields a data dir keeps (``SAVED``) by public name."""

    __slots__ = ()  # a table with slots keeps them (``Trail``)

    #: Each saved field: its public name and the attribute that holds it.
    SAVED: ClassVar[Mapping[str, str]] = {}
    #: Attributes not saved, and what each is after a restore when it had no value (an
    #: object restored in place keeps its own: the callbacks its owner set).
    UNSAVED: ClassVar[Mapping[str, Callable[[], Any]]] = {}

    def saved_fields(self) -> dict[str, Any]:
        """The saved fields' values, by public name."""
        return {name: getattr(self, attribute) for name, attribute in self.SAVED.items()}

    def undeclared_attributes(self) -> list[str]:
        """Attributes neither saved nor declared unsaved: state a data dir would lose."""
        held = set(getattr(self, "__dict__", ()))
        for cls in type(self).__mro__:
            held.update(name for name in getattr(cls, "__slots__", ()) if hasattr(self, name))
        held -= {"__dict__", "__weakref__"}
        return sorted(held - set(self.SAVED.values()) - set(self.UNSAVED))

    def restore_fields(self, values: Mapping[str, Any]) -> None:
        """Become what ``values`` (every saved field, by public name) describe; an unsaved
        attribute keeps its value, or takes its ``UNSAVED`` one when it has none."""
        for name, make in self.UNSAVED.items():
            if not hasattr(self, name):
                setattr(self, name, make())
        for name, attribute in self.SAVED.items():
            setattr(self, attribute, values[name])
        self.restored()

    def restored(self) -> None:
        """Called once its fields are restored: what a table derives from them (links to
        another table's collections) it sets again here."""
