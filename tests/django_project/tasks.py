"""django-qstash tasks; found by django-qstash's discovery because they sit next to settings."""

from __future__ import annotations

from typing import Any

from django_qstash import stashed_task

#: What the task bodies did, in order; tests clear it.
ran: list[tuple[str, Any]] = []
#: How many more times ``flaky`` fails before it succeeds.
flaky_failures_left: list[int] = [0]


@stashed_task
def greet(name: str, punctuation: str = "!") -> str:
    greeting = f"Hello, {name}{punctuation}"
    ran.append(("greet", greeting))
    return greeting


@stashed_task
async def greet_async(name: str) -> str:
    ran.append(("greet_async", name))
    return f"Hi, {name}"


@stashed_task
def flaky(name: str) -> str:
    ran.append(("flaky", name))
    if flaky_failures_left[0] > 0:
        flaky_failures_left[0] -= 1
        raise RuntimeError("flaky failed on purpose")
    return name


@stashed_task(bind=True)
def poll(self: Any, until_retry: int) -> int:
    """Asks for another run (Celery-style ``self.retry``) until the ``until_retry``-th one."""
    ran.append(("poll", self.request.retries))
    if self.request.retries < until_retry:
        self.retry(countdown=10)
    return int(self.request.retries)
