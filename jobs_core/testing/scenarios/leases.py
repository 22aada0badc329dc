"""The lease family's scenarios: a key's limit under racing takers, a holder taking its own key
again, renewals that must not revive an expired holding, slots freed by a release, stamps kept
by one and removed by an abandon, tokens that only grow, and the purge of expired holdings.

A driver that does not declare `leases` in `capabilities()` must refuse the calls with
`X_DRIVER_CAPABILITY_MISSING`; these scenarios check that much and stop there.
"""

from __future__ import annotations

import asyncio

from jobs_core.driver import MAX_PURGE_LIMIT, JobDriver
from jobs_core.records import Lease, LeaseRef, LeaseRenew, LeaseTake
from jobs_core.semantics import LEASE_CLOCK_KEEP_MS
from jobs_core.testing.scenarios.support import T0, Scenario, exactly, refused


async def _unsupported(driver: JobDriver) -> bool:
    if driver.capabilities().leases:
        return False
    await refused("X_DRIVER_CAPABILITY_MISSING", driver.lease_holders("k", T0))
    return True


async def _take(
    driver: JobDriver,
    key: str,
    holder: str,
    now: int,
    *,
    limit: int = 1,
    ttl: int = 1000,
    stamp: bool = False,
) -> Lease | None:
    return (await driver.lease_take([LeaseTake(key, holder, limit, ttl, stamp)], now))[0]


async def scenario_lease_limit_holds_and_frees(driver: JobDriver) -> None:
    """At most `limit` live holders; an expired one frees its room, a release frees it at once,
    and a later grant's token is greater."""
    if await _unsupported(driver):
        return
    got = await driver.lease_take([LeaseTake("k", h, 2, 1000) for h in ("a", "b", "c")], T0)
    a, b, c = got
    assert a is not None and b is not None and c is None, got
    assert a.token < b.token, (a, b)
    assert (a.expires_at_ms, a.holder, a.key, a.stamp) == (T0 + 1000, "a", "k", False)
    assert [h.holder for h in await driver.lease_holders("k", T0)] == ["a", "b"]
    assert await driver.lease_release([LeaseRef("k", a.token)], T0 + 1) == [True]
    c2 = await _take(driver, "k", "c", T0 + 1, limit=2)
    assert c2 is not None and c2.token > b.token, c2
    assert await _take(driver, "k", "d", T0 + 2, limit=2) is None
    # b's holding ends at T0 + 1000 exactly: from then on it no longer counts.
    assert await _take(driver, "k", "d", T0 + 999, limit=2) is None
    d = await _take(driver, "k", "d", T0 + 1000, limit=2)
    assert d is not None
    holders = await driver.lease_holders("k", T0 + 1000)
    assert [h.holder for h in holders] == ["c", "d"], holders
    # Another key has its own room.
    assert await _take(driver, "k2", "a", T0 + 1000) is not None


async def scenario_lease_renew_never_revives(driver: JobDriver) -> None:
    """A renewal lands only on a live holding, from now; an expired holding stays lost even when
    nobody took its room, and a forged or replaced token never lands."""
    if await _unsupported(driver):
        return
    a = await _take(driver, "k", "a", T0)
    assert a is not None
    assert await driver.lease_renew([LeaseRenew("k", a.token, 5000)], T0 + 999) == [True]
    holders = await driver.lease_holders("k", T0 + 999)
    assert [h.expires_at_ms for h in holders] == [T0 + 999 + 5000], holders
    end = T0 + 999 + 5000
    assert await driver.lease_renew([LeaseRenew("k", a.token, 5000)], end) == [False]
    assert await driver.lease_holders("k", end) == []
    assert await driver.lease_release([LeaseRef("k", a.token)], end) == [False]
    assert await driver.lease_renew([LeaseRenew("k", a.token + 1_000_000, 10)], T0) == [False]
    assert await driver.lease_renew([LeaseRenew("other", a.token, 10)], T0) == [False]


async def scenario_lease_holder_takes_again(driver: JobDriver) -> None:
    """A holder taking a key it holds replaces its holding (a new token, the old one dead) and
    does not count twice."""
    if await _unsupported(driver):
        return
    first = await _take(driver, "k", "run-1", T0)
    assert first is not None
    again = await _take(driver, "k", "run-1", T0 + 10, ttl=2000)
    assert again is not None and again.token > first.token, (first, again)
    assert again.expires_at_ms == T0 + 10 + 2000
    holders = await driver.lease_holders("k", T0 + 10)
    assert [(h.holder, h.token) for h in holders] == [("run-1", again.token)], holders
    assert await driver.lease_renew([LeaseRenew("k", first.token, 1000)], T0 + 10) == [False]
    assert await _take(driver, "k", "run-2", T0 + 10) is None


async def scenario_lease_stamps_stay_until_abandoned(driver: JobDriver) -> None:
    """A released stamp still counts until it expires; an abandoned one (the start never
    happened) goes at once, as an abandoned slot does."""
    if await _unsupported(driver):
        return
    s = await _take(driver, "rate", "j1:1", T0, ttl=60_000, stamp=True)
    assert s is not None and s.stamp
    assert await driver.lease_release([LeaseRef("rate", s.token)], T0 + 1) == [True]
    assert [h.token for h in await driver.lease_holders("rate", T0 + 1)] == [s.token]
    assert await _take(driver, "rate", "j2:1", T0 + 1, ttl=60_000, stamp=True) is None
    assert await driver.lease_abandon([LeaseRef("rate", s.token)], T0 + 2) == [True]
    assert await driver.lease_holders("rate", T0 + 2) == []
    t = await _take(driver, "rate", "j2:1", T0 + 2, ttl=60_000, stamp=True)
    assert t is not None
    slot = await _take(driver, "slot", "j3", T0 + 2)
    assert slot is not None
    answers = await driver.lease_abandon([LeaseRef("slot", slot.token)] * 2, T0 + 3)
    assert answers == [True, False], answers
    assert await driver.lease_holders("slot", T0 + 3) == []


async def scenario_lease_batch_in_order(driver: JobDriver) -> None:
    """One call's takes are decided in order, per key; its refusals come before any write."""
    if await _unsupported(driver):
        return
    got = await driver.lease_take(
        [
            LeaseTake("x", "a", 1, 1000),
            LeaseTake("y", "a", 2, 1000),
            LeaseTake("x", "b", 1, 1000),
            LeaseTake("y", "b", 2, 1000),
            LeaseTake("y", "c", 2, 1000),
        ],
        T0,
    )
    assert [g is not None for g in got] == [True, True, False, True, False], got
    # Tokens grow per key (how a store numbers them across keys is its own affair).
    y_tokens = [g.token for g in got if g is not None and g.key == "y"]
    assert y_tokens == sorted(set(y_tokens)), y_tokens
    await refused(
        "X_JOB_RECORD_INVALID",
        driver.lease_take([LeaseTake("z", "a", 1, 10), LeaseTake("z", "b", 2, 10)], T0),
    )
    await refused(
        "X_JOB_RECORD_INVALID",
        driver.lease_take([LeaseTake("z", "a", 2, 10), LeaseTake("z", "a", 2, 10)], T0),
    )
    await refused("X_JOB_RECORD_INVALID", driver.lease_take([LeaseTake("z", "a", 0, 10)], T0))
    await refused("X_JOB_RECORD_INVALID", driver.lease_take([LeaseTake("", "a", 1, 10)], T0))
    assert await driver.lease_holders("z", T0) == []


async def scenario_lease_racing_takers(driver: JobDriver) -> None:
    """Many callers at once racing for a key of limit 3: exactly 3 win, none is refused while
    room was left, and their tokens are distinct."""
    if await _unsupported(driver):
        return
    takes = [driver.lease_take([LeaseTake("race", f"h{i}", 3, 10_000)], T0) for i in range(24)]
    answers = await asyncio.gather(*takes)
    granted = [a[0] for a in answers if a[0] is not None]
    exactly(3, granted, "granted takes")
    assert len({g.token for g in granted}) == 3, granted
    holders = await driver.lease_holders("race", T0)
    assert sorted(h.holder for h in holders) == sorted(g.holder for g in granted), holders
    # Released one by one, each room goes to exactly one of the next racers.
    await driver.lease_release([LeaseRef("race", granted[0].token)], T0 + 1)
    again = await asyncio.gather(
        *(driver.lease_take([LeaseTake("race", f"n{i}", 3, 10_000)], T0 + 1) for i in range(8))
    )
    exactly(1, [a[0] for a in again if a[0] is not None], "grants of the freed room")


async def scenario_lease_purge_takes_the_expired_only(driver: JobDriver) -> None:
    """A purge deletes holdings expired by its now (slots and stamps, released stamps too),
    soonest expired first and no more than its limit; live ones stay. What a take of the key,
    a release or an abandon deleted already is not there to purge; tokens never repeat on a
    purged key; purgers at once delete each holding once."""
    if await _unsupported(driver):
        return
    slot = await _take(driver, "k1", "a", T0, ttl=1000)
    tied = await _take(driver, "k3", "a", T0, ttl=1000)
    stamp = await _take(driver, "rate", "r", T0, ttl=500, stamp=True)
    live = await _take(driver, "k2", "b", T0, ttl=5000)
    assert slot is not None and tied is not None and stamp is not None and live is not None
    assert await driver.lease_release([LeaseRef("rate", stamp.token)], T0 + 1) == [True]
    assert await driver.lease_purge(T0 + 499, 10) == 0, "nothing had expired by T0 + 499"
    # The stamp ends first: a limit of one takes it alone, and nothing else ended by T0 + 999.
    assert await driver.lease_purge(T0 + 1000, 1) == 1
    assert await driver.lease_purge(T0 + 999, 10) == 0, "a purge took a holding out of order"
    assert await driver.lease_purge(T0 + 1000, 10) == 2, "k1's and k3's holdings end at T0+1000"
    assert await driver.lease_purge(T0 + 1000, 10) == 0
    holders = await driver.lease_holders("k2", T0 + 1000)
    assert [h.token for h in holders] == [live.token], holders
    again = await _take(driver, "k1", "a", T0 + 1000)
    assert again is not None and again.token > slot.token, (slot, again)
    # A take of a key deletes its expired holdings, granted or not; a release or an abandon
    # deletes the expired one it names: none of them is left to purge.
    tokens = []
    for key in ("x0", "x1", "x2", "x3"):
        held = await _take(driver, key, "a", T0, ttl=100)
        assert held is not None
        tokens.append(held.token)
    assert await _take(driver, "x0", "b", T0 + 200) is not None
    assert await driver.lease_release([LeaseRef("x1", tokens[1])], T0 + 200) == [False]
    assert await driver.lease_abandon([LeaseRef("x2", tokens[2])], T0 + 200) == [False]
    # A renewal of an expired holding writes nothing, and deletes nothing either.
    assert await driver.lease_renew([LeaseRenew("x3", tokens[3], 1000)], T0 + 200) == [False]
    assert await driver.lease_purge(T0 + 200, 10) == 1, "x3's alone was left to purge"
    # Purgers at once: each expired holding goes once.
    for i in range(5):
        assert await _take(driver, f"y{i}", "a", T0, ttl=300) is not None
    counts = await asyncio.gather(*(driver.lease_purge(T0 + 300, 2) for _ in range(4)))
    assert sum(counts) == 5 and all(n <= 2 for n in counts), counts
    await refused("X_JOB_RECORD_INVALID", driver.lease_purge(T0, 0))
    await refused("X_JOB_RECORD_INVALID", driver.lease_purge(T0, MAX_PURGE_LIMIT + 1))


# -- the key's clock: callers out of order and hosts whose clocks disagree --------------------


def _stamp_times(held: list[Lease], per: int) -> list[int]:
    """When each stamp was taken, in the store's time: its end less the rate's `per`."""
    return sorted(h.expires_at_ms - per for h in held)


def _most_in_a_window(times: list[int], per: int) -> int:
    """The most stamp times inside one window of `per` (a window holds `t` to `t + per`
    excluded: a stamp taken exactly `per` after another no longer counts it)."""
    return max(sum(1 for u in times if t <= u < t + per) for t in times)


async def scenario_lease_time_never_runs_back(driver: JobDriver) -> None:
    """A call works on a key at the later of its `now_ms` and the latest time any call on the
    key used: a stale take landing after a fresher one is judged at the fresher time (granted
    there, its end from there), so no window of a rate's `per` ever holds more than `limit`
    stamps in stamp times; a host ahead leads the key for the hosts behind it (a slot it counts
    live stays counted), for renewals, releases and abandons too; the holders are read at the
    key's time."""
    if await _unsupported(driver):
        return
    per = 500
    stamps = []
    for i, at in enumerate((T0, T0 + 100, T0 + 200)):
        got = await _take(driver, "rate", f"s{i}", at, limit=3, ttl=per, stamp=True)
        assert got is not None, at
        stamps.append(got)
    # A fresher take prunes the stamps of T0 and T0+100 and is granted...
    x = await _take(driver, "rate", "x", T0 + 650, limit=3, ttl=per, stamp=True)
    assert x is not None and x.expires_at_ms == T0 + 650 + per, x
    # ...then a take whose now (T0+450) was read before it lands: judged at T0+650, where only
    # T0+200 and X are live. Granted THERE (at its own now it would make four stamps within
    # 450 ms: T0, +100, +200, +450), and the answer says the stored end.
    y = await _take(driver, "rate", "y", T0 + 450, limit=3, ttl=per, stamp=True)
    assert y is not None and y.expires_at_ms == T0 + 650 + per, y
    assert await _take(driver, "rate", "z", T0 + 460, limit=3, ttl=per, stamp=True) is None
    every = [*stamps, x, y]
    assert _most_in_a_window(_stamp_times(every, per), per) == 3, _stamp_times(every, per)
    # Holders read at the key's time: a caller behind sees what a take would count.
    live = await driver.lease_holders("rate", T0 + 300)
    assert sorted(h.holder for h in live) == ["s2", "x", "y"], live

    # Hosts whose clocks disagree: A is 10 s ahead of B. B's slot, taken at B's time, is
    # stored to end at the key's time (A's) + ttl, so A's next take counts it live.
    ahead = T0 + 10_000
    a = await _take(driver, "slot", "a", ahead, limit=2)
    assert a is not None
    b = await _take(driver, "slot", "b", T0 + 300, limit=2)
    assert b is not None and b.expires_at_ms == ahead + 1000, b
    assert await _take(driver, "slot", "c", ahead + 1, limit=2) is None
    # B renews from the key's time too (A's last, ahead + 1): live there, ends from there.
    assert await driver.lease_renew([LeaseRenew("slot", b.token, 1000)], T0 + 400) == [True]
    holders = await driver.lease_holders("slot", T0 + 400)
    assert {h.holder: h.expires_at_ms for h in holders} == {"a": ahead + 1000, "b": ahead + 1001}

    # A release from a host ahead deletes a holding expired at ITS time: the key's clock moves
    # there, so a caller behind no longer finds that holding's room free at its own time.
    r = await _take(driver, "r", "one", T0, limit=1, ttl=per, stamp=True)
    assert r is not None
    assert await driver.lease_release([LeaseRef("r", r.token)], T0 + per) == [False]
    late = await _take(driver, "r", "two", T0 + 100, limit=1, ttl=per, stamp=True)
    assert late is not None and late.expires_at_ms == T0 + 2 * per, late
    # An abandon from ahead moves the clock as well (its key named, whatever the token).
    assert await driver.lease_abandon([LeaseRef("ab", 10**12)], T0 + 5000) == [False]
    ab = await _take(driver, "ab", "h", T0, ttl=100)
    assert ab is not None and ab.expires_at_ms == T0 + 5100, ab


async def scenario_lease_purge_moves_and_drops_clocks(driver: JobDriver) -> None:
    """A purge that deletes a key's holdings moves the key's clock to the latest end deleted
    (never back), so a caller behind is judged there; once the key holds nothing and its clock
    is `LEASE_CLOCK_KEEP_MS` behind a purge's now, that purge drops it, and the key starts again
    from its next caller's time."""
    if await _unsupported(driver):
        return
    per = 500
    first = await _take(driver, "rate", "a", T0, ttl=per, stamp=True)
    assert first is not None
    assert await driver.lease_purge(T0 + 600, 10) == 1
    # Judged at T0 + 500 (the end the purge deleted), not at T0 + 100.
    behind = await _take(driver, "rate", "b", T0 + 100, ttl=per, stamp=True)
    assert behind is not None and behind.expires_at_ms == T0 + 2 * per, behind
    # A purge at a time behind the clock moves nothing back.
    slot = await _take(driver, "slot", "a", T0 + 10_000, ttl=100)
    assert slot is not None
    assert await driver.lease_release([LeaseRef("slot", slot.token)], T0 + 10_000) == [True]
    assert await driver.lease_purge(T0 + 2000, 10) == 1  # the stamp of "rate", at T0 + 1000
    again = await _take(driver, "slot", "b", T0, ttl=100)
    assert again is not None and again.expires_at_ms == T0 + 10_100, again
    assert await driver.lease_release([LeaseRef("slot", again.token)], T0) == [True]
    # "slot" holds nothing now, its clock at T0 + 10_000. A purge a millisecond short of
    # the keep drops nothing; one at the keep drops it: a caller far behind starts afresh.
    clock = T0 + 10_000
    assert await driver.lease_purge(clock + LEASE_CLOCK_KEEP_MS - 1, 10) == 0
    kept = await _take(driver, "slot", "c", T0, ttl=100)
    assert kept is not None and kept.expires_at_ms == clock + 100, kept
    assert await driver.lease_release([LeaseRef("slot", kept.token)], T0) == [True]
    assert await driver.lease_purge(clock + LEASE_CLOCK_KEEP_MS, 10) == 0
    fresh = await _take(driver, "slot", "d", T0, ttl=100)
    assert fresh is not None and fresh.expires_at_ms == T0 + 100, fresh
    # A key still holding something keeps its clock however far behind it is.
    held = await _take(driver, "held", "a", T0, ttl=LEASE_CLOCK_KEEP_MS * 3)
    assert held is not None
    assert await driver.lease_purge(T0 + 2 * LEASE_CLOCK_KEEP_MS, 10) == 1  # slot's "d"
    more = await _take(driver, "held", "b", T0 - 50, limit=2, ttl=100)
    assert more is not None and more.expires_at_ms == T0 + 100, more


LEASE_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_lease_batch_in_order,
        scenario_lease_holder_takes_again,
        scenario_lease_limit_holds_and_frees,
        scenario_lease_purge_moves_and_drops_clocks,
        scenario_lease_purge_takes_the_expired_only,
        scenario_lease_racing_takers,
        scenario_lease_renew_never_revives,
        scenario_lease_stamps_stay_until_abandoned,
        scenario_lease_time_never_runs_back,
    )
}
