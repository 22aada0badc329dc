"""`jobs_core.lost_claims`: the bookkeeping both store drivers share for claims whose answer was
lost — here with a look and a give-back of the test's own, so its waits can be driven."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import pytest

from jobs_core import lost_claims
from jobs_core.lost_claims import ClaimCall, LostClaim, LostClaims
from jobs_core.records import ClaimParams, Fence

log = logging.getLogger("tests.lost_claims")


def _params() -> ClaimParams:
    # A long lease, its clock the wall's: the claim's rows stay worth giving back throughout.
    return ClaimParams(
        queues=("q",), worker_id="w", limit=1, lease_ms=3_600_000, now_ms=int(time.time() * 1000)
    )


async def test_a_look_told_to_wait_past_a_thousand_times_still_gives_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A look answers None (the store may still run the claim: a transaction of the driver's
    open since before the loss) for as long as that lasts, up to the lease end: a lease of
    10 minutes holds over a thousand waits of `RETRY_S`. The waits stay capped at `RETRY_S`
    (a doubling reckoned as a float overflowed past 1,023 of them and ended the task, every
    pending claim of the worker left to lapse), and once the look finds the rows they go back."""
    monkeypatch.setattr(lost_claims, "RETRY_S", 0.0)  # the count matters here, not the time
    looks = 0
    given: list[Sequence[Fence]] = []
    fence = Fence("j1", 1, "w")

    async def look(lost: LostClaim) -> Sequence[Fence] | None:
        nonlocal looks
        looks += 1
        return None if looks <= 1_100 else [fence]

    async def give_back(call: ClaimCall, fences: Sequence[Fence]) -> None:
        given.append(fences)

    claims = LostClaims(log, look, give_back, lambda: False, lambda rows: ())
    call = claims.start(_params())
    claims.end(call)
    claims.lost(call)
    for _ in range(500):
        if given or not claims._pending:
            break
        await asyncio.sleep(0.01)
    assert given == [[fence]]
    assert looks == 1_101
