"""Seeded, QStash-shaped ids: the same seed gives the same ids, run after run."""

from __future__ import annotations

import random
from typing import Any

from .saved import Saved, saved_as

#: The characters of the ids QStash makes (base58: no 0, O, I or l).
BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


class IdGenerator(Saved):
    SAVED = saved_as("_random drawn")

    def __init__(self, seed: int | str = 0) -> None:
        self._random = random.Random(seed)
        #: Characters drawn so far: where the sequence is (a server's journal records it).
        self.drawn = 0

    def position(self) -> tuple[tuple[Any, ...], int]:
        """Where the sequence is: the random state and ``drawn``."""
        return self._random.getstate(), self.drawn

    def restore(self, earlier: IdGenerator) -> None:
        """Go back to where ``earlier`` (a copy of this generator taken before) is."""
        state, self.drawn = earlier.position()
        self._random.setstate(state)

    def token(self, length: int) -> str:
        self.drawn += length
        return "".join(self._random.choices(BASE58, k=length))

    def skip(self, count: int) -> None:
        """Draw ``count`` characters for nothing: afterwards the generator is where one is
        that made ids of ``count`` characters in all (each character is one draw)."""
        while count > 0:
            step = min(count, 1 << 16)
            self.token(step)
            count -= step

    def message_id(self) -> str:
        return "msg_" + self.token(40)

    def jwt_id(self) -> str:
        return "jwt_" + self.token(28)

    def signing_key(self) -> str:
        return "sig_" + self.token(28)
