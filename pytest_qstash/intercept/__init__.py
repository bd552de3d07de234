"""Interception: the QStash hosts answered by the fake (respx, httpx2), and only those."""
