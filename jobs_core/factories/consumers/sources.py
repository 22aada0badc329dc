"""What a consumer reads, a turn at a time, and how each source commits a turn's cursor.

- `table(select, engine=, key=, tenant_column=)`: a Postgres table read by an increasing key
  (the backfill's keyset: `WHERE key > :cursor ORDER BY key LIMIT batch`, ANDed with the
  tenant's column). A turn is ONE transaction on the app's engine: the batch is read, the
  handler is handed that transaction's connection for its own writes, and the cursor row (in
  the jobs store's schema, fenced on the run's claim) is written last in it. A put that does not
  land (a lost claim, another turn first) rolls the whole turn back. So the batch and its cursor
  commit together, and a crash before the commit re-reads the batch with nothing of it kept:
  the handler's writes in that transaction take effect exactly once. A sync engine's turn runs
  in a thread, which cannot be stopped: a run cancelled meanwhile (a drain's deadline) waits for
  the turn to end before it unwinds and lets go of its lease, so no other run's turn reads the
  batch beside it.
- `stream(client, key, group=)`: a Redis Stream read by a consumer group (XREADGROUP). The
  cursor is the group's acknowledgement: after the handler, the fenced cursor write (the last
  entry's id), then XACK. On a run's first turn the group's pending entries (delivered, never
  acknowledged: a crash mid-turn) are taken back first (XAUTOCLAIM); those at or before the
  stored cursor were handled and recorded already, and are acknowledged without the handler.
- `function(fn)`: `fn(cursor, limit) -> (records, next cursor)`; the cursor is stored by the
  fenced write after the handler.

Outside the table source, the handler's side effects and the cursor are two writes: a crash
between them hands the same batch to the handler again. At least once, at most the one batch.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from jobs_core.clock import Clock
from jobs_core.context import CancelSignal
from jobs_core.driver import (
    MAX_CONSUMER_CURSOR_BYTES,
    MAX_SWEEP_ROWS,
    JobDriver,
    name_refusal,
)
from jobs_core.errors import (
    ConsumerCursorMovedError,
    ConsumerDeclarationInvalidError,
    ConsumerSourceInvalidError,
    DriverUnavailableError,
    JobsError,
    LeaseLostError,
)
from jobs_core.factories.backfill.source import Keyset
from jobs_core.factories.sweep import call
from jobs_core.jsonform import JsonValue, dumps, loads, utf8_length
from jobs_core.records import ConsumerCursor, ConsumerPut, Fence

T = TypeVar("T")

#: A table's lag is counted up to this many rows (a count past it answers it).
MAX_LAG_COUNT: Final = 1_000_000

#: `function(fn)`: `(cursor, limit) -> (records, next cursor)`, sync (run on a thread) or async.
FetchFn = Callable[[JsonValue, int], Any]
#: `function(fn, lag=)`: `(cursor) -> records left past it, or None`.
LagFn = Callable[[JsonValue], Any]
#: The handler: `(records, turn)`, sync or async (see `consumer()`).
Handler = Callable[[list[Any], "Turn"], Any]


@dataclass(frozen=True, slots=True)
class Turn:
    """What a handler is told about its batch."""

    #: The consumer's name and the tenant it acts for (None: `tenant="none"`).
    name: str
    tenant: str | None
    #: The cursor this batch was read after (None on the first turn).
    cursor: JsonValue
    #: The table source's transaction: the SQLAlchemy connection (sync or async, as the engine
    #: is) whose commit carries the cursor too. None for the other sources.
    conn: Any = None


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """One turn as the run hands it to its source: where to write, from which cursor."""

    driver: JobDriver
    fence: Fence
    name: str
    tenant: str | None
    source: str
    stored: ConsumerCursor | None
    batch: int
    handler: Handler
    clock: Clock
    signal: CancelSignal

    @property
    def cursor(self) -> JsonValue:
        """The stored cursor's value (None: nothing stored yet)."""
        return None if self.stored is None else loads(self.stored.cursor_json)

    def put(self, cursor_json: str, records: int, lag: int | None) -> ConsumerPut:
        """The fenced write of this turn: from the stored cursor to `cursor_json`."""
        return ConsumerPut(
            fence=self.fence,
            name=self.name,
            tenant_id=self.tenant,
            source=self.source,
            expect_json=None if self.stored is None else self.stored.cursor_json,
            cursor_json=cursor_json,
            records=records,
            lag=None if lag is None else max(0, min(lag, MAX_SWEEP_ROWS)),
            now_ms=self.clock.now_ms(),
        )

    def turn(self, conn: Any = None) -> Turn:
        return Turn(self.name, self.tenant, self.cursor, conn)

    async def store(self, put: ConsumerPut) -> bool:
        """The turn's fenced cursor write (the driver's own connection); whether it landed.

        When its answer is lost (`X_DRIVER_UNAVAILABLE`: it may have landed), the stored cursor
        says which: this turn's (landed), the one it read (sent again once), else it raises —
        rather than fail the run, its attempt spent, on a cursor that moved."""
        try:
            return await self.driver.consumer_cursor_put(put)
        except DriverUnavailableError:
            now = await self.driver.consumer_cursor_get(self.name, self.tenant)
            text = None if now is None else now.cursor_json
            if text == put.cursor_json:
                return True
            if text != put.expect_json:
                raise
            return await self.driver.consumer_cursor_put(put)

    async def refused(self) -> JobsError:
        """Why a put of this turn did not land: another turn moved the cursor, else the claim
        was lost."""
        now = await self.driver.consumer_cursor_get(self.name, self.tenant)
        was = None if self.stored is None else self.stored.cursor_json
        if (None if now is None else now.cursor_json) != was:
            return ConsumerCursorMovedError(
                "another turn moved the cursor after this one read it", detail=self.name
            )
        return LeaseLostError(f"the claim was lost before {self.name!r} stored its cursor")


@dataclass(frozen=True, slots=True)
class Done:
    """What a turn did: records handled (0: nothing new), the cursor stored after it."""

    records: int
    cursor: ConsumerCursor | None


class Source(Protocol):
    """A consumer's source: its stored label and one turn."""

    def label(self, name: str) -> str:
        """What `ujobs consumers` shows as the source (`table:…`, `stream:…`, `function:…`)."""
        ...

    def check(self, handler: Handler, tenant: str | None) -> None:
        """Refuse, at declaration, what no turn could do (`X_CONSUMER_DECLARATION_INVALID`)."""
        ...

    async def turn(self, plan: TurnPlan) -> Done:
        """Read a batch after the stored cursor, hand it to the handler and store the cursor
        after it, committed as the source says; `Done(0, …)` when there was nothing."""
        ...


def cursor_text(value: Any, what: str) -> str:
    """`value` as the stored cursor's text: its JSON form within `MAX_CONSUMER_CURSOR_BYTES`,
    else `X_CONSUMER_SOURCE_INVALID` (before the handler ran)."""
    if value is None:
        raise ConsumerSourceInvalidError(f"{what} is None: a batch must name where it ends")
    try:
        text = dumps(value)
    except JobsError as exc:
        raise ConsumerSourceInvalidError(f"{what} has no JSON form: {exc.message}") from exc
    if utf8_length(text) > MAX_CONSUMER_CURSOR_BYTES:
        raise ConsumerSourceInvalidError(
            f"{what} is longer than {MAX_CONSUMER_CURSOR_BYTES} bytes of JSON"
        )
    return text


def _is_async(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's async __call__
    )


def _lag(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


# -- a Postgres table, the batch and its cursor in one transaction --------------------------------


class TableSource:
    """`table(...)`: see the module's docstring."""

    def __init__(self, select: Any, *, engine: Any, key: Any, tenant_column: Any = None) -> None:
        try:
            self._keyset = Keyset(select, engine=engine, key=key, tenant_column=tenant_column)
        except JobsError as exc:
            raise ConsumerDeclarationInvalidError(exc.message, detail=exc.detail) from exc
        if not hasattr(engine, "connect"):
            raise ConsumerDeclarationInvalidError(
                "a SQLAlchemy Engine or AsyncEngine (a turn is one transaction on it)",
                detail="engine",
            )
        self._engine = engine
        self._async = hasattr(engine, "sync_engine")
        self._tenant_column = tenant_column
        froms = select.get_final_froms() if hasattr(select, "get_final_froms") else []
        self._table = str(froms[0]) if len(froms) == 1 else str(key)

    def label(self, name: str) -> str:
        return f"table:{self._table}"

    def check(self, handler: Handler, tenant: str | None) -> None:
        if tenant is None and self._tenant_column is not None:
            raise ConsumerDeclarationInvalidError(
                "a tenant='none' consumer crosses tenants: it takes no tenant_column",
                detail="tenant_column",
            )
        if tenant is not None and self._tenant_column is None:
            raise ConsumerDeclarationInvalidError(
                "a tenant's consumer reads only that tenant's rows: give tenant_column=",
                detail="tenant_column",
            )
        if _is_async(handler) != self._async:
            kind = "an async" if self._async else "a plain (def)"
            raise ConsumerDeclarationInvalidError(
                f"the handler shares the turn's transaction: {kind} handler for this engine",
                detail="handle",
            )

    async def turn(self, plan: TurnPlan) -> Done:
        driver: Any = plan.driver
        if not callable(getattr(driver, "consumer_cursor_put_async", None)):
            raise ConsumerDeclarationInvalidError(
                "a table's turn stores its cursor in the table's transaction: that takes the"
                " Postgres driver, on the same database as the engine",
                detail=driver.describe(),
            )
        stmt = self._keyset.statement(plan.cursor, plan.tenant)
        if self._async:
            landed = await self._turn_async(plan, stmt)
        else:
            landed = await _to_the_end(asyncio.to_thread(self._turn_sync, plan, stmt))
        if landed is None:
            return Done(0, plan.stored)
        if not landed:
            raise await plan.refused()
        return Done(landed, await plan.driver.consumer_cursor_get(plan.name, plan.tenant))

    def _batch(self, rows: list[Any]) -> tuple[str, Any]:
        at = self._keyset.key_position
        keys = [row[at] for row in rows]
        if any(k is None for k in keys) or len(set(map(repr, keys))) != len(keys):
            raise ConsumerSourceInvalidError(
                "a batch's keys must be unique and never NULL: keyset reads would skip rows",
                detail=self._table,
            )
        return cursor_text(keys[-1], "the last row's key"), keys[-1]

    def _lag_stmt(self, plan: TurnPlan, last: Any) -> Any:
        # The app's own SQLAlchemy (it built the select): jobs_core imports none.
        sa: Any = sys.modules["sqlalchemy"]
        after = self._keyset.statement(loads(dumps(last)), plan.tenant).limit(MAX_LAG_COUNT)
        return sa.select(sa.func.count()).select_from(after.subquery())

    async def _turn_async(self, plan: TurnPlan, stmt: Any) -> int | bool | None:
        driver: Any = plan.driver
        async with self._engine.connect() as conn, conn.begin() as tx:
            rows = list((await conn.execute(stmt.limit(plan.batch))).all())
            if not rows:
                return None
            text, last = self._batch(rows)
            await plan.handler(rows, plan.turn(conn))
            lag = (await conn.execute(self._lag_stmt(plan, last))).scalar()
            if not await driver.consumer_cursor_put_async(conn, plan.put(text, len(rows), lag)):
                await tx.rollback()
                return False
        return len(rows)

    def _turn_sync(self, plan: TurnPlan, stmt: Any) -> int | bool | None:
        driver: Any = plan.driver
        with self._engine.connect() as conn, conn.begin() as tx:
            rows = list(conn.execute(stmt.limit(plan.batch)).all())
            if not rows:
                return None
            text, last = self._batch(rows)
            plan.handler(rows, plan.turn(conn))
            lag = conn.execute(self._lag_stmt(plan, last)).scalar()
            if not driver.consumer_cursor_put_sync(conn, plan.put(text, len(rows), lag)):
                tx.rollback()
                return False
        return len(rows)


async def _to_the_end(turn: Awaitable[T]) -> T:
    """`turn` awaited; when the run is cancelled meanwhile (a drain's deadline, a lost claim),
    still awaited to its end before the cancellation goes on. A thread cannot be stopped: its
    turn (the handler, the transaction, the fenced cursor write) runs on regardless, and the run
    must not unwind — and let go of its lease — while it does, or another run's turn would read
    the same batch beside it. A second cancellation (a forced exit) is not held."""
    running = asyncio.ensure_future(turn)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait({running})
        raise


# -- a Redis Stream, acknowledged after the cursor ------------------------------------------------


def _stream_id(value: object) -> tuple[int, int]:
    text = value.decode() if isinstance(value, bytes) else str(value)
    ms, _, seq = text.partition("-")
    return (int(ms), int(seq or 0))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class StreamSource:
    """`stream(...)`: see the module's docstring. `client` is a `redis.asyncio.Redis` (or a
    cluster client) the app made; the group is created at the stream's start (`0`) when it is
    missing, so a new consumer reads what the stream holds."""

    def __init__(self, client: Any, key: str, *, group: str | None = None) -> None:
        for method in ("xreadgroup", "xack", "xautoclaim", "xgroup_create"):
            if not callable(getattr(client, method, None)):
                raise ConsumerDeclarationInvalidError(
                    "a redis.asyncio client (Redis or RedisCluster)", detail="client"
                )
        for what, value in (("key", key), ("group", group)):
            why = None if value is None and what == "group" else name_refusal(value)
            if why is not None:
                raise ConsumerDeclarationInvalidError(why, detail=what)
        self._client = client
        self._key = key
        self._group = group
        #: Runs (by fence) that took the group's pending entries back already.
        self._drained: set[Fence] = set()

    def label(self, name: str) -> str:
        return f"stream:{self._key}"

    def check(self, handler: Handler, tenant: str | None) -> None:
        return None

    def _names(self, plan: TurnPlan) -> tuple[str, str]:
        group = self._group or plan.name
        # One consumer of the group per consumer and tenant: the lease keeps it to one run.
        return group, f"{plan.name}:{plan.tenant or ''}"

    async def turn(self, plan: TurnPlan) -> Done:
        group, member = self._names(plan)
        c = self._client
        entries: list[tuple[Any, Any]] = []
        if plan.fence not in self._drained:
            try:
                await c.xgroup_create(self._key, group, id="0", mkstream=True)
            except Exception as exc:
                # The client's own ResponseError (jobs_core imports no redis): the group exists.
                if "BUSYGROUP" not in str(exc):
                    raise
            # At most one batch is pending (each turn acknowledges its batch before the next
            # read), so one page of `batch` entries takes it all back.
            entries = await self._pending(plan, group, member)
            if not entries:
                if len(self._drained) > 1_000:
                    self._drained.clear()
                self._drained.add(plan.fence)
        if not entries:
            got = await c.xreadgroup(group, member, {self._key: ">"}, count=plan.batch)
            if isinstance(got, dict):  # RESP3: {key: [entries]}
                entries = [e for batch in got.values() for e in batch[0]]
            else:  # RESP2: [[key, entries]]
                entries = list(got[0][1]) if got else []
        if not entries:
            return Done(0, plan.stored)
        ids = [_text(i) for i, _ in entries]
        records = [(_text(i), fields) for i, fields in entries]
        await call(plan.handler, records, plan.turn())
        lag = await self._group_lag(group)
        if not await plan.store(plan.put(dumps(ids[-1]), len(records), lag)):
            raise await plan.refused()
        await c.xack(self._key, group, *ids)
        return Done(len(records), await plan.driver.consumer_cursor_get(plan.name, plan.tenant))

    async def _pending(self, plan: TurnPlan, group: str, member: str) -> list[tuple[Any, Any]]:
        """The group's pending entries, taken back for this run's member; those at or before
        the stored cursor (handled and recorded, not acknowledged: a crash between the two)
        are acknowledged here without the handler."""
        c = self._client
        got = await c.xautoclaim(self._key, group, member, 0, start_id="0-0", count=plan.batch)
        entries = [(i, f) for i, f in got[1] if f is not None]
        stored = plan.cursor
        if isinstance(stored, str):
            done = [i for i, _ in entries if _stream_id(i) <= _stream_id(stored)]
            if done:
                await c.xack(self._key, group, *done)
            entries = [(i, f) for i, f in entries if _stream_id(i) > _stream_id(stored)]
        return entries

    async def _group_lag(self, group: str) -> int | None:
        try:
            groups = await self._client.xinfo_groups(self._key)
        except Exception:
            return None
        for g in groups:
            if _text(g.get("name", g.get(b"name", ""))) == group:
                return _lag(g.get("lag", g.get(b"lag")))
        return None


# -- a function of the cursor -----------------------------------------------------------------


class FunctionSource:
    """`function(fn, lag=)`: see the module's docstring."""

    def __init__(self, fn: FetchFn, *, lag: LagFn | None = None, name: str | None = None) -> None:
        if not callable(fn):
            raise ConsumerDeclarationInvalidError("fn must be a function", detail="fn")
        if lag is not None and not callable(lag):
            raise ConsumerDeclarationInvalidError("lag must be a function", detail="lag")
        self._fn = fn
        self._lag_fn = lag
        label = name if name is not None else getattr(fn, "__name__", "fn")
        why = name_refusal(f"function:{label}")
        if why is not None:
            raise ConsumerDeclarationInvalidError(why, detail="name")
        self._label = f"function:{label}"

    def label(self, name: str) -> str:
        return self._label

    def check(self, handler: Handler, tenant: str | None) -> None:
        return None

    async def turn(self, plan: TurnPlan) -> Done:
        answer = await call(self._fn, plan.cursor, plan.batch)
        if not isinstance(answer, tuple | list) or len(answer) != 2:
            raise ConsumerSourceInvalidError(
                f"fn must answer (records, next cursor), not {type(answer).__name__}"
            )
        records, after = answer
        if not isinstance(records, list | tuple):
            raise ConsumerSourceInvalidError("records must be a list", detail="records")
        if not records:
            return Done(0, plan.stored)
        if len(records) > plan.batch:
            raise ConsumerSourceInvalidError(
                f"{len(records)} records, more than the batch of {plan.batch}"
            )
        text = cursor_text(after, "the next cursor")
        if plan.stored is not None and text == plan.stored.cursor_json:
            raise ConsumerSourceInvalidError(
                "the next cursor is the one this batch was read after: the consumer would"
                " read the same records forever"
            )
        await call(plan.handler, list(records), plan.turn())
        lag = None if self._lag_fn is None else _lag(await call(self._lag_fn, loads(text)))
        if not await plan.store(plan.put(text, len(records), lag)):
            raise await plan.refused()
        return Done(len(records), await plan.driver.consumer_cursor_get(plan.name, plan.tenant))


def table(select: Any, *, engine: Any, key: Any, tenant_column: Any = None) -> TableSource:
    """A Postgres table read by `key` (unique, increasing), a turn one transaction on `engine`
    with the cursor in it; a tenant's consumer names `tenant_column`."""
    return TableSource(select, engine=engine, key=key, tenant_column=tenant_column)


def stream(client: Any, key: str, *, group: str | None = None) -> StreamSource:
    """A Redis Stream read by consumer group `group` (default: the consumer's name)."""
    return StreamSource(client, key, group=group)


def function(fn: FetchFn, *, lag: LagFn | None = None, name: str | None = None) -> FunctionSource:
    """`fn(cursor, limit) -> (records, next cursor)`; `lag(cursor)` answers what is left."""
    return FunctionSource(fn, lag=lag, name=name)
