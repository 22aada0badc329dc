"""`lease_take` whose answer may be lost: asked again at once under the same holders."""

from __future__ import annotations

from collections.abc import Sequence

from jobs_core.clock import Clock
from jobs_core.driver import JobDriver
from jobs_core.errors import DriverUnavailableError
from jobs_core.records import Lease, LeaseTake


async def take_again_if_lost(
    driver: JobDriver, takes: Sequence[LeaseTake], clock: Clock
) -> list[Lease | None]:
    """`driver.lease_take(takes)` at the clock's time; when it fails unavailable (its write may
    have landed, its answer lost) it is sent once more at once, under the SAME holders: a
    holder's own live holding is replaced by its next take (the count stays), so a take that
    landed unanswered is neither doubled nor left holding its key for a TTL with nobody knowing.
    A second failure raises; what the first may have granted then lapses at its TTL."""
    try:
        return await driver.lease_take(takes, clock.now_ms())
    except DriverUnavailableError:
        return await driver.lease_take(takes, clock.now_ms())
