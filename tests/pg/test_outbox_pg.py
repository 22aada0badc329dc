"""`PgOutbox` on real Postgres: a stage lives and dies with the caller's transaction on every
connection kind, refusals send nothing, claims never share a row, a stale token lands nothing,
and the wake rings on commit only."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import tempfile
import time
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from importlib import import_module
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from jobs_core.cli import main as ujobs_main
from jobs_core.clock import FakeClock
from jobs_core.errors import (
    BatchTooLargeError,
    DeclarationInvalidError,
    DriverError,
    DriverUnavailableError,
    DriverUnsupportedError,
    DriverUrlInvalidError,
    InputInvalidError,
    JobsError,
    KeyRequiredError,
    OptionInvalidError,
)
from jobs_core.job import JobRegistry, job
from jobs_core.outbox import OutboxClaim, OutboxRelease, Staged
from jobs_core.records import NewJob
from jobs_pg import PgOutbox, stage
from jobs_pg.outbox import STATEMENTS, outbox_from_url
from jobs_pg.schema import metadata_in
from jobs_pg.urls import libpq_url, sqlalchemy_url
from tests.core.support import T0, until
from tests.pg.conftest import HEAD_REVISION, PG_URL, admin, drop_schema, fresh_schema
from tests.redis.conftest import spare_port

REPO = Path(__file__).resolve().parents[2]
KINDS = ["sa_connection", "sa_session", "sa_async_connection", "sa_async_session", "psycopg"]
KINDS += ["psycopg_async"]


async def _body(input: Any, ctx: Any) -> None:
    return None


WELCOME = job(
    _body,
    name="welcome",
    tenant="none",
    idempotency_key=lambda i: str(i["email"]),
    registry=JobRegistry(),
)


@pytest.fixture
def box_schema() -> Iterator[str]:
    """A schema of the test's own holding the declared `outbox` table, and an app table beside
    it (`signups`); dropped after. Built from the declaration, not by the migrations, to keep
    this file fast: test_migrations.py proves the two equal, and the last test here runs them."""
    schema = fresh_schema()
    table = metadata_in(schema).tables[f"{schema}.outbox"]
    ddl: list[sa.schema.ExecutableDDLElement] = [sa.schema.CreateTable(table)]
    ddl += [sa.schema.CreateIndex(i) for i in table.indexes]
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    try:
        with admin() as conn, conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            for statement in ddl:
                conn.execute(str(statement.compile(dialect=dialect)))
            conn.execute(
                sql.SQL("CREATE TABLE {}.signups (email text PRIMARY KEY)").format(
                    sql.Identifier(schema)
                )
            )
        yield schema
    finally:
        drop_schema(schema)


@pytest.fixture
async def outbox(box_schema: str) -> AsyncIterator[PgOutbox]:
    """An open outbox on the test's own schema, stamping stages at T0."""
    box = PgOutbox(PG_URL, schema=box_schema, clock=FakeClock(T0))
    async with box:
        yield box


def signups(schema: str) -> list[str]:
    with admin() as conn:
        rows = conn.execute(
            sql.SQL("SELECT email FROM {}.signups ORDER BY email").format(sql.Identifier(schema))
        ).fetchall()
    return [r[0] for r in rows]


@dataclass
class Tx:
    """One open transaction of the app's, on one connection kind."""

    write: Callable[[str], Awaitable[None]]
    stage: Callable[..., Awaitable[Staged]]
    conn: Any


def _insert(schema: str) -> str:
    quoted = '"' + schema.replace('"', '""') + '"'
    return f"INSERT INTO {quoted}.signups (email) VALUES (%(email)s)"


@contextlib.asynccontextmanager
async def transaction(kind: str, box: PgOutbox, *, commit: bool) -> AsyncIterator[Tx]:
    """A transaction of `kind` the app writes and stages in; committed (or rolled back) after
    the block, as the app would."""
    insert = _insert(box.schema)
    sa_insert = sa.text(insert.replace("%(email)s", ":email"))

    def sync_stage(conn: Any) -> Callable[..., Awaitable[Staged]]:
        async def call(*args: Any, **kwargs: Any) -> Staged:
            got: object = box.stage(conn, *args, **kwargs)
            assert isinstance(got, Staged)  # a sync connection answers at once
            return got

        return call

    def async_stage(conn: Any) -> Callable[..., Awaitable[Staged]]:
        async def call(*args: Any, **kwargs: Any) -> Staged:
            pending: object = box.stage(conn, *args, **kwargs)
            assert inspect.isawaitable(pending)  # an async one answers an awaitable
            got = await pending
            assert isinstance(got, Staged)
            return got

        return call

    if kind in ("sa_connection", "sa_session"):
        engine = sa.create_engine(sqlalchemy_url(PG_URL), poolclass=NullPool)
        try:
            with engine.connect() if kind == "sa_connection" else Session(engine) as conn:

                async def sa_write(email: str) -> None:
                    conn.execute(sa_insert, {"email": email})

                yield Tx(sa_write, sync_stage(conn), conn)
                conn.commit() if commit else conn.rollback()
        finally:
            engine.dispose()
    elif kind in ("sa_async_connection", "sa_async_session"):
        aengine = create_async_engine(sqlalchemy_url(PG_URL), poolclass=NullPool)
        try:
            async with (
                aengine.connect() if kind == "sa_async_connection" else AsyncSession(aengine)
            ) as aconn:

                async def sa_async_write(email: str) -> None:
                    await aconn.execute(sa_insert, {"email": email})

                yield Tx(sa_async_write, async_stage(aconn), aconn)
                await (aconn.commit() if commit else aconn.rollback())
        finally:
            await aengine.dispose()
    elif kind == "psycopg":
        with psycopg.connect(libpq_url(PG_URL)) as pconn:

            async def pg_write(email: str) -> None:
                pconn.execute(insert, {"email": email})

            yield Tx(pg_write, sync_stage(pconn), pconn)
            pconn.commit() if commit else pconn.rollback()
    else:
        async with await psycopg.AsyncConnection.connect(libpq_url(PG_URL)) as apconn:

            async def apg_write(email: str) -> None:
                await apconn.execute(insert, {"email": email})

            yield Tx(apg_write, async_stage(apconn), apconn)
            await (apconn.commit() if commit else apconn.rollback())


@pytest.mark.parametrize("kind", KINDS)
async def test_a_stage_lives_and_dies_with_the_callers_transaction(
    kind: str, outbox: PgOutbox
) -> None:
    # Committed: the business row and exactly one staged row, under the answer's ids.
    async with transaction(kind, outbox, commit=True) as tx:
        await tx.write("ada@example.com")
        got = await tx.stage(WELCOME, {"email": "ada@example.com"}, priority=7)
        assert await outbox.outbox_pending(10) == []  # not visible before the commit
    assert isinstance(got, Staged)
    (row,) = await outbox.outbox_pending(10)
    assert (row.job.id, row.job.run_id) == (got.id, got.run_id)
    assert row.job.name == "welcome" and row.job.idempotency_key == "ada@example.com"
    assert row.job.input_json == '{"email":"ada@example.com"}' and row.job.priority == 7
    assert row.job.created_at_ms == T0 and row.available_at_ms == T0  # the outbox's clock
    assert (row.attempts, row.claimed_by, row.lease_until_ms, row.last_error) == (
        0,
        None,
        None,
        None,
    )
    assert signups(outbox.schema) == ["ada@example.com"]

    # Rolled back: neither the business row nor the job.
    async with transaction(kind, outbox, commit=False) as tx:
        await tx.write("bob@example.com")
        await tx.stage(WELCOME, {"email": "bob@example.com"})
    assert [r.job.id for r in await outbox.outbox_pending(10)] == [got.id]
    assert signups(outbox.schema) == ["ada@example.com"]

    # Refused stages raise their typed errors, and the transaction goes on to commit its own.
    async with transaction(kind, outbox, commit=True) as tx:
        with pytest.raises(KeyRequiredError):
            await tx.stage(WELCOME, {"no_email": 1})
        with pytest.raises(InputInvalidError):
            await tx.stage(WELCOME, {"email": "c@example.com", "at": object()})
        with pytest.raises(DeclarationInvalidError):
            await tx.stage(WELCOME, {"email": "c@example.com"}, id="mine")
        await tx.write("cy@example.com")
    assert [r.job.id for r in await outbox.outbox_pending(10)] == [got.id]
    assert signups(outbox.schema) == ["ada@example.com", "cy@example.com"]


@contextlib.contextmanager
def protocol_trace(conn: psycopg.Connection[Any]) -> Iterator[list[str]]:
    """Every message this connection sends while the block runs (libpq's trace), by kind."""
    sent: list[str] = []
    with tempfile.TemporaryFile() as f:
        conn.pgconn.trace(f.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield sent
        finally:
            conn.pgconn.untrace()
            f.seek(0)
            for line in f.read().decode(errors="replace").splitlines():
                parts = line.split("\t")
                if len(parts) >= 3 and parts[0] == "F":
                    sent.append(parts[2].split(" ")[0].strip())


def records(n: int, *, start: int = 0, name: str = "welcome") -> list[NewJob]:
    return [
        NewJob(
            id=f"j{i:03}",
            run_id=f"r{i:03}",
            name=name,
            queue="mail",
            tenant_id="org-1" if i % 2 else None,
            idempotency_key=f"k{i}",
            input_json=f'{{"i":{i}}}',
            priority=i % 3,
            run_at_ms=T0 + 1_000 * i,
            max_attempts=5,
            created_at_ms=T0 + i,
            enqueued_by="tests" if i % 2 else None,
            traceparent=None,
        )
        for i in range(start, start + n)
    ]


async def test_stage_records_is_one_statement_and_a_refusal_sends_nothing(
    outbox: PgOutbox,
) -> None:
    with psycopg.connect(libpq_url(PG_URL)) as conn:
        conn.execute("SELECT 1")  # the transaction is open: what follows is the stage alone
        with protocol_trace(conn) as sent:
            with pytest.raises(BatchTooLargeError):
                outbox.stage_records(conn, records(1_001))
            with pytest.raises(JobsError) as bad:
                outbox.stage_records(conn, [*records(2), records(1, start=2, name="")[0]])
            with pytest.raises(KeyRequiredError):
                outbox.stage(conn, WELCOME, {"nope": 1})
            # Flow links are refused, not dropped at publish.
            for option, value in [("after", ["j1"]), ("parent_id", "p"), ("batch_id", "b")]:
                with pytest.raises(OptionInvalidError) as flow:
                    outbox.stage(conn, WELCOME, {"email": "a@b"}, **{option: value})
                assert flow.value.detail == option
            with pytest.raises(JobsError) as linked:
                outbox.stage_records(conn, [replace(records(1)[0], batch_id="b")])
        assert bad.value.code == linked.value.code == "X_JOB_RECORD_INVALID"
        assert sent == []  # refused before a single byte went out
        with protocol_trace(conn) as sent:
            assert outbox.stage_records(conn, records(3)) is None
        assert sent.count("Execute") == 1 and "Query" not in sent
        # An id staged before keeps its first row; a batch's own repeat too.
        second = replace(records(1)[0], input_json='"second"')
        outbox.stage_records(conn, [second, *records(1, start=3), *records(1, start=3)])
        outbox.stage_records(conn, [])
        conn.commit()
    rows = await outbox.outbox_pending(10)
    assert [r.job for r in rows] == records(4)
    assert all(r.available_at_ms == r.job.created_at_ms for r in rows)


async def test_connections_a_stage_cannot_share_are_refused(outbox: PgOutbox) -> None:
    engine = sa.create_engine(sqlalchemy_url(PG_URL), poolclass=NullPool)
    try:
        with pytest.raises(DriverUnsupportedError):
            outbox.stage(engine, WELCOME, {"email": "a"})  # type: ignore[call-overload]
        with pytest.raises(DriverUnsupportedError):
            outbox.stage("postgresql://…", WELCOME, {"email": "a"})  # type: ignore[call-overload]
        auto = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        with auto, pytest.raises(DeclarationInvalidError) as info:
            outbox.stage(auto, WELCOME, {"email": "a"})
        assert "autocommit" in info.value.message
    finally:
        engine.dispose()
    with psycopg.connect(libpq_url(PG_URL), autocommit=True) as conn:
        with pytest.raises(DeclarationInvalidError):
            outbox.stage(conn, WELCOME, {"email": "a"})
        with conn.transaction():  # autocommit with a transaction of the caller's: fine
            staged = outbox.stage(conn, WELCOME, {"email": "a"})
    with psycopg.connect(libpq_url(PG_URL)) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")
        with pytest.raises(DeclarationInvalidError) as failed:
            outbox.stage(conn, WELCOME, {"email": "b"})
        assert "roll it back" in failed.value.message
    assert [r.job.id for r in await outbox.outbox_pending(10)] == [staged.id]


async def test_the_module_stage_and_a_missing_table(outbox: PgOutbox) -> None:
    async with await psycopg.AsyncConnection.connect(libpq_url(PG_URL)) as conn:
        got = await stage(conn, WELCOME, {"email": "a"}, schema=outbox.schema)
        await conn.commit()
    assert [r.job.id for r in await outbox.outbox_pending(10)] == [got.id]
    nowhere = fresh_schema()
    with psycopg.connect(libpq_url(PG_URL)) as conn:
        with pytest.raises(DriverError) as info:
            stage(conn, WELCOME, {"email": "a"}, schema=nowhere)
        assert "is not installed" in info.value.message and "ujobs db upgrade" in info.value.message


async def test_special_names_round_trip(outbox: PgOutbox) -> None:
    odd = "q'uo%te\n☃ \\x"
    h = job(
        _body,
        name=odd,
        queue=odd,
        tenant=lambda i: odd,
        idempotency_key=lambda i: odd,
        registry=JobRegistry(),
    )
    with psycopg.connect(libpq_url(PG_URL)) as conn:
        outbox.stage(conn, h, {odd: odd}, enqueued_by=odd, tenant_id=odd)
    (row,) = await outbox.outbox_pending(1)
    assert (row.job.name, row.job.queue, row.job.tenant_id, row.job.idempotency_key) == (odd,) * 4
    assert row.job.enqueued_by == odd and json.loads(row.job.input_json) == {odd: odd}


def _stage_committed(box: PgOutbox, jobs: list[NewJob]) -> None:
    with psycopg.connect(libpq_url(PG_URL)) as conn:
        box.stage_records(conn, jobs)


async def test_claim_publish_release_in_stage_order_fenced_on_the_token(outbox: PgOutbox) -> None:
    # Staged out of order: stage order is (created_at_ms, id), not insertion order.
    _stage_committed(outbox, [*records(2, start=2), *records(2)])
    first = await outbox.outbox_claim(OutboxClaim("A", 3, 1_000, T0 + 10))
    assert [r.job.id for r in first] == ["j000", "j001", "j002"]
    assert {(r.claimed_by, r.lease_until_ms) for r in first} == {("A", T0 + 1_010)}
    # The lease holds: a second claim gets only the free row.
    assert [r.job.id for r in await outbox.outbox_claim(OutboxClaim("B", 9, 60_000, T0 + 20))] == [
        "j003"
    ]
    # A's lease lapses; C takes its rows. A's publish and release now land nothing.
    again = await outbox.outbox_claim(OutboxClaim("C", 2, 1_000, T0 + 1_010))
    assert [r.job.id for r in again] == ["j000", "j001"]
    assert await outbox.outbox_publish("A", ["j000", "j001", "j002"]) == ["j002"]  # still A's
    assert await outbox.outbox_release(OutboxRelease("A", ("j000", "j001"), T0, "late")) == []
    pending = {r.job.id: r for r in await outbox.outbox_pending(10)}
    assert sorted(pending) == ["j000", "j001", "j003"]
    assert {pending[i].claimed_by for i in ("j000", "j001")} == {"C"}
    assert all(r.attempts == 0 and r.last_error is None for r in pending.values())
    # Answers follow the order named, once each; an unknown id is left out.
    assert await outbox.outbox_release(
        OutboxRelease("C", ("j001", "zzz", "j000", "j001"), T0 + 5_000, "boom")
    ) == ["j001", "j000"]
    released = {r.job.id: r for r in await outbox.outbox_pending(10)}
    assert released["j000"].attempts == 1 and released["j000"].last_error == "boom"
    assert (released["j000"].claimed_by, released["j000"].lease_until_ms) == (None, None)
    assert released["j000"].available_at_ms == T0 + 5_000
    # Not claimable before the retry time; then again, and a release without error keeps both.
    assert await outbox.outbox_claim(OutboxClaim("D", 9, 1_000, T0 + 4_999)) == []
    d = await outbox.outbox_claim(OutboxClaim("D", 9, 1_000, T0 + 5_000))
    assert [r.job.id for r in d] == ["j000", "j001"]
    assert await outbox.outbox_release(OutboxRelease("D", ("j000",), T0 + 5_000)) == ["j000"]
    kept = {r.job.id: r for r in await outbox.outbox_pending(10)}["j000"]
    assert (kept.attempts, kept.last_error) == (1, "boom")
    assert await outbox.outbox_publish("D", ["j001", "j001", "j000"]) == ["j001"]
    assert await outbox.outbox_publish("B", ["j003"]) == ["j003"]
    assert [r.job.id for r in await outbox.outbox_pending(10)] == ["j000"]


async def test_two_racing_claims_never_take_one_row(outbox: PgOutbox) -> None:
    _stage_committed(outbox, records(6))
    claim = STATEMENTS["OUTBOX_CLAIM"]
    rival = await psycopg.AsyncConnection.connect(libpq_url(PG_URL))
    try:
        # A rival relay's claim, its transaction still open: it holds its rows' locks.
        cur = await rival.execute(
            claim.render(outbox.schema),
            claim.args({"token": "rival", "limit": 2, "lease_ms": 60_000, "now_ms": T0 + 9}),
        )
        assert [r[0] for r in await cur.fetchall()] == ["j000", "j001"]
        # Uncommitted, those rows still read free to everyone else, yet this claim skips them
        # (without waiting on the rival) and takes the next ones.
        mine = await asyncio.wait_for(outbox.outbox_claim(OutboxClaim("me", 3, 60_000, T0 + 9)), 10)
        assert [r.job.id for r in mine] == ["j002", "j003", "j004"]
        await rival.commit()
    finally:
        await rival.close()
    last = await outbox.outbox_claim(OutboxClaim("late", 9, 60_000, T0 + 9))
    assert [r.job.id for r in last] == ["j005"]
    owners = {r.job.id: r.claimed_by for r in await outbox.outbox_pending(10)}
    assert owners == {
        "j000": "rival",
        "j001": "rival",
        "j002": "me",
        "j003": "me",
        "j004": "me",
        "j005": "late",
    }


async def test_many_concurrent_claims_share_nothing(outbox: PgOutbox) -> None:
    _stage_committed(outbox, records(60))
    other = PgOutbox(PG_URL, schema=outbox.schema, pool_size=4)
    try:
        boxes = [outbox, other]
        answers = await asyncio.gather(
            *(
                boxes[i % 2].outbox_claim(OutboxClaim(f"t{i}", 7, 60_000, T0 + 100))
                for i in range(12)
            )
        )
    finally:
        await other.close()
    taken = [r.job.id for rows in answers for r in rows]
    assert len(taken) == len(set(taken))
    owners = {r.job.id: r.claimed_by for r in await outbox.outbox_pending(100)}
    for i, rows in enumerate(answers):
        assert all(owners[r.job.id] == f"t{i}" for r in rows)


async def test_the_wake_rings_after_a_commit_never_after_a_rollback(outbox: PgOutbox) -> None:
    rings: list[int] = []
    sub = await outbox.outbox_wake(lambda: rings.append(1))
    assert sub is not None
    await until(sub.is_live)  # a probe crossed: the channel delivers
    assert rings == []  # the probe itself rings nothing
    async with await psycopg.AsyncConnection.connect(libpq_url(PG_URL)) as conn:
        await outbox.stage(conn, WELCOME, {"email": "a"})
        await conn.rollback()
        await outbox.stage(conn, WELCOME, {"email": "b"})
        await outbox.stage(conn, WELCOME, {"email": "c"})
        await asyncio.sleep(0.3)
        assert rings == []  # staged, not committed: nothing yet
        await conn.commit()
    await until(lambda: rings == [1])  # one transaction, one ring
    await asyncio.sleep(0.3)
    assert rings == [1]
    await sub.close()
    assert not sub.is_live()


async def test_wake_off_notifies_nothing_and_offers_no_subscription(box_schema: str) -> None:
    quiet = PgOutbox(PG_URL, schema=box_schema, wake=False)
    loud = PgOutbox(f"{PG_URL}?schema={box_schema}&wake=0")
    async with quiet, loud:
        assert await quiet.outbox_wake(lambda: None) is None
        assert await loud.outbox_wake(lambda: None) is None
        async with await psycopg.AsyncConnection.connect(
            libpq_url(PG_URL), autocommit=True
        ) as listener:
            await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(quiet.channel)))
            with psycopg.connect(libpq_url(PG_URL)) as conn:
                quiet.stage(conn, WELCOME, {"email": "a"})
            gen = listener.notifies(timeout=0.5)
            assert [n async for n in gen] == []


async def test_a_stage_only_outbox_and_an_unreachable_one() -> None:
    box = PgOutbox(schema="anything")
    assert box.describe() == "postgres outbox (stage only: no url) schema=anything"
    with pytest.raises(DriverUrlInvalidError):
        await box.outbox_pending(1)
    down = PgOutbox(f"postgresql+psycopg://postgres:hunter2@127.0.0.1:{spare_port()}/test")
    try:
        with pytest.raises(DriverUnavailableError) as info:
            await down.outbox_claim(OutboxClaim("t", 1, 1_000, T0))
        assert "hunter2" not in str(info.value) and "hunter2" not in down.describe()
    finally:
        await down.close()


def test_from_url_reads_the_drivers_options_and_masks_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    box = outbox_from_url("postgresql://app:s3cret@db.example/app?schema=tenant_a&pool_size=3")
    assert box.schema == "tenant_a"
    where = "postgresql://app:***@db.example/app?schema=tenant_a&pool_size=3"
    assert box.describe() == f"postgres outbox {where} schema=tenant_a"
    with pytest.raises(DriverUrlInvalidError) as info:
        outbox_from_url("postgresql://app:s3cret@db.example/app?pool_size=many")
    assert "s3cret" not in str(info.value)
    with pytest.raises(DriverUrlInvalidError):
        outbox_from_url("mysql://app@db/app")
    monkeypatch.delenv("JOBS_PG_SCHEMA", raising=False)
    assert outbox_from_url("postgres://db/app").schema == "ujobs"
    # The entry points `ujobs relay --outbox` looks up, one per scheme the driver takes.
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    group = declared["ujobs.outboxes"]
    assert set(group) >= {"postgresql", "postgresql+psycopg", "postgres"}
    for target in (group[s] for s in ("postgresql", "postgresql+psycopg", "postgres")):
        module, attr = target.split(":")
        assert getattr(import_module(module), attr) is outbox_from_url


def test_ujobs_db_upgrade_creates_the_outbox_table(capsys: pytest.CaptureFixture[str]) -> None:
    schema = fresh_schema()
    url = f"{PG_URL}?schema={schema}"
    try:
        # In process (a refusal would exit 2): a subprocess would cost seconds of imports.
        ujobs_main(["db", "upgrade", "--url", url])
        said = capsys.readouterr().out
        assert said.startswith(f"created the jobs tables in schema '{schema}'"), said
        assert f"at revision {HEAD_REVISION}" in said

        async def stage_and_read() -> tuple[Staged, list[str]]:
            async with PgOutbox(url) as box:
                with psycopg.connect(libpq_url(PG_URL)) as conn:
                    got = box.stage(conn, WELCOME, {"email": "a"})
                return got, [r.job.id for r in await box.outbox_pending(1)]

        got, pending = asyncio.run(stage_and_read())
        assert pending == [got.id]
    finally:
        drop_schema(schema)


def test_ujobs_outbox_shows_the_backlog_oldest_first(
    box_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One row held by a relay, one waiting out a failed publish, one free; then none."""
    url = f"{PG_URL}?schema={box_schema}"
    now = int(time.time() * 1000)

    async def prepare() -> None:
        async with PgOutbox(url) as box:
            staged_ago = [
                replace(r, created_at_ms=now - 60_000 + i) for i, r in enumerate(records(3))
            ]
            _stage_committed(box, staged_ago)
            await box.outbox_claim(OutboxClaim("held", 2, 60_000, now))
            await box.outbox_release(OutboxRelease("held", ("j001",), now + 60_000, "X_BOOM"))

    asyncio.run(prepare())
    ujobs_main.main(["outbox", "--outbox", url, "--json"], standalone_mode=False)
    doc = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in doc["rows"]] == ["j000", "j001", "j002"] and not doc["more"]
    held, failed, free = doc["rows"]
    assert held["claimed"] and held["lease_until_ms"] == now + 60_000 and held["attempts"] == 0
    assert not failed["claimed"] and failed["available_at_ms"] == now + 60_000
    assert (failed["attempts"], failed["last_error"]) == (1, "X_BOOM")
    assert not free["claimed"] and free["attempts"] == 0 and "input" not in free
    ujobs_main.main(["outbox", "--outbox", url, "--limit", "2"], standalone_mode=False)
    said = capsys.readouterr().out
    assert "2 rows waiting (or more: raise --limit)" in said, said
    assert "1 with a failed publish" in said and "X_BOOM" in said, said

    async def publish_all() -> None:
        async with PgOutbox(url) as box:
            rows = await box.outbox_claim(OutboxClaim("all", 3, 1, now + 120_000))
            assert len(rows) == 3
            await box.outbox_publish("all", [r.job.id for r in rows])

    asyncio.run(publish_all())
    ujobs_main.main(["outbox", "--outbox", url], standalone_mode=False)
    assert "the outbox is empty" in capsys.readouterr().out
