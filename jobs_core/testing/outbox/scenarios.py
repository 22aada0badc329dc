"""Fixed outbox scenarios: the cases a random walk rarely reaches, each spelled out with asserts.

Each scenario is `async def scenario_x(harness)` over a fresh, empty store; `OUTBOX_SCENARIOS`
lists them by name (the function name without `scenario_`). Times are fixed offsets from `T0`,
handed in as every claim's `now_ms`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Final, TypeAlias, cast

from jobs_core.driver import MAX_KEY_BYTES, MAX_LEASE_MS, MAX_NAME_BYTES, MAX_TIME_MS
from jobs_core.outbox.records import OutboxClaim, OutboxRelease, OutboxRow
from jobs_core.outbox.store import MAX_OUTBOX_BATCH, MAX_OUTBOX_ERROR_CHARS, MAX_OUTBOX_PENDING
from jobs_core.records import NewJob
from jobs_core.testing.compare import exactly_bytes, typed_json
from jobs_core.testing.outbox.harness import OutboxHarness
from jobs_core.testing.scenarios.support import T0, new_job, refused
from jobs_core.testing.scenarios.twins import PREFIX, TWINS, UNWRITTEN

Scenario: TypeAlias = Callable[[OutboxHarness], Awaitable[None]]

#: How long a store that offers a wake may take to deliver one (a real channel, a busy machine).
WAKE_WAIT_S = 15.0


def record(job_id: str, *, created: int = T0, **fields: Any) -> NewJob:
    """A valid staged record stamped `created` (its stage time), due then."""
    return replace(new_job(job_id, run_at_ms=created, created_at_ms=created), **fields)


async def claim(
    h: OutboxHarness, token: str, now: int, *, limit: int = 100, lease: int = 1000
) -> list[OutboxRow]:
    """One claim under `token` at `now`."""
    return await h.store.outbox_claim(OutboxClaim(token, limit, lease, now))


async def release(
    h: OutboxHarness, token: str, ids: Sequence[str], retry_at: int, error: str | None = None
) -> list[str]:
    """One release of `ids` by `token`."""
    return await h.store.outbox_release(OutboxRelease(token, tuple(ids), retry_at, error))


def ids(rows: Sequence[OutboxRow]) -> list[str]:
    """The rows' ids, in the order answered."""
    return [r.job.id for r in rows]


async def pending(h: OutboxHarness) -> list[OutboxRow]:
    """Every row, in stage order."""
    return await h.store.outbox_pending(MAX_OUTBOX_PENDING)


async def row_of(h: OutboxHarness, job_id: str) -> OutboxRow:
    """The stored row of `job_id`, which must be there."""
    rows = {r.job.id: r for r in await pending(h)}
    assert job_id in rows, f"{job_id!r} is not in the outbox (holds {sorted(rows)})"
    return rows[job_id]


def claim_state(r: OutboxRow) -> tuple[object, ...]:
    """Everything of a row but its job: `(claimed_by, lease_until_ms, available_at_ms,
    attempts, last_error)`."""
    return (r.claimed_by, r.lease_until_ms, r.available_at_ms, r.attempts, r.last_error)


async def scenario_lapsed_lease_reclaimed(h: OutboxHarness) -> None:
    """A live lease holds its rows; at exactly its end a second token takes them, and the first
    token's publish and release then land nothing."""
    await h.stage([record("a"), record("b")], True)
    first = await claim(h, "A", T0, lease=1000)
    assert ids(first) == ["a", "b"], first
    assert [claim_state(r) for r in first] == [("A", T0 + 1000, T0, 0, None)] * 2, first
    assert await claim(h, "early", T0 + 999) == [], "a claim took rows under a live lease"
    second = await claim(h, "B", T0 + 1000, lease=500)
    assert ids(second) == ["a", "b"], f"at its lease's end the rows are free: {second!r}"
    assert [claim_state(r) for r in second] == [("B", T0 + 1500, T0, 0, None)] * 2, second
    assert await h.store.outbox_publish("A", ["a", "b"]) == [], "a stale token published"
    assert await release(h, "A", ["a"], T0, "late") == [], "a stale token released"
    assert [claim_state(r) for r in await pending(h)] == [("B", T0 + 1500, T0, 0, None)] * 2
    assert await h.store.outbox_publish("B", ["b", "a"]) == ["b", "a"]
    assert await pending(h) == []


async def scenario_lapsed_token_still_publishes(h: OutboxHarness) -> None:
    """A lapsed lease nobody reclaimed still names its token: that token's publish and release
    land (the fence is the token, not the clock)."""
    await h.stage([record("a"), record("b")], True)
    assert ids(await claim(h, "A", T0, lease=1)) == ["a", "b"]
    lapsed = await pending(h)
    assert [claim_state(r) for r in lapsed] == [("A", T0 + 1, T0, 0, None)] * 2, lapsed
    assert await h.store.outbox_publish("A", ["a"]) == ["a"]
    assert await release(h, "A", ["b"], T0 + 50) == ["b"]
    assert [claim_state(r) for r in await pending(h)] == [(None, None, T0 + 50, 0, None)]


async def scenario_released_row_keeps_its_place(h: OutboxHarness) -> None:
    """A release with an error counts an attempt and stores the error (an empty one too); one
    without keeps both. A released row waits for its retry time, then comes first again: its
    place in the stage order never moves."""
    await h.stage([record("m1"), record("m2"), record("m3", created=T0 + 1)], True)
    assert ids(await claim(h, "A", T0 + 1, lease=60_000)) == ["m1", "m2", "m3"]
    assert await release(h, "A", ["m1"], T0 + 5000, "boom") == ["m1"]
    assert await release(h, "A", ["m2"], T0 + 2) == ["m2"]
    rows = await pending(h)
    assert ids(rows) == ["m1", "m2", "m3"], f"a release moved a row: {ids(rows)}"
    assert claim_state(rows[0]) == (None, None, T0 + 5000, 1, "boom"), rows[0]
    assert claim_state(rows[1]) == (None, None, T0 + 2, 0, None), rows[1]
    assert await claim(h, "B", T0 + 1) == [], "a row was claimed before its retry time"
    assert ids(await claim(h, "B", T0 + 2, lease=60_000)) == ["m2"], "m1 waits, m3 is held"
    assert await claim(h, "C", T0 + 4999) == []
    again = await claim(h, "D", T0 + 5000)
    assert [(r.job.id, r.attempts, r.last_error) for r in again] == [("m1", 1, "boom")], again
    assert await release(h, "D", ["m1"], T0 + 5000) == ["m1"]
    assert claim_state(await row_of(h, "m1")) == (None, None, T0 + 5000, 1, "boom")
    assert await release(h, "D", ["m1"], T0 + 5000, "twice") == [], "released a free row"
    assert ids(await claim(h, "E", T0 + 5000)) == ["m1"]
    assert await release(h, "E", ["m1"], T0 + 6000, "") == ["m1"]
    assert claim_state(await row_of(h, "m1")) == (None, None, T0 + 6000, 2, ""), (
        "an empty error is still a failed publish"
    )
    assert ids(await pending(h)) == ["m1", "m2", "m3"]


async def scenario_rollback_leaves_nothing(h: OutboxHarness) -> None:
    """A rolled-back stage leaves no row (nothing to claim, publish or release); a committed
    one after it is all there is."""
    await h.stage([record("a"), record("b", created=T0 - 5)], False)
    assert await pending(h) == [], "a rolled-back stage left rows"
    assert await claim(h, "A", T0 + 10) == []
    assert await h.store.outbox_publish("A", ["a", "b"]) == []
    assert await release(h, "A", ["a"], T0, "x") == []
    await h.stage([], True)
    await h.stage([record("c")], True)
    assert ids(await pending(h)) == ["c"]
    await h.stage([record("d", created=T0 - 1)], False)
    assert ids(await claim(h, "B", T0 + 10)) == ["c"]


async def scenario_refused_stage_writes_nothing(h: OutboxHarness) -> None:
    """A batch with one bad record, or one record past the cap, is refused before anything is
    written — even when the transaction then commits — and a batch of exactly the cap lands."""
    good = [record(f"g{n}") for n in range(3)]
    for field, value in (("input_json", "{"), ("id", ""), ("created_at_ms", -1)):
        bad = [*good, replace(record("bad"), **cast(dict[str, Any], {field: value}))]
        await refused("X_JOB_RECORD_INVALID", h.stage(bad, True))
        assert await pending(h) == [], f"a refused stage ({field}={value!r}) wrote rows"
    over = [record(f"o{n:04d}") for n in range(MAX_OUTBOX_BATCH + 1)]
    await refused("X_JOB_BATCH_TOO_LARGE", h.stage(over, True))
    assert await pending(h) == [], "a stage past the cap wrote rows"
    await h.stage(over[:MAX_OUTBOX_BATCH], True)
    rows = await h.store.outbox_pending(MAX_OUTBOX_PENDING)
    assert ids(rows) == [r.id for r in over[:MAX_OUTBOX_BATCH]], "a full batch is in order"
    taken = await claim(h, "A", T0, limit=MAX_OUTBOX_BATCH)
    assert len(taken) == MAX_OUTBOX_BATCH, len(taken)
    published = await h.store.outbox_publish("A", ids(taken)[::-1])
    assert published == ids(taken)[::-1], "a full publish answers every id, as named"
    assert await pending(h) == []


#: Ids whose code-point order (what every store sorts by) differs from the order they are
#: staged in, from byte-wise UTF-16 order (`\ufb01` before `\U0001f600` by code point) and from
#: any locale's collation (`B` before `_` before `a`).
ORDER_IDS: Final = ("b", "\U0001f600", "a", "é", "\ufb01", "B", "☃", "\U0010ffff", "_")


async def scenario_stage_order(h: OutboxHarness) -> None:
    """Rows are ordered by `(created_at_ms, id)`, ids by code point, whatever order the stages
    came in: pending answers that order and claims take it in turn."""
    await h.stage([record(i) for i in ORDER_IDS], True)
    await h.stage([record("z", created=T0 - 1)], True)
    await h.stage([record("0", created=T0 + 1), record("1", created=T0 - 1)], True)
    want = ["1", "z", *sorted(ORDER_IDS), "0"]
    assert ids(await pending(h)) == want, "pending is not in (created_at_ms, id) order"
    assert ids(await h.store.outbox_pending(3)) == want[:3]
    taken: list[str] = []
    for n in range(5):
        got = await claim(h, f"c{n}", T0 + 1, limit=3)
        assert len(got) <= 3, f"a claim of limit 3 took {len(got)}"
        taken += ids(got)
    assert taken == want, f"claims took {taken}, expected the stage order {want}"


async def scenario_named_order_and_fence(h: OutboxHarness) -> None:
    """Publish and release touch only the rows the token holds, answer each once, in the order
    named; unknown ids, repeats and another token's rows are passed over."""
    await h.stage([record(i) for i in ("a", "b", "c", "d")], True)
    assert ids(await claim(h, "A", T0, limit=3)) == ["a", "b", "c"]
    assert ids(await claim(h, "B", T0)) == ["d"]
    named = ["c", "no-such-row", "d", "a", "c", "a"]
    assert await h.store.outbox_publish("A", named) == ["c", "a"]
    assert await release(h, "B", ["b", "d", "d"], T0 + 9, "x") == ["d"]
    rows = {r.job.id: claim_state(r) for r in await pending(h)}
    assert rows == {"b": ("A", T0 + 1000, T0, 0, None), "d": (None, None, T0 + 9, 1, "x")}, rows
    assert await h.store.outbox_publish("B", ["d"]) == [], "published a row it released"
    assert await h.store.outbox_publish("no-such-token", ["b"]) == []
    assert await h.store.outbox_publish("A", []) == []


async def scenario_refused_calls_change_nothing(h: OutboxHarness) -> None:
    """Every bad argument is refused with its code, and nothing stored changes."""
    await h.stage([record("a"), record("b")], True)
    assert ids(await claim(h, "A", T0, limit=1)) == ["a"]
    before = await pending(h)
    s = h.store
    ok = OutboxClaim("T", 10, 1000, T0)
    long_token = exactly_bytes("t", "☃", MAX_NAME_BYTES + 1)
    invalid: list[Callable[[], Awaitable[object]]] = [
        lambda: s.outbox_claim(replace(ok, token="")),
        lambda: s.outbox_claim(replace(ok, token="t\x00")),
        lambda: s.outbox_claim(replace(ok, token=long_token)),
        lambda: s.outbox_claim(replace(ok, limit=0)),
        lambda: s.outbox_claim(replace(ok, limit=MAX_OUTBOX_BATCH + 1)),
        lambda: s.outbox_claim(replace(ok, limit=cast(int, 1.0))),
        lambda: s.outbox_claim(replace(ok, lease_ms=0)),
        lambda: s.outbox_claim(replace(ok, lease_ms=MAX_LEASE_MS + 1)),
        lambda: s.outbox_claim(replace(ok, now_ms=-1)),
        lambda: s.outbox_claim(replace(ok, now_ms=MAX_TIME_MS + 1)),
        lambda: s.outbox_pending(0),
        lambda: s.outbox_pending(MAX_OUTBOX_PENDING + 1),
        lambda: s.outbox_publish("", ["a"]),
        lambda: s.outbox_publish("A", cast(list[str], "a")),
        lambda: s.outbox_publish("A", ["a", ""]),
        lambda: release(h, "A", ["a"], -1, "x"),
        lambda: release(h, "A", ["a"], MAX_TIME_MS + 1, "x"),
        lambda: release(h, "A", ["a"], T0, "x\x00"),
        lambda: release(h, "A", ["a", "b\x00"], T0, "x"),
    ]
    for n, call in enumerate(invalid):
        try:
            await refused("X_JOB_RECORD_INVALID", call())
        except AssertionError as exc:
            raise AssertionError(f"refusal {n}: {exc}") from None
    too_many = ["a"] * (MAX_OUTBOX_BATCH + 1)
    await refused("X_JOB_BATCH_TOO_LARGE", s.outbox_publish("A", too_many))
    await refused("X_JOB_BATCH_TOO_LARGE", release(h, "A", too_many, T0, "x"))
    assert await pending(h) == before, "a refused call changed the outbox"


async def scenario_racing_claims_take_each_row_once(h: OutboxHarness) -> None:
    """Claims at once never take the same row, and together with one more claim take them all."""
    staged = [record(f"r{n:02d}", created=T0 + n % 3) for n in range(30)]
    await h.stage(staged, True)
    answers = await asyncio.gather(*(claim(h, f"c{n}", T0 + 5, limit=7) for n in range(6)))
    taken = [i for a in answers for i in ids(a)]
    twice = sorted({i for i in taken if taken.count(i) > 1})
    assert not twice, f"racing claims took {twice} more than once"
    for n, a in enumerate(answers):
        assert all(r.claimed_by == f"c{n}" for r in a), a
    rest = await claim(h, "last", T0 + 5, limit=MAX_OUTBOX_BATCH)
    assert sorted([*taken, *ids(rest)]) == sorted(r.id for r in staged)
    holders = {r.job.id: r.claimed_by for r in await pending(h)}
    for n, a in enumerate(answers):
        for i in ids(a):
            assert holders[i] == f"c{n}", f"{i} answered to c{n}, stored as {holders[i]}"


async def scenario_racing_publishes_answer_each_row_once(h: OutboxHarness) -> None:
    """Publishes and releases of the same rows at once: each row is answered by exactly one of
    them, and whatever was released is free again."""
    await h.stage([record(f"p{n:02d}") for n in range(20)], True)
    held = ids(await claim(h, "A", T0))
    orders = [held, held[::-1], held[5:] + held[:5]]
    answers = await asyncio.gather(
        *(h.store.outbox_publish("A", o) for o in orders),
        release(h, "A", held[::2], T0 + 1, "x"),
    )
    answered = [i for a in answers for i in a]
    assert sorted(answered) == sorted(held), f"each row once across racing calls: {answers!r}"
    for order, answer in zip(orders, answers, strict=False):
        assert answer == [i for i in order if i in answer], "answered out of the named order"
    rows = await pending(h)
    assert ids(rows) == sorted(answers[-1]), "only the released rows are left"
    assert all(claim_state(r) == (None, None, T0 + 1, 1, "x") for r in rows), rows


async def scenario_values_round_trip(h: OutboxHarness) -> None:
    """A staged job comes back field for field: values at the byte limits, quotes, newlines,
    non-ASCII text, JSON whose types matter (`1`, `1.0`, `true`), a trace context, an org."""
    job = record(
        exactly_bytes("i", "😀é", MAX_NAME_BYTES),
        created=T0 - 7,
        run_id=exactly_bytes("r", "☃", MAX_NAME_BYTES),
        name=exactly_bytes("q'uo%te\n", "ü☃", MAX_NAME_BYTES),
        queue="q'\n%☃",
        tenant_id=exactly_bytes("t", "☃", MAX_NAME_BYTES),
        idempotency_key=exactly_bytes("k", "😀☃ü", MAX_KEY_BYTES),
        input_json='{"one": 1, "float": 1.0, "yes": true, "big": 12345678901234567890}',
        priority=100,
        run_at_ms=MAX_TIME_MS,
        max_attempts=1000,
        enqueued_by="u'\n",
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        acts_for=exactly_bytes("o", "é", MAX_NAME_BYTES),  # acts-for: published with it
    )
    await h.stage([job, record("plain")], True)
    rows = await pending(h)
    assert ids(rows) == [job.id, "plain"], ids(rows)
    (claimed,) = await claim(h, "A", T0, limit=1)
    for got in (rows[0].job, claimed.job):
        assert typed_json(got.input_json) == typed_json(job.input_json), got.input_json
        assert replace(got, input_json=job.input_json) == job, f"stored {got!r}"
    assert rows[1].job == record("plain"), rows[1].job


async def scenario_long_error_cut(h: OutboxHarness) -> None:
    """A release's error is stored unchanged up to 2,000 characters (not bytes) and cut there."""
    await h.stage([record("a"), record("b")], True)
    assert ids(await claim(h, "A", T0)) == ["a", "b"]
    text = "q'uo%te\n☃ é\\" * 300
    assert await release(h, "A", ["a"], T0, text) == ["a"]
    assert await release(h, "A", ["b"], T0, text[:40]) == ["b"]
    a, b = await pending(h)
    assert a.last_error == text[:MAX_OUTBOX_ERROR_CHARS], (len(a.last_error or ""), a.last_error)
    assert b.last_error == text[:40], b.last_error


async def scenario_twin_ids_and_tokens_apart(h: OutboxHarness) -> None:
    """Ids and tokens are exact text: a publish or release lands on the rows named, by their
    exact id, under their exact token, never on a twin that differs in case, accent, a trailing
    space, a suffix or where a pattern has `_` (a store comparing as its collation does, or
    `LIKE`, takes them for one another)."""
    await h.stage([record(t) for t in TWINS], True)
    assert sorted(ids(await claim(h, "A", T0))) == sorted(TWINS)
    held = [claim_state(r) for r in await pending(h)]
    strangers = [UNWRITTEN, PREFIX, "sync  ", "s%"]
    assert await h.store.outbox_publish("A", strangers) == [], "published a twin of an id"
    assert await release(h, "A", strangers, T0 + 5, "x") == [], "released a twin of an id"
    for token in ("a", "A ", "Á", "_"):
        assert await h.store.outbox_publish(token, list(TWINS)) == [], f"{token!r} published"
        assert await release(h, token, TWINS, T0 + 5, "x") == [], f"{token!r} released"
    assert [claim_state(r) for r in await pending(h)] == held, "a twin's call changed a row"
    # Each by its exact id: one published, one released, the rest as they were.
    assert await h.store.outbox_publish("A", [TWINS[0]]) == [TWINS[0]]
    assert await release(h, "A", [TWINS[1]], T0 + 5, "boom") == [TWINS[1]]
    rows = {r.job.id: claim_state(r) for r in await pending(h)}
    want = dict.fromkeys(TWINS[2:], ("A", T0 + 1000, T0, 0, None))
    assert rows == {**want, TWINS[1]: (None, None, T0 + 5, 1, "boom")}, rows


async def scenario_wake(h: OutboxHarness) -> None:
    """A store that offers a wake rings it when a stage commits; None says it offers none (the
    relay's poll is the guarantee either way)."""
    woken: list[int] = []
    sub = await h.store.outbox_wake(lambda: woken.append(1))
    if sub is None:
        return
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAKE_WAIT_S
        while not sub.is_live():
            assert loop.time() < deadline, f"the wake was not live after {WAKE_WAIT_S} s"
            await asyncio.sleep(0.02)
        await h.stage([record("w")], True)
        deadline = loop.time() + WAKE_WAIT_S
        while not woken:
            assert loop.time() < deadline, f"no wake within {WAKE_WAIT_S} s of a committed stage"
            await asyncio.sleep(0.02)
    finally:
        await sub.close()


#: Every outbox scenario by name (the function name without `scenario_`).
OUTBOX_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_lapsed_lease_reclaimed,
        scenario_lapsed_token_still_publishes,
        scenario_long_error_cut,
        scenario_named_order_and_fence,
        scenario_racing_claims_take_each_row_once,
        scenario_racing_publishes_answer_each_row_once,
        scenario_refused_calls_change_nothing,
        scenario_refused_stage_writes_nothing,
        scenario_released_row_keeps_its_place,
        scenario_rollback_leaves_nothing,
        scenario_stage_order,
        scenario_twin_ids_and_tokens_apart,
        scenario_values_round_trip,
        scenario_wake,
    )
}
