"""Which deliveries a server may send, and those it holds back instead.

A server that has loaded an export (``serve --load``, ``POST /_qstash/load``) holds copies
of production's schedules, dead letters and runs, whose URLs are production's. Unless it was
started with ``--allow-outbound``, it sends only to loopback hosts and to URLs under an
outbound mount (``--mount``, ``POST /_qstash/mounts``): ``withheld`` is that decision, the one
place it is made, asked of every attempt before anything is sent (``ServerDeliveries``).

A delivery held back is not an attempt: nothing is sent, nothing is logged, nothing fails or
goes to the DLQ. Its message is put back and set aside (``Store.set_aside``), waiting as it
was, and listed here with its URL and why (``GET /_qstash/held``, the dashboard) until a retry
plans it again (``POST /_qstash/held/retry``): mount its URL first, and it goes to the mount.
A data dir keeps a message set aside as such; a restart lists it again (``restore``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx

from ...delivery.mounts import Redirect, redirect
from ...engine.models import Message, ms_to_datetime
from ...wire.hosts import is_loopback

if TYPE_CHECKING:
    from ...engine.store import Store


def withheld(url: str, mounts: tuple[Redirect, ...], *, holding: bool) -> str | None:
    """Why a request to ``url`` must not go out (one sentence), or None when it may: always
    unless ``holding``; then only to loopback hosts and under a mount."""
    if not holding or redirect(url, mounts) is not None:
        return None
    try:
        host = httpx.URL(url).host
    except httpx.InvalidURL:
        host = ""
    if host and is_loopback(host):
        return None
    return (
        f"{url} is neither on this machine nor under an outbound mount, and this server "
        "holds a loaded export, whose URLs are production's: mount the URL (serve --mount "
        "PREFIX=TO, POST /_qstash/mounts) and retry it (POST /_qstash/held/retry), or start "
        "the server with --allow-outbound to send such deliveries"
    )


@dataclasses.dataclass(frozen=True)
class HeldDelivery:
    """A delivery the server held back: its message, the URL it was for, and why."""

    message_id: str
    url: str
    reason: str
    #: When it was held back (the server's clock).
    held_at: datetime
    #: What the message is: ``"message"``, ``"callback"``, ``"failure_callback"``,
    #: ``"workflow"`` (a run's step), ``"call"`` (a workflow's ``context.call``).
    kind: str = "message"

    def as_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "url": self.url,
            "reason": self.reason,
            "held_at": self.held_at.isoformat().replace("+00:00", "Z"),
            "kind": self.kind,
        }

    @classmethod
    def read(cls, data: dict[str, Any]) -> HeldDelivery:
        """One item of ``GET /_qstash/held``, read back."""
        return cls(
            message_id=str(data["message_id"]),
            url=str(data["url"]),
            reason=str(data["reason"]),
            held_at=datetime.fromisoformat(str(data["held_at"]).replace("Z", "+00:00")),
            kind=str(data.get("kind", "message")),
        )


class Holdback:
    """The server's held-back deliveries (one store's: a reset starts afresh) and the rule.

    ``holding`` says whether the rule applies now, ``mounts`` the outbound mounts: both read
    from the server's settings at each attempt, so a mount counts from the moment it is made.
    """

    def __init__(
        self, holding: Callable[[], bool], mounts: Callable[[], tuple[Redirect, ...]]
    ) -> None:
        self._holding = holding
        self._mounts = mounts
        self._held: dict[str, HeldDelivery] = {}
        self._store: Store | None = None

    def bind(self, store: Store) -> None:
        """Hold back for ``store`` from now on (a new server's, or a reset's); what was held
        for another store is forgotten, and what this one has set aside is listed again."""
        self._store = store
        self._held = {}
        self.restore()

    @property
    def holding(self) -> bool:
        """Whether the rule applies now (a loaded export, no ``--allow-outbound``)."""
        return self._holding()

    def reason(self, url: str) -> str | None:
        """``withheld`` under the server's settings now."""
        return withheld(url, self._mounts(), holding=self._holding())

    def hold(self, message: Message, reason: str) -> None:
        """Set ``message`` aside (its attempt put back already) and list it."""
        store = self._require_store()
        store.set_aside(message)
        held_id = message.message_id
        self._held[held_id] = HeldDelivery(
            message.message_id,
            message.url,
            reason,
            ms_to_datetime(store.clock.now_ms),
            _kind(store, message),
        )

    @property
    def held(self) -> list[HeldDelivery]:
        """What is held back now, in the order it was held (what a cancel, a retry or a
        "run now" planned again is no longer)."""
        store = self._require_store()
        for message_id in [m for m in self._held if not store.is_set_aside(m)]:
            del self._held[message_id]
        return list(self._held.values())

    def retry(self, message_id: str | None = None) -> list[str]:
        """Plan the held messages again (or the one named), due now: each goes out if the
        rule lets it now (a mount made since), else it is held back again. Returns the ids
        planned; ``ValueError`` for an id that is not held back."""
        store = self._require_store()
        held = [item.message_id for item in self.held]
        if message_id is not None:
            if message_id not in held:
                listed = ", ".join(held) if held else "none is"
                raise ValueError(
                    f"message {message_id!r} is not held back; those held back: {listed}"
                )
            held = [message_id]
        retried = []
        for held_id in held:
            message = store.messages.get(held_id)
            self._held.pop(held_id, None)
            if message is not None and store.take_back(message):
                retried.append(held_id)
        return retried

    def restore(self) -> None:
        """List the messages the store holds set aside (a data dir's, after a restart): why
        is asked again; one the rule lets go now is planned again."""
        store = self._require_store()
        for message_id, since_ms in store.set_aside_ids().items():
            message = store.messages[message_id]
            why = self.reason(message.url)
            if why is None:
                store.take_back(message)
            elif message_id not in self._held:
                self._held[message_id] = HeldDelivery(
                    message_id,
                    message.url,
                    why,
                    ms_to_datetime(since_ms),
                    _kind(store, message),
                )

    def _require_store(self) -> Store:
        assert self._store is not None, "bind() gives the holdback its store"
        return self._store


def _kind(store: Store, message: Message) -> str:
    if message.callback_for is not None:
        return message.kind
    if message.workflow_run_id is not None:
        return "call" if store.workflows.is_third_party_call(message) else "workflow"
    return "message"
