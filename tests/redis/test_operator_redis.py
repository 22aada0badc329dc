"""The operator family on Redis, where the parity suite cannot look: the listing index and the
queue counts of rows an older version stored (built by `migrate`), a settle moving its counter
inside its own script, the scan budget over a big store, and folds racing on one server."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace
from typing import Any

from jobs_core.records import (
    Ack,
    ClaimParams,
    CounterReadParams,
    JobFilter,
    JobListParams,
    Nack,
    NackKind,
)
from jobs_core.semantics import HOUR_MS, MINUTE_MS, decode_cursor
from jobs_redis import RedisDriver
from jobs_redis.scripts import load_all
from tests.core.retention_support import new_job
from tests.redis.conftest import CONNECT_TIMEOUT_S, REDIS_URL, Factory, fresh_prefix, purge

T = 1_800_000_000_000


class Sent:
    """Records every command the driver's main client sends, and the script each EVALSHA ran."""

    def __init__(self, client: Any) -> None:
        self.commands: list[str] = []
        by_sha = {s.sha: s.name for s in load_all().values()}
        original = client.execute_command

        async def counted(*args: Any, **options: Any) -> Any:
            name = str(args[0])
            self.commands.append(by_sha.get(str(args[1]), "?") if name == "EVALSHA" else name)
            return await original(*args, **options)

        client.execute_command = counted


async def _stats_by_walking(d: RedisDriver, now_ms: int) -> dict[str, dict[str, Any]]:
    """What `queue_stats` must answer, worked out from every stored row (the slow way)."""
    client: Any = d.client
    out: dict[str, dict[str, Any]] = {}
    for row in (await client.hgetall(d.keys.state)).values():
        f = row.split("\x00")
        q = out.setdefault(f[9], {"counts": Counter(), "oldest": None})
        q["counts"][f[0]] += 1
        if f[0] == "ready" and int(f[5]) <= now_ms:
            q["oldest"] = min(q["oldest"] or int(f[5]), int(f[5]))
    return out


async def _stats(d: RedisDriver, now_ms: int) -> dict[str, dict[str, Any]]:
    return {
        s.queue: {
            "counts": Counter({st.value: n for st, n in s.counts if n}),
            "oldest": s.oldest_ready_at_ms,
        }
        for s in await d.queue_stats(now_ms)
    }


async def _listed(d: RedisDriver) -> list[str]:
    page = await d.job_list(JobListParams(limit=500))
    return [j.id for j in page.jobs]


async def test_migrate_on_a_fresh_prefix_says_it_created_the_schema(make_driver: Factory) -> None:
    """A new user's first `ujobs db upgrade` on a prefix that holds nothing is told the schema was
    created, as on Postgres (it read "upgraded to schema 2: 0 index entries added")."""
    async with make_driver() as d:
        await d.client.delete(d.keys.schema)  # a prefix nothing was ever written under
        assert await d.migrate() == "created schema 2 (a fresh prefix: nothing to index)"
        assert await d.migrate() == "schema 2 current (0 index entries added)"


async def test_migrate_lists_and_counts_rows_an_older_version_stored(make_driver: Factory) -> None:
    async with make_driver() as d:
        jobs = [new_job(f"j{i}", T + i, queue=f"q{i % 3}") for i in range(30)]
        await d.job_enqueue_many(jobs)
        got = await d.job_claim(ClaimParams(("q0", "q1"), "w", 8, 1000, T + 100))
        held = {j.id: j.fence for j in got.jobs}
        first, *rest = sorted(held)
        await d.job_ack([Ack(held[first], T + 101)])
        # What an older version leaves: no listing index, no queue counts, no schema mark, and
        # job:data rows of four fields (no traceparent).
        client: Any = d.client
        k = d.keys
        await client.delete(k.created, k.queue_count, k.schema)
        for job_id, data in (await client.hgetall(k.data)).items():
            await client.hset(k.data, job_id, data.rsplit("\x00", 1)[0])
        assert await _listed(d) == []
        assert await d.queue_stats(T + 200) == []
        # Settles before the upgrade reaches a row move no count of it (the row is counted once,
        # by migrate, in the state it is in then): a nack and a cancel of unindexed rows.
        assert await d.job_nack([Nack(held[rest[0]], NackKind.FAIL, T + 102)]) == [True]
        await d.job_cancel(rest[1], T + 103)
        assert await client.hgetall(k.queue_count) == {}

        assert "upgraded" in await d.migrate()
        assert "current" in await d.migrate()  # idempotent: nothing counted twice
        assert await client.get(k.schema) == "2"
        assert await _stats(d, T + 200) == await _stats_by_walking(d, T + 200)
        want = [j.id for j in sorted(jobs, key=lambda j: j.created_at_ms, reverse=True)]
        assert await _listed(d) == want
        # The old rows read back whole, and settle (and count) as new ones do.
        assert (await d.job_get_many([first]))[first].traceparent is None
        assert await d.job_ack([Ack(held[rest[2]], T + 104)]) == [True]
        assert await _stats(d, T + 200) == await _stats_by_walking(d, T + 200)
        # A claim decodes job:data in Lua: an old row of four fields is claimed whole (on real
        # Redis, Lua 5.1, whose patterns cannot hold the NUL the fields are split on).
        old = sorted(j.id for j in jobs if j.queue == "q2")
        claimed = await d.job_claim(ClaimParams(("q2",), "w2", 20, 1000, T + 300))
        assert sorted(j.id for j in claimed.jobs) == old
        assert all(j.traceparent is None and j.run_id for j in claimed.jobs)
        want_input = {j.id: j.input_json for j in jobs}
        assert all(j.input_json == want_input[j.id] for j in claimed.jobs)


async def test_a_settle_moves_its_counter_inside_its_own_script() -> None:
    driver = RedisDriver(REDIS_URL, prefix=fresh_prefix(), connect_timeout=CONNECT_TIMEOUT_S)
    try:
        async with driver as d:
            await d.job_enqueue_many([new_job(f"j{i}", T) for i in range(4)])
            # j3 has one attempt, so its lapsed lease is buried by the next claim. Made in a wake
            # slot of its own: it publishes now, no trailing PUBLISH lands among the settles.
            await d.job_enqueue(replace(new_job("bury", T), max_attempts=1, created_at_ms=T + 10))
            got = await d.job_claim(ClaimParams(("q",), "w", 5, 1000, T))
            f = {j.id: j.fence for j in got.jobs}
            sent = Sent(d.client)
            await d.job_ack([Ack(f["j0"], T + 1)])
            await d.job_nack([Nack(f["j1"], NackKind.RETRY, T + 2, run_at_ms=T + 10**6)])
            await d.job_claim(ClaimParams(("q",), "w", 1, 1000, T + 5_000))
            assert sent.commands == ["job_ack", "job_nack", "job_claim"]
            sent.commands.clear()
            await d.job_cancel("j2", T + 6_000)
            # The cancel reads the row's queue first (a bulk call's KEYS name its queues).
            assert sent.commands == ["HMGET", "job_cancel_many"]
            rows = await d.counter_read(CounterReadParams(T - HOUR_MS, T + HOUR_MS))
            assert [(r.completed, r.retried, r.dead_lettered, r.cancelled) for r in rows] == [
                (1, 1, 1, 1)
            ]
            assert rows[0].width_ms == MINUTE_MS
    finally:
        await purge(driver)
        await driver.close()


async def test_a_walk_through_10k_rows_examines_the_scan_budget_per_page(
    make_driver: Factory,
) -> None:
    async with make_driver() as d:
        # Ids whose code-point order differs from UTF-16's and from a locale's: the index must
        # order them byte by byte (UTF-8 bytes order as code points do).
        ids = [f"{c}{i:05d}" for i in range(2_500) for c in ("z", "é", "\uffff", "😀")]
        for start in range(0, len(ids), 5_000):
            chunk = ids[start : start + 5_000]
            await d.job_enqueue_many([new_job(i, T + int(i[1:]) // 7) for i in chunk])
        want = sorted(((T + int(i[1:]) // 7, i) for i in ids), reverse=True)
        nothing = JobFilter(name="no such job")
        pages = 0
        cursor = None
        while True:
            page = await d.job_list(JobListParams(filter=nothing, cursor=cursor, scan=2_000))
            pages += 1
            assert page.jobs == ()
            if page.next_cursor is None:
                break
            # The cursor names the 2,000th row of this page: exactly 2,000 were examined.
            at = decode_cursor(page.next_cursor, nothing)
            assert (at.created_at_ms, at.id) == want[2_000 * pages - 1]
            cursor = page.next_cursor
        assert pages == 5
        listed: list[tuple[int, str]] = []
        cursor = None
        while True:
            page = await d.job_list(JobListParams(cursor=cursor, limit=500, scan=10_000))
            listed += [(j.created_at_ms, j.id) for j in page.jobs]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert listed == want


async def test_folds_racing_on_one_server_fold_each_minute_once() -> None:
    prefix = fresh_prefix()
    drivers = [
        RedisDriver(REDIS_URL, prefix=prefix, connect_timeout=CONNECT_TIMEOUT_S) for _ in range(3)
    ]
    d = drivers[0]
    try:
        minutes = 40
        await d.job_enqueue_many([new_job(f"j{m}", T) for m in range(minutes)])
        got = await d.job_claim(ClaimParams(("q",), "w", minutes, 10**6, T))
        start = T - T % HOUR_MS
        for m, j in enumerate(sorted(got.jobs, key=lambda j: j.id)):
            assert await d.job_ack([Ack(j.fence, start + m * MINUTE_MS)]) == [True]
        later = start + 3 * HOUR_MS
        folded = await asyncio.gather(*(x.counter_fold(later, 7) for x in drivers * 3))
        assert sum(folded) == minutes
        rows = await d.counter_read(CounterReadParams(start - HOUR_MS, later))
        assert [(r.bucket_ms, r.width_ms, r.completed) for r in rows] == [(start, HOUR_MS, minutes)]
    finally:
        await purge(d)
        for x in drivers:
            await x.close()
