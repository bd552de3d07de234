"""What the rules modules may use of the store: the seam between the mutator (``store.py``,
the one entry point the API, the facade and the server call) and the modules holding the
rules it delegates to (``workflow_dlq.py``, ``trigger.py``, ``provisioned.py``) or the verbs
it is composed of (``store_runs.py``, ``store_resources.py``).

Those modules are handed the store as an ``Engine`` (the verbs take it as ``self``) and never
import ``store.py``: the store imports them, so the import runs one way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .clock import VirtualClock
from .dlq import DeadLetters
from .flow_control import FlowKey, FlowKeys
from .ids import IdGenerator
from .models import Message
from .options import MessageOptions
from .plans import Plan
from .queues import Queue, Queues
from .retention import Retention
from .schedules import Schedules
from .url_groups import UrlGroup
from .waiters import Waiters
from .workflows import WorkflowRuns


@dataclass(slots=True)
class Published:
    message: Message
    deduplicated: bool
    #: The endpoint's URL when the destination was a URL group.
    endpoint_url: str | None = None


class Engine(Protocol):
    """The store, as the rules modules see it: its collections and its own transitions."""

    @property
    def clock(self) -> VirtualClock: ...

    @property
    def ids(self) -> IdGenerator: ...

    @property
    def dlq(self) -> DeadLetters: ...

    @property
    def workflows(self) -> WorkflowRuns: ...

    @property
    def url_groups(self) -> dict[str, UrlGroup]: ...

    @property
    def queues(self) -> Queues: ...

    @property
    def schedules(self) -> Schedules: ...

    @property
    def flow_keys(self) -> FlowKeys: ...

    @property
    def waiters(self) -> Waiters: ...

    @property
    def plan(self) -> Plan: ...

    @property
    def retention(self) -> Retention | None: ...

    @property
    def messages(self) -> dict[str, Message]: ...

    @property
    def default_retries(self) -> int: ...

    def create_message(
        self,
        url: str,
        content: bytes,
        opts: MessageOptions,
        *,
        queue: str | None = None,
        url_group: str | None = None,
        endpoint_name: str | None = None,
        schedule_id: str | None = None,
        callback_for: str | None = None,
        max_retries: int | None = None,
        cause: Message | None = None,
        message_id: str | None = None,
    ) -> Message: ...

    def publish(
        self,
        destination: str,
        content: bytes,
        opts: MessageOptions,
        *,
        queue: str | None = None,
        schedule_id: str | None = None,
        cause: Message | None = None,
    ) -> tuple[list[Published], bool]: ...

    def cancel(self, message: Message) -> bool: ...

    def flow_key(self, key: str) -> FlowKey: ...

    def update_queue(
        self, name: str, *, parallelism: int | None = None, paused: bool | None = None
    ) -> Queue: ...

    def wake_flow(self, key: str) -> None: ...

    def check_new_url_group(self, name: str) -> None: ...
