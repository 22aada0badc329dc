"""The wake: one LISTEN session, proven by a probe; one NOTIFY per queue per slot, and from an
enqueuing process one more for a due job of its that went in without one: carried by that job's
own commit, or at its slot's end when one went a slot's length before."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import psycopg

from jobs_core.records import NewJob
from jobs_pg import PgDriver
from jobs_pg.wake import PgWakeSubscription
from tests.pg.conftest import PG_URL, admin, kept_database

T0 = 1_800_000_000_000
SLOT = 5  # the driver's default wake slot, ms
#: A wake slot (ms) long enough that a test's enqueues all fall in it however slow the machine;
#: T0 starts one.
LONG = 1000


def job(i: int | str, *, queue: str = "q", now: int = T0, run_at: int | None = None) -> NewJob:
    return NewJob(
        id=f"j-{i}",
        run_id=f"r-{i}",
        name="n",
        queue=queue,
        tenant_id=None,
        idempotency_key=f"k-{i}",
        input_json="{}",
        priority=0,
        run_at_ms=now if run_at is None else run_at,
        max_attempts=3,
        created_at_ms=now,
    )


async def _until(cond: Callable[[], bool], within: float = 8.0) -> None:
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def _subscribe(pg: PgDriver, queues: list[str]) -> tuple[PgWakeSubscription, list[str]]:
    woken: list[str] = []
    sub = await pg.wake_subscribe(queues, woken.append)
    assert isinstance(sub, PgWakeSubscription)
    assert not sub.is_live() or sub.dials >= 1
    await _until(sub.is_live)
    return sub, woken


async def test_capabilities_and_the_probe(pg: PgDriver) -> None:
    assert pg.capabilities().wake is True
    sub, woken = await _subscribe(pg, ["q"])
    assert sub.dials == 1
    assert woken == []  # the probe itself wakes nobody
    await sub.close()
    assert not sub.is_live()


async def test_enqueues_notify_once_per_queue_per_slot_and_once_more_at_its_end(
    pg: PgDriver,
) -> None:
    _, woken = await _subscribe(pg, ["q", "other"])
    d = PgDriver(PG_URL, schema=pg.schema, pool_size=2, wake_slot_ms=LONG)
    try:
        # Five due jobs in one slot: the first notifies; the second carries the one more wake
        # a slot's quiet jobs get (its own commit notifies); the other three go in quiet,
        # perhaps after a worker's claim, and bring one more a slot after it, not three.
        for i in range(5):
            await d.job_enqueue(job(i, now=T0 + i))
        await _until(lambda: len(woken) == 2, 5)
        # Concurrent enqueues racing into a new slot: still one, and one at its end.
        now = T0 + 10 * LONG
        await asyncio.gather(*(d.job_enqueue(job(f"c{i}", now=now)) for i in range(20)))
        await _until(lambda: len(woken) == 4, 5)
        # A delayed job (not due at enqueue) and a deduped one wake nobody.
        now = T0 + 20 * LONG
        await d.job_enqueue(job("later", now=now, run_at=now + 60_000))
        await d.job_enqueue(job(0, now=now))
        # A batch over two queues: one wake each, not one per job.
        now = T0 + 30 * LONG
        batch = [job(f"b{i}", queue=("q", "other")[i % 2], now=now) for i in range(200)]
        await d.job_enqueue_many(batch)
        await _until(lambda: len(woken) == 6, 5)
        await asyncio.sleep(LONG / 1000 + 0.3)
        assert woken[:4] == ["q"] * 4 and sorted(woken[4:]) == ["other", "q"]
        with admin() as conn:
            rows = conn.execute(
                f'SELECT queue, slot FROM "{pg.schema}".wakes ORDER BY queue'
            ).fetchall()
        assert rows == [("other", now // LONG), ("q", now // LONG)]
    finally:
        await d.close()


async def test_unsubscribed_queues_are_not_delivered(pg: PgDriver) -> None:
    _, woken = await _subscribe(pg, ["q"])
    await pg.job_enqueue(job(1, queue="elsewhere"))
    await pg.job_enqueue(job(2, queue="q'uo%te\n☃", now=T0 + SLOT))
    await pg.job_enqueue(job(3, queue="q", now=T0 + 2 * SLOT))
    await asyncio.sleep(0.3)
    assert woken == ["q"]


async def test_special_queue_names_are_delivered(pg: PgDriver) -> None:
    odd = "q'uo%te\n☃ q:x"
    _, woken = await _subscribe(pg, [odd])
    await pg.job_enqueue(job(1, queue=odd))
    await _until(lambda: woken == [odd], 3)


async def test_a_redial_starts_unproven(pg: PgDriver) -> None:
    sub, woken = await _subscribe(pg, ["q"])
    await sub.drop_session()
    await _until(lambda: not sub.is_live(), 3)
    await _until(sub.is_live)
    assert sub.dials == 2
    await pg.job_enqueue(job(1))
    await _until(lambda: woken == ["q"], 3)


class _SwallowedProbes(PgDriver):
    """A path that delivers nothing back (as PgBouncer in transaction mode): probes vanish."""

    probes = 0

    async def send_probe(self, payload: str) -> None:
        type(self).probes += 1


async def test_never_proven_when_nothing_crosses(pg_schema: str) -> None:
    d = _SwallowedProbes(PG_URL, schema=pg_schema, pool_size=2)
    try:
        sub = await d.wake_subscribe(["q"], lambda q: None)
        assert isinstance(sub, PgWakeSubscription)
        await _until(lambda: _SwallowedProbes.probes >= 2, 5)
        assert sub.dials == 1  # LISTEN itself succeeded…
        assert not sub.is_live()  # …but without a probe crossing it is never trusted
    finally:
        await d.close()


async def test_wake_off_neither_listens_nor_notifies(pg_schema: str) -> None:
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=2, wake=False)
    try:
        assert d.capabilities().wake is False
        assert await d.wake_subscribe(["q"], lambda q: None) is None
        await d.job_enqueue(job(1))
        await d.job_enqueue_many([job(2), job(3)])
        with admin() as conn:
            row = conn.execute(f'SELECT count(*) FROM "{pg_schema}".wakes').fetchone()
        assert row == (0,)
    finally:
        await d.close()


async def test_listen_url_is_where_the_session_dials(pg_schema: str) -> None:
    """Behind a transaction-mode pooler, `listen_url` sends only the LISTEN session direct."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"postgresql://postgres@127.0.0.1:{s.getsockname()[1]}/test"
        d = PgDriver(PG_URL, schema=pg_schema, pool_size=2, listen_url=dead, connect_timeout_s=1)
        try:
            sub = await d.wake_subscribe(["q"], lambda q: None)
            assert isinstance(sub, PgWakeSubscription)
            await d.job_enqueue(job(1))  # the pool is fine…
            await asyncio.sleep(0.5)
            assert sub.dials == 0 and not sub.is_live()  # …the listener dials only listen_url
        finally:
            await d.close()
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=2, listen_url=PG_URL)
    try:
        sub = await d.wake_subscribe(["q"], lambda q: None)
        assert isinstance(sub, PgWakeSubscription)
        await _until(sub.is_live)
    finally:
        await d.close()


async def test_two_enqueuing_processes_share_one_notify_per_slot(pg: PgDriver) -> None:
    """Each driver remembers the slots it spent; across drivers the wakes row decides. Each
    driver whose due job went in quiet sends one more of its own: carried by that job's commit
    when it knew the slot spent before sending it, else at the slot's end."""
    _, woken = await _subscribe(pg, ["q"])
    one = PgDriver(PG_URL, schema=pg.schema, pool_size=2, wake_slot_ms=LONG)
    other = PgDriver(PG_URL, schema=pg.schema, pool_size=2, wake_slot_ms=LONG)
    try:
        await one.job_enqueue(job(1))
        await other.job_enqueue(job(2))  # same slot, a driver that never saw it: no NOTIFY…
        await one.job_enqueue(job(3))  # quiet in `one`'s eyes: it carries one more itself
        await asyncio.sleep(0.3)
        assert woken == ["q", "q"]
        await _until(lambda: len(woken) == 3, 5)  # …but `other` sends one at the slot's end
        await other.job_enqueue(job(4, now=T0 + LONG))  # the next slot: one more
        await one.job_enqueue(job(5, now=T0 + LONG))  # quiet: one more at its end
        await _until(lambda: len(woken) == 5, 5)
        await asyncio.sleep(LONG / 1000 + 0.3)
        assert woken == ["q"] * 5
    finally:
        await one.close()
        await other.close()


async def test_a_quiet_job_carries_its_trailing_wake_in_its_own_commit(pg: PgDriver) -> None:
    """A due job that would go in quiet (its slot's NOTIFY already out) notifies at its own
    commit when a trailing NOTIFY may go now: no wait for the slot's end, no transaction of its
    own. The next quiet one within a slot's length waits for one more a slot after it."""
    _, woken = await _subscribe(pg, ["q"])
    d = PgDriver(PG_URL, schema=pg.schema, pool_size=2, wake_slot_ms=LONG)
    try:
        await d.job_enqueue(job(1))
        await d.job_enqueue(job(2, now=T0 + 1))
        await asyncio.sleep(0.3)  # the slot ends 1 s after it began
        assert woken == ["q", "q"]
        await d.job_enqueue(job(3, now=T0 + 2))  # quiet: one more a slot after the carried one
        await asyncio.sleep(0.3)
        assert woken == ["q", "q"]
        await _until(lambda: len(woken) == 3, 5)
        await asyncio.sleep(LONG / 1000 + 0.3)
        assert woken == ["q"] * 3
        trails = d._loops.get().trails
        assert trails is not None and (trails.carries, trails.sent) == (1, 1)
    finally:
        await d.close()


async def test_a_notify_of_ours_after_a_quiet_enqueue_stands_for_the_slots_end(
    pg: PgDriver,
) -> None:
    _, woken = await _subscribe(pg, ["q"])
    d = PgDriver(PG_URL, schema=pg.schema, pool_size=2, wake_slot_ms=LONG)
    try:
        await d.job_enqueue(job(1))
        await d.job_enqueue(job(2, now=T0 + 1))  # carries the slot's one more wake
        await d.job_enqueue(job(3, now=T0 + 2))  # quiet: a NOTIFY is due a slot later…
        await d.job_enqueue(job(4, now=T0 + LONG))  # …but this one notified after its commit
        await asyncio.sleep(2 * LONG / 1000 + 0.3)
        assert woken == ["q", "q", "q"]
    finally:
        await d.close()


async def test_a_close_while_notifications_stream_in_ends_the_session(pg: PgDriver) -> None:
    """The session reads its socket from the event loop, not through psycopg's `notifies()`
    (whose wait, before psycopg 3.3.6, could drop a cancel landing with a notification, CPython
    gh-86296): a close amid a stream of notifications ends it at once."""
    sub, woken = await _subscribe(pg, ["q"])

    async def stream() -> None:
        while True:
            await pg.send_probe("q:q")
            await asyncio.sleep(0)

    sender = asyncio.get_running_loop().create_task(stream())
    try:
        await _until(lambda: len(woken) >= 20, 5)
        started = time.monotonic()
        async with asyncio.timeout(10):
            await sub.close()
        assert time.monotonic() - started < 2
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
    seen = len(woken)
    await pg.send_probe("q:q")
    await asyncio.sleep(0.3)
    assert len(woken) == seen and not sub.is_live()  # closed: nothing more is delivered


async def test_a_session_the_server_ends_redials_and_delivers_again(pg: PgDriver) -> None:
    sub, woken = await _subscribe(pg, ["q"])
    with admin() as conn:
        ended = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE starts_with(query, 'LISTEN') AND strpos(query, %s) > 0",
            (pg.channel,),
        ).fetchall()
    assert ended == [(True,)]
    await _until(lambda: sub.dials == 2 and sub.is_live())
    await pg.job_enqueue(job(1))
    await _until(lambda: woken == ["q"], 3)


async def test_a_trailing_notify_pending_when_the_quiet_memory_is_cleared_still_goes(
    pg: PgDriver,
) -> None:
    """The driver forgets its quiet queues past 10,000 of them (a process enqueuing to many
    queues over its life): a trailing NOTIFY pending at that moment still goes at its slot's
    end, instead of its timer raising on the forgotten queue."""
    _, woken = await _subscribe(pg, ["q", "b"])
    d = PgDriver(PG_URL, schema=pg.schema, pool_size=2, wake_slot_ms=LONG)
    errors: list[object] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: errors.append(context.get("exception")))
    try:
        await d.job_enqueue(job(1))
        await d.job_enqueue(job(2, now=T0 + 1))  # carries one more wake of "q"
        await d.job_enqueue(job(5, now=T0 + 1))  # quiet: a NOTIFY of "q" pending a slot later
        # The queues this process went quiet in before, up to the bound (as 10,000 enqueues
        # to as many queues would leave them).
        trails = d._loops.get().trails
        assert trails is not None
        trails._quiet_at.update((f"old-{i}", 0.0) for i in range(10_000))
        await d.job_enqueue(job(3, queue="b", now=T0 + 2))
        await d.job_enqueue(job(4, queue="b", now=T0 + 3))  # carries one more of "b"
        await d.job_enqueue(job(6, queue="b", now=T0 + 3))  # quiet too: past the bound, clears
        await asyncio.sleep(LONG / 1000 + 0.5)
        assert errors == []
        assert sorted(woken) == ["b", "b", "b", "q", "q", "q"]
    finally:
        loop.set_exception_handler(None)
        await d.close()


#: An empty SQL_ASCII database on the test server, kept between runs (`kept_database`): the
#: test below only LISTENs and NOTIFYs there, on its own schema's channel, so runs side by side
#: share it safely.
ASCII_DB = "ujobs_tests_wake_sql_ascii"


def ascii_database() -> str:
    """`ASCII_DB`, created when missing, checked SQL_ASCII."""
    encoding = kept_database(
        ASCII_DB, "ENCODING 'SQL_ASCII' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'"
    )
    assert encoding == "SQL_ASCII", encoding
    return ASCII_DB


async def test_a_payload_the_session_cannot_decode_holds_back_no_note_behind_it(
    pg_schema: str,
) -> None:
    """On a SQL_ASCII database nothing converts a NOTIFY's payload: a stranger's non-ASCII bytes
    on the channel are skipped, and the wake sent with them in one commit is still delivered."""
    from jobs_pg.driver import wake_channel

    ascii_url = PG_URL.rsplit("/", 1)[0] + "/" + ascii_database()
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=2, listen_url=ascii_url)
    errors: list[BaseException | None] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, ctx: errors.append(ctx.get("exception")))
    try:
        woken: list[str] = []
        sub = await d.wake_subscribe(["q"], woken.append)
        assert isinstance(sub, PgWakeSubscription)
        await _until(lambda: sub.dials == 1)
        await asyncio.sleep(0.3)  # its LISTEN is in
        channel = wake_channel(pg_schema).encode()
        plain = ascii_url.replace("+psycopg", "")
        with psycopg.connect(plain, autocommit=True) as conn, conn.transaction():
            conn.execute(b'NOTIFY "' + channel + b"\", 'q:caf\xc3\xa9'")
            conn.execute(b'NOTIFY "' + channel + b"\", 'q:q'")
        await _until(lambda: woken == ["q"], 3)
        assert errors == []
    finally:
        loop.set_exception_handler(None)
        await d.close()
