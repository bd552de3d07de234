"""Errors a test can see from the fake itself (not from the QStash HTTP API)."""

from __future__ import annotations


class QStashFakeError(Exception):
    """Base class of every error raised by pytest-qstash's Python API."""


class UnroutedDeliveryError(QStashFakeError):
    """A due message's URL matches no mount and nothing else answered it.

    The message is not lost: it stays due, so mounting the app and calling ``tick()`` again
    delivers it.
    """

    def __init__(self, url: str, message_id: str, mounts: list[str], reason: str) -> None:
        self.url = url
        self.message_id = message_id
        self.mounts = mounts
        mounted = ", ".join(mounts) if mounts else "nothing is mounted"
        near = _near_misses(url, mounts)
        near_text = f" Note: {near}." if near else ""
        super().__init__(
            f"{message_id} is due for {url}, but no mounted app matches that URL "
            f"({reason}). Mounted: {mounted}.{near_text} Mount the app with "
            f"qstash.mount({_base_of(url)!r}, app), or answer it with a respx route or a "
            "pytest-httpx response."
        )


class DeliveryTimeoutError(QStashFakeError, TimeoutError):
    """A delivery did not finish within ``delivery_timeout`` of real time, or its event loop
    sat idle with the delivery still waiting (nothing could ever finish it).

    The attempt did not happen: the message stays due. ``stalled`` is True when the fake saw
    the idle loop before the timeout ran out.
    """

    def __init__(
        self, url: str, message_id: str, timeout_s: float, *, stalled: bool, detail: str = ""
    ) -> None:
        self.url = url
        self.message_id = message_id
        self.timeout_s = timeout_s
        self.stalled = stalled
        if stalled:
            what = (
                "is stuck: its event loop sat idle (no task ready, no timer, no I/O, no "
                "worker thread) while the app still waited"
            )
        else:
            what = f"did not finish within {timeout_s:g} s of real time (delivery_timeout)"
        super().__init__(
            f"the delivery of {message_id} to {url} {what}{detail}. Likely cause: the app "
            "awaits something bound to another event loop (a queue, worker task or "
            "connection pool its lifespan created under `with TestClient(app)`, while a "
            "mounted app is called on the fake's own loop): mount the test client instead, "
            "qstash.mount(url, client), so deliveries run where the lifespan runs. The "
            f"message is kept, due again.{'' if stalled else _LONGER}"
        )


_LONGER = (
    " For work that really takes longer, raise delivery_timeout "
    "(@pytest.mark.qstash(delivery_timeout=...))."
)


class DeliveryLoopError(QStashFakeError):
    """A cascade of deliveries did not settle (e.g. a handler republishing itself at once)."""


class ReentrantCallError(QStashFakeError, RuntimeError):
    """``tick()``/``advance()`` called from inside a delivery (an app handler, say)."""


class LifespanError(QStashFakeError, RuntimeError):
    """An app's lifespan startup or shutdown failed (the app's exception is the cause)."""


class AsyncContextError(QStashFakeError, RuntimeError):
    """A blocking method was called inside a running event loop."""


class SettingError(QStashFakeError, AttributeError):
    """A setting the fake was built with was set on it: settings shape the fake when it is
    built (the marker, the ini options, ``FakeQStash(...)``), and are read-only after."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"{name!r} is a setting the fake was built with, read-only after: give it to the "
            f"marker (@pytest.mark.qstash({name}=...)), an ini option, or FakeQStash({name}=...)"
        )
        self.name = name


def _base_of(url: str) -> str:
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].split("?", 1)[0]
    return f"{scheme}://{host}" if host else url


def _near_misses(url: str, mounts: list[str]) -> str:
    """Mounts for the same host under another scheme, port or path: the usual slip."""
    host = _host_of(url)
    near = [m for m in mounts if _host_of(m) == host and not url.startswith(m)]
    if not near:
        return ""
    return f"{', '.join(near)} is mounted for the same host, under another scheme, port or path"


def _host_of(url: str) -> str:
    rest = url.partition("://")[2]
    return rest.split("/", 1)[0].split("?", 1)[0].rsplit(":", 1)[0].lower()
