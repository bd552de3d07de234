"""Run a function the moment a module has been imported (or at once, if it already was).

The plugin's session-wide routers patch httpx and httpcore. Started when pytest starts, they
would load respx and httpx in every run, also the many that never make an HTTP call; started
later (at the first test, say), they would miss a QStash call made by code that imported
httpx in between (a conftest, an app imported during collection, a session fixture). So they
start when httpx is imported, before the statement that imported it returns: nothing can
reach httpx without them.

A finder first on ``sys.meta_path`` sees the watched name's import, finds its spec through the
finders after it, and wraps the spec's loader so that the callbacks run right after the
module's code (the way wrapt's post-import hooks work). The real loader is put back on the
module before its code runs, so nothing else ever sees the wrapper. Should another finder
ahead of this one load the module, ``catch_up`` (before each test) still starts them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

_callbacks: dict[str, list[Callable[[], None]]] = {}


def when_imported(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` once ``name`` is imported: now, if it already is."""
    if name in sys.modules:
        callback()
        return
    _callbacks.setdefault(name, []).append(callback)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def cancel(callback: Callable[[], None]) -> None:
    """Forget ``callback`` wherever it still waits (the plugin's, at unconfigure)."""
    for name in list(_callbacks):
        _callbacks[name] = [c for c in _callbacks[name] if c != callback]
        if not _callbacks[name]:
            del _callbacks[name]
    if not _callbacks and _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def catch_up() -> None:
    """Call the callbacks of every watched name imported without this finder seeing it: one
    more finder inserted ahead of it on ``sys.meta_path`` (an import hook of another tool)
    may have loaded it. The plugin asks before each test."""
    for name in [name for name in _callbacks if name in sys.modules]:
        _fire(name)


def _fire(name: str) -> None:
    # Taken off first: a callback may import more watched names, or this one again.
    for callback in _callbacks.pop(name, []):
        callback()
    if not _callbacks and _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = (
                find(fullname, path, target) if find is not None else None
            )
            if spec is not None:
                break
        else:
            return None  # not installed: the import fails as it would without us
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _NotifyingLoader(spec.loader, fullname)
        return spec


class _NotifyingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The module's own spec and loader, before its code runs: a module may read them.
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        _fire(self._name)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...
        return getattr(self._loader, name)


_FINDER = _Finder()
