"""Budget 3: time skipping costs events, not the time skipped."""

from __future__ import annotations

import time
from collections.abc import Callable

import qstash
from bench import (
    APP_BASE,
    HOOK,
    START,
    TRIVIAL_APP,
    Mode,
    Report,
    Step,
    interleaved,
    ms,
    us,
)

from pytest_qstash import FakeQStash

# -- 3. time skipping ------------------------------------------------------------------------
#: Skipping ten years with nothing due costs at most so many times skipping a second.
IDLE_ADVANCE_BUDGET = 1.5


def idle_advance(report: Report, k: int, rounds: int) -> None:
    """``advance("3650d")`` with nothing due against ``advance("1s")`` with nothing due, ``k``
    of each a round: time skipped costs nothing, so the two cost the same."""
    with FakeQStash(start="2000-01-01T00:00:00Z") as fake:
        fake.mount(APP_BASE, TRIVIAL_APP)

        def advances(by: str) -> Callable[[], float]:
            def run() -> float:
                began = time.perf_counter()
                for _ in range(k):
                    fake.advance(by)
                return (time.perf_counter() - began) / k

            return run

        for by in ("3650d", "1s"):  # warm-up: the first advance builds what later ones reuse
            fake.advance(by)
        result = interleaved({"decade": advances("3650d"), "second": advances("1s")}, rounds)
    ratio = result.ratio("decade", "second")
    report.check(
        f'3. advance("3650d"), nothing due ({rounds} x {k})',
        ms(result.median("decade")),
        ms(result.median("second")) + ' advance("1s")',
        ratio,
        f"<= {IDLE_ADVANCE_BUDGET:g}x",
        ratio <= IDLE_ADVANCE_BUDGET,
    )


def cron_firing(report: Report, n: int, rounds: int) -> None:
    figure = f'3. minutely cron firing, advance("1m") ({rounds} x {n})'
    budget = "<= 1.5x"
    # Probe: until the fake serves /v2/schedules it answers 501, which the SDK raises.
    with FakeQStash(start=START) as fake:
        fake.mount(APP_BASE, TRIVIAL_APP)
        client = qstash.QStash(fake.token, retry=False)
        try:
            client.schedule.create(destination=HOOK, cron="* * * * *")
        except qstash.errors.QStashError as exc:
            if "501" in str(exc):
                report.skip(figure, "not available yet (schedules answer 501)", budget)
                return
            raise

    def plain() -> float:
        with FakeQStash(start=START) as fake:
            fake.mount(APP_BASE, TRIVIAL_APP)
            client = qstash.QStash(fake.token, retry=False)
            for i in range(n):
                client.message.publish_json(url=HOOK, body={"n": i}, delay=f"{60 * (i + 1)}s")
            began = time.perf_counter()
            for _ in range(n):
                fake.advance("1m")
            elapsed = time.perf_counter() - began
            assert len(fake.deliveries) == n, len(fake.deliveries)
            return elapsed / n

    def cron() -> float:
        with FakeQStash(start=START) as fake:
            fake.mount(APP_BASE, TRIVIAL_APP)
            client = qstash.QStash(fake.token, retry=False)
            client.schedule.create(destination=HOOK, cron="* * * * *", body='{"n":0}')
            began = time.perf_counter()
            for _ in range(n):
                fake.advance("1m")
            elapsed = time.perf_counter() - began
            assert len(fake.deliveries) == n, len(fake.deliveries)
            return elapsed / n

    result = interleaved({"plain": plain, "cron": cron}, rounds)
    ratio = result.ratio("cron", "plain")
    report.check(
        figure,
        us(result.median("cron")),
        us(result.median("plain")) + " delayed message",
        ratio,
        budget,
        ratio <= 1.5,
    )


def linear_growth(report: Report, small: int, factor: int, rounds: int) -> None:
    def per_event(n: int) -> Callable[[], float]:
        def run() -> float:
            with FakeQStash(start=START) as fake:
                fake.mount(APP_BASE, TRIVIAL_APP)
                client = qstash.QStash(fake.token, retry=False)
                for i in range(n):
                    client.message.publish_json(url=HOOK, body={"n": i}, delay=f"{i + 1}s")
                began = time.perf_counter()
                fake.advance("1d")
                elapsed = time.perf_counter() - began
                assert len(fake.deliveries) == n
                return elapsed / n

        return run

    big = small * factor
    result = interleaved({"small": per_event(small), "big": per_event(big)}, rounds)
    ratio = result.ratio("big", "small")
    report.check(
        f"3. one advance over {big} due messages, per event ({rounds} rounds)",
        us(result.median("big")),
        us(result.median("small")) + f" with {small}",
        ratio,
        "<= 1.5x",
        ratio <= 1.5,
    )


def steps(report: Report, mode: Mode) -> list[Step]:
    idle, cron, linear = {
        "full": ((50, 11), (50, 11), (100, 8, 7)),
        "ci": ((30, 7), (30, 11), (50, 8, 5)),
        "smoke": ((5, 2), (3, 2), (5, 4, 2)),
    }[mode]
    return [
        ("3", f"<= {IDLE_ADVANCE_BUDGET:g}x", lambda: idle_advance(report, *idle)),
        ("3", "<= 1.5x", lambda: cron_firing(report, *cron)),
        ("3", "<= 1.5x", lambda: linear_growth(report, *linear)),
    ]
