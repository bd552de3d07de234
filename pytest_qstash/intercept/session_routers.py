"""The pytest session's own routers, started the moment httpx (or httpx2) is imported.

- ``KeepHttpxPatched`` keeps respx's httpx patch in place between tests (see its docstring),
  and the fakes' patches of httpx2's clients and httpx's transports are held likewise.
- ``NetworkGuard`` stops a QStash call made while no fake is active, on httpcore's pools, and
  its companion on httpcore2's (httpx2 clients).

Both patch httpx's and httpcore's classes, so starting them loads respx and httpx. A run that
never imports httpx (a unit-test job, ``pytest --co`` of a project without HTTP) has nothing
for them to patch or guard, and pays nothing: ``import_hook`` starts them right after httpx's
own import, before any code that imported it can make a request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import import_hook

if TYPE_CHECKING:
    from .router import KeepHttpxPatched, NetworkGuard


class SessionRouters:
    """What one pytest config started (and stops at unconfigure). Each router is one per
    process: a pytester run inside a session shares the outer session's and owns none."""

    def __init__(self, *, guard: bool) -> None:
        self.guard_on = guard
        self.keep: KeepHttpxPatched | None = None
        self.guard: NetworkGuard | None = None
        self._guard2: NetworkGuard | None = None
        self._owns_keep = self._owns_guard = False

    def watch(self) -> None:
        """Start each router when its library is imported (now, for one already imported)."""
        import_hook.when_imported("httpx", self._start_httpx)
        if self.guard_on:
            import_hook.when_imported("httpx2", self._start_httpx2)

    def _start_httpx(self) -> None:
        from .router import KeepHttpxPatched, NetworkGuard

        kept = KeepHttpxPatched.running()
        self.keep = kept or KeepHttpxPatched().started()
        self._owns_keep = kept is None
        if self._owns_keep:
            # The same for the fakes' other patches: made at the first fake, kept till the end.
            from . import httpx2_support, sslcache

            sslcache.hold()
            httpx2_support.hold()
        if self.guard_on:
            running = NetworkGuard.running()
            self.guard = running or NetworkGuard().started()
            self._owns_guard = running is None

    def _start_httpx2(self) -> None:
        import httpx  # noqa: F401  # the httpcore guard first: its companion reports into it

        from . import httpx2_support

        if self.guard is not None and self._owns_guard and self._guard2 is None:
            self._guard2 = httpx2_support.start_guard(self.guard)

    def stop(self) -> None:
        import_hook.cancel(self._start_httpx)
        import_hook.cancel(self._start_httpx2)
        if self._guard2 is not None:
            self._guard2.stop(quiet=True)
        if self.guard is not None and self._owns_guard:
            self.guard.stop(quiet=True)
        if self.keep is not None and self._owns_keep:
            self.keep.stop(quiet=True)
            from . import httpx2_support, sslcache

            sslcache.unhold()
            httpx2_support.unhold()
        self.keep = self.guard = self._guard2 = None
