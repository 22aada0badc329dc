"""The lease family on real Postgres, where the parity suite cannot look: takers racing on four
drivers (and so on many connections), a take waiting on its key's lock or on a row a renewal
holds, tokens in item order over a full batch, keys, holders and a schema name with quotes,
`%`, newlines and non-ASCII text, and a purge that never waits on a row another call holds."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

from psycopg import sql

from jobs_core.driver import MAX_LEASE_BATCH
from jobs_core.records import Lease, LeaseRef, LeaseRenew, LeaseTake
from jobs_pg import PgDriver
from tests.core.support import T0
from tests.lease_clock_cases import LIMIT, PER_MS, most_in_a_window, skewed_hosts, stale_racers
from tests.pg.conftest import PG_URL, admin, drop_schema, fresh_schema, migrate
from tests.pg.support import locker, named_drivers, sessions_waiting

#: Long enough that nothing expires in a test that keeps `now_ms` at T0.
FOREVER = 600_000_000


def _table(schema: str) -> sql.Composed:
    return sql.SQL("{}.leases").format(sql.Identifier(schema))


async def test_a_take_waiting_for_its_keys_lock_counts_what_the_lock_holder_committed(
    pg_schema: str,
) -> None:
    """A session holds the key's lock (its clock row, upserted as a take does) and stores a
    holding, as a racing take would; the take that waited for the lock sees that holding once it
    goes on, and is refused (one statement that counted, then waited, would count from before
    and grant a second)."""
    async with named_drivers(pg_schema, 1) as (d,):
        other = await locker()
        try:
            await other.execute(
                sql.SQL("INSERT INTO {}.lease_clocks (key, now_ms) VALUES ('k', %s)").format(
                    sql.Identifier(pg_schema)
                ),
                (T0,),
            )
            await other.execute(
                sql.SQL(
                    "INSERT INTO {} (key, holder, token, expires_at_ms, stamp)"
                    " VALUES ('k', 'other', nextval(%s::regclass), %s, false)"
                ).format(_table(pg_schema)),
                (d._lease_tokens, T0 + 10_000),
            )
            take = asyncio.create_task(d.lease_take([LeaseTake("k", "me", 1, 1000)], T0))
            await sessions_waiting(pg_schema, ("transactionid", "speculative token", "tuple"))
            # Another key's take does not wait for this one.
            assert (await d.lease_take([LeaseTake("k2", "me", 1, 1000)], T0))[0] is not None
            assert not take.done()
            await other.commit()
            assert await asyncio.wait_for(take, 20) == [None]
        finally:
            await other.close()
        assert [h.holder for h in await d.lease_holders("k", T0)] == ["other"]


async def test_a_take_decides_on_an_expired_holding_as_a_racing_renewal_left_it(
    pg_schema: str,
) -> None:
    """A holding expired at the take's `now_ms` but being renewed (by a caller whose clock is
    earlier) is read as the renewal leaves it: the take waits for its row, then finds it live
    and is refused, and the renewed holding stays. Renewed the other way round, a holding a
    take deleted as expired is not revived."""
    async with named_drivers(pg_schema, 1) as (d,):
        (a,) = await d.lease_take([LeaseTake("k", "a", 1, 1000)], T0)
        assert a is not None
        renewal = await locker()
        try:
            await renewal.execute(
                sql.SQL("UPDATE {} SET expires_at_ms = %s WHERE key = 'k' AND token = %s").format(
                    _table(pg_schema)
                ),
                (T0 + 5000, a.token),
            )
            take = asyncio.create_task(d.lease_take([LeaseTake("k", "b", 1, 1000)], T0 + 2000))
            await sessions_waiting(pg_schema, ("transactionid",))
            await renewal.commit()
            assert await asyncio.wait_for(take, 20) == [None]
        finally:
            await renewal.close()
        assert await d.lease_holders("k", T0 + 2000) == [Lease("k", "a", a.token, T0 + 5000)]
        (b,) = await d.lease_take([LeaseTake("k", "b", 1, 1000)], T0 + 5000)
        assert b is not None and b.token > a.token
        assert await d.lease_renew([LeaseRenew("k", a.token, 10_000)], T0 + 4000) == [False]
        assert [h.holder for h in await d.lease_holders("k", T0 + 4000)] == ["b"]


async def test_a_full_batch_is_decided_in_item_order_with_tokens_in_item_order(
    pg: PgDriver,
) -> None:
    """1,000 takes over ten keys of limit 60, interleaved: the first 60 of each key are
    granted, tokens grow with the item, and a later call's tokens are greater still."""
    keys = [f"batch:{i}" for i in range(10)]
    takes = [LeaseTake(keys[i % 10], f"h{i}", 60, 1000) for i in range(MAX_LEASE_BATCH)]
    got = await pg.lease_take(takes, T0)
    assert [g is not None for g in got] == [i < 600 for i in range(MAX_LEASE_BATCH)]
    tokens = [g.token for g in got if g is not None]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    for key in keys:
        holders = await pg.lease_holders(key, T0)
        assert len(holders) == 60
    refs = [LeaseRef(g.key, g.token) for g in got if g is not None]
    assert await pg.lease_release(refs[::2], T0) == [True] * 300
    later = await pg.lease_take(takes, T0 + 1)
    # Each key's 30 holders left are taken again (replaced); 30 of the rest get the free room.
    granted = [g for g in later if g is not None]
    assert len(granted) == 600
    assert min(g.token for g in granted) > max(tokens)
    renewed = await pg.lease_renew([LeaseRenew(g.key, g.token, 500) for g in granted], T0 + 2)
    assert renewed == [True] * 600


async def test_keys_holders_and_a_schema_with_quotes_percent_newlines_and_non_ascii() -> None:
    """What is stored is what comes back, byte for byte, and keys that differ in one code
    point (case, an accent, a trailing space) are different keys; the token sequence is found
    in a schema whose name needs quoting."""
    schema = fresh_schema() + "_q'u\"o%te ☃"
    key = "lock:ü'%\n\"x\\ %s %b %% $1 日本\t"
    holder = "h'%s\n\"☃\\ ; DROP TABLE leases; --"
    try:
        await asyncio.to_thread(migrate, schema)
        async with PgDriver(PG_URL, schema=schema, pool_size=2) as d:
            (got,) = await d.lease_take([LeaseTake(key, holder, 1, 1000, stamp=True)], T0)
            assert got is not None and got == Lease(key, holder, got.token, T0 + 1000, True)
            assert await d.lease_holders(key, T0) == [got]
            for twin in (key.upper(), key.replace("ü", "u"), key + " ", key[:-1]):
                (other,) = await d.lease_take([LeaseTake(twin, holder, 1, 1000)], T0)
                assert other is not None and other.key == twin
            assert await d.lease_renew([LeaseRenew(key, got.token, 2000)], T0 + 1) == [True]
            assert await d.lease_release([LeaseRef(key, got.token)], T0 + 2) == [True]
            (kept,) = await d.lease_holders(key, T0 + 2)
            assert (kept.key, kept.holder, kept.expires_at_ms) == (key, holder, T0 + 2001)
            assert await d.lease_abandon([LeaseRef(key, got.token)], T0 + 2) == [True]
            assert await d.lease_holders(key, T0 + 2) == []
    finally:
        await asyncio.to_thread(drop_schema, schema)


# -- racing takers on four drivers ----------------------------------------------------------------

LIMITS = {"race:one": 1, "race:three": 3, "race:five": 5}
WORKERS = 24
ROUNDS = 50


@dataclass
class Holding:
    """One holder's holding of one key, from its take's call to its release's (monotonic s)."""

    key: str
    took: tuple[float, float]
    ended: tuple[float, float] = (float("inf"), float("inf"))


async def test_racing_takers_on_four_drivers_never_exceed_a_limit_nor_refuse_with_room(
    pg_schema: str,
) -> None:
    """24 workers on 4 drivers take 1-3 keys at a time (limits 1, 3, 5), renew, take their own
    again, and release or abandon, hundreds of rounds interleaved. Checked from the answers:
    at each grant, the holdings certainly live then (taken before the call began, ended after
    it returned) stay within the limit; each refusal had at least `limit` holdings possibly
    live during its call; a grant after another returned carries a greater token; the workers'
    own count of holders never passes the limit; every `lease_holders` read is within it; and
    no call met a deadlock."""
    seed = random.randrange(2**32)
    print(f"lease race seed {seed}")
    rng = random.Random(seed)
    holdings: list[Holding] = []
    grants: list[tuple[Holding, tuple[float, float]]] = []
    refusals: list[tuple[str, tuple[float, float]]] = []
    tokens: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    using: Counter[str] = Counter()
    seen_most: Counter[str] = Counter()
    done = asyncio.Event()

    async with named_drivers(pg_schema, 4, pool_size=4) as drivers:

        async def take(
            d: PgDriver, takes: list[LeaseTake]
        ) -> tuple[list[Lease | None], tuple[float, float]]:
            start = time.monotonic()
            got = await d.lease_take(takes, T0)
            call = (start, time.monotonic())
            for t, g in zip(takes, got, strict=True):
                if g is not None:
                    tokens[t.key].append((*call, g.token))
            return got, call

        async def worker(w: int) -> None:
            d = drivers[w % len(drivers)]
            for r in range(ROUNDS):
                holder = f"w{w}:r{r}"
                keys = rng.sample(sorted(LIMITS), rng.randint(1, 3))
                got, call = await take(d, [LeaseTake(k, holder, LIMITS[k], FOREVER) for k in keys])
                held: dict[str, tuple[Holding, Lease]] = {}
                for k, g in zip(keys, got, strict=True):
                    if g is None:
                        refusals.append((k, call))
                        continue
                    h = Holding(k, call)
                    holdings.append(h)
                    grants.append((h, call))
                    held[k] = (h, g)
                    using[k] += 1
                    assert using[k] <= LIMITS[k], (k, using[k])
                if not held:
                    await asyncio.sleep(rng.random() * 0.002)
                    continue
                if rng.random() < 0.5:
                    renews = [LeaseRenew(k, g.token, FOREVER) for k, (_, g) in held.items()]
                    rng.shuffle(renews)
                    assert await d.lease_renew(renews, T0) == [True] * len(renews)
                if rng.random() < 0.3:
                    again = list(held)
                    rng.shuffle(again)
                    got, call = await take(
                        d, [LeaseTake(k, holder, LIMITS[k], FOREVER) for k in again]
                    )
                    replaced = []
                    for k, g in zip(again, got, strict=True):
                        h, old = held[k]
                        assert g is not None and g.token > old.token, (old, g)
                        grants.append((h, call))
                        held[k] = (h, g)
                        replaced.append(LeaseRenew(k, old.token, 1))
                    assert await d.lease_renew(replaced, T0) == [False] * len(replaced)
                await asyncio.sleep(rng.random() * 0.003)
                for k in held:
                    using[k] -= 1
                refs = [LeaseRef(k, g.token) for k, (_, g) in held.items()]
                rng.shuffle(refs)
                end = d.lease_release if rng.random() < 0.5 else d.lease_abandon
                start = time.monotonic()
                assert await end(refs, T0) == [True] * len(refs)
                for h, _ in held.values():
                    h.ended = (start, time.monotonic())

        async def watch() -> None:
            d = drivers[0]
            while not done.is_set():
                for k, limit in LIMITS.items():
                    n = len(await d.lease_holders(k, T0))
                    assert n <= limit, (k, n)
                    seen_most[k] = max(seen_most[k], n)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        try:
            await asyncio.gather(*(worker(w) for w in range(WORKERS)))
        finally:
            done.set()
            await watcher
        for k in LIMITS:
            assert await drivers[1].lease_holders(k, T0) == []
        assert sum(d.conflicts_seen for d in drivers) == 0

    for g, (start, end) in grants:
        certain = sum(
            1
            for h in holdings
            if h is not g and h.key == g.key and h.took[1] < start and h.ended[0] > end
        )
        assert certain + 1 <= LIMITS[g.key], (g, certain)
    for key, (start, end) in refusals:
        possible = sum(
            1 for h in holdings if h.key == key and h.took[0] < end and h.ended[1] > start
        )
        assert possible >= LIMITS[key], (key, possible)
    for key, calls in tokens.items():
        assert len({t for _, _, t in calls}) == len(calls)
        for _, e1, t1 in calls:
            for s2, _, t2 in calls:
                if e1 < s2:
                    assert t1 < t2, (key, t1, t2)
    # The race was a race: every key was refused at times and full at times.
    assert {k for k, _ in refusals} == set(LIMITS)
    assert seen_most == Counter(LIMITS), seen_most


async def test_a_purge_never_waits_on_a_row_a_take_or_renewal_holds(pg_schema: str) -> None:
    """A session holds one expired holding's row (a renewal in flight, say): the purge passes it
    over at once (SKIP LOCKED) and takes the next ones in expiry order; the held one goes in a
    later pass. The purge reads `leases_expiry`, one index range, not the table."""
    async with named_drivers(pg_schema, 1) as (d,):
        got = await d.lease_take([LeaseTake(f"k{i}", "a", 1, 100 + i) for i in range(4)], T0)
        assert None not in got
        other = await locker()
        try:
            await other.execute(
                sql.SQL("SELECT 1 FROM {} WHERE key = 'k0' FOR UPDATE").format(_table(pg_schema))
            )
            started = time.monotonic()
            assert await asyncio.wait_for(d.lease_purge(T0 + 200, 2), 5) == 2
            assert time.monotonic() - started < 2
        finally:
            await other.rollback()
            await other.close()
        with admin() as conn:
            left = conn.execute(
                sql.SQL("SELECT key FROM {} ORDER BY key").format(_table(pg_schema))
            ).fetchall()
            assert left == [("k0",), ("k3",)], left
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg_schema)))
            conn.execute("SET enable_seqscan = off")
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    "EXPLAIN SELECT key, token FROM leases WHERE expires_at_ms <= 1"
                    " ORDER BY expires_at_ms, key, token LIMIT 10 FOR UPDATE SKIP LOCKED"
                )
            )
            assert "leases_expiry" in plan, plan
        assert await d.lease_purge(T0 + 200, 10) == 2


# -- the key's clock -------------------------------------------------------------------------


async def test_stale_takes_racing_fresh_ones_never_put_more_than_the_limit_in_a_window(
    pg_schema: str,
) -> None:
    """Takes over four drivers (eight connections' worth of callers) whose `now_ms` was read a
    random moment before they land: in the store's stamp times, no window of `per` ever holds
    more than `limit` (a take judged at its own stale now, after a fresher one pruned the
    stamps it should count, made four)."""
    async with named_drivers(pg_schema, 4) as drivers:
        stamps = await stale_racers(drivers, seed=7)
    assert most_in_a_window(stamps, PER_MS) <= LIMIT, stamps


async def test_two_hosts_whose_clocks_disagree_share_one_window(pg_schema: str) -> None:
    """A host ten seconds behind another is judged at the key's time (the one ahead leads):
    in true time, the two of them start no more than `limit` per window."""
    async with named_drivers(pg_schema, 2) as (ahead, behind):
        granted = await skewed_hosts(ahead, behind)
    assert most_in_a_window(granted, PER_MS) <= LIMIT, granted
