"""Redis specifics of the lease family, beyond the parity suite: takers racing on several driver
instances (several connections), lease keys and holders of any text, a lease key named like a
queue or like the family's own keys, full batches, expired holdings dropped by the next take or
a purge (and indexed for it by an upgrade), and one script call per lease call."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from redis.crc import key_slot

from jobs_core.driver import MAX_LEASE_BATCH, MAX_LEASE_KEY_BYTES
from jobs_core.records import ClaimParams, Lease, LeaseRef, LeaseRenew, LeaseTake
from jobs_memory import MemoryDriver
from jobs_redis import RedisDriver
from tests.lease_clock_cases import LIMIT, PER_MS, most_in_a_window, skewed_hosts, stale_racers
from tests.redis.conftest import CONNECT_TIMEOUT_S, Factory
from tests.redis.test_durable_redis import new_job
from tests.redis.test_operator_redis import Sent

T0 = 1_800_000_000_000
#: Lease keys and holders a codec or a key pattern could get wrong: quotes, %, newlines, braces
#: (the cluster hash tag), glob characters, backslashes, non-ASCII, and names of the family's
#: own Redis keys and of a queue's.
ODD = (
    "lock:ü'%\n\"x",
    "100%\r\n%s%d\\n",
    "{x}}{",
    "*?[a-z]^\\",
    "☃ 名前 \U0001f600",
    "er:x",
    "x",
    "-token",
    "token",
    "q",
    "lease:q",
    " ",
)


def _other(d: RedisDriver) -> RedisDriver:
    """Another driver on `d`'s prefix: its own connections on a server, `d`'s fake client.
    With the tests' connect timeout, as every fixture's driver: a burst of connects on a busy
    machine once took over the default second (`task_fire: Timeout connecting to server`)."""
    if d.url == "fakeredis://":
        return RedisDriver(d.url, prefix=d.keys.prefix, client=d.client)
    return RedisDriver(d.url, prefix=d.keys.prefix, connect_timeout=CONNECT_TIMEOUT_S)


async def test_racing_takers_on_several_instances_never_pass_the_limit(
    make_driver: Factory,
) -> None:
    """Hundreds of takes, renewals, releases and abandons from 16 callers over 4 driver
    instances, each call a batch over one or both of two keys (limits 3 and 1), at one time.

    A caller counts itself held from its grant's reply until just before it sends its release:
    over that span its holding is surely live, so more than `limit` counted at once would be a
    breach. A watcher asks `lease_holders` meanwhile: never more than the limit, and every
    caller counted held across the whole call is among them.
    """
    limits = {"slots": 3, "lock": 1}
    async with make_driver() as base:
        drivers = [base, *(_other(base) for _ in range(3))]
        try:
            held: dict[str, dict[str, int]] = {key: {} for key in limits}
            tokens: list[int] = []
            grants = {key: 0 for key in limits}
            done = asyncio.Event()

            async def caller(n: int) -> None:
                rng = random.Random(n)
                d = drivers[n % len(drivers)]
                for i in range(30):
                    keys = rng.sample(sorted(limits), rng.choice((1, 2)))
                    holder = f"c{n}-{i}"
                    got = await d.lease_take(
                        [LeaseTake(k, holder, limits[k], 600_000) for k in keys], T0
                    )
                    mine = [g for g in got if g is not None]
                    for g in mine:
                        held[g.key][holder] = g.token
                        grants[g.key] += 1
                        tokens.append(g.token)
                        assert len(held[g.key]) <= limits[g.key], (g.key, held[g.key])
                    await asyncio.sleep(rng.random() / 500)
                    if mine and rng.random() < 0.3:
                        renews = [LeaseRenew(g.key, g.token, 600_000) for g in mine]
                        assert await d.lease_renew(renews, T0) == [True] * len(mine)
                    for g in mine:
                        del held[g.key][holder]
                    refs = [LeaseRef(g.key, g.token) for g in mine]
                    end = d.lease_abandon if rng.random() < 0.2 else d.lease_release
                    assert await end(refs, T0) == [True] * len(mine)

            async def watcher() -> None:
                d = drivers[-1]
                while not done.is_set():
                    for key, limit in limits.items():
                        before = dict(held[key])
                        live = await d.lease_holders(key, T0)
                        assert len(live) <= limit, live
                        stayed = {h for h, t in before.items() if held[key].get(h) == t}
                        assert stayed <= {h.holder for h in live}, (stayed, live)
                    await asyncio.sleep(0)

            async def callers() -> None:
                try:
                    async with asyncio.TaskGroup() as tg:
                        for n in range(16):
                            tg.create_task(caller(n))
                finally:
                    done.set()

            # A failing caller or watcher stops every other before the drivers close.
            async with asyncio.TaskGroup() as tg:
                tg.create_task(watcher())
                tg.create_task(callers())
            assert len(set(tokens)) == len(tokens)
            # Rooms freed by a release went to later takers, again and again: none was lost.
            assert grants["slots"] > 3 * 4 and grants["lock"] > 4, grants
            for key, limit in limits.items():
                assert await base.lease_holders(key, T0) == []
                again = await base.lease_take(
                    [LeaseTake(key, f"last-{j}", limit, 1000) for j in range(limit + 1)], T0
                )
                assert [g is not None for g in again] == [True] * limit + [False], again
        finally:
            for d in drivers[1:]:
                await d.close()


async def test_odd_keys_and_holders_round_trip(make_driver: Factory) -> None:
    """Keys and holders of any text come back as they went in, each key on its own; a lease key
    named like a queue leaves that queue's running jobs alone; every key sits in the prefix's
    slot and none is left once every holding ends."""
    async with make_driver() as d:
        await d.job_enqueue(new_job(1, queue="q"))
        claimed = await d.job_claim(ClaimParams(("q",), "w", 1, 60_000, T0))
        assert len(claimed.jobs) == 1
        long_key = "ü" * (MAX_LEASE_KEY_BYTES // 2)
        keys = (*ODD, long_key)
        holders = [f"{ODD[(i + 1) % len(ODD)]}|{i}" for i in range(len(keys))]
        takes = [LeaseTake(k, h, 2, 1000) for k, h in zip(keys, holders, strict=True)]
        got = await d.lease_take(takes, T0)
        assert [(g.key, g.holder) for g in got if g is not None] == [
            (t.key, t.holder) for t in takes
        ]
        for t, g in zip(takes, got, strict=True):
            assert await d.lease_holders(t.key, T0) == [g]
        found = [k async for k in d.client.scan_iter(match=d.keys.pattern())]
        assert {d.keys.hold(k) for k in keys} <= set(found)
        assert {key_slot(k.encode()) for k in found} == {key_slot(d.keys.state.encode())}
        # The lease key "q" and the queue "q" are apart: the claimed job is still held.
        assert await d.job_get_many([claimed.jobs[0].id])
        assert await d.client.zcard(d.keys.lease("q")) == 1
        stamps = await d.lease_take([LeaseTake(k, "stamp", 2, 1000, True) for k in keys], T0 + 1)
        leases = [g for g in [*got, *stamps] if g is not None]
        assert len(leases) == 2 * len(keys)
        renews = [LeaseRenew(g.key, g.token, 5000) for g in leases]
        assert await d.lease_renew(renews, T0 + 2) == [True] * len(leases)
        assert await d.lease_release([LeaseRef(g.key, g.token) for g in leases], T0 + 3) == [
            True
        ] * len(leases)
        for k in keys:
            assert [(h.holder, h.stamp) for h in await d.lease_holders(k, T0 + 3)] == [
                ("stamp", True)
            ]
        abandons = [LeaseRef(g.key, g.token) for g in stamps if g is not None]
        assert await d.lease_abandon(abandons, T0 + 4) == [True] * len(keys)
        left = {k async for k in d.client.scan_iter(match=d.keys.pattern())}
        assert not {k for k in left if k.startswith((d.keys.hold(""), d.keys.holder("")))}
        assert d.keys.hold_token in left


async def test_a_full_batch_of_distinct_keys(make_driver: Factory) -> None:
    """1,000 items naming 1,000 lease keys: one script call with 2,002 KEYS, answers in order."""
    async with make_driver() as d:
        keys = [f"k{i}" for i in range(MAX_LEASE_BATCH)]
        got = await d.lease_take([LeaseTake(k, "h", 1, 1000) for k in keys], T0)
        assert [g.key for g in got if g is not None] == keys
        tokens = [g.token for g in got if g is not None]
        assert tokens == sorted(tokens)
        refused = await d.lease_take([LeaseTake(k, "other", 1, 1000) for k in keys], T0)
        assert refused == [None] * MAX_LEASE_BATCH
        refs = [LeaseRef(g.key, g.token) for g in got if g is not None]
        assert await d.lease_release(refs[::-1], T0) == [True] * MAX_LEASE_BATCH
        assert await d.lease_release(refs, T0) == [False] * MAX_LEASE_BATCH


async def test_one_key_many_holders_in_one_batch(make_driver: Factory) -> None:
    """1,000 takes of one key of limit 999: the last is refused, decided in order."""
    async with make_driver() as d:
        got = await d.lease_take(
            [LeaseTake("k", f"h{i}", 999, 1000) for i in range(MAX_LEASE_BATCH)], T0
        )
        assert [g is None for g in got] == [False] * 999 + [True]
        holders = await d.lease_holders("k", T0)
        assert [h.holder for h in holders] == [f"h{i}" for i in range(999)]


async def test_expired_holdings_go_when_the_key_is_next_taken(make_driver: Factory) -> None:
    """A crashed holder's holding is not left behind for good: the key's next take drops every
    expired one (slots and stamps, released or not), from both of the key's hashes."""
    async with make_driver() as d:
        got = await d.lease_take(
            [LeaseTake("k", f"h{i}", 100, 10, stamp=i % 2 == 0) for i in range(100)], T0
        )
        stamps = [LeaseRef("k", g.token) for g in got if g is not None and g.stamp]
        assert await d.lease_release(stamps, T0) == [True] * 50
        client: Any = d.client
        assert await client.zcard(d.keys.hold("k")) == 100
        assert await d.lease_holders("k", T0 + 10) == []
        assert await client.zcard(d.keys.hold("k")) == 100  # a read writes nothing
        late = await d.lease_take([LeaseTake("k", "h0", 100, 10)], T0 + 10)
        assert late[0] is not None
        assert await client.zcard(d.keys.hold("k")) == 1
        assert await client.hlen(d.keys.holder("k")) == 2


async def test_a_renewal_never_revives_an_expired_holding(make_driver: Factory) -> None:
    """Nobody took the room, the holding is still stored: the renewal still fails and writes
    nothing, and the holder's next take is a new grant."""
    async with make_driver() as d:
        (a,) = await d.lease_take([LeaseTake("k", "a", 1, 10)], T0)
        assert a is not None
        client: Any = d.client
        before = await client.zscore(d.keys.hold("k"), str(a.token))
        assert await d.lease_renew([LeaseRenew("k", a.token, 1000)], T0 + 10) == [False]
        assert await client.zscore(d.keys.hold("k"), str(a.token)) == before
        (again,) = await d.lease_take([LeaseTake("k", "a", 1, 10)], T0 + 10)
        assert again is not None and again.token > a.token


async def test_each_lease_call_is_one_script_call(make_driver: Factory) -> None:
    async with make_driver() as d:

        async def every_call(now: int) -> None:
            taken = await d.lease_take(
                [LeaseTake("a", "h", 2, 100), LeaseTake("b", "h", 1, 100)], now
            )
            leases: list[Lease] = [g for g in taken if g is not None]
            refs = [LeaseRef(g.key, g.token) for g in leases]
            await d.lease_renew([LeaseRenew(g.key, g.token, 100) for g in leases], now)
            await d.lease_holders("a", now)
            await d.lease_release(refs[:1], now)
            await d.lease_abandon(refs[1:], now)
            await d.lease_purge(now, 1000)

        await every_call(T0)  # loads the scripts a fresh server lacks
        sent = Sent(d.client)
        await every_call(T0 + 1)
        assert sent.commands == [
            "lease_take",
            "lease_renew",
            "lease_holders",
            "lease_release",
            "lease_abandon",
            "lease_purge",
        ]


async def test_random_lease_calls_answer_as_the_memory_driver(make_driver: Factory) -> None:
    """2,000 random lease calls, on Redis and on the reference driver alike: the same answers,
    tokens included (both stores number their grants from 1), with the clock moving to holdings'
    ends and now and then back (callers' clocks disagree)."""
    rng = random.Random(20261202)
    keys = ("a", "b", "lock:ü'%\n\"x")
    holders = ("h1", "h2", "h3", "h4")
    memory = MemoryDriver()
    async with make_driver() as d:
        now = T0
        granted: list[Lease] = []
        for step in range(2_000):
            op = rng.choice(
                ("take", "take", "take", "renew", "release", "abandon", "clock", "purge")
            )
            if op == "clock":
                ends = [g.expires_at_ms for g in granted[-8:]] or [now]
                now = max(T0, rng.choice(ends) + rng.choice((-1, 0, 1, -500)))
                continue
            if op == "purge":
                limit = rng.choice((1, 2, 1000))
                assert await d.lease_purge(now, limit) == await memory.lease_purge(now, limit)
                continue
            if op == "take":
                pairs = {(rng.choice(keys), rng.choice(holders)) for _ in range(rng.randint(1, 4))}
                takes = [
                    LeaseTake(
                        k, h, 1 + keys.index(k), rng.choice((1, 300, 1000)), rng.random() < 0.3
                    )
                    for k, h in sorted(pairs)
                ]
                want: object = await memory.lease_take(takes, now)
                got: object = await d.lease_take(takes, now)
                assert isinstance(want, list)
                granted += [g for g in want if g is not None]
            else:
                recent = granted[-12:]
                picked = [rng.choice(recent) for _ in range(rng.randint(1, 3))] if recent else []
                refs = [LeaseRef(g.key, g.token) for g in picked] or [LeaseRef("a", 2**61)]
                items: list[Any] = refs
                if op == "renew":
                    items = [LeaseRenew(r.key, r.token, rng.choice((1, 500))) for r in refs]
                want = await getattr(memory, f"lease_{op}")(items, now)
                got = await getattr(d, f"lease_{op}")(items, now)
            assert got == want, (step, op, now)
            for k in keys:
                assert await d.lease_holders(k, now) == await memory.lease_holders(k, now), step


async def test_a_purge_leaves_nothing_of_a_lease_key_it_empties(make_driver: Factory) -> None:
    """Holdings expired on keys of any text (braces, glob characters, newlines) go with both of
    their key's Redis keys and their index entries; a live holding stays, with its entry; the
    token counter stays, so a later grant of a purged key is still greater."""
    async with make_driver() as d:
        client: Any = d.client
        got = await d.lease_take([LeaseTake(k, "h", 2, 10, k == ODD[0]) for k in ODD], T0)
        (live,) = await d.lease_take([LeaseTake(ODD[1], "other", 2, 1000)], T0)
        assert None not in got and live is not None
        assert await client.zcard(d.keys.hold_expiry) == len(ODD) + 1
        assert await d.lease_purge(T0 + 10, 5) == 5
        assert await d.lease_purge(T0 + 10, 1000) == len(ODD) - 5
        left = {k async for k in client.scan_iter(match=d.keys.pattern())}
        assert {k for k in left if k.startswith((d.keys.hold(""), d.keys.holder("")))} == {
            d.keys.hold(ODD[1]),
            d.keys.holder(ODD[1]),
        }
        assert await client.zrange(d.keys.hold_expiry, 0, -1) == [f"{ODD[1]}\x00{live.token:019d}"]
        assert await d.lease_holders(ODD[1], T0 + 10) == [live]
        (again,) = await d.lease_take([LeaseTake(ODD[0], "h", 2, 10)], T0 + 10)
        assert again is not None and again.token > live.token


async def test_upgrade_indexes_holdings_stored_before_the_index(make_driver: Factory) -> None:
    """A store written before `hold-expiry` existed (here: the index deleted): the purge finds
    nothing to take until `migrate()` (`ujobs db upgrade`) indexes every stored holding, live or
    not, at its current end; then it takes the expired ones only. Running it again adds none."""
    async with make_driver() as d:
        client: Any = d.client
        keys = ODD[:4]
        await d.lease_take([LeaseTake(k, "h", 1, 10) for k in keys], T0)
        (renewed,) = await d.lease_take([LeaseTake("lasting", "h", 1, 10)], T0)
        assert renewed is not None
        await client.delete(d.keys.hold_expiry)
        assert await d.lease_purge(T0 + 10, 1000) == 0
        said = await d.migrate()
        assert f"{len(keys) + 1} index entries added" in said, said
        assert "0 index entries added" in await d.migrate()
        assert await d.lease_renew([LeaseRenew("lasting", renewed.token, 1000)], T0 + 5) == [True]
        assert await d.lease_purge(T0 + 10, 1000) == len(keys)
        assert [h.token for h in await d.lease_holders("lasting", T0 + 10)] == [renewed.token]


# -- the key's clock -------------------------------------------------------------------------


async def test_stale_takes_racing_fresh_ones_never_put_more_than_the_limit_in_a_window(
    make_driver: Factory,
) -> None:
    """Takes over four driver instances whose `now_ms` was read a random moment before they
    land: in the store's stamp times, no window of `per` ever holds more than `limit` (a take
    judged at its own stale now, after a fresher one pruned the stamps it should count, made
    four)."""
    async with make_driver() as d:
        drivers = [d, *(_other(d) for _ in range(3))]
        try:
            stamps = await stale_racers(drivers, seed=7)
        finally:
            for other in drivers[1:]:
                await other.close()
    assert most_in_a_window(stamps, PER_MS) <= LIMIT, stamps


async def test_two_hosts_whose_clocks_disagree_share_one_window(make_driver: Factory) -> None:
    """A host ten seconds behind another is judged at the key's time (the one ahead leads):
    in true time, the two of them start no more than `limit` per window."""
    async with make_driver() as d:
        behind = _other(d)
        try:
            granted = await skewed_hosts(d, behind)
        finally:
            await behind.close()
    assert most_in_a_window(granted, PER_MS) <= LIMIT, granted
