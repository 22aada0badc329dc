"""Lost answers in the newer families, the same on every backend: a write the store committed
whose answer the caller never read (the connection dropped right after the server answered), so
the caller got X_DRIVER_UNAVAILABLE and carries on. Each case asserts its family's promise after
the runtime's own retry: a cron occurrence fired once, the lead and a lock not stuck behind a
holding nobody knows, a posting once, a step's function run once and its record reused, a
consumer's cursor never back and no batch handed twice.

A backend's test file builds a `Rig`: a driver behind its own proxy (the runtime's), a direct
one on the same store (the test's reads), and `lose(token)`, which swallows the answer to the
next request holding `token` (a bind value or script argument only the write under test
carries) and then cuts every connection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from jobs_core.clock import FakeClock, SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import DriverUnavailableError
from jobs_core.job import JobRegistry, job
from jobs_core.leases.lock import with_lock
from jobs_core.records import JobFilter, JobListParams, JobRecord
from jobs_core.scheduler import LEADER_KEY, Scheduler, TaskRegistry, task

MINUTE = 60_000
HOUR = 60 * MINUTE
#: 2026-06-01T00:00:00Z.
JUNE = 1_780_272_000_000


@dataclass
class Rig:
    """The runtime's driver (behind the proxy), the test's own, and the loss."""

    driver: JobDriver
    direct: JobDriver
    #: Swallow the answer to the next request holding these bytes, then cut.
    lose: Callable[[bytes], None]
    #: How many answers were swallowed so far.
    dropped: Callable[[], int]


async def _jobs(driver: JobDriver) -> list[JobRecord]:
    page = await driver.job_list(JobListParams(JobFilter(), limit=500))
    rows = await driver.job_get_many([s.id for s in page.jobs])
    return sorted(rows.values(), key=lambda r: r.idempotency_key)


def _hourly() -> Any:
    async def report(input: Any, ctx: JobContext) -> None:
        return None

    handle = job(report, tenant="none", idempotency_key=lambda i: "hourly", registry=JobRegistry())
    return task("hourly", cron="0 * * * *", tz="UTC", job=handle, registry=TaskRegistry())


async def fire_lost_fires_each_occurrence_once(rig: Rig) -> None:
    """`task_fire` committed (job enqueued, watermark moved), its answer lost: the round fails,
    the next one is fenced by the stored watermark, and the occurrence is one job; the next
    occurrence fires as usual."""
    clock = FakeClock(JUNE + 5 * MINUTE)
    s = Scheduler(rig.driver, [_hourly()], clock=clock, lease_ttl=3 * 3600)
    assert await s.tick() == []  # leads, arms the mark
    clock.set(JUNE + HOUR + 1_000)
    rig.lose(f"task:{JUNE + HOUR}:hourly".encode())
    with pytest.raises(DriverUnavailableError):
        await s.tick()
    assert rig.dropped() == 1
    (again,) = await s.tick()
    assert again.fenced and again.job_id is None
    clock.set(JUNE + 2 * HOUR + 1_000)
    (second,) = await s.tick()
    assert second.job_id is not None and not second.fenced
    rows = await _jobs(rig.direct)
    assert [r.idempotency_key for r in rows] == [
        f"task:{JUNE + HOUR}:hourly",
        f"task:{JUNE + 2 * HOUR}:hourly",
    ]
    mark = (await rig.direct.task_marks(["hourly"]))["hourly"]
    assert mark.watermark_ms == mark.fired_ms == JUNE + 2 * HOUR
    assert await s.stop(timeout=5)


async def lead_take_lost_leads_at_the_next_ask(rig: Rig) -> None:
    """The lead's `lease_take` landed, its answer lost: the next ask (a third of the TTL on)
    takes it again under the same holder, which replaces the holding nobody knew of rather
    than being refused by it for a whole TTL; the lead is one holding all along."""
    clock = FakeClock(JUNE + 5 * MINUTE)
    s = Scheduler(rig.driver, [_hourly()], clock=clock, lease_ttl=3 * 3600, scheduler_id="s-a")
    rig.lose(b"s-a")
    with pytest.raises(DriverUnavailableError):
        await s.tick()
    assert rig.dropped() == 1 and not s.leading
    (held,) = await rig.direct.lease_holders(LEADER_KEY, clock.now_ms())
    assert held.holder == "s-a"
    clock.set(clock.now_ms() + s.renew_every_ms + s.renew_every_ms // 10 + 1)
    assert await s.tick() == []
    assert s.leading
    (again,) = await rig.direct.lease_holders(LEADER_KEY, clock.now_ms())
    assert again.holder == "s-a" and again.token > held.token
    clock.set(JUNE + 2 * HOUR + 1_000)  # armed at its lead: 02:00 is its first occurrence
    (fired,) = await s.tick()
    assert fired.job_id is not None
    assert await s.stop(timeout=5)
    # The lead it took again is the one it gives back.
    assert await rig.direct.lease_holders(LEADER_KEY, clock.now_ms()) == []


async def lock_take_lost_takes_it_again(rig: Rig) -> None:
    """`with_lock`'s `lease_take` landed, its answer lost: it is asked again under the same
    holder, which replaces that holding, so the block runs (rather than the caller failing and
    the key staying locked by nobody for a whole TTL, every other taker timing out behind it);
    the lock is one holding, released after the block."""
    clock = SystemClock()
    rig.lose(b"lock:nightly-report")
    ran: list[int] = []
    async with with_lock("nightly-report", ttl=3600, wait=5, driver=rig.driver) as lock:
        (held,) = await rig.direct.lease_holders("lock:nightly-report", clock.now_ms())
        assert held.token == lock.token
        ran.append(lock.token)
    assert rig.dropped() == 1 and ran
    assert await rig.direct.lease_holders("lock:nightly-report", clock.now_ms()) == []
