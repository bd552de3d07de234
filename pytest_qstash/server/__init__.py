"""Server mode: the fake QStash over real HTTP, for apps in other processes.

``pytest-qstash serve`` runs it (``cli.py``, on uvicorn); ``Client`` steers and inspects a
running one over its control API; the ``qstash_server`` fixture starts one per test session
(per pytest-xdist worker). Nothing here imports uvicorn but the command itself.
"""

from __future__ import annotations

from .apps import AppProcess
from .client import Client, ServerError
from .node import NodeApp, NodeUnavailable, install_node_packages
from .process import ServerProcess
from .records import Record

__all__ = [
    "AppProcess",
    "Client",
    "NodeApp",
    "NodeUnavailable",
    "Record",
    "ServerError",
    "ServerProcess",
    "install_node_packages",
]
