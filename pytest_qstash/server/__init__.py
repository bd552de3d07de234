"""Server mode: the fake QStash over real HTTP, for apps in other processes.

``pytest-qstash serve`` runs it (``cli.py``, on uvicorn); ``Client`` steers and inspects a
running one over its control API; the ``qstash_server`` fixture starts one per test session
(per pytest-xdist worker). Nothing here imports uvicorn but the command itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Loaded on first use (PEP 562): the qstash_server plugin imports this package in every run.
_WHERE = {
    "AppProcess": ".processes.apps",
    "Client": ".control.client",
    "NodeApp": ".processes.node",
    "NodeUnavailable": ".processes.node",
    "install_node_packages": ".processes.node",
    "ServerError": ".control.client",
    "ServerProcess": ".processes.server",
}

if TYPE_CHECKING:
    from .control.client import Client, ServerError
    from .processes.apps import AppProcess
    from .processes.node import NodeApp, NodeUnavailable, install_node_packages
    from .processes.server import ServerProcess

__all__ = [
    "AppProcess",
    "Client",
    "NodeApp",
    "NodeUnavailable",
    "ServerError",
    "ServerProcess",
    "install_node_packages",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value
