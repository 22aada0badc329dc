"""The attempt history on Redis: the scripts' bound is the contract's, and a removed row leaves
no history for a new row of the same id."""

from __future__ import annotations

import re
from typing import Any

from jobs_core.attempts import ATTEMPT_HISTORY, AttemptOutcome
from jobs_core.records import Ack, ClaimParams
from jobs_redis.scripts import load_source
from tests.core.retention_support import new_job
from tests.redis.conftest import Factory

T = 1_800_000_000_000


def test_the_scripts_keep_the_contracts_number_of_attempts() -> None:
    (bound,) = re.findall(r"local ATTEMPT_HISTORY = (\d+)", load_source("job_ack"))
    assert int(bound) == ATTEMPT_HISTORY


async def test_a_removed_rows_history_goes_with_it(make_driver: Factory) -> None:
    async with make_driver() as d:
        await d.job_enqueue(new_job("r", T))
        (held,) = (await d.job_claim(ClaimParams(("q",), "w", 1, 1000, T))).jobs
        assert await d.job_ack([Ack(held.fence, T + 1)]) == [True]
        row = (await d.job_get_many(["r"]))["r"]
        assert [a.outcome for a in row.attempts] == [AttemptOutcome.COMPLETED]
        assert row.claimed_at_ms == T
        await d.job_remove(["r"])
        client: Any = d.client
        for key in (d.keys.attempts, d.keys.claimed):
            assert not await client.hexists(key, "r"), key
        await d.job_enqueue(new_job("r", T + 2))
        again = (await d.job_get_many(["r"]))["r"]
        assert (again.attempts, again.claimed_at_ms) == ((), None)
