"""Seeded, QStash-shaped ids: the same seed gives the same ids, run after run."""

from __future__ import annotations

import random

_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


class IdGenerator:
    def __init__(self, seed: int | str = 0) -> None:
        self._random = random.Random(seed)

    def token(self, length: int) -> str:
        return "".join(self._random.choices(_BASE58, k=length))

    def message_id(self) -> str:
        return "msg_" + self.token(40)

    def jwt_id(self) -> str:
        return "jwt_" + self.token(28)

    def signing_key(self) -> str:
        return "sig_" + self.token(28)
