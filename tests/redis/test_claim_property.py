"""The claim, the demand and the bury against the memory driver on random data.

The parity machine walks small pools; this property spreads priorities over 0..100, times around
now, ids over multi-byte characters, several queues and pauses, and lapsed leases, and asks the
claim for random limits — the script's scan windows and merge are where Redis could drift.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs_core.records import ClaimParams, NewJob, Pause
from jobs_memory import MemoryDriver
from tests.redis.conftest import factory_for

T0 = 1_800_000_000_000
QUEUES = ("q1", "q2", "q☃")
NAMES = ("a", "b", "c")

ids = st.text(alphabet=st.sampled_from("aAbB_-%é☃💥\n{}"), min_size=1, max_size=4).map(
    lambda s: "id" + s
)
jobs = st.lists(
    st.tuples(
        ids,
        st.sampled_from(QUEUES),
        st.sampled_from(NAMES),
        st.sampled_from((0, 0, 0, 1, 50, 99, 100)),  # ties across queues are the hard case
        st.sampled_from((-3, 0, 0, 0, 2)),
        st.integers(1, 2),
    ),
    max_size=25,
    unique_by=lambda t: t[0],
)
pauses = st.lists(
    st.one_of(
        st.builds(Pause, st.just("queue"), st.sampled_from(QUEUES)),
        st.builds(Pause, st.just("name"), st.sampled_from(NAMES)),
    ),
    max_size=2,
)
claims = st.lists(
    st.tuples(
        st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3),
        st.integers(1, 8),
        st.sampled_from((0, 1, 2, 5, 3000)),
        st.sampled_from(((), ("a",), ("a", "c"))),
    ),
    min_size=1,
    max_size=5,
)


@pytest.mark.parametrize("backend", ["real", "fake"])
def test_claim_demand_and_bury_match_memory(backend: str, request: pytest.FixtureRequest) -> None:
    make = factory_for(backend, request)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(jobs=jobs, pauses=pauses, claims=claims)
    def check(
        jobs: list[tuple[str, str, str, int, int, int]],
        pauses: list[Pause],
        claims: list[tuple[list[str], int, int, tuple[str, ...]]],
    ) -> None:
        async def go() -> None:
            memory = MemoryDriver()
            async with make() as redis:
                records = [
                    NewJob(i, "r" + i, n, q, None, i, json.dumps(i), p, T0 + dt, a, T0)
                    for i, q, n, p, dt, a in jobs
                ]
                now = T0
                for d in (memory, redis):
                    await d.job_enqueue_many(records)
                    for pause in pauses:
                        await d.pause_add(pause)
                for queues, limit, ahead, drop in claims:
                    now += ahead
                    params = ClaimParams(
                        tuple(queues), "w", limit, 1000, now, drop_exhausted=frozenset(drop)
                    )
                    assert await redis.job_claim(params) == await memory.job_claim(params)
                    assert await redis.queue_demand(QUEUES, now) == await memory.queue_demand(
                        QUEUES, now
                    )
                every = [j[0] for j in jobs]
                assert await redis.job_get_many(every) == await memory.job_get_many(every)

        asyncio.run(go())

    check()
