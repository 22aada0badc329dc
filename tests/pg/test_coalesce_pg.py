"""A worker's ack and its next claim, asked within a loop turn or two of each other, go to the
server as one pipeline and one transaction (`PgDriver._coalesced`); a failure of either makes
each run again alone, so neither sinks nor hides the other."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from jobs_core.attempts import AttemptOutcome
from jobs_core.errors import JobsError
from jobs_core.records import Ack, BuriedJob, ClaimedJob, ClaimParams, ClaimResult, Fence
from jobs_core.states import JobState
from jobs_pg import PgDriver
from tests.pg.conftest import PG_URL, admin
from tests.pg.test_driver import T0, job


def _claim(limit: int) -> ClaimParams:
    return ClaimParams(
        queues=("q",), worker_id="w", limit=limit, lease_ms=60_000, now_ms=T0 + 1_000
    )


def _ack(j: ClaimedJob) -> Ack:
    return Ack(Fence(j.id, j.claims, "w"), now_ms=T0 + 2_000)


def _xmins(schema: str, ids: list[str]) -> set[str]:
    with admin() as conn:
        rows = conn.execute(
            f'SELECT xmin::text FROM "{schema}".jobs WHERE id = ANY(%s)', (ids,)
        ).fetchall()
    return {r[0] for r in rows}


def _states(schema: str) -> dict[str, str]:
    with admin() as conn:
        rows = conn.execute(f'SELECT id, state FROM "{schema}".jobs').fetchall()
    return {r[0]: r[1] for r in rows}


def _given_back(schema: str) -> list[tuple[str, int, int]]:
    """(state, attempt, claims) of each job claimed and then given back, by id."""
    with admin() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                f'SELECT state, attempt, claims FROM "{schema}".jobs'
                " WHERE state = 'ready' AND claims > 0 ORDER BY id"
            ).fetchall()
        ]


async def test_an_ack_and_a_claim_asked_together_commit_in_one_transaction(pg: PgDriver) -> None:
    await pg.job_enqueue_many([job(i) for i in range(4)])
    first = (await pg.job_claim(_claim(2))).jobs
    landed, second = await asyncio.gather(
        pg.job_ack([_ack(j) for j in first]), pg.job_claim(_claim(2))
    )
    assert landed == [True, True]
    assert len(second.jobs) == 2
    ids = [j.id for j in (*first, *second.jobs)]
    # One transaction wrote the acked rows and the claimed ones.
    assert len(_xmins(pg.schema, ids)) == 1
    states = _states(pg.schema)
    assert {states[j.id] for j in first} == {"completed"}
    assert {states[j.id] for j in second.jobs} == {"running"}


async def test_a_claim_the_server_refuses_does_not_sink_the_ack_asked_with_it(
    pg: PgDriver,
) -> None:
    await pg.job_enqueue_many([job(i) for i in range(4)])
    first = (await pg.job_claim(_claim(2))).jobs
    # Past the contract's checks (`job_claim` would refuse it): the server refuses its lease's
    # end, past `bigint`.
    bad = ClaimParams(queues=("q",), worker_id="w", limit=2, lease_ms=2**63, now_ms=T0 + 1_000)
    landed, refused = await asyncio.gather(
        pg._job_ack([_ack(j) for j in first]), pg._job_claim(bad), return_exceptions=True
    )
    assert isinstance(refused, JobsError)
    assert landed == [True, True]
    states = _states(pg.schema)
    assert {states[j.id] for j in first} == {"completed"}
    assert sorted(states.values()) == ["completed", "completed", "ready", "ready"]


async def test_a_claim_cancelled_before_it_went_out_claims_nothing(pg: PgDriver) -> None:
    await pg.job_enqueue_many([job(i) for i in range(2)])
    task = asyncio.create_task(pg.job_claim(_claim(2)))
    await asyncio.sleep(0)  # asked, still gathering company
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(5):
        await asyncio.sleep(0)
    assert set(_states(pg.schema).values()) == {"ready"}
    assert len((await pg.job_claim(_claim(2))).jobs) == 2


async def test_a_claim_cancelled_as_its_batch_is_handed_over_claims_nothing(
    pg: PgDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim gathered with an ack whose caller is cancelled in the loop turn its batch is
    handed to the flushing task: its caller's handler runs before that task's first turn, with
    no gather left to leave and no flight yet to cancel. It is never sent: its jobs stay
    ready, not running for nobody until their leases lapse. The ack lands alone."""
    await pg.job_enqueue_many([job(i) for i in range(4)])
    first = (await pg.job_claim(_claim(2))).jobs
    ack = asyncio.ensure_future(pg.job_ack([_ack(j) for j in first]))  # the first asker
    claim = asyncio.ensure_future(pg.job_claim(_claim(2)))
    spawn = pg._spawn_flush
    handed: list[int] = []

    def cancel_then_spawn(batch: list[Any]) -> None:
        handed.append(len(batch))
        claim.cancel()  # by another task, in the turn the ack's gathering ends
        spawn(batch)

    monkeypatch.setattr(pg, "_spawn_flush", cancel_then_spawn)
    assert await ack == [True, True]
    with pytest.raises(asyncio.CancelledError):
        await claim
    for _ in range(10):
        await asyncio.sleep(0.02)
    assert handed == [2]
    states = _states(pg.schema)
    assert {states[j.id] for j in first} == {"completed"}
    assert sorted(states.values()) == ["completed", "completed", "ready", "ready"]


async def _held_behind(
    locker: Any, pg: PgDriver, first: list[ClaimedJob]
) -> tuple[asyncio.Future[list[bool]], asyncio.Future[Any]]:
    """An ack of `first` and a claim of 2 sent together, the transaction held on the lock
    `locker` takes on `first[0]`'s row: both in flight, neither answered."""
    locker.execute("BEGIN")
    locker.execute(f'SELECT 1 FROM "{pg.schema}".jobs WHERE id = %s FOR UPDATE', [first[0].id])
    ack = asyncio.ensure_future(pg.job_ack([_ack(j) for j in first]))
    claim = asyncio.ensure_future(pg.job_claim(_claim(2)))
    await asyncio.sleep(0.3)
    assert not ack.done() and not claim.done()
    return ack, claim


async def test_a_claim_cancelled_after_it_went_out_with_an_ack_claims_nothing(
    pg: PgDriver,
) -> None:
    """A claim whose caller is cancelled while it is in flight, gathered with an ack, is rolled
    back as a lone claim's cancel rolls it back (its jobs stay ready, no lease to wait out);
    the ack beside it still lands, once."""
    await pg.job_enqueue_many([job(i) for i in range(4)])
    first = (await pg.job_claim(_claim(2))).jobs
    with admin() as locker:
        # The ack goes first in the shared transaction and waits for this row's lock: the
        # claim is sent, behind it, before its caller is cancelled.
        ack, claim = await _held_behind(locker, pg, first)
        claim.cancel()
        await asyncio.sleep(0.2)
        locker.execute("ROLLBACK")
    assert await ack == [True, True]
    with pytest.raises(asyncio.CancelledError):
        await claim
    for _ in range(10):
        await asyncio.sleep(0.02)
    states = _states(pg.schema)
    assert {states[j.id] for j in first} == {"completed"}
    assert sorted(states.values()) == ["completed", "completed", "ready", "ready"]


async def test_an_ack_and_a_claim_whose_session_dies_before_commit_are_told_and_sent_again(
    pg: PgDriver,
) -> None:
    """The shared transaction's session is killed while it waits: the driver cannot tell a
    commit that happened from one that did not, so each caller gets X_DRIVER_UNAVAILABLE, as
    a lone call would. Nothing committed here: the ack sent again (as the settle lane does)
    lands once, the claim sent again takes the jobs, none is left running unheld."""
    await pg.job_enqueue_many([job(i) for i in range(4)])
    first = (await pg.job_claim(_claim(2))).jobs
    with admin() as locker, admin() as killer:
        ack, claim = await _held_behind(locker, pg, first)
        (killed,) = killer.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            " AND strpos(query, %s) > 0",
            [pg.schema],
        ).fetchall()
        assert killed == (True,)
        got = await asyncio.gather(ack, claim, return_exceptions=True)
        assert [getattr(g, "code", g) for g in got] == ["X_DRIVER_UNAVAILABLE"] * 2
        locker.execute("ROLLBACK")
    assert {_states(pg.schema)[j.id] for j in first} == {"running"}
    assert await pg.job_ack([_ack(j) for j in first]) == [True, True]
    second = (await pg.job_claim(_claim(2))).jobs
    assert len(second) == 2
    states = _states(pg.schema)
    assert {states[j.id] for j in first} == {"completed"}
    assert sorted(states.values()) == ["completed", "completed", "running", "running"]


async def test_a_claim_cancelled_while_it_runs_again_alone_claims_nothing(pg: PgDriver) -> None:
    """The shared transaction failed (the ack beside it refused by the server), so the claim
    runs again alone; its caller cancelled meanwhile cancels that run on the server too."""
    from jobs_core.records import WorkerBeat

    await pg.job_enqueue_many([job(i) for i in range(4)])
    first = (await pg.job_claim(_claim(2))).jobs
    beat = WorkerBeat("w", "{}", 60_000, T0)
    await pg.job_claim(ClaimParams(("none",), "w", 1, 60_000, T0, beat=beat))
    # Past the contract's checks (`job_ack` would refuse it): the server refuses its time.
    bad = [Ack(Fence(j.id, j.claims, "w"), now_ms=2**63) for j in first]
    with admin() as locker:
        locker.execute("BEGIN")
        # The claim's beat waits for its worker's row: it is in flight when cancelled.
        locker.execute(f'SELECT 1 FROM "{pg.schema}".workers FOR UPDATE')
        ack = asyncio.ensure_future(pg._job_ack(bad))
        claim = asyncio.ensure_future(
            pg.job_claim(ClaimParams(("q",), "w", 2, 60_000, T0 + 1_000, beat=beat))
        )
        with pytest.raises(JobsError):
            await ack
        await asyncio.sleep(0.3)
        assert not claim.done()
        claim.cancel()
        await asyncio.sleep(0.2)
        locker.execute("ROLLBACK")
    with pytest.raises(asyncio.CancelledError):
        await claim
    for _ in range(10):
        await asyncio.sleep(0.02)
    assert sorted(_states(pg.schema).values()) == ["ready", "ready", "running", "running"]


class _Proxy:
    """A TCP relay to the test's Postgres that can withhold the server's answers, then cut
    every connection (a commit whose answer never reaches the driver) or `release` them."""

    def __init__(self, host: str, port: int) -> None:
        self.to = (host, port)
        self.hold = False
        self.held: list[tuple[asyncio.StreamWriter, bytes]] = []
        self.clients: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _relay(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection(*self.to)
        self.clients.append(cw)

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter, answers: bool) -> None:
            with contextlib.suppress(Exception):
                while data := await r.read(65536):
                    if answers and self.hold:
                        self.held.append((w, data))
                    else:
                        w.write(data)
                        await w.drain()
            w.close()

        await asyncio.gather(pump(cr, sw, False), pump(sr, cw, True))

    def release(self) -> None:
        self.hold = False
        for w, data in self.held:
            w.write(data)
        self.held.clear()

    def cut(self) -> None:
        for w in self.clients:
            w.transport.abort()
        self.clients.clear()

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()


async def _until(check: Any) -> None:
    for _ in range(40):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the statement never committed")


@contextlib.asynccontextmanager
async def _relayed(pg: PgDriver, call_timeout_s: float) -> AsyncIterator[tuple[_Proxy, PgDriver]]:
    """A driver reaching `pg`'s server through a `_Proxy` relay, with `call_timeout_s`."""
    from urllib.parse import urlsplit

    from tests.pg.conftest import PG_URL

    target = urlsplit(PG_URL)
    proxy = _Proxy(target.hostname or "127.0.0.1", target.port or 5432)
    port = await proxy.start()
    url = PG_URL.replace(f"@{target.hostname}:{target.port}", f"@127.0.0.1:{port}")
    d = PgDriver(
        url, schema=pg.schema, pool_size=2, connect_timeout_s=2.0, call_timeout_s=call_timeout_s
    )
    try:
        yield proxy, d
    finally:
        await d.close()
        await proxy.close()


@contextlib.asynccontextmanager
async def _committed_unanswered(
    pg: PgDriver, call_timeout_s: float
) -> AsyncIterator[tuple[_Proxy, tuple[ClaimedJob, ...], asyncio.Future[Any], asyncio.Future[Any]]]:
    """A driver reaching `pg`'s server through a `_Proxy` relay (with `call_timeout_s`),
    two jobs claimed, then their ack and a claim of 2 gathered into one transaction that has
    committed while the relay holds its answer back."""
    async with _relayed(pg, call_timeout_s) as (proxy, d):
        await d.job_enqueue_many([job(i) for i in range(6)])
        first = (await d.job_claim(_claim(2))).jobs
        proxy.hold = True
        ack = asyncio.ensure_future(d.job_ack([_ack(j) for j in first]))
        claim = asyncio.ensure_future(d.job_claim(_claim(2)))
        await _until(lambda: {_states(pg.schema)[j.id] for j in first} == {"completed"})
        assert not ack.done() and not claim.done()
        yield proxy, first, ack, claim


async def test_an_ack_and_a_claim_whose_commit_answer_is_lost_are_not_run_again(
    pg: PgDriver,
) -> None:
    """The shared transaction committed but its answer never came (the connection dropped
    after the commit): running each again alone would answer the ack that landed False and
    claim again past the rows it took. Each caller gets X_DRIVER_UNAVAILABLE instead, as a
    lone call whose answer was lost does (the settle lane then sends the ack again)."""
    async with _committed_unanswered(pg, 30.0) as (proxy, first, ack, claim):
        proxy.cut()
        proxy.held.clear()
        proxy.hold = False
        got = await asyncio.gather(ack, claim, return_exceptions=True)
        assert [getattr(g, "code", g) for g in got] == ["X_DRIVER_UNAVAILABLE"] * 2
        states = _states(pg.schema)
        assert {states[j.id] for j in first} == {"completed"}
        # The claim's two jobs are held as a lone claim's whose answer was lost are; no more.
        assert sorted(states.values()) == ["completed"] * 2 + ["ready"] * 2 + ["running"] * 2


@pytest.mark.parametrize("how", ["cancel", "timeout"])
async def test_a_shared_commit_cancelled_after_it_happened_keeps_its_answers(
    pg: PgDriver, how: str
) -> None:
    """The shared transaction committed, its answer on the way, when its flight is cancelled:
    the claim's caller gone, or the call's timeout. The server's cancel comes too late and
    psycopg reads the answers in before it re-raises: the ack answers what landed (True), not
    False from running again alone (its worker would log it unowned and skip its observers),
    nor X_DRIVER_UNAVAILABLE; the claim takes nothing more. Past the timeout its caller gets
    its jobs; its caller gone, they go back at once (attempt given back), not held by nobody
    until their leases lapse."""
    call_timeout_s = 1.0 if how == "timeout" else 30.0
    async with _committed_unanswered(pg, call_timeout_s) as (proxy, first, ack, claim):
        if how == "cancel":
            claim.cancel()
        # The server's cancel sent (too late), the answers awaited.
        await asyncio.sleep(0.3 if how == "cancel" else call_timeout_s + 0.3)
        proxy.release()
        assert await asyncio.wait_for(ack, 10) == [True, True]
        if how == "cancel":
            with pytest.raises(asyncio.CancelledError):
                await claim
        else:
            assert len((await claim).jobs) == 2
        for _ in range(10):
            await asyncio.sleep(0.02)
        states = _states(pg.schema)
        assert {states[j.id] for j in first} == {"completed"}
        if how == "cancel":
            # The claim's two jobs committed for a caller gone, then went back.
            assert sorted(states.values()) == ["completed"] * 2 + ["ready"] * 4
            assert _given_back(pg.schema) == [("ready", 0, 1)] * 2
        else:
            # The claim's two jobs committed as a lone claim's would; none more.
            assert sorted(states.values()) == ["completed"] * 2 + ["ready"] * 2 + ["running"] * 2


async def test_a_shared_commit_whose_answer_never_comes_after_a_cancel_is_unknown(
    pg: PgDriver,
) -> None:
    """The claim's caller is cancelled after the shared commit and the answer never comes:
    psycopg waits 5 s after its cancel, then closes the session. The commit is unknown, so the
    ack's caller gets X_DRIVER_UNAVAILABLE (its settle lane sends it again), as when the
    connection drops, not False from running it again alone; the claim's rows, if it
    committed, are given back as a lost claim's."""
    async with _committed_unanswered(pg, 30.0) as (proxy, first, ack, claim):
        claim.cancel()
        await asyncio.sleep(5.5)  # psycopg's wait for the answer after its cancel, and its close
        proxy.held.clear()
        proxy.hold = False
        with pytest.raises(JobsError) as got:
            await asyncio.wait_for(ack, 10)
        assert got.value.code == "X_DRIVER_UNAVAILABLE"
        with pytest.raises(asyncio.CancelledError):
            await claim
        states = _states(pg.schema)
        assert {states[j.id] for j in first} == {"completed"}
        # The claim's two jobs, committed for a caller gone with the answer unknown, are looked
        # for as a lost claim's (`LostClaims`) and go back, not run for nobody to their lapse.
        for _ in range(100):
            if sorted(_states(pg.schema).values()) == ["completed"] * 2 + ["ready"] * 4:
                break
            await asyncio.sleep(0.05)
        assert _given_back(pg.schema) == [("ready", 0, 1)] * 2


@pytest.mark.parametrize("what", ["claim", "ack"])
async def test_a_lone_call_timed_out_after_its_commit_keeps_its_answer(
    pg: PgDriver, what: str
) -> None:
    """A claim or an ack with no company commits, and the call's timeout cancels it while the
    relay holds its answer back: the server's cancel comes too late and psycopg reads the
    answer in before it re-raises. That answer stands: the claim's caller gets its jobs (not
    X_DRIVER_UNAVAILABLE with them held by nobody until their leases lapse), the ack's gets
    True (not X_DRIVER_UNAVAILABLE, whose resend would answer False: logged unowned)."""
    async with _relayed(pg, 1.0) as (proxy, d):
        await d.job_enqueue_many([job(i) for i in range(6)])
        # Each statement once first: prepared, it then goes out in one message, not after a
        # prepare whose answer the relay would hold back.
        done = (await d.job_claim(_claim(2))).jobs
        assert await d.job_ack([_ack(j) for j in done]) == [True, True]
        first = (await d.job_claim(_claim(2))).jobs
        proxy.hold = True
        if what == "claim":
            call: asyncio.Future[Any] = asyncio.ensure_future(d.job_claim(_claim(2)))
            await _until(lambda: list(_states(pg.schema).values()).count("running") == 4)
        else:
            call = asyncio.ensure_future(d.job_ack([_ack(j) for j in first]))
            await _until(lambda: {_states(pg.schema)[j.id] for j in first} == {"completed"})
        await asyncio.sleep(1.3)  # past the call's timeout: the server's cancel sent, too late
        assert not call.done()
        proxy.release()
        got = await asyncio.wait_for(call, 10)
        states = _states(pg.schema)
        if what == "claim":
            assert sorted(j.id for j in got.jobs) == sorted(
                i for i, s in states.items() if s == "running" and i not in {j.id for j in first}
            )
            assert len(got.jobs) == 2
        else:
            assert got == [True, True]
            assert sorted(states.values()) == ["completed"] * 4 + ["ready"] * 2


@pytest.mark.parametrize("answer", ["late", "never"])
async def test_a_lone_claim_cancelled_after_its_commit_gives_its_jobs_back(
    pg: PgDriver, answer: str
) -> None:
    """A claim with no company commits, then its caller is cancelled while the relay holds
    the answer back. Late, the server's cancel comes too late and psycopg reads the answer in;
    never, psycopg waits 5 s after its cancel, then closes the session, the commit unknown, and
    the rows are looked for as a lost claim's. Either way its jobs go back to ready, their
    attempt given back, rather than running for nobody until their leases lapse (the lapse
    would spend the attempt, and bury a final one never run)."""
    async with _relayed(pg, 30.0) as (proxy, d):
        await d.job_enqueue_many([job(i) for i in range(2)])
        proxy.hold = True
        claim = asyncio.ensure_future(d.job_claim(_claim(2)))
        await _until(lambda: set(_states(pg.schema).values()) == {"running"})
        claim.cancel()
        if answer == "late":
            await asyncio.sleep(0.3)  # the server's cancel sent, too late
            proxy.release()
        else:
            proxy.hold = False  # what is held stays held; the look for the rows gets through
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(claim, 10)  # never: psycopg's 5 s wait, then its close
        for _ in range(100):
            if set(_states(pg.schema).values()) == {"ready"}:
                break
            await asyncio.sleep(0.05)
        assert _given_back(pg.schema) == [("ready", 0, 1)] * 2
        if answer == "late":
            # Ready from when given back (the claim's time and 0.3 s more), as a drain's.
            later = replace(_claim(2), now_ms=T0 + 2_000)
            assert len((await d.job_claim(later)).jobs) == 2


async def test_a_claim_given_back_is_stamped_when_given_back_and_reports_what_it_buried(
    pg: PgDriver,
) -> None:
    """A claim committed for a caller gone gives its jobs back as a drain would: the attempt it
    records ends when the give-back ran (not at the claim's own time: no zero-length attempt).
    A row it buried (a lapsed final attempt) is answered in `buried` by that worker's next
    claim, once, as a claim's own burials are (its worker counts, logs and hooks it)."""
    async with _relayed(pg, 30.0) as (proxy, d):
        await d.job_enqueue(replace(job(0), max_attempts=1))
        first = ClaimParams(("q",), "w", 1, 1_000, T0 + 1_000)
        assert [j.id for j in (await d.job_claim(first)).jobs] == ["id-0"]
        await d.job_enqueue_many([job(1), job(2)])
        proxy.hold = True
        at = T0 + 5_000  # id-0's lease lapsed on its final attempt
        claim = asyncio.ensure_future(d.job_claim(ClaimParams(("q",), "w", 2, 60_000, at)))
        await _until(
            lambda: _states(pg.schema) == {"id-0": "dead", "id-1": "running", "id-2": "running"}
        )
        claim.cancel()
        await asyncio.sleep(0.3)  # the server's cancel sent, too late
        proxy.release()
        with pytest.raises(asyncio.CancelledError):
            await claim
        await _until(lambda: _states(pg.schema)["id-1"] == "ready")
        await _until(lambda: _states(pg.schema)["id-2"] == "ready")
        for row in (await d.job_get_many(["id-1", "id-2"])).values():
            (attempt,) = row.attempts
            assert attempt.outcome is AttemptOutcome.INTERRUPTED
            assert attempt.claimed_at_ms == at
            # Ended when it was given back: 0.3 s and more after the claim began.
            assert attempt.settled_at_ms - at >= 250, attempt
            assert row.run_at_ms == attempt.settled_at_ms
        later = T0 + 10_000
        other = await d.job_claim(ClaimParams(("other",), "w2", 1, 60_000, later))
        assert other.buried == ()  # another worker's claim: not its burial
        got = await d.job_claim(ClaimParams(("other",), "w", 1, 60_000, later))
        assert got.buried == (BuriedJob("id-0", "n", "q", JobState.DEAD),)
        again = await d.job_claim(ClaimParams(("other",), "w", 1, 60_000, later))
        assert again.buried == ()


async def test_a_lone_claim_and_a_lone_ack_run_in_their_callers_task(pg: PgDriver) -> None:
    await pg.job_enqueue_many([job(0)])
    loop = asyncio.get_running_loop()
    made: list[object] = []
    factory = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kw)

    # A trickle's claim or ack has no company: no task, answer future or gather of its own.
    loop.set_task_factory(counting)
    try:
        claimed = (await pg.job_claim(_claim(1))).jobs
        landed = await pg.job_ack([_ack(claimed[0])])
    finally:
        loop.set_task_factory(factory)
    assert (len(claimed), landed) == (1, [True])
    assert made == []


async def _a_prepared_round(d: PgDriver) -> ClaimResult:
    """Six jobs enqueued, two claimed, then their ack and a claim of two more gathered into
    one round, which ran prepared; that claim's answer."""
    await d.job_enqueue_many([job(i) for i in range(6)])
    first = (await d.job_claim(_claim(2))).jobs
    landed, second = await asyncio.gather(
        d.job_ack([_ack(j) for j in first]), d.job_claim(_claim(2))
    )
    assert landed == [True, True] and len(second.jobs) == 2
    assert d._prepare_threshold == 0  # the round ran prepared
    return second


@pytest.mark.parametrize("lost", ["deallocated", "name taken"])
async def test_a_shared_round_that_meets_lost_prepared_statements_runs_each_alone(
    pg_schema: str, lost: str
) -> None:
    """What a pooler without prepared-statement support does to a gathered ack and claim, made
    deterministic: the session forgot the statements the round prepared there, or holds
    another statement under the name it would prepare next. Nothing of the round ran; each
    runs again alone, unprepared from then on, and both land."""
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=1, wake=False)  # one session for all
    try:
        second = await _a_prepared_round(d)
        pool = await d._ready()
        async with pool.connection() as conn:
            # Inside DO, so psycopg does not see it and the driver still trusts its statements.
            if lost == "deallocated":
                await conn.execute("DO $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$")
            else:
                session = pool.sessions[conn]
                session.names.clear()  # the round prepares under a new name
                taken = b"_ujobs_%d" % (session.count + 1)
                await conn.execute(
                    f"DO $$ BEGIN EXECUTE 'PREPARE {taken.decode()} AS SELECT 1'; END $$"
                )
        landed, third = await asyncio.gather(
            d.job_ack([_ack(j) for j in second.jobs]), d.job_claim(_claim(2))
        )
        assert landed == [True, True] and len(third.jobs) == 2
        assert d._prepare_threshold is None
        landed, fourth = await asyncio.gather(
            d.job_ack([_ack(j) for j in third.jobs]), d.job_claim(_claim(2))
        )
        assert landed == [True, True] and fourth.jobs == ()
        states = _states(pg_schema)
        assert sorted(states.values()) == ["completed"] * 6
    finally:
        await d.close()


async def test_a_round_after_a_rolled_back_transaction_on_its_session_stays_prepared(
    pg_schema: str,
) -> None:
    """psycopg deallocates every prepared statement of a session whose transaction it rolled
    back (DEALLOCATE ALL, its own and the rounds'): here an `enqueue_many` of two chunks whose
    call timed out waiting on a lock. The next round on that session prepares its statements
    again, and lands prepared: it is not read as a pooler's loss, which would stop preparing
    for the driver's life."""
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=1, wake=False, call_timeout_s=1.0)
    try:
        second = await _a_prepared_round(d)
        with admin() as locker:
            locker.autocommit = False
            locker.execute(f'LOCK TABLE "{pg_schema}".jobs IN SHARE ROW EXCLUSIVE MODE')
            with pytest.raises(JobsError) as got:
                await d.job_enqueue_many([job(f"big-{i}") for i in range(1_500)])
            assert got.value.code == "X_DRIVER_UNAVAILABLE"
            locker.rollback()
        # The failure's sweep checks the idle session in the background: done, the round below
        # takes that session, not one opened beside it meanwhile.
        await asyncio.sleep(0.3)
        landed, third = await asyncio.gather(
            d.job_ack([_ack(j) for j in second.jobs]), d.job_claim(_claim(2))
        )
        assert landed == [True, True] and len(third.jobs) == 2
        assert d._prepare_threshold == 0  # still prepared: no "prepare_off"
        assert sorted(_states(pg_schema).values()) == ["completed"] * 4 + ["running"] * 2
    finally:
        await d.close()


async def test_what_a_round_keeps_of_a_connection_goes_with_it(pg_schema: str) -> None:
    """A round keeps its prepared names and psycopg's dumpers per connection (which they hold):
    a connection the pool closes takes them along, or every discarded connection would live on."""
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=2, wake=False)
    try:
        await d.job_enqueue_many([job(i) for i in range(4)])
        first = (await d.job_claim(_claim(2))).jobs
        await asyncio.gather(d.job_ack([_ack(j) for j in first]), d.job_claim(_claim(2)))
        pool = await d._ready()
        assert len(pool.sessions) == 1
    finally:
        await d.close()
    assert pool.sessions == {}
