"""The server's HTTP: the QStash API and the control API, its verbs, records and ``Client``."""
