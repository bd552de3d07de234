"""Deliveries into a mounted Django application, made as Django's test client makes requests.

Django closes "old" database connections at the start and end of every request
(``close_old_connections`` on ``request_started`` and ``request_finished``). A connection inside
a test's transaction (pytest-django's ``django_db``, ``django.test.TestCase``) is one it closes:
the delivery then fails, and so does the rest of the test. Django's test client disconnects
that handler for the length of each request; a delivery into a Django handler from a sync test,
made in the test's thread, does the same. (From an async test, Django's sync code runs in
other threads, on connections of their own that are never the test's: those it closes as
usual.)

Django's ASGI handler runs sync code (sync views and middleware, the ORM under async views) on
its thread-sensitive executor, a thread of its own, away from the test's connection and its
transaction. A sync test's delivery runs it in the test's own thread instead, as Django's test
case runs async tests: through asgiref's ``async_to_sync``, which runs the event loop in a
helper thread and the thread-sensitive work in the calling one.

Django is never imported here unless the app is a Django handler, which needs it loaded.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Literal, TypeVar

_T = TypeVar("_T")
_HANDLERS = (
    ("django.core.handlers.wsgi", "WSGIHandler", "wsgi"),
    ("django.core.handlers.asgi", "ASGIHandler", "asgi"),
)


def django_handler(app: Any) -> Literal["wsgi", "asgi"] | None:
    """Which of Django's handlers ``app`` is (what ``get_wsgi_application()`` and
    ``get_asgi_application()`` return, subclasses too), or None. A Django app has Django
    loaded: without it in ``sys.modules``, nothing is one."""
    for module_name, class_name, kind in _HANDLERS:
        module = sys.modules.get(module_name)
        handler = getattr(module, class_name, None)
        if isinstance(handler, type) and isinstance(app, handler):
            return kind  # type: ignore[return-value]
    return None


_lock = threading.Lock()
_deliveries_in_flight = 0
_reconnect: list[Callable[[], None]] = []


@contextlib.contextmanager
def connections_kept_open() -> Iterator[None]:
    """For the length of a delivery, Django closes no database connection at the start or end
    of a request, as under its test client. With deliveries overlapping (an async test's), the
    first in takes the handlers off and the last out puts back those it took."""
    global _deliveries_in_flight
    with _lock:
        if _deliveries_in_flight == 0:
            _reconnect.extend(_disconnect_close_old_connections())
        _deliveries_in_flight += 1
    try:
        yield
    finally:
        with _lock:
            _deliveries_in_flight -= 1
            if _deliveries_in_flight == 0:
                for reconnect in _reconnect:
                    reconnect()
                _reconnect.clear()


def _disconnect_close_old_connections() -> list[Callable[[], None]]:
    # Django ships no type information: looked up, untyped.
    signals = importlib.import_module("django.core.signals")
    close_old_connections = importlib.import_module("django.db").close_old_connections
    undo: list[Callable[[], None]] = []
    for signal in (signals.request_started, signals.request_finished):
        # Put back only what was there: a project may have taken it off itself.
        if signal.disconnect(close_old_connections):
            undo.append(functools.partial(signal.connect, close_old_connections))
    return undo


def run_in_this_thread(coroutine: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Await ``coroutine()`` on an event loop of its own in a helper thread, while Django's
    thread-sensitive work runs here, in the caller's thread (on its database connection)."""
    from asgiref.sync import async_to_sync

    async def run() -> _T:
        return await coroutine()

    return async_to_sync(run)()
