"""`PgOutbox`: the outbox on Postgres. A stage writes on the CALLER's connection, in the caller's
transaction; the relay's side (`OutboxStore`) runs on the outbox's own pool.

`stage(conn, handle, input, **options)` takes the connection the app's business write is on — a
SQLAlchemy `Connection` or `Session` (also `scoped_session`), a psycopg 3 `Connection`, Django's
`django.db.connection` — and answers `Staged`; for a SQLAlchemy `AsyncConnection` or
`AsyncSession` (also `async_scoped_session`) or a psycopg `AsyncConnection` it answers an
awaitable. It never commits, never rolls back and never opens a connection of its own: the job
exists iff the caller's transaction commits. Every refusal (the record's, as `Jobs.enqueue`
makes them; a connection it cannot stage on) is raised before anything is sent, so a refused
stage leaves the caller's transaction as usable as it was. The statement runs on the psycopg
connection underneath (SQLAlchemy's own transaction begun first, so its commit or rollback
decides), through a plain server-binding cursor whatever cursor factory the app configured.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, overload

import psycopg
import sqlalchemy as sa
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from jobs_core.clock import Clock, SystemClock
from jobs_core.driver import WakeSubscription
from jobs_core.errors import (
    DeclarationInvalidError,
    DriverError,
    DriverUnsupportedError,
    DriverUrlInvalidError,
)
from jobs_core.job import JobHandle
from jobs_core.outbox import (
    OutboxClaim,
    OutboxRelease,
    OutboxRow,
    OutboxStore,
    Staged,
    check_staged,
    staged,
    staged_record,
)
from jobs_core.records import NewJob
from jobs_pg.driver import PgDriver, translate, wake_channel
from jobs_pg.sqltext import Statements, compile_all
from jobs_pg.statements import outbox as outbox_stmts
from jobs_pg.statements.outbox import JOB_COLUMNS, STAGED_PAYLOAD
from jobs_pg.urls import flag, mask, split_options


class DjangoConnection(Protocol):
    """What `stage` reads of Django's `django.db.connection` (a database wrapper or its proxy)."""

    vendor: str

    def ensure_connection(self) -> None: ...


if TYPE_CHECKING:
    from typing import TypeAlias

    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
    from sqlalchemy.orm import Session, scoped_session

    #: The connections a stage answers `Staged` on.
    SyncConnection: TypeAlias = (
        sa.Connection | Session | scoped_session[Any] | psycopg.Connection[Any] | DjangoConnection
    )
    #: The connections a stage answers an awaitable `Staged` on.
    AsyncConnectionLike: TypeAlias = (
        AsyncConnection | AsyncSession | async_scoped_session[Any] | psycopg.AsyncConnection[Any]
    )

#: Every outbox statement, compiled on first use (schema left as a token).
STATEMENTS: Final[Statements] = compile_all(vars(outbox_stmts))
_STAGE: Final = STATEMENTS["OUTBOX_STAGE"]
#: What a stage can run on, for the refusal that names everything else.
_ACCEPTED: Final = (
    "a SQLAlchemy Connection, Session, AsyncConnection or AsyncSession on psycopg 3, a psycopg 3"
    " Connection or AsyncConnection, or Django's connection"
)
DEFAULT_SCHEMA: Final = "ujobs"

T = TypeVar("T")


class PgOutbox(OutboxStore):
    """Staged jobs in the `outbox` table of a jobs schema (migration `0008_outbox`).

    `url` is needed only by the relay's side (claim, publish, release, pending, wake), which
    runs on a pool of its own (`pool_size` connections per event loop, with `PgDriver`'s
    timeouts and typed errors); a stage runs on the caller's connection, so an app that only
    stages passes none. The URL may carry `?schema=`, `pool_size`, `wake`, `prepare` and
    `listen_url` as a driver URL does; an explicit `schema` wins, then the URL's, then env
    `JOBS_PG_SCHEMA`, then `ujobs`. `clock` stamps each stage. `wake=False` neither notifies on
    stage nor offers `outbox_wake` (the relay polls).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        schema: str | None = None,
        clock: Clock | None = None,
        pool_size: int = 2,
        wake: bool = True,
    ) -> None:
        """Configure; nothing connects until `open()` or the first relay call."""
        opts: dict[str, str] = {}
        base: str | None = None
        if url is not None:
            base, opts = split_options(url)
        name = schema or opts.get("schema") or os.environ.get("JOBS_PG_SCHEMA") or DEFAULT_SCHEMA
        if "\x00" in name:
            raise DriverError("the schema name must hold no NUL character", detail="schema")
        self.schema: str = name
        self.clock = clock or SystemClock()
        self._url = url
        self._wake = wake and flag(opts.get("wake", "1"), "wake", url or "")
        #: The NOTIFY channel of this schema's stages (apart from the workers' queue wakes).
        self.channel = wake_channel(self.schema, "outbox")
        self._stage_text = _STAGE.render(self.schema)
        self._driver: PgDriver | None = None
        if base is not None:
            try:
                size = int(opts.get("pool_size", pool_size))
            except ValueError:
                raise DriverUrlInvalidError(
                    "pool_size must be an integer", detail=mask(base)
                ) from None
            self._driver = PgDriver(
                base,
                schema=self.schema,
                pool_size=size,
                wake=self._wake,
                prepare=flag(opts.get("prepare", "1"), "prepare", base),
                listen_url=opts.get("listen_url"),
            )

    async def __aenter__(self) -> PgOutbox:
        await self.open()
        return self

    def describe(self) -> str:
        where = mask(self._url) if self._url is not None else "(stage only: no url)"
        return f"postgres outbox {where} schema={self.schema}"

    async def open(self) -> None:
        """Connect the relay's pool once (`X_DRIVER_UNAVAILABLE` when the server does not
        answer); idempotent, and nothing to do for a stage-only outbox."""
        if self._driver is not None:
            await self._driver.open()

    async def close(self) -> None:
        """Close the relay's pools and LISTEN sessions (on every loop that used them)."""
        if self._driver is not None:
            await self._driver.close()

    # -- staging, on the caller's connection ------------------------------------------------------

    @overload
    def stage(
        self, conn: AsyncConnectionLike, handle: JobHandle, input: Any, **options: Any
    ) -> Awaitable[Staged]: ...

    @overload
    def stage(
        self, conn: SyncConnection, handle: JobHandle, input: Any, **options: Any
    ) -> Staged: ...

    def stage(
        self, conn: Any, handle: JobHandle, input: Any, **options: Any
    ) -> Staged | Awaitable[Staged]:
        """Stage one job in the caller's transaction on `conn` (`Jobs.enqueue`'s options but
        `id`/`run_id`, which the stage allocates and answers). Refused before anything is sent
        when the record is, or when `conn` is no connection a stage can run on."""
        record = staged_record(handle, input, clock=self.clock, **options)
        pending = self._write(conn, [record])
        answer = staged(record)
        return answer if pending is None else _then(pending, answer)

    @overload
    def stage_records(
        self, conn: AsyncConnectionLike, records: Sequence[NewJob]
    ) -> Awaitable[None]: ...

    @overload
    def stage_records(self, conn: SyncConnection, records: Sequence[NewJob]) -> None: ...

    def stage_records(self, conn: Any, records: Sequence[NewJob]) -> Awaitable[None] | None:
        """Stage ready-made records in ONE statement in the caller's transaction on `conn`; all
        refused (`check_staged`) before anything is sent. An id staged before keeps its row."""
        return self._write(conn, records)

    def _write(self, conn: object, records: Sequence[NewJob]) -> Awaitable[None] | None:
        """Every refusal now; then the write itself (sync), or an awaitable of it (async)."""
        check_staged(records)
        args = _STAGE.args(self._stage_values(records))
        if _is_async(conn):
            return self._write_async(conn, args, bool(records))
        raw = _sync_psycopg(conn)
        if records:
            try:
                with psycopg.Cursor(raw, row_factory=tuple_row) as cur:
                    cur.execute(self._stage_text, args)
            except psycopg.Error as exc:
                raise translate(exc, self.schema, _STAGE.name) from exc
        return None

    async def _write_async(self, conn: object, args: Sequence[Any], any_records: bool) -> None:
        if not any_records:
            return
        raw = await _async_psycopg(conn)
        try:
            async with psycopg.AsyncCursor(raw, row_factory=tuple_row) as cur:
                await cur.execute(self._stage_text, args)
        except psycopg.Error as exc:
            raise translate(exc, self.schema, _STAGE.name) from exc

    def _stage_values(self, records: Sequence[NewJob]) -> dict[str, Any]:
        values: dict[str, Any] = {c: [getattr(r, c) for r in records] for c in JOB_COLUMNS}
        values["channel"] = self.channel if self._wake else None
        return values

    # -- the relay's side, on the outbox's own pool -----------------------------------------------

    def _pool(self) -> PgDriver:
        if self._driver is None:
            raise DriverUrlInvalidError(
                "this outbox was made without a url: stage works, the relay's calls need one",
                detail=self.describe(),
            )
        return self._driver

    async def outbox_wake(self, on_wake: Callable[[], None]) -> WakeSubscription | None:
        """ONE dedicated LISTEN session on this schema's stage channel (`jobs_pg.wake`), proven
        by a probe through the pool before `is_live()`; `on_wake()` once per committed stage
        transaction that wrote a row. None with the wake off."""
        if not self._wake:
            return None
        pool = self._pool()

        def deliver(payload: str) -> None:
            if payload == STAGED_PAYLOAD:
                on_wake()

        return pool.listen(
            self.channel, deliver, functools.partial(pool.send_probe, channel=self.channel)
        )

    async def _outbox_claim(self, claim: OutboxClaim) -> list[OutboxRow]:
        rows = await self._pool().run(
            STATEMENTS["OUTBOX_CLAIM"],
            {
                "token": claim.token,
                "limit": claim.limit,
                "lease_ms": claim.lease_ms,
                "now_ms": claim.now_ms,
            },
        )
        return [_outbox_row(r) for r in rows]

    async def _outbox_pending(self, limit: int) -> list[OutboxRow]:
        rows = await self._pool().run(STATEMENTS["OUTBOX_PENDING"], {"limit": limit}, read=True)
        return [_outbox_row(r) for r in rows]

    async def _outbox_publish(self, token: str, ids: Sequence[str]) -> list[str]:
        named = list(dict.fromkeys(ids))
        rows = await self._pool().run(STATEMENTS["OUTBOX_PUBLISH"], {"token": token, "ids": named})
        return _in_named_order(named, rows)

    async def _outbox_release(self, release: OutboxRelease) -> list[str]:
        named = list(dict.fromkeys(release.ids))
        rows = await self._pool().run(
            STATEMENTS["OUTBOX_RELEASE"],
            {
                "token": release.token,
                "ids": named,
                "retry_at_ms": release.retry_at_ms,
                "error": release.error,
            },
        )
        return _in_named_order(named, rows)


# -- the caller's connection ----------------------------------------------------------------------


def _is_async(conn: object) -> bool:
    """Whether `conn` is one of the async kinds; anything not accepted is refused here.

    SQLAlchemy's ORM and asyncio modules are looked up, not imported: an object of theirs exists
    only once the app imported them, so `import jobs_pg` never pays for them.
    """
    if isinstance(conn, psycopg.AsyncConnection):
        return True
    if isinstance(conn, psycopg.Connection | sa.Connection):
        return False
    orm = sys.modules.get("sqlalchemy.orm")
    if orm is not None and isinstance(conn, orm.Session | orm.scoped_session):
        return False
    aio = sys.modules.get("sqlalchemy.ext.asyncio")
    if aio is not None and isinstance(
        conn, aio.AsyncConnection | aio.AsyncSession | aio.async_scoped_session
    ):
        return True
    if _is_django(conn):
        return False
    raise DriverUnsupportedError(f"stage runs on {_ACCEPTED}", detail=type(conn).__name__)


def _is_django(conn: object) -> bool:
    # Duck-typed: Django is the app's dependency, never ours.
    return callable(getattr(conn, "ensure_connection", None)) and hasattr(conn, "vendor")


def _sync_psycopg(conn: object) -> psycopg.Connection[Any]:
    """The psycopg connection under a sync `conn`, checked, its SQLAlchemy transaction begun."""
    if isinstance(conn, psycopg.Connection):
        return _sync_checked(conn)
    if isinstance(conn, sa.Connection):
        raw = _sync_checked(conn.connection.driver_connection)
        if not conn.in_transaction():
            conn.begin()  # what SQLAlchemy's autobegin does: its commit() now commits our row
        return raw
    if _is_django(conn):
        django: Any = conn
        if django.vendor != "postgresql":
            raise DriverUnsupportedError(f"stage runs on {_ACCEPTED}", detail=django.vendor)
        if getattr(django, "needs_rollback", False):
            raise DeclarationInvalidError(
                "the transaction is marked for rollback after an error; stage in a new one",
                detail="conn",
            )
        django.ensure_connection()
        return _sync_checked(django.connection)
    # A Session (or scoped_session): its connection() begins the session's transaction.
    session: Any = conn
    return _sync_psycopg(session.connection())


async def _async_psycopg(conn: object) -> psycopg.AsyncConnection[Any]:
    """The psycopg connection under an async `conn`, checked, its SQLAlchemy transaction begun."""
    if isinstance(conn, psycopg.AsyncConnection):
        return _async_checked(conn)
    aio = sys.modules["sqlalchemy.ext.asyncio"]
    if isinstance(conn, aio.AsyncConnection):
        raw = _async_checked((await conn.get_raw_connection()).driver_connection)
        if not conn.in_transaction():
            await conn.begin()
        return raw
    # An AsyncSession (or async_scoped_session): its connection() begins its transaction.
    session: Any = conn
    return await _async_psycopg(await session.connection())


def _sync_checked(raw: object) -> psycopg.Connection[Any]:
    if not isinstance(raw, psycopg.Connection):
        raise _unsupported(raw)
    _usable(raw)
    return raw


def _async_checked(raw: object) -> psycopg.AsyncConnection[Any]:
    if not isinstance(raw, psycopg.AsyncConnection):
        raise _unsupported(raw)
    _usable(raw)
    return raw


def _unsupported(raw: object) -> DriverUnsupportedError:
    kind = f"{type(raw).__module__}.{type(raw).__name__}"
    return DriverUnsupportedError(f"stage runs on {_ACCEPTED}", detail=kind)


def _usable(raw: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Refuse a connection whose transaction cannot carry the stage to the caller's commit."""
    status = raw.info.transaction_status
    if raw.autocommit and status == TransactionStatus.IDLE:
        # Each statement would commit alone: there is no transaction for the job to share.
        raise DeclarationInvalidError(
            "stage inside the caller's transaction: this connection is in autocommit mode"
            " with no transaction open",
            detail="conn",
        )
    if status == TransactionStatus.INERROR:
        raise DeclarationInvalidError(
            "the caller's transaction failed on an earlier statement; roll it back first",
            detail="conn",
        )


# -- consumers --


def in_transaction_sync(conn: object) -> psycopg.Connection[Any]:
    """The psycopg connection under a sync `conn` (as `stage` takes it), in an open transaction
    that can carry a write to the caller's commit; refused (typed) otherwise, nothing sent."""
    if _is_async(conn):
        raise DriverUnsupportedError("an async connection: use the async put", detail="conn")
    return _sync_psycopg(conn)


async def in_transaction_async(conn: object) -> psycopg.AsyncConnection[Any]:
    """The psycopg connection under an async `conn`, as `in_transaction_sync`."""
    if not _is_async(conn):
        raise DriverUnsupportedError("a sync connection: use the sync put", detail="conn")
    return await _async_psycopg(conn)


async def _then(pending: Awaitable[None], answer: T) -> T:
    await pending
    return answer


def _outbox_row(r: Sequence[Any]) -> OutboxRow:
    """An `OutboxRow` from a row in `ROW_COLUMNS` order."""
    return OutboxRow(
        job=NewJob(**dict(zip(JOB_COLUMNS, (*r[:13], r[18]), strict=True))),
        attempts=r[13],
        available_at_ms=r[14],
        claimed_by=r[15],
        lease_until_ms=r[16],
        last_error=r[17],
    )


def _in_named_order(named: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    done = {r[0] for r in rows}
    return [i for i in named if i in done]


# -- the module-level shortcut --------------------------------------------------------------------

#: One stage-only outbox per schema, for `stage()`.
_STAGERS: dict[str, PgOutbox] = {}


@overload
def stage(
    conn: AsyncConnectionLike,
    handle: JobHandle,
    input: Any,
    *,
    schema: str | None = None,
    **options: Any,
) -> Awaitable[Staged]: ...


@overload
def stage(
    conn: SyncConnection,
    handle: JobHandle,
    input: Any,
    *,
    schema: str | None = None,
    **options: Any,
) -> Staged: ...


def stage(
    conn: Any, handle: JobHandle, input: Any, *, schema: str | None = None, **options: Any
) -> Staged | Awaitable[Staged]:
    """`PgOutbox(schema=schema).stage(conn, handle, input, **options)` on the system clock: one
    job staged in the caller's transaction on `conn` (see `PgOutbox.stage`)."""
    name = schema or os.environ.get("JOBS_PG_SCHEMA") or DEFAULT_SCHEMA
    outbox = _STAGERS.get(name)
    if outbox is None:
        outbox = _STAGERS.setdefault(name, PgOutbox(schema=name))
    answer: Staged | Awaitable[Staged] = outbox.stage(conn, handle, input, **options)
    return answer


def outbox_from_url(url: str) -> PgOutbox:
    """A new, unopened `PgOutbox` for `url` (the `ujobs relay --outbox postgresql+psycopg://…`
    path, via the `ujobs.outboxes` entry points)."""
    return PgOutbox(url)


__all__ = ["STATEMENTS", "DjangoConnection", "PgOutbox", "outbox_from_url", "stage"]
