"""What an app provisions (URL groups, queues, schedules), carried from one store to a fresh one.

A server that outlives its tests forgets messages and runs between them, but the app it serves
created its URL groups, queues and schedules once, at start-up. ``carry_over`` copies those
into a new store as resources, never as history: queues come empty, schedules keep their ids,
cron and settings but not the messages they made (what they make later is new, with the new
store's ids), and each schedule's next firing is the first cron time at or after the new
store's now.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace

from .engine import Engine
from .queues import Queue
from .url_groups import Endpoint, UrlGroup

#: The resources ``carry_over`` can keep, by the names a reset takes.
KEEPABLE: tuple[str, ...] = ("url_groups", "queues", "schedules")


def keep_names(keep: Iterable[str] | str | bool | None) -> frozenset[str]:
    """The resources to keep: ``True`` (or ``"all"``) for all of them, a name or a list of
    names, ``None``/``False``/``[]`` for none. ``ValueError`` for a name not known."""
    if keep is None or keep is False:
        return frozenset()
    if keep is True or keep == "all":
        return frozenset(KEEPABLE)
    names = [keep] if isinstance(keep, str) else list(keep)
    unknown = [n for n in names if not isinstance(n, str) or n not in KEEPABLE]
    if unknown:
        raise ValueError(
            f"cannot keep {', '.join(map(repr, unknown))}: expected true (all), or any of "
            f"{', '.join(KEEPABLE)}"
        )
    return frozenset(names)


def carry_over(old: Engine, new: Engine, keep: Collection[str]) -> None:
    """Copy the resources named in ``keep`` from ``old`` into ``new`` (whose clock is set)."""
    now = new.clock.now_ms
    if "url_groups" in keep:
        for group in old.url_groups.values():
            new.url_groups[group.name] = UrlGroup(
                group.name,
                group.created_ms,
                group.updated_ms,
                [Endpoint(e.url, e.name) for e in group.endpoints],
            )
    if "queues" in keep:
        for queue in old.queues.values():
            new.queues[queue.name] = Queue(
                queue.name, queue.created_ms, queue.updated_ms, queue.parallelism, queue.paused
            )
    if "schedules" in keep:
        for schedule in old.schedules.values():
            kept = replace(schedule, last_message_ids=[], generation=0)
            if not kept.paused:
                # The firing that was next, unless the new clock is past it (then firings
                # in between are skipped, as a resumed schedule skips them).
                kept.next_ms = kept.expression.next_after_ms(now - 1)
            new.schedules.adopt(kept)
