"""The lease key's clock under real concurrency, shared by each backend's lease tests: callers
whose `now_ms` was read before another's landed, racing over several driver instances, and two
hosts whose clocks disagree by more than a window. The parity suite checks the same rules one
call at a time (`scenario_lease_time_never_runs_back`); these race them over real connections.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from jobs_core.driver import JobDriver
from jobs_core.records import Lease, LeaseTake

T0 = 1_800_000_000_000
LIMIT = 3
PER_MS = 100


def most_in_a_window(times: Sequence[int], per: int) -> int:
    """The most of `times` inside one window of `per` ms (`t` to `t + per`, excluded)."""
    return max((sum(1 for u in times if t <= u < t + per) for t in times), default=0)


async def stale_racers(drivers: Sequence[JobDriver], *, seed: int, takes: int = 24) -> list[int]:
    """Each driver's callers read a shared clock, then wait a random moment (a claim's round
    trip, a busy loop) before their stamp goes out, so takes land out of the order of their
    `now_ms`; answers every stamp's time as the store granted it (its end less `per`)."""
    rng = random.Random(seed)
    tick = 0
    stamps: list[Lease] = []

    async def caller(d: JobDriver, name: str) -> None:
        nonlocal tick
        for i in range(takes):
            now = T0 + tick
            tick += 7
            await asyncio.sleep(rng.uniform(0, 0.012))
            got = await d.lease_take([LeaseTake("rate", f"{name}-{i}", LIMIT, PER_MS, True)], now)
            stamps.extend(g for g in got if g is not None)

    await asyncio.gather(*(caller(d, f"c{n}") for n, d in enumerate([*drivers, *drivers])))
    assert stamps, "no stamp granted"
    return sorted(s.expires_at_ms - PER_MS for s in stamps)


async def skewed_hosts(ahead: JobDriver, behind: JobDriver, *, skew_ms: int = 10_000) -> list[int]:
    """Two hosts take stamps of one key every 25 ms of true time for 1.5 s, the first one's
    clock `skew_ms` ahead of the second's (it speaks first: the key's time starts at its clock).
    Answers the true time of every stamp granted, whoever took it."""
    granted: list[int] = []
    for true_ms in range(0, 1500, 25):
        for name, host, clock in (
            ("a", ahead, T0 + skew_ms + true_ms),
            ("b", behind, T0 + true_ms),
        ):
            take = LeaseTake("rate", f"{name}{true_ms}", LIMIT, PER_MS, True)
            (got,) = await host.lease_take([take], clock)
            if got is not None:
                granted.append(true_ms)
    return granted
