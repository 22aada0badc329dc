"""`PgDriver`: the `JobDriver` contract on Postgres, through psycopg 3 (async) and a pool.

Each method is one round-trip in the common case: the statements (`jobs_pg.statements`) are
SQLAlchemy Core constructs compiled once to SQL text, then run on raw psycopg connections in
autocommit mode (each statement is its own transaction — only an `enqueue_many` longer than
one chunk runs its statements in one — so no session state is kept and the driver works behind
PgBouncer in transaction mode). A server that is down, or goes away during a call, becomes
`DriverUnavailableError` (`X_DRIVER_UNAVAILABLE`): connects and calls carry timeouts, and a
failed call is never retried blindly (a write that may have landed is reported, not repeated),
so nothing is lost or done twice beyond what the fence allows. Only a statement the server
rolled back whole (deadlock, serialization failure) runs again; other server errors are sorted
by SQLSTATE (`classify`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import operator
import random
import select
import time
import weakref
import zlib
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Hashable,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

import psycopg
import psycopg.errors
from psycopg_pool import PoolTimeout

from jobs_core.attempts import (
    ABANDONED_ERROR,
    AttemptRecord,
    attempt_error,
    from_entry,
    nack_attempt_outcome,
)
from jobs_core.driver import (
    ENQUEUE_CHUNK,
    MAX_TIME_MS,
    Capabilities,
    JobDriver,
    WakeSubscription,
    check_consumer_put,
)
from jobs_core.errors import (
    DriverCancelledError,
    DriverConflictError,
    DriverError,
    DriverLimitError,
    DriverSchemaMissingError,
    DriverUnavailableError,
    JobsError,
)
from jobs_core.jsonform import loads
from jobs_core.loops import LoopLocal
from jobs_core.lost_claims import ClaimCall as _Claim
from jobs_core.lost_claims import HeldBurials, LostClaim, LostClaims
from jobs_core.records import (
    Ack,
    BalanceRow,
    BuriedJob,
    CancelAnswer,
    ClaimedJob,
    ClaimParams,
    ClaimResult,
    ConsumerCursor,
    ConsumerPut,
    CounterReadParams,
    CounterRow,
    EnqueueResult,
    EventRecord,
    EventWait,
    Fence,
    Heartbeat,
    JobFilter,
    JobRecord,
    JobSlice,
    JobSummary,
    JoinEnqueue,
    JoinEnqueueAnswer,
    JoinPolicy,
    JoinState,
    Lease,
    LeaseRef,
    LeaseRenew,
    LeaseTake,
    ListKey,
    Nack,
    NackKind,
    NewJob,
    NewJobs,
    Pause,
    PostingPut,
    PostingPutAnswer,
    PostingRecord,
    Progress,
    PromoteAnswer,
    PurgeParams,
    QueueStats,
    RemoveAnswer,
    RequeueAnswer,
    RequeueParams,
    StepPut,
    StepRecord,
    SweepAdvance,
    SweepCheckpoint,
    SweepFinish,
    SweepRecord,
    SweepStart,
    SweepStartAnswer,
    TaskFire,
    TaskFireAnswer,
    TaskMark,
    WebhookAttempt,
    WebhookAttemptAnswer,
    WebhookAttemptListParams,
    WebhookAttemptPut,
    WebhookEndpoint,
    WebhookEndpointEnable,
    WebhookEndpointPut,
    WorkerBeat,
    WorkerInfo,
)
from jobs_core.semantics import (
    LEASE_CLOCK_KEEP_MS,
    LEASE_LAPSED_ERROR,
    drop_before,
    event_matches,
    fold_before,
    lapsed_by,
    posting_lines_of,
    posting_lines_text,
)
from jobs_core.states import LIVE_STATES, JobState
from jobs_core.wake import Trails
from jobs_pg.schema import COUNTER_SHARDS, lease_tokens
from jobs_pg.sqltext import Sql, Statements, compile_all
from jobs_pg.statements import consumer as consumer_stmts
from jobs_pg.statements import counter as counter_stmts
from jobs_pg.statements import event as event_stmts
from jobs_pg.statements import job as job_stmts
from jobs_pg.statements import join as join_stmts
from jobs_pg.statements import lease as lease_stmts
from jobs_pg.statements import pause as pause_stmts
from jobs_pg.statements import posting as posting_stmts
from jobs_pg.statements import queue as queue_stmts
from jobs_pg.statements import step as step_stmts
from jobs_pg.statements import sweep as sweep_stmts
from jobs_pg.statements import task as task_stmts
from jobs_pg.statements import wake as wake_stmts
from jobs_pg.statements import webhook as webhook_stmts
from jobs_pg.statements import worker as worker_stmts
from jobs_pg.statements.job import SHARED_COLUMNS
from jobs_pg.urls import libpq_url, mask
from jobs_pg.wire import Round, Session

if TYPE_CHECKING:
    from jobs_pg.wake import PgWakeSubscription

log = logging.getLogger("jobs.pg")

#: Every statement, compiled on first use (schema left as a token).
STATEMENTS: Final[Statements] = compile_all(
    vars(counter_stmts),
    vars(event_stmts),
    vars(job_stmts),
    vars(join_stmts),
    vars(lease_stmts),
    vars(pause_stmts),
    vars(posting_stmts),
    vars(queue_stmts),
    vars(step_stmts),
    vars(sweep_stmts),
    vars(task_stmts),
    vars(worker_stmts),
    vars(wake_stmts),
    # -- consumers --
    vars(consumer_stmts),
    vars(webhook_stmts),
)

_STATES: Final = {s.value: s for s in JobState}
_LIVE_VALUES: Final = frozenset(s.value for s in LIVE_STATES)
#: How long the hot connection serves before it goes back to the pool for recycling.
HOT_MAX_AGE_S: Final = 600.0
#: Failures that carry no SQLSTATE and mean the store is out of reach (a refused connect, a
#: dropped socket, no pooled connection in time). A server's own answer is sorted by its SQLSTATE.
_UNAVAILABLE: Final = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout, OSError)
#: SQLSTATEs of a server going away or refusing sessions (besides class 08, connection exception).
_GONE_STATES: Final = frozenset({"57P01", "57P02", "57P03", "53300"})
#: Deadlock and serialization failure: the statement was rolled back whole, so it can run again.
_CONFLICT_STATES: Final = frozenset({"40P01", "40001"})
#: The note a server error carries to name the statement it came from.
_STATEMENT_NOTE: Final = "ujobs statement: "
#: How often a statement rolled back by a deadlock or serialization failure runs again.
CONFLICT_RETRIES: Final = 3
#: Which record fields an index or constraint is built from (to name them in a refusal).
_INDEX_FIELDS: Final = {
    "jobs_pkey": "id",
    "jobs_live_key": "name, tenant_id, idempotency_key",
    "jobs_due": "queue, id",
    "jobs_lease": "queue",
    "jobs_listing": "created_at_ms, id",
    "counters_pkey": "name, queue",
    "events_pkey": "id",
    "events_by_name": "name",
    "jobs_waits": "wait.event",
    "steps_pkey": "run_id, name",
    "pauses_pkey": "value",
    "workers_pkey": "worker_id",
    "leases_pkey": "key, token",
    "task_marks_pkey": "name",
    "sweeps_pkey": "run_id",
    "postings_pkey": "tenant_id, key",
    "posting_balances_pkey": "tenant_id, account, currency",
    "consumers_pkey": "name, tenant_id",
    "webhook_endpoints_pkey": "tenant_id, endpoint",
    "webhook_attempts_pkey": "fence",
}

#: Events read per `EVENT_FIND` page while looking for the first one a wait matches.
EVENT_PAGE: Final = 100

T = TypeVar("T")
_Fenced = TypeVar("_Fenced", Ack, Nack, Heartbeat, Progress)


def list_values(f: JobFilter, after: ListKey | None, limit: int, scan: int) -> dict[str, Any]:
    """`JOB_LIST`'s parameters for one page: the walk starts strictly after `after` (None: above
    every row, as created_at_ms never exceeds MAX_TIME_MS)."""
    return {
        "after_created_at_ms": MAX_TIME_MS + 1 if after is None else after.created_at_ms,
        "after_id": "" if after is None else after.id,
        "scan": scan,
        "limit": limit,
        "states": sorted(s.value for s in f.states),
        "queue": f.queue,
        "name": f.name,
        "tenant_id": f.tenant_id,
        "parent_id": f.parent_id,
        "batch_id": f.batch_id,
        "acts_for": f.acts_for,  # acts-for
    }


def counter_shard(worker_id: str) -> int:
    """The counter row a worker's settles add to (`jobs_pg.schema.counters`): the same for every
    call of one worker, spread over `COUNTER_SHARDS` across workers."""
    return zlib.crc32(worker_id.encode()) % COUNTER_SHARDS


def wake_channel(schema: str, family: str = "wake") -> str:
    """The NOTIFY channel of a schema's `family` (`wake`: queue wakes; `outbox`: stages); a
    channel name must fit in 63 bytes, so a long schema name is hashed."""
    channel = f"ujobs_{family}.{schema}"
    if len(channel.encode()) > 63:
        channel = f"ujobs_{family}." + hashlib.sha1(schema.encode()).hexdigest()[:32]
    return channel


def _has_rows(cur: psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement answered rows (`cur.description` would build its columns)."""
    result = cur.pgresult
    return result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK


# Scoped to the implicit transaction of one pipeline: see `PgDriver._execute`. The generic
# plan's estimate grows with the rows it might read (a `LIMIT $n` guessed at a tenth of them):
# past `jit_above_cost` (about 650,000 due jobs in a queue) the server would JIT-compile the
# claim on every call, ~100 ms for 1 ms of work (docs/pg.md, "Cost as the work grows").
GENERIC_PLAN_SETTINGS: Final = (
    "SELECT set_config('plan_cache_mode', 'force_generic_plan', true),"
    " set_config('jit', 'off', true)"
)
# The same scope: a `LAZY_COMMIT` statement's transaction commits without waiting for its WAL
# flush, when the driver was asked to (`lazy_claim`; what it costs:
# `jobs_pg.statements.job.LAZY_COMMIT`).
_LAZY_COMMIT_SETTING: Final = "set_config('synchronous_commit', 'off', true)"
_GENERIC_PLAN_QUERY: Final = GENERIC_PLAN_SETTINGS.encode()
#: A pooler gave a prepared execution to a server session that lacks (or has another) statement
#: of its name (`PgDriver._execute`).
_PREPARED_LOST: Final = (
    psycopg.errors.InvalidSqlStatementName,
    psycopg.errors.DuplicatePreparedStatement,
)
#: What goes ahead of a statement, by (on its generic plan, lazy commit).
LOCAL_SETTINGS: Final[dict[tuple[bool, bool], str]] = {
    (True, False): GENERIC_PLAN_SETTINGS,
    (False, True): "SELECT " + _LAZY_COMMIT_SETTING,
    (True, True): f"{GENERIC_PLAN_SETTINGS}, {_LAZY_COMMIT_SETTING}",
}
#: `LOCAL_SETTINGS` as a lone claim's or ack's round sends them (`PgDriver._alone`).
_LOCAL_SETTINGS_QUERY: Final = {k: v.encode() for k, v in LOCAL_SETTINGS.items()}
#: What the server rolls back for another transaction's sake: alone, a statement runs again.
_CONFLICTS: Final = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
_IDLE: Final = psycopg.pq.TransactionStatus.IDLE
#: Runs of an enqueue whose id a concurrent insert keeps winning (`_raced`), then `_RACED`.
_RACE_TRIES: Final = 5
_RACED: Final = "enqueue kept racing a concurrent writer"
#: A claimed row's claim order: (priority, run_at_ms, id).
_CLAIM_ORDER: Final = operator.itemgetter(9, 13, 1)
#: A record's values of JOB_ENQUEUE_MANY's `SHARED_COLUMNS`, as one tuple.
_shared_fields: Final = operator.attrgetter(*SHARED_COLUMNS)


class _Rendered(dict[str, "_Stmt"]):
    """`STATEMENTS` rendered for one schema, each the first time it is looked up."""

    __slots__ = ("schema",)

    def __init__(self, schema: str) -> None:
        super().__init__()
        self.schema = schema

    def __missing__(self, name: str) -> _Stmt:
        stmt = self[name] = _Stmt(STATEMENTS[name], self.schema)
        return stmt


class _Stmt:
    """A compiled statement rendered for one schema: SQL text + how to order its parameters."""

    __slots__ = ("args", "generic", "lazy_commit", "name", "query", "raw", "text")

    def __init__(self, sql: Sql, schema: str) -> None:
        self.name = sql.name
        self.text = sql.render(schema)
        #: What is sent: a raw text as one bytes object, kept. psycopg encodes a str text on every
        #: execution, and its prepared-statement lookup then hashes the fresh bytes (the claim's
        #: 7 KB, on every claim) where a kept object's hash is computed once. Any client encoding
        #: reads ASCII the same; a text that is not (a schema's name) goes as it is.
        self.query: str | bytes = (
            self.text.encode() if sql.raw and self.text.isascii() else self.text
        )
        #: The positional parameters for a dict of values by name: a C `itemgetter` where no
        #: name has a default or binds an array (every call of the driver passes here).
        self.args: Callable[[Mapping[str, Any]], tuple[Any, ...]] = (
            operator.itemgetter(*sql.order)
            if len(sql.order) > 1 and not sql.defaults and not any(sql.arrays)
            else sql.args
        )
        self.generic = sql.generic_plan
        self.lazy_commit = sql.lazy_commit
        self.raw = sql.raw


def unique_runs(keys: Sequence[Hashable]) -> list[list[int]]:
    """Split positions into consecutive runs whose keys are unique within the run.

    One batched statement handles one run; a key repeated later starts the next run, so the
    runs, executed in order, behave exactly as items applied one after another.
    """
    runs: list[list[int]] = [[]]
    seen: set[Hashable] = set()
    for i, k in enumerate(keys):
        if k in seen:
            runs.append([])
            seen = set()
        seen.add(k)
        runs[-1].append(i)
    return runs


#: Loop turns a claim or an ack waits for another to go out with it in one transaction: a
#: worker's ack flush and its next claim start one or two turns apart.
_GATHER_TURNS: Final = 2
#: Statements of more rows than this go alone: one transaction runs them one after the other
#: on one server session, where alone they would run side by side on two.
_GATHER_MAX_ROWS: Final = 16


def _settle_params(
    sel: list[_Fenced], columns: Callable[[list[_Fenced]], dict[str, Any]]
) -> dict[str, Any]:
    """A settle statement's parameters for `sel` (its job ids unique): each item's fence, its
    worker's counter shard and `columns`' own."""
    fences = [item.fence for item in sel]
    return {
        "id": [f.job_id for f in fences],
        "claims": [f.claims for f in fences],
        "worker_id": [f.worker_id for f in fences],
        # The counters an ack or nack moves go to its worker's shard (a batch is one worker's in
        # practice; any shard would count right).
        "shard": counter_shard(fences[0].worker_id),
        **columns(sel),
    }


class _Piped:
    """One statement waiting to go out in a shared pipeline, and the future of its rows."""

    __slots__ = ("args", "claim", "flight", "fut", "lazy", "stmt")

    def __init__(
        self,
        stmt: _Stmt,
        args: Sequence[Any],
        lazy: bool,
        claim: _Claim | None,
        fut: asyncio.Future[list[Any]],
    ) -> None:
        self.stmt = stmt
        self.args = args
        self.lazy = lazy
        #: A claim's parameters: its jobs go back if they commit for a caller gone.
        self.claim = claim
        self.fut = fut
        #: The task carrying it to the server once sent (shared or alone), None before.
        self.flight: asyncio.Future[Any] | None = None


async def _flown(sent: list[_Piped], call: Awaitable[object]) -> asyncio.Future[Any]:
    """`call` run to its end as the flight of every item of `sent` (a caller cancelled while
    it runs cancels it: `PgDriver._coalesced`); answers it done, cancelled or not. Cancelled
    itself, it cancels the flight."""
    flight = asyncio.ensure_future(call)
    for p in sent:
        p.flight = flight
    try:
        await flight
    except Exception:  # read off the flight by the caller
        pass
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # this task itself is cancelled
            flight.cancel()
            raise
    return flight


async def _answer(here: _LoopConns, item: _Piped) -> list[Any]:
    """The rows of `item`, gathered with others. Its caller cancelled: not sent yet, it never
    will be (a claim sent for a caller gone would hold its jobs until their leases lapse); sent,
    its flight is cancelled as a lone call is, on the server too, so its transaction rolls back
    and the others in it run alone."""
    try:
        return await item.fut
    except asyncio.CancelledError:
        if here.gather is not None and item in here.gather:
            here.gather.remove(item)
        elif item.flight is not None:
            item.flight.cancel()
        raise


class _LoopConns:
    """What one event loop holds of a driver: its pool, hot connection and LISTEN sessions."""

    __slots__ = (
        "checking",
        "conns",
        "gather",
        "hot",
        "hot_busy",
        "hot_since",
        "open_lock",
        "pool",
        "subscriptions",
        "trails",
    )

    def __init__(self) -> None:
        self.pool: _Pool | None = None
        self.open_lock = asyncio.Lock()
        self.hot: psycopg.AsyncConnection[tuple[Any, ...]] | None = None
        self.hot_busy = False
        self.hot_since = 0.0
        self.checking = False
        #: Claims and acks waiting a few loop turns to go out together (`PgDriver._coalesced`).
        self.gather: list[_Piped] | None = None
        self.subscriptions: set[WakeSubscription] = set()
        #: The trailing NOTIFYs of slots in which a due job went in quiet (`PgDriver._new_loop`).
        self.trails: Trails | None = None
        #: Every connection the pool made, so a loop that is gone can still close its sockets.
        self.conns: weakref.WeakSet[psycopg.AsyncConnection[tuple[Any, ...]]] = weakref.WeakSet()


class PgDriver(JobDriver):
    """Jobs in Postgres, as durable as its commit (see docs/pg.md).

    Callers on several event loops share one driver: each loop gets its own pool, hot connection
    and LISTEN sessions, closed when that loop shuts down or by `close()`.
    """

    #: `enqueue_many` reads the facade's batch as columns (`_EnqueueColumns`).
    enqueue_columns: ClassVar[bool] = True

    def __init__(
        self,
        url: str,
        *,
        schema: str = "ujobs",
        pool_size: int = 10,
        wake: bool = True,
        wake_slot_ms: int = 5,
        connect_timeout_s: float = 5.0,
        call_timeout_s: float = 30.0,
        prepare: bool = True,
        listen_url: str | None = None,
        conflict_retries: int = CONFLICT_RETRIES,
        lazy_claim: bool = False,
    ) -> None:
        """Configure; nothing connects until `open()` or the first call.

        `wake=False` neither notifies on enqueue nor offers `wake_subscribe` (workers poll).
        `prepare=False` turns off server-side prepared statements (PgBouncer before 1.21).
        `listen_url` points the one LISTEN session straight at Postgres when `url` goes through
        a transaction-mode pooler (which cannot carry LISTEN). `conflict_retries`: how often a
        statement the server rolled back in a deadlock or serialization failure runs again
        before the call fails with `X_DRIVER_CONFLICT`. `lazy_claim=True` lets a claim commit
        without waiting for its WAL flush (a pickup then waits for one flush, its enqueue's, not
        two) at a price: a server crash in the moments after a claim can undo it, and its body,
        already started, runs again (docs/pg.md, "Durability").
        """
        self._url = url
        self._conninfo = libpq_url(url)
        self._listen_conninfo = libpq_url(listen_url) if listen_url else self._conninfo
        if not schema or "\x00" in schema:
            raise DriverError("the schema name must be a non-empty string", detail="schema")
        self.schema = schema
        self._pool_size = max(1, pool_size)
        self._wake = wake
        self._slot_ms = max(1, wake_slot_ms)
        self._connect_timeout = connect_timeout_s
        self._call_timeout = call_timeout_s
        self._prepare_threshold: int | None = 0 if prepare else None
        self._lazy_claim = lazy_claim
        self.channel = wake_channel(schema)
        self._q = _Rendered(schema)
        #: The token sequence by its schema-qualified name (`LEASE_TAKE`'s `:tokens`).
        quoted = '"' + schema.replace('"', '""') + '"'
        self._lease_tokens = f"{quoted}.{lease_tokens.name}"
        # A pool (and the hot connection, the LISTEN sessions) belongs to one event loop; each
        # loop that calls gets its own, closed with that loop or by `close()`.
        self._loops: LoopLocal[_LoopConns] = LoopLocal(
            self._new_loop, self._close_loop, _abandon_loop
        )
        #: queue -> the wake slot this process knows is already spent (notified or recorded).
        self._spent_slots: dict[str, int] = {}
        self._conflict_retries = max(0, conflict_retries)
        #: Deadlocks and serialization failures this driver met (each retried or raised).
        self.conflicts_seen = 0
        #: Rows a claim buried for a worker it could not answer (its caller gone: `_give_back`;
        #: its answer lost: `_lost_buried_look`), answered with that worker's next claim.
        self._held_buried = HeldBurials(log)
        #: The claims in flight, answered and lost: those lost give their rows back
        #: (`JOB_CLAIM_LOST` finds them, `_interrupt` gives them back).
        self._lost_claims = LostClaims(
            log,
            self._lost_look,
            self._interrupt,
            self._closed,
            # A claim's answer as its rows; a buried row's id too (it is running for no one).
            lambda rows: (r[1] for r in rows),
            self._lost_buried_look,
            self._held_buried.hold,
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def describe(self) -> str:
        return f"postgres {mask(self._url)} schema={self.schema}"

    def capabilities(self) -> Capabilities:
        return Capabilities(
            wake=self._wake,
            operator=True,
            pauses=True,
            workers=True,
            counters=True,
            retention=True,
            steps=True,
            events=True,
            leases=True,
            tasks=True,
            flows=True,
            sweeps=True,
            postings=True,
            consumers=True,
            webhooks=True,
        )

    def connect_kwargs(self) -> dict[str, Any]:
        """libpq settings for every connection: bounded connects, dead peers noticed."""
        kwargs: dict[str, Any] = {
            "connect_timeout": max(1, round(self._connect_timeout)),
            "keepalives": 1,
            "keepalives_idle": 30,
            "keepalives_interval": 10,
            "keepalives_count": 3,
        }
        if "application_name" not in self._conninfo:
            kwargs["application_name"] = "ultimat3-jobs"
        return kwargs

    @property
    def listen_conninfo(self) -> str:
        """Where the LISTEN session dials (`listen_url`, else the pool's URL)."""
        return self._listen_conninfo

    async def open(self) -> None:
        """Connect once (`X_DRIVER_UNAVAILABLE` when the server does not answer); idempotent."""
        pool = await self._ready()
        try:
            async with asyncio.timeout(self._call_timeout), pool.connection():
                pass
        except TimeoutError as exc:
            self._after_failure()
            raise DriverUnavailableError("the connect timed out", detail=self.describe()) from exc
        except _UNAVAILABLE as exc:
            self._after_failure()
            raise DriverUnavailableError(detail=_reason(exc)) from exc

    async def migrate(self) -> str:
        """Apply the packaged alembic migrations to this driver's schema (`ujobs db upgrade`);
        answers whether it created, upgraded (from → to) or found the schema current."""
        from jobs_pg.migrate import upgrade

        return await asyncio.to_thread(upgrade, self._url, self.schema)

    async def _ready(self) -> _Pool:
        here = self._loops.get()
        pool = here.pool
        if pool is not None:
            return pool
        async with here.open_lock:
            if here.pool is None:
                kwargs = self.connect_kwargs()
                kwargs.update(autocommit=True, prepare_threshold=self._prepare_threshold)
                here.pool = _Pool(
                    self._conninfo,
                    kwargs,
                    max_size=self._pool_size,
                    timeout=self._connect_timeout,
                    on_connect=here.conns.add,
                )
            return here.pool

    async def close(self) -> None:
        """Close the pools of every loop that used this driver (each on its own loop)."""
        await self._loops.close_all()

    def _new_loop(self) -> _LoopConns:
        here = _LoopConns()
        if self._wake:
            here.trails = Trails(self._slot_ms, self._send_trail)
        return here

    async def _close_loop(self, here: _LoopConns) -> None:
        for sub in list(here.subscriptions):
            await sub.close()
        here.subscriptions.clear()
        if here.trails is not None:
            await here.trails.close()
        pool, here.pool = here.pool, None
        hot, here.hot = here.hot, None
        if pool is not None:
            if hot is not None and not here.hot_busy:
                await pool.putconn(hot)
            await pool.close()

    # -- running statements -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _conn(
        self, here: _LoopConns | None = None
    ) -> AsyncIterator[psycopg.AsyncConnection[tuple[Any, ...]]]:
        """A pooled connection; a call past its timeout is X_DRIVER_UNAVAILABLE, a failure its
        typed error by SQLSTATE (`classify`).

        The driver's hot connection when it is free, else one from the pool: calls made one
        after another (an enqueue loop, a worker's claim then its acks) reuse one connection
        without a trip through the pool's locks and bookkeeping (≈ 35 µs a call); concurrent
        calls spill over to the pool. After any failure the hot connection goes back to the
        pool, which keeps or discards it by its state, and the next call takes a new one.
        (One context manager, not a lease nested in this one: every call of the driver enters
        it.) `here`: the running loop's holder when the caller has it already — finding it
        asks the loop for itself, and on Python 3.11 that is a `getpid` system call."""
        if here is None:
            here = self._loops.get()
        pool = here.pool
        if pool is None:
            pool = await self._ready()
        try:
            async with asyncio.timeout(self._call_timeout):
                if here.hot_busy or self._pool_size < 2:
                    async with pool.connection() as conn:
                        yield conn
                    return
                here.hot_busy = True
                try:
                    hot = here.hot
                    if hot is not None and (
                        time.monotonic() - here.hot_since > HOT_MAX_AGE_S or _stale(hot)
                    ):
                        # The pool recycles connections by age; the hot one takes its turn too.
                        # A stale one (the server ended it: a restart) goes back to be closed,
                        # not used.
                        here.hot = None
                        await pool.putconn(hot)
                        hot = None
                    if hot is None:
                        hot = here.hot = await pool.getconn()
                        here.hot_since = time.monotonic()
                    try:
                        yield hot
                    except BaseException:
                        here.hot = None
                        await pool.putconn(hot)
                        raise
                finally:
                    here.hot_busy = False
        except TimeoutError as exc:
            self._after_failure()
            raise DriverUnavailableError("the call timed out", detail=self.describe()) from exc
        except (psycopg.Error, *_UNAVAILABLE) as exc:
            err = translate(exc, self.schema)
            if isinstance(err, DriverUnavailableError):
                self._after_failure()
            raise err from exc

    @contextlib.asynccontextmanager
    async def _transaction(self, conn: _Conn) -> AsyncIterator[None]:
        """`conn.transaction()`. Rolled back, the session's gathered rounds forget what they
        prepared there (`Session.forget`): psycopg deallocates every prepared statement of a
        session whose transaction it rolls back (`DEALLOCATE ALL`), and a round executing one
        of them would be taken for a pooler's loss, preparing turned off for the driver's life.
        """
        try:
            async with conn.transaction():
                yield
        except BaseException:
            here = self._loops.peek()
            session = here.pool.sessions.get(conn) if here is not None and here.pool else None
            if session is not None:
                session.forget()
            raise

    async def _execute(
        self,
        conn: psycopg.AsyncConnection[tuple[Any, ...]],
        text: str | bytes,
        args: Sequence[Any],
        *,
        generic: bool = False,
        raw: bool = False,
        lazy_commit: bool = False,
    ) -> psycopg.AsyncCursor[tuple[Any, ...]]:
        """Run one statement; behind a pooler that loses prepared statements, stop preparing.

        A transaction-mode pooler without prepared-statement support (PgBouncer before 1.21)
        hands an execution to a server session that never saw our PREPARE ("does not exist") or
        that holds another client's statement of the same name ("already exists"). Either way the
        server ran nothing (the failed Parse or Bind skips the rest up to Sync), so running it
        again unprepared is safe. From then on this driver prepares nothing.

        A statement the server rolled back in a deadlock or serialization failure runs again (up
        to `conflict_retries` times) when it ran alone; a server error is marked with the
        statement's name, which its `X_*` message then shows.

        A `generic` statement (`GENERIC_PLANS`) runs on the server's generic plan, without JIT,
        when prepared outside a transaction of ours: the local settings and the statement go in
        one pipeline, so one round trip and one implicit transaction, which the settings end
        with (a pooler in transaction mode keeps both on one server session; nothing outlives
        it). A `lazy_commit` statement (`LAZY_COMMIT`) run outside a transaction of ours gets
        `synchronous_commit = off` the same way, prepared or not.
        A `raw` statement's text has `$n` placeholders and runs on a raw cursor (`RAW_TEXT`).
        """
        retries = 0
        while True:
            try:
                return await self._execute_once(conn, text, args, generic, raw, lazy_commit)
            except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
                self.conflicts_seen += 1
                # Outside a transaction of ours the server rolled back exactly this statement,
                # so running it again is as if it ran once; inside one, the caller starts over.
                idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                if retries >= self._conflict_retries or not idle:
                    exc.add_note(_STATEMENT_NOTE + self._name_of(text))
                    raise
                retries += 1
                log.info("jobs.pg.conflict_retry: %s (try %d)", exc.sqlstate, retries)
                await asyncio.sleep(random.uniform(0.0, 0.005 * 2**retries))
            except psycopg.Error as exc:
                if exc.sqlstate is not None:
                    exc.add_note(_STATEMENT_NOTE + self._name_of(text))
                raise

    def _name_of(self, text: str | bytes) -> str:
        return next(
            (name for name, st in self._q.items() if text in (st.text, st.query)), "a statement"
        )

    async def _execute_once(
        self,
        conn: psycopg.AsyncConnection[tuple[Any, ...]],
        text: str | bytes,
        args: Sequence[Any],
        generic: bool,
        raw: bool,
        lazy_commit: bool,
    ) -> psycopg.AsyncCursor[tuple[Any, ...]]:
        if self._prepare_threshold is None and conn.prepare_threshold is not None:
            conn.prepare_threshold = None
        cur = psycopg.AsyncRawCursor(conn) if raw else conn.cursor()
        try:
            settings = (
                LOCAL_SETTINGS.get((generic and conn.prepare_threshold is not None, lazy_commit))
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                else None
            )
            if settings is not None:
                async with conn.pipeline():
                    await conn.execute(settings)
                    await cur.execute(text, args)
                return cur
            return await cur.execute(text, args)
        except _PREPARED_LOST:
            self._prepare_off(conn)
            return await cur.execute(text, args)

    def _prepare_off(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A session lost a prepared statement of ours (a pooler handed it another server
        session): from now on this driver prepares nothing, this connection included."""
        if self._prepare_threshold is not None:
            log.warning("jobs.pg.prepare_off: the server lost a prepared statement (pooler?)")
        self._prepare_threshold = None
        conn.prepare_threshold = None

    def _after_failure(self) -> None:
        """After a failure, sweep broken idle connections (the hot one too) so the next call gets a
        live one."""
        here = self._loops.peek()
        pool = here.pool if here is not None else None
        if here is None or pool is None or here.checking:
            return
        here.checking = True

        async def sweep() -> None:
            try:
                hot = here.hot
                if hot is not None and not here.hot_busy:
                    # Idle through the failure, it is as likely dead as the rest: checked too, so
                    # the first call after the server's return does not fail on it.
                    here.hot = None
                    await pool.putconn(hot)
                await pool.check()
            except Exception:  # best effort: the next call reports whatever is still wrong
                log.debug("jobs.pg.sweep_failed", exc_info=True)
            finally:
                here.checking = False

        _in_background(sweep())

    async def _rows(self, name: str, values: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        stmt = self._q[name]
        async with self._conn() as conn:
            cur = await self._execute(
                conn,
                stmt.query,
                stmt.args(values),
                generic=stmt.generic,
                raw=stmt.raw,
                lazy_commit=stmt.lazy_commit and self._lazy_claim,
            )
            return await cur.fetchall() if _has_rows(cur) else []

    async def _coalesced(
        self, stmt: _Stmt, args: Sequence[Any], lazy: bool, rows: int, claim: _Claim | None
    ) -> list[Any]:
        """Rows of a claim or an ack. Those asked for within `_GATHER_TURNS` loop turns of each
        other (a worker's ack flush and its next claim) go to the server as one pipeline: one
        implicit transaction, so one commit and one answer; if the server fails it each runs
        again alone, as a lone call would (nothing of a failed transaction stayed); out of
        reach (its commit unknown) each caller gets `X_DRIVER_UNAVAILABLE`, as alone. The jobs
        of a `claim` committed for a caller cancelled meanwhile go back at once (`_give_back`).
        """
        if lazy or rows > _GATHER_MAX_ROWS:
            # A lazy commit would make the others' commit lazy too; a big statement would
            # wait for the others on one session instead of running beside them on another.
            return await self._alone(stmt, args, lazy, claim)
        here = self._loops.get()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[Any]] = loop.create_future()
        item = _Piped(stmt, args, lazy, claim, fut)
        if here.gather is not None:
            here.gather.append(item)
            return await _answer(here, item)
        # The first asker waits for company in its own task: at a trickle nothing joins, and it
        # runs alone with no task, answer future or gather of its own (~40 µs of a lone
        # statement's CPU, docs/pg.md "A trickle's overhead, measured").
        gathered = here.gather = [item]
        try:
            for _ in range(_GATHER_TURNS):
                await asyncio.sleep(0)
        except BaseException:
            # Cancelled while gathering: not sent; whoever joined goes without it.
            here.gather = None
            gathered.remove(item)
            if gathered:
                self._spawn_flush(gathered)
            raise
        here.gather = None
        if len(gathered) == 1:
            return await self._alone(stmt, args, lazy, claim)
        # Company came: the batch goes in a task of its own, so a caller cancelled from now on
        # cancels no one else's statement.
        self._spawn_flush(gathered)
        return await _answer(here, item)

    def _spawn_flush(self, batch: list[_Piped]) -> None:
        _in_background(self._flush_gathered(batch))

    async def _flush_gathered(self, batch: list[_Piped]) -> None:
        # A caller cancelled after the batch was handed here, before this task's first turn
        # (`_answer` found no flight to cancel): its statement is never sent (a claim would
        # hold its jobs for nobody until their leases lapse).
        batch = [p for p in batch if not p.fut.done()]
        try:
            rows: list[list[Any] | None] = [None] * len(batch)
            if len(batch) > 1:
                answers: list[list[Any] | None] = [None] * len(batch)
                together = await _flown(batch, self._together(batch, answers))
                # Failed, or cancelled by a caller gone before the commit (no answers): each
                # runs alone below, and says why.
                lost = None if together.cancelled() else together.exception()
                if all(a is not None for a in answers):
                    # Committed and read, then perhaps cancelled (a caller gone, the call's
                    # timeout): the answers stand.
                    rows = answers
                elif isinstance(lost, DriverUnavailableError):
                    # The commit may have happened, its answer lost: run again, an ack
                    # that landed would answer False and a claim take more. Each caller
                    # is told, as a lone call is.
                    for p in batch:
                        if not p.fut.done():
                            p.fut.set_exception(lost)
                        elif p.claim is not None:
                            # Its caller gone meanwhile: its rows, if it committed, are looked
                            # for as a lost claim's.
                            self._lost_claims.lost(p.claim)
            alone = []
            for p, got in zip(batch, rows, strict=True):
                if got is None:
                    alone.append(self._answer_alone(p))
                else:
                    self._hand(p, got)
            # Side by side, as they would have run without waiting for company.
            await asyncio.gather(*alone)
        except BaseException:
            for p in batch:
                if not p.fut.done():
                    p.fut.cancel()
            raise

    async def _answer_alone(self, p: _Piped) -> None:
        if p.fut.done():
            return
        alone = await _flown([p], self._alone(p.stmt, p.args, p.lazy, p.claim))
        if alone.cancelled():  # its caller is gone (`_alone` gave back what it claimed)
            return
        exc = alone.exception()
        if exc is None:
            self._hand(p, alone.result())
        elif not p.fut.done():  # handed to its caller
            p.fut.set_exception(exc)

    def _hand(self, p: _Piped, rows: list[Any]) -> None:
        """A gathered statement's committed rows to its caller; its caller gone, a claim's
        jobs go back at once (`_give_back`)."""
        if not p.fut.done():
            p.fut.set_result(rows)
        elif p.claim is not None:
            self._give_back(p.claim, rows)

    def _give_back(self, claim: _Claim, rows: list[Any]) -> None:
        """The jobs a claim committed for a caller gone (cancelled once the commit happened),
        back to `ready` at once, in a task of their own: an interrupt nack, as a drain gives
        back the jobs it held unstarted (the attempt given back, `interrupted` in the
        history, ended when the nack ran: the claim's clock moved on by the time since its
        call began). Left running, nobody would hold them until their leases lapsed and the
        lapse spent their attempt. Best effort: failed, the leases lapse as before.

        The rows it buried (lapsed final attempts) are reported with the same worker's next
        claim (`ClaimResult.buried`, whose worker counts, logs and hooks them as any burial),
        and logged here meanwhile: a worker that stops claims no more."""
        worker = claim.params.worker_id
        self._held_buried.hold(
            worker, [BuriedJob(r[1], r[3], r[4], _STATES[r[8]]) for r in rows if r[0] != "c"]
        )
        fences = [Fence(r[1], r[12], worker) for r in rows if r[0] == "c"]
        if not fences:
            return

        async def give_back() -> None:
            if self._closed():
                # A worker's stop cancels its claim, then closes the driver.
                log.info("jobs.pg.claim_give_back_skipped: closed; leases lapse")
                return
            try:
                await self._interrupt(claim, fences)
            except Exception:
                log.warning("jobs.pg.claim_give_back_failed: leases lapse", exc_info=True)

        _in_background(give_back())

    async def _lost_buried_look(self, lost: LostClaim) -> list[BuriedJob]:
        """The rows a claim whose answer was lost may have buried (`JOB_CLAIM_LOST_BURIED`)."""
        params = lost.call.params
        rows = await self._read(
            "JOB_CLAIM_LOST_BURIED",
            {
                "queues": list(dict.fromkeys(params.queues)),
                "now_ms": params.now_ms,
                "error": LEASE_LAPSED_ERROR,
            },
        )
        return [BuriedJob(i, name, queue, _STATES[state]) for i, name, queue, state in rows]

    def _closed(self) -> bool:
        """This loop's pool is closed: a call now would open a new one that nobody closes."""
        here = self._loops.peek()
        return here is None or here.pool is None

    async def _interrupt(self, claim: _Claim, fences: Sequence[Fence]) -> None:
        """`claim`'s rows of `fences` back to `ready`: an interrupt nack at the claim's clock
        now, as a drain gives back what it held unstarted. Raises as the nack does."""
        now = claim.now_ms()
        back = await self._job_nack([Nack(f, NackKind.INTERRUPT, now) for f in fences])
        log.info("jobs.pg.claim_given_back: %d of %d jobs", sum(back), len(back))

    async def _lost_look(self, lost: LostClaim) -> list[Fence] | None:
        """The rows a claim whose answer was lost may have taken (`LostClaims`): its worker's,
        `running`, in its queues, leased to its lease end, claimed at its `now_ms`. None while
        a session of the driver's is in a transaction begun before the loss: the claim's own,
        its connection gone, may still commit (`JOB_CLAIM_LOST_OPEN`)."""
        since_ms = round((time.monotonic() - lost.lost_at) * 1000)
        ((still_open,),) = await self._read("JOB_CLAIM_LOST_OPEN", {"since_ms": since_ms})
        if still_open:
            return None
        params = lost.call.params
        worker = params.worker_id
        rows = await self._read(
            "JOB_CLAIM_LOST",
            {
                "queues": list(dict.fromkeys(params.queues)),
                "lease_until_ms": lost.lease_end,
                "worker_id": worker,
                "now_ms": params.now_ms,
            },
        )
        return [Fence(job_id, claims, worker) for job_id, claims in rows]

    async def _alone(
        self,
        stmt: _Stmt,
        args: Sequence[Any],
        lazy: bool,
        claim: _Claim | None,
        enqueue_of: str | None = None,
        here: _LoopConns | None = None,
    ) -> list[Any]:
        """A claim, an ack or a lone enqueue (`enqueue_of`: its job's id) run alone: one
        `Round` on libpq, its plan and commit settings ahead of it in the same pipeline (one
        Sync, one implicit transaction), with what `_execute` does for a statement: a deadlock
        or serialization failure runs it again, a session that lost its prepared statement (a
        pooler) turns preparing off and runs it unprepared, a server error names it; an enqueue
        whose id a concurrent insert won runs again (`_raced`), as `_insert`'s does. Cancelled
        by the call's timeout after its commit, its answer read in (`Round.answered`), it
        answers that: run again, an ack that landed would answer False, a claim take more and
        an enqueue answer deduped; lost, its claimed jobs were held by nobody
        until their leases lapsed. Its caller cancelled then, a `claim`'s jobs go back at once
        (`_give_back`). Its answer unknown (psycopg gave up on it after its cancel):
        X_DRIVER_UNAVAILABLE past the timeout; a cancelled caller's claim is lost
        (`LostClaims`: its rows, if it committed, are looked for and given back). `here`: the
        running loop's holder when the caller has it (finding it is a system call, `_conn`)."""
        if here is None:
            here = self._loops.get()
        pool = here.pool
        if pool is None:
            pool = await self._ready()
        shared: Round | None = None
        # The session the round went on, and the place of the statement's own answer in the
        # round (after its settings).
        held: psycopg.AsyncConnection[Any] | None = None
        last = 0
        try:
            async with self._conn(here) as conn:
                held = conn
                retries = raced = 0
                while True:
                    prepared = self._prepare_threshold is not None
                    if not prepared:
                        conn.prepare_threshold = None
                    prepared = prepared and conn.prepare_threshold is not None
                    query = stmt.query
                    if not isinstance(query, bytes):
                        query = query.encode(conn.info.encoding)
                    statements: list[tuple[bytes, Sequence[Any]]] = [(query, args)]
                    # `pgconn`'s, not `conn.info`'s: that makes a new object on every read.
                    if conn.pgconn.transaction_status == _IDLE:
                        settings = _LOCAL_SETTINGS_QUERY.get((stmt.generic and prepared, lazy))
                        if settings is not None:
                            statements.insert(0, (settings, ()))
                    last = len(statements) - 1
                    shared = Round(conn, prepared, pool.sessions)
                    try:
                        await shared.run(statements)
                    except psycopg.Error as exc:
                        if prepared and isinstance(exc, _PREPARED_LOST):
                            # Nothing ran (the failed Parse or Bind skips the rest up to Sync).
                            self._prepare_off(conn)
                            continue
                        if enqueue_of is not None and _raced(exc, conn):
                            raced += 1
                            if raced < _RACE_TRIES:
                                continue
                            raise DriverError(_RACED, detail=enqueue_of) from exc
                        conflict = isinstance(exc, _CONFLICTS)
                        self.conflicts_seen += conflict
                        if conflict and retries < self._conflict_retries:
                            # Alone, the server rolled back exactly this transaction: running
                            # it again is as if it ran once.
                            retries += 1
                            log.info("jobs.pg.conflict_retry: %s (try %d)", exc.sqlstate, retries)
                            await asyncio.sleep(random.uniform(0.0, 0.005 * 2**retries))
                            continue
                        if exc.sqlstate is not None:
                            exc.add_note(_STATEMENT_NOTE + stmt.name)
                        raise
                    return shared.rows(last)
        except DriverUnavailableError:
            # The call's timeout, after the commit: the answer stands (read in by psycopg
            # after its cancel).
            if shared is None or not shared.answered():
                raise
            return shared.rows(last)
        except asyncio.CancelledError:
            if claim is not None and shared is not None:
                if shared.answered():
                    self._give_back(claim, shared.rows(last))
                elif held is not None and held.closed:
                    # psycopg gave up on the answer after its cancel and closed the session:
                    # the commit is unknown, as when a connection drops (`LostClaims`).
                    self._lost_claims.lost(claim)
            raise

    async def _together(self, batch: list[_Piped], got: list[list[Any] | None]) -> None:
        """Run the statements in one pipeline with one Sync: all commit together, or none.
        Once all committed, `got` holds each one's rows (in `batch`'s order), also when this
        flight is then cancelled, re-raised: those answers stand (`Round.answered`)."""
        pool = await self._ready()
        async with self._conn() as conn:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                return
            prepared = self._prepare_threshold is not None and conn.prepare_threshold is not None
            # The settings of a generic-plan statement hold to the end of the transaction:
            # the others go first, so they run as they would alone.
            order = sorted(range(len(batch)), key=lambda i: batch[i].stmt.generic)
            statements: list[tuple[bytes, Sequence[Any]]] = []
            places: list[int] = []
            for i in order:
                stmt = batch[i].stmt
                if stmt.generic and prepared:
                    statements.append((_GENERIC_PLAN_QUERY, ()))
                places.append(len(statements))
                query = stmt.query
                if not isinstance(query, bytes):
                    query = query.encode(conn.info.encoding)
                statements.append((query, batch[i].args))
            shared = Round(conn, prepared, pool.sessions)
            try:
                await shared.run(statements)
            except asyncio.CancelledError:
                # A caller gone (or the call's timeout) cancels the flight on the server; that
                # cancel may come after the commit, and psycopg reads the answers in before it
                # re-raises. Then they are the answers: run again alone, an ack that landed
                # would answer False and a claim take more.
                if shared.answered():
                    for i, place in zip(order, places, strict=True):
                        got[i] = shared.rows(place)
                elif conn.closed:
                    # psycopg gave up waiting for the answer after its cancel and closed the
                    # session: the commit is unknown, as when a connection drops.
                    raise DriverUnavailableError(
                        "the answer of a cancelled transaction never came", detail=self.describe()
                    ) from None
                raise
            except _PREPARED_LOST:
                # A pooler handed the round to a session that never saw its Parse (or holds
                # another client's of that name): nothing ran; each runs alone, unprepared.
                if self._prepare_threshold is not None:
                    log.warning(
                        "jobs.pg.prepare_off: the server lost a prepared statement (pooler?)"
                    )
                self._prepare_threshold = None
                conn.prepare_threshold = None
                raise
            for i, place in zip(order, places, strict=True):
                got[i] = shared.rows(place)

    async def _read(self, name: str, values: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """A read: safe to run twice, so a connection found dead is retried once on a fresh one."""
        try:
            return await self._rows(name, values)
        except DriverUnavailableError:
            return await self._rows(name, values)

    async def run(
        self, sql: Sql, values: Mapping[str, Any], *, read: bool = False
    ) -> list[tuple[Any, ...]]:
        """Run a statement another family compiled (the outbox's) on this driver's pool, with
        its timeouts and typed errors; a `read` runs again once when its connection was dead."""
        if sql.name not in self._q and sql.name not in STATEMENTS:
            self._q[sql.name] = _Stmt(sql, self.schema)
        return await (self._read if read else self._rows)(sql.name, values)

    # -- jobs -----------------------------------------------------------------------------------

    def _slot(self, now_ms: int) -> int | None:
        return now_ms // self._slot_ms if self._wake else None

    def _job_enqueue(self, job: NewJob) -> Coroutine[Any, Any, EnqueueResult]:
        # `_enqueue_on`'s coroutine itself: a frame awaiting it would be passed through on
        # every resume of the enqueue.
        return self._enqueue_on(None, job)

    async def _enqueue_on(
        self,
        conn: psycopg.AsyncConnection[tuple[Any, ...]] | None,
        job: NewJob,
        *,
        quiet: bool = False,
    ) -> EnqueueResult:
        """One job's enqueue: alone (`conn` None) its statement goes as one `Round`
        (`_alone`), its own transaction; on `conn`, in the caller's transaction, through
        `_insert`."""
        slot = self._slot(job.created_at_ms)
        due = not quiet and slot is not None and job.run_at_ms <= job.created_at_ms
        wake = due and self._spent_slots.get(job.queue) != slot
        here = self._loops.get()
        trails = here.trails
        # Its slot's NOTIFY is out: rather than go in quiet and have a trailing NOTIFY sent
        # after it (a transaction of its own, at the slot's end), the job carries that one in
        # its own commit when one may go now (docs/pg.md, "The wake").
        carry = due and not wake and trails is not None and trails.may_carry(job.queue)
        stmt = self._q[
            "JOB_ENQUEUE" if wake else "JOB_ENQUEUE_CARRIED" if carry else "JOB_ENQUEUE_QUIET"
        ]
        args = stmt.args(self._enqueue_values(job, slot))
        began = time.monotonic()
        for _ in range(5):
            if conn is None:
                rows = await self._alone(stmt, args, False, None, job.id, here)
                row = rows[0] if rows else None
            else:
                row = await (await self._insert(conn, stmt, args, job.id)).fetchone()
            if row is None:
                raise DriverError("the enqueue statement answered no row", detail=job.id)
            inserted, existing, holder = row[0], row[1], row[2]
            if inserted is not None:
                if wake and slot is not None:
                    self._slot_spent(job.queue, slot)
                if trails is not None and carry:
                    trails.carried(job.queue, began)
                elif trails is not None and wake and row[3]:
                    trails.published(job.queue, began)
                elif trails is not None and due:
                    trails.quiet(job.queue, job.created_at_ms, began)
                return EnqueueResult(job.id, deduped=False)
            if existing is not None:
                return EnqueueResult(job.id, deduped=True)
            if holder is not None:
                return EnqueueResult(holder, deduped=True)
            # The key's holder committed after our snapshot: a fresh one names it.
            found = await self._key_holder(conn, job)
            if found is not None:
                return EnqueueResult(found, deduped=True)
        raise DriverError("enqueue kept racing a concurrent writer", detail=job.id)

    async def _send_trail(self, queue: str) -> None:
        try:
            await self._notify(self.channel, "q:" + queue)
        except JobsError as exc:  # the poll is the guarantee; this only shortens the wait
            log.debug("jobs.pg.trailing_wake_failed: %s", exc.code)

    def _slot_spent(self, queue: str, slot: int) -> None:
        """This queue's wake slot is now recorded (by us or by a peer earlier in it)."""
        if len(self._spent_slots) > 10_000:
            self._spent_slots.clear()
        self._spent_slots[queue] = slot

    def _enqueue_values(self, job: NewJob, slot: int | None) -> dict[str, Any]:
        """The values of one job's enqueue (`JOB_ENQUEUE`, `TASK_FIRE`)."""
        return {
            "id": job.id,
            "run_id": job.run_id,
            "name": job.name,
            "queue": job.queue,
            "tenant_id": job.tenant_id,
            "idempotency_key": job.idempotency_key,
            "input_json": job.input_json,
            "priority": job.priority,
            "max_attempts": job.max_attempts,
            "run_at_ms": job.run_at_ms,
            "created_at_ms": job.created_at_ms,
            "enqueued_by": job.enqueued_by,
            "traceparent": job.traceparent,
            "parent_id": job.parent_id,
            "batch_id": job.batch_id,
            "acts_for": job.acts_for,  # acts-for
            "slot": slot,
            "channel": self.channel,
        }

    async def _key_holder(
        self, conn: psycopg.AsyncConnection[tuple[Any, ...]] | None, job: NewJob
    ) -> str | None:
        if conn is None:
            async with self._conn() as alone:
                return await self._key_holder(alone, job)
        stmt = self._q["JOB_KEY_HOLDER"]
        cur = await self._execute(
            conn,
            stmt.text,
            stmt.args(
                {
                    "name": job.name,
                    "tenant_id": job.tenant_id,
                    "idempotency_key": job.idempotency_key,
                }
            ),
        )
        row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def _job_enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Answers as the records enqueued one after another, in the caller's order; all or nothing.

        A batch of one statement (up to `ENQUEUE_CHUNK` records, no id repeated) is that one
        autocommit statement. A longer batch runs every statement in ONE transaction, so a
        refusal of any kind, even the server's in the last chunk, leaves nothing written. Rows
        are written in namespace order (name, tenant, key; the caller's order within a key), so
        two batches over the same keys in different orders wait for each other, never deadlock;
        a batch that repeats an id keeps the caller's order (a deadlock is then retried).
        """
        cols = _EnqueueColumns(jobs)
        ids = cols.ids
        unique_ids = len(set(ids)) == len(ids)
        if unique_ids and len(ids) <= ENQUEUE_CHUNK:
            async with self._conn() as conn:
                return await self._enqueue_chunks(conn, cols, range(len(ids)), wake=True)
        order: Sequence[int] = range(len(ids))
        if unique_ids:
            # Ids never repeat, so records interact only through their key: sorted stably by
            # namespace, the answers are those of the caller's order (COLLATE "C" = code points).
            order = sorted(order, key=cols.namespace_key())
        tries = 0
        while True:
            try:
                async with self._conn() as conn, self._transaction(conn):
                    out = await self._enqueue_chunks(conn, cols, order, wake=False)
                    await self._enqueue_wake(conn, cols, out)
                return out
            except (DriverConflictError, DriverError) as exc:
                if not _restartable(exc) or tries >= self._conflict_retries:
                    raise
                tries += 1

    async def _enqueue_chunks(
        self,
        conn: psycopg.AsyncConnection[tuple[Any, ...]],
        cols: _EnqueueColumns,
        order: Sequence[int],
        *,
        wake: bool,
    ) -> list[EnqueueResult]:
        """Enqueue the records taken in `order`, one statement per chunk (split where an id
        repeats)."""
        ids = cols.ids
        out: list[EnqueueResult | None] = [None] * len(ids)
        stmt = self._q["JOB_ENQUEUE_MANY"]
        leftovers: list[int] = []
        for start in range(0, len(order), ENQUEUE_CHUNK):
            chunk = order[start : start + ENQUEUE_CHUNK]
            for run in unique_runs([ids[pos] for pos in chunk]):
                positions = [chunk[i] for i in run]
                rows = await self._enqueue_batch(conn, stmt, cols, positions, wake=wake)
                # Answer in batch order; `inserted` rows map to themselves, the rest to the
                # id that was taken or the key's holder (a row stored before, or an earlier
                # record of this very batch).
                for ordinal, existed, inserted, batch_holder, holder in rows:
                    pos = positions[ordinal - 1]
                    if inserted:
                        out[pos] = EnqueueResult(ids[pos], deduped=False)
                    elif existed:
                        out[pos] = EnqueueResult(ids[pos], deduped=True)
                    elif batch_holder is not None or holder is not None:
                        out[pos] = EnqueueResult(batch_holder or holder, deduped=True)
                    else:
                        leftovers.append(pos)
                if leftovers:
                    # A concurrent writer won a key after our snapshot: settle those
                    # records one by one, in order, before the next batch.
                    for pos in leftovers:
                        one = cols.jobs[pos]
                        found = await self._key_holder(conn, one)
                        out[pos] = (
                            EnqueueResult(found, deduped=True)
                            if found is not None
                            else await self._enqueue_on(conn, one, quiet=not wake)
                        )
                    leftovers = []
        return [r for r in out if r is not None]

    async def _enqueue_wake(
        self,
        conn: psycopg.AsyncConnection[tuple[Any, ...]],
        cols: _EnqueueColumns,
        answers: Sequence[EnqueueResult],
    ) -> None:
        """Record the wake slot of each queue that got a due row (NOTIFY at commit)."""
        shared = cols.shared
        if shared is not None:
            slot = self._slot(shared.created_at_ms)
            due = shared.run_at_ms <= shared.created_at_ms
            inserted = due and not all(a.deduped for a in answers)
            queues = [shared.queue] if inserted else []
        else:
            jobs = cols.jobs
            slot = self._slot(max(j.created_at_ms for j in jobs))
            queues = sorted(
                {
                    j.queue
                    for j, a in zip(jobs, answers, strict=True)
                    if not a.deduped and j.run_at_ms <= j.created_at_ms
                }
            )
        if slot is None or not queues:
            return
        stmt = self._q["JOB_ENQUEUE_MANY_WAKE"]
        await self._execute(
            conn, stmt.text, stmt.args({"queue": queues, "slot": slot, "channel": self.channel})
        )

    async def _enqueue_batch(
        self,
        conn: psycopg.AsyncConnection[tuple[Any, ...]],
        stmt: _Stmt,
        cols: _EnqueueColumns,
        positions: Sequence[int],
        *,
        wake: bool,
    ) -> list[tuple[Any, ...]]:
        """One JOB_ENQUEUE_MANY of the records at `positions` (no id repeated among them)."""
        ids, run_ids, keys, texts = cols.ids, cols.run_ids, cols.keys, cols.input_jsons
        acts = cols.acts_for
        values: dict[str, Any] = {
            "id": [ids[pos] for pos in positions],
            "run_id": [run_ids[pos] for pos in positions],
            "idempotency_key": [keys[pos] for pos in positions],
            "input_json": [texts[pos] for pos in positions],
            "acts_for": None if acts is None else [acts[pos] for pos in positions],
            "slot": None,
            "channel": self.channel,
        }
        # One value for the whole batch where every record holds it (JOB_ENQUEUE_MANY's
        # SHARED_COLUMNS): dumping an array costs the client about a microsecond an item.
        shared = cols.shared
        if shared is not None:
            if wake:
                values["slot"] = self._slot(shared.created_at_ms)
            for name, value in zip(SHARED_COLUMNS, _shared_fields(shared), strict=True):
                values[name] = None
                values[f"{name}_all"] = value
        else:
            batch = [cols.jobs[pos] for pos in positions]
            if wake:
                values["slot"] = self._slot(max(j.created_at_ms for j in batch))
            for name in SHARED_COLUMNS:
                values[name] = [getattr(j, name) for j in batch]
                values[f"{name}_all"] = None
        cur = await self._insert(conn, stmt, stmt.args(values), ids[positions[0]])
        return [r[:5] for r in await cur.fetchall()]

    async def _insert(
        self,
        conn: psycopg.AsyncConnection[tuple[Any, ...]],
        stmt: _Stmt,
        args: Sequence[Any],
        job_id: str,
    ) -> psycopg.AsyncCursor[tuple[Any, ...]]:
        """Run an enqueue statement, again while a concurrent insert of one of its ids races it.

        Such an insert committed between our snapshot and our write: nothing of this statement
        was written, and a fresh snapshot sees that id and answers it deduped. Inside a
        transaction the error aborted it all: the caller starts the transaction over.
        """
        for _ in range(_RACE_TRIES):
            try:
                return await self._execute(conn, stmt.query, args, raw=stmt.raw)
            except psycopg.errors.UniqueViolation as exc:
                if not _raced(exc, conn):
                    raise
        raise DriverError(_RACED, detail=job_id)

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        now = params.now_ms
        beat = params.beat
        values = {
            # A queue named twice would be scanned twice; once is the contract's meaning.
            "queues": list(dict.fromkeys(params.queues)),
            "now_ms": now,
            "lapsed_by": lapsed_by(params),
            "limit": params.limit,
            "worker_id": params.worker_id,
            "lease_until_ms": now + params.lease_ms,
            "drop_exhausted": sorted(params.drop_exhausted),
            "lapsed_error": LEASE_LAPSED_ERROR,
            "abandoned_code": ABANDONED_ERROR[0],
            "abandoned_message": ABANDONED_ERROR[1],
            "shard": counter_shard(params.worker_id),
            "beat_worker_id": beat.worker_id if beat is not None else None,
            "beat_info_json": beat.info_json if beat is not None else None,
            "beat_now_ms": beat.now_ms if beat is not None else None,
            "beat_expires_at_ms": beat.now_ms + beat.ttl_ms if beat is not None else None,
        }
        stmt = self._q["JOB_CLAIM"]
        lazy = stmt.lazy_commit and self._lazy_claim
        lost_claims = self._lost_claims
        claim = lost_claims.start(params)
        try:
            rows = await self._coalesced(stmt, stmt.args(values), lazy, params.limit, claim)
        except DriverUnavailableError:
            # Out of reach: its commit may have happened, the answer lost.
            lost_claims.lost(claim)
            raise
        finally:
            # No await from here to `answered`: a lost claim's give-back sees this claim's
            # rows either in flight or answered, never neither.
            lost_claims.end(claim)
        lost_claims.answered(claim, rows)
        lease_until = now + params.lease_ms
        worker = params.worker_id
        mine = [r for r in rows if r[0] == "c"]
        # Claim order: (priority, run_at, id); Python compares str by code point, as COLLATE "C".
        mine.sort(key=_CLAIM_ORDER)
        # Positional, in `ClaimedJob`'s field order: a frozen dataclass's keyword call costs
        # twice as much, ten times a claim.
        jobs = tuple(
            ClaimedJob(
                r[1],  # id
                r[2],  # run_id
                r[3],  # name
                r[4],  # queue
                r[5],  # tenant_id
                r[6],  # idempotency_key
                r[7],  # input_json
                r[9],  # priority
                r[10],  # attempt
                r[11],  # max_attempts
                r[12],  # claims
                worker,
                lease_until,
                r[14],  # created_at_ms
                r[15],  # enqueued_by
                r[16],  # traceparent
                None if r[17] is None else _join_state(r[17:21]),
            )
            for r in mine
        )
        lost = self._held_buried.take(worker)
        if len(mine) == len(rows) and lost is None:
            return ClaimResult(jobs)
        buried = sorted(
            [
                *(BuriedJob(r[1], r[3], r[4], _STATES[r[8]]) for r in rows if r[0] != "c"),
                *(lost or ()),
            ],
            key=lambda b: b.id,
        )
        return ClaimResult(jobs, tuple(buried))

    async def _settle(
        self,
        name: str,
        items: Sequence[_Fenced],
        columns: Callable[[list[_Fenced]], dict[str, Any]],
    ) -> list[bool]:
        """Run a batched, fenced settle; True for each item whose fence held, in order.

        Every settle binds the fence (id, claims, worker) per item and its counter shard;
        `columns` adds the rest.
        """
        if name == "JOB_ACK" and len(items) == len({item.fence.job_id for item in items}):
            stmt = self._q[name]
            params = _settle_params(list(items), columns)
            out = [False] * len(items)
            rows = await self._coalesced(stmt, stmt.args(params), False, len(items), None)
            for (ordinal,) in rows:
                out[ordinal - 1] = True
            return out
        async with self._conn() as conn:
            return await self._settle_on(conn, name, items, columns)

    async def _settle_on(
        self,
        conn: psycopg.AsyncConnection[tuple[Any, ...]],
        name: str,
        items: Sequence[_Fenced],
        columns: Callable[[list[_Fenced]], dict[str, Any]],
    ) -> list[bool]:
        """`_settle` on a connection the caller holds (perhaps inside its transaction)."""
        ids = [item.fence.job_id for item in items]
        out = [False] * len(items)
        stmt = self._q[name]
        for run in unique_runs(ids):
            params = _settle_params([items[i] for i in run], columns)
            cur = await self._execute(conn, stmt.query, stmt.args(params), raw=stmt.raw)
            for (ordinal,) in await cur.fetchall():
                out[run[ordinal - 1]] = True
        return out

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        return await self._settle(
            "JOB_ACK",
            acks,
            lambda sel: {
                "now_ms": [a.now_ms for a in sel],
                "result_json": [a.result_json for a in sel],
                "progress_json": [a.progress_json for a in sel],
            },
        )

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        """One statement; a batch with a PARK that waits for an event is one transaction: the
        events' locks (`EVENT_LOCK`, each name's, sorted), then a look for an event each wait
        already matches (`EVENT_FIND`, decided in Python), then the nack — a found event makes
        that park `ready` at `now_ms`, else its wait is stored with the row. A publish of one of
        those names waits for the lock, so it sees the stored wait (see `statements.event`)."""
        waits = sorted({n.wait.event for n in nacks if n.wait is not None})
        deps = sorted({d for n in nacks if n.join is not None for d in n.join})
        if not waits and not deps:
            return await self._settle("JOB_NACK", nacks, lambda sel: _nack_columns(sel, set()))

        async def attempt(conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> list[bool]:
            if waits:
                keys = sorted(self._event_key(e) for e in waits)
                await self._on(conn, "EVENT_LOCK", {"keys": keys})
            # A join's dependencies are locked before the nack locks the waiter (the finish
            # trigger's order: dependency, then waiter), and counted under those locks.
            if deps:
                await self._on(conn, "JOIN_DEPS", {"ids": deps})
            found: set[int] = set()
            for n in nacks:
                if n.wait is not None and await self._find_on(conn, n.wait, n.now_ms) is not None:
                    found.add(id(n))
            landed = await self._settle_on(
                conn, "JOB_NACK", nacks, lambda sel: _nack_columns(sel, found)
            )
            parks = [n for n, ok in zip(nacks, landed, strict=True) if ok and n.join is not None]
            if parks:
                # Counted after this very batch's settles: a dependency it failed or completed
                # counts as finished (its trigger ran before the park's edge existed).
                states = dict(await self._on(conn, "JOIN_DEPS", {"ids": deps}))
                await self._join_parks(conn, parks, states)
            return landed

        return await self._in_transaction(attempt)

    async def _join_parks(
        self,
        conn: psycopg.AsyncConnection[tuple[Any, ...]],
        parks: Sequence[Nack],
        states: Mapping[str, str],
    ) -> None:
        """Write the joins of PARK nacks that just landed, in their transaction: the old edges
        go, the counts (as `_join_counts`) and `join_claims` on each row (`JOIN_PARK`: ready at
        once when nothing is pending), the new edges and the dependencies' markers."""
        waiters = [n.fence.job_id for n in parks]
        await self._on(conn, "JOIN_UNLINK", {"ids": waiters})
        counts = [_join_counts(n.join or (), states) for n in parks]
        parked = await self._on(
            conn,
            "JOIN_PARK",
            {
                "id": waiters,
                "join_total": [len(n.join or ()) for n in parks],
                "join_pending": [len(live) for live, _ in counts],
                "join_failed": [failed for _, failed in counts],
                "now_ms": [n.now_ms for n in parks],
            },
        )
        if self._wake:
            # A park whose rows all finished already (a gather of children done) is ready now:
            # its queue is told at commit, as a release by the finish trigger tells it.
            for queue in sorted({q for q, state in parked if state == "ready"}):
                await self._on(
                    conn, "WAKE_PROBE", {"channel": self.channel, "payload": "q:" + queue}
                )
        edges = sorted((d, w) for w, (live, _) in zip(waiters, counts, strict=True) for d in live)
        if edges:
            await self._on(
                conn,
                "JOIN_LINK",
                {"dep_id": [d for d, _ in edges], "waiter_id": [w for _, w in edges]},
            )

    # -- flows ----------------------------------------------------------------------------------

    async def _join_enqueue(self, items: Sequence[JoinEnqueue]) -> list[JoinEnqueueAnswer]:
        """One transaction: every named dependency locked in id order (`JOIN_DEPS`), then item
        by item its dependencies counted under those locks (again, so an earlier item's job is
        seen), the row inserted with its join (`JOIN_ENQUEUE`) and its edges (`JOIN_LINK`). A
        dependency's finish either committed before our lock (counted finished) or waits for
        our commit and its trigger then finds the edge: never neither."""
        every = sorted({d for item in items for d in item.after})

        async def attempt(
            conn: psycopg.AsyncConnection[tuple[Any, ...]],
        ) -> list[JoinEnqueueAnswer]:
            await self._on(conn, "JOIN_DEPS", {"ids": every})
            out: list[JoinEnqueueAnswer] = []
            for item in items:
                states = dict(await self._on(conn, "JOIN_DEPS", {"ids": sorted(item.after)}))
                missing = tuple(d for d in item.after if d not in states)
                if missing:
                    out.append(JoinEnqueueAnswer(None, missing))
                    continue
                live, failed = _join_counts(item.after, states)
                done = await self._join_insert(conn, item, len(live), failed)
                if not done.deduped:
                    # Edges left by an earlier row of this id (removed or purged while waiting)
                    # must not count for this one.
                    await self._on(conn, "JOIN_UNLINK", {"ids": [item.job.id]})
                if not done.deduped and live:
                    await self._on(
                        conn,
                        "JOIN_LINK",
                        {"dep_id": sorted(live), "waiter_id": [item.job.id] * len(live)},
                    )
                out.append(JoinEnqueueAnswer(done))
            return out

        return await self._in_transaction(attempt)

    async def _join_insert(
        self,
        conn: psycopg.AsyncConnection[tuple[Any, ...]],
        item: JoinEnqueue,
        pending: int,
        failed: int,
    ) -> EnqueueResult:
        """`_enqueue_on` for a row holding its join: parked (no due time) while `pending`."""
        job = item.job
        values = self._enqueue_values(job, self._slot(job.created_at_ms))
        values.update(
            state=JobState.PARKED.value if pending else JobState.READY.value,
            run_at_ms=None if pending else job.run_at_ms,
            join_total=len(item.after),
            join_pending=pending,
            join_failed=failed,
            join_policy=item.policy.value,
        )
        rows = await self._on(conn, "JOIN_ENQUEUE", values)
        inserted, existing, holder = rows[0][0], rows[0][1], rows[0][2]
        if inserted is not None:
            return EnqueueResult(job.id, deduped=False)
        if existing is not None:
            return EnqueueResult(job.id, deduped=True)
        if holder is None:
            # The key's holder committed after this statement's snapshot: a fresh one names it.
            holder = await self._key_holder(conn, job)
        if holder is None:
            raise DriverError("join_enqueue kept racing a concurrent writer", detail=job.id)
        return EnqueueResult(holder, deduped=True)

    async def _join_pending(self, job_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for waiter_id, dep_id in await self._rows("JOIN_PENDING", {"ids": sorted(set(job_ids))}):
            out.setdefault(waiter_id, []).append(dep_id)
        return {i: tuple(out[i]) for i in dict.fromkeys(job_ids) if i in out}

    async def _job_watch(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        rows = await self._rows("JOB_WATCH", {"ids": sorted(set(job_ids))})
        n = len(job_stmts.RECORD_COLUMNS)
        out = {
            r[0]: _record(dict(zip(job_stmts.RECORD_COLUMNS, r[:n], strict=True)), r[n:])
            for r in rows
        }
        return {i: out[i] for i in dict.fromkeys(job_ids) if i in out}

    async def finish_subscribe(self, on_finish: Callable[[str], None]) -> WakeSubscription | None:
        """Hold ONE dedicated LISTEN session on this schema's finish channel, where the finish
        trigger announces every watched row (`f:<id>`, at its commit); None where this driver
        holds no LISTEN session (`wake=False`: a transaction-mode pooler)."""
        if not self._wake:
            return None
        channel = wake_channel(self.schema, "finish")

        def deliver(payload: str) -> None:
            if payload.startswith("f:"):
                on_finish(payload[2:])

        async def probe(payload: str) -> None:
            await self.send_probe(payload, channel)

        return self.listen(channel, deliver, probe)

    async def _in_transaction(
        self, work: Callable[[psycopg.AsyncConnection[tuple[Any, ...]]], Awaitable[T]]
    ) -> T:
        """Run `work` in one transaction, again from the start (up to `conflict_retries` times)
        when the server rolled it back in a deadlock or serialization failure."""
        tries = 0
        while True:
            try:
                async with self._conn() as conn, self._transaction(conn):
                    return await work(conn)
            except DriverConflictError:
                if tries >= self._conflict_retries:
                    raise
                tries += 1

    async def _pipelined(
        self, steps: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> list[tuple[Any, ...]]:
        """Run the named statements in order as ONE transaction in one round trip; the last
        one's rows. Each statement takes its own snapshot (READ COMMITTED) when it starts, and
        the locks taken are held until the end; a failure leaves nothing written. Rolled back
        in a deadlock or serialization failure, it runs again from the start (up to
        `conflict_retries` times)."""
        tries = 0
        while True:
            try:
                async with self._conn() as conn:
                    return await self._pipelined_on(conn, steps)
            except DriverConflictError:
                if tries >= self._conflict_retries:
                    raise
                tries += 1

    async def _pipelined_on(
        self,
        conn: psycopg.AsyncConnection[tuple[Any, ...]],
        steps: Sequence[tuple[str, Mapping[str, Any]]],
    ) -> list[tuple[Any, ...]]:
        if not psycopg.AsyncPipeline.is_supported():
            # A libpq before 14: the same transaction, a round trip per statement.
            async with self._transaction(conn):
                rows: list[tuple[Any, ...]] = []
                for name, values in steps:
                    rows = await self._on(conn, name, values)
                return rows
        queries = [(self._q[name], values) for name, values in steps]
        for _ in range(2):
            if self._prepare_threshold is None and conn.prepare_threshold is not None:
                conn.prepare_threshold = None
            try:
                # On an autocommit connection everything up to the pipeline's one Sync is one
                # implicit transaction: no BEGIN or COMMIT to wait for.
                async with conn.pipeline():
                    curs = [await conn.execute(q.text, q.args(v)) for q, v in queries]
            except (
                psycopg.errors.InvalidSqlStatementName,
                psycopg.errors.DuplicatePreparedStatement,
            ):
                # As in `_execute_once`: the failed message aborted the pipeline up to its Sync,
                # so nothing was written; run it all again unprepared.
                if self._prepare_threshold is not None:
                    log.warning("jobs.pg.prepare_off: the server lost a prepared statement")
                self._prepare_threshold = None
                conn.prepare_threshold = None
                continue
            except psycopg.Error as exc:
                if isinstance(
                    exc, (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
                ):
                    self.conflicts_seen += 1
                if exc.sqlstate is not None:
                    exc.add_note(_STATEMENT_NOTE + " + ".join(name for name, _ in steps))
                raise
            last = curs[-1]
            return await last.fetchall() if _has_rows(last) else []
        raise DriverError("the server kept losing prepared statements", detail=steps[-1][0])

    async def _on(
        self, conn: psycopg.AsyncConnection[tuple[Any, ...]], name: str, values: Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        """Run one named statement on `conn`; its rows (none for a statement without any)."""
        stmt = self._q[name]
        cur = await self._execute(conn, stmt.query, stmt.args(values), raw=stmt.raw)
        return await cur.fetchall() if _has_rows(cur) else []

    def _event_key(self, name: str) -> int:
        """The advisory lock key of an event name in this schema (a signed 64-bit int)."""
        digest = hashlib.blake2b(f"{self.schema}\x00{name}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        return await self._settle(
            "JOB_HEARTBEAT",
            beats,
            lambda sel: {"lease_until_ms": [b.now_ms + b.lease_ms for b in sel]},
        )

    async def _job_progress(self, items: Sequence[Progress]) -> list[bool]:
        return await self._settle(
            "JOB_PROGRESS", items, lambda sel: {"progress_json": [p.progress_json for p in sel]}
        )

    # -- the operator's bulk calls ---------------------------------------------------------------
    # Each is one statement over the distinct ids (first mention order); a repeated id is
    # answered from what its first mention did, as the same calls made one after another would.

    async def _job_cancel_many(self, job_ids: Sequence[str], now_ms: int) -> list[CancelAnswer]:
        ids = list(dict.fromkeys(job_ids))
        rows = await self._rows("JOB_CANCEL_MANY", {"ids": ids, "now_ms": now_ms})
        cancelled = {r[0]: bool(r[1]) for r in rows}
        first = {
            i: CancelAnswer.NOT_FOUND
            if i not in cancelled
            else CancelAnswer.CANCELLED
            if cancelled[i]
            else CancelAnswer.FINISHED
            for i in ids
        }
        # After its first mention a row that exists is finished, whatever that mention did.
        again = {
            i: a if a is CancelAnswer.NOT_FOUND else CancelAnswer.FINISHED for i, a in first.items()
        }
        return _in_call_order(job_ids, first, again)

    async def _job_promote(self, job_ids: Sequence[str], now_ms: int) -> list[PromoteAnswer]:
        ids = list(dict.fromkeys(job_ids))
        rows = await self._rows("JOB_PROMOTE", {"ids": ids, "now_ms": now_ms})
        first = dict.fromkeys(ids, PromoteAnswer.NOT_FOUND)
        for job_id, state, run_at_ms, promoted in rows:
            if promoted:
                first[job_id] = PromoteAnswer.PROMOTED
            elif state == JobState.READY.value and run_at_ms is not None and run_at_ms <= now_ms:
                first[job_id] = PromoteAnswer.ALREADY_DUE
            else:
                first[job_id] = PromoteAnswer.NOT_READY
        again = {
            i: PromoteAnswer.ALREADY_DUE if a is PromoteAnswer.PROMOTED else a
            for i, a in first.items()
        }
        return _in_call_order(job_ids, first, again)

    async def _job_remove(self, job_ids: Sequence[str]) -> list[RemoveAnswer]:
        ids = list(dict.fromkeys(job_ids))
        rows = await self._rows("JOB_REMOVE", {"ids": ids})
        first = dict.fromkeys(ids, RemoveAnswer.NOT_FOUND)
        for job_id, state, removed in rows:
            if removed:
                first[job_id] = RemoveAnswer.REMOVED
            elif state == JobState.RUNNING.value:
                first[job_id] = RemoveAnswer.RUNNING
        again = {
            i: RemoveAnswer.NOT_FOUND if a is RemoveAnswer.REMOVED else a for i, a in first.items()
        }
        return _in_call_order(job_ids, first, again)

    async def _job_requeue_many(self, params: RequeueParams) -> list[RequeueAnswer]:
        job_ids = params.job_ids
        fresh: dict[str, str | None] = {}
        for job_id, run_id in params.items():
            # A second mention answers LIVE (or what the first did), its run id unused.
            fresh.setdefault(job_id, run_id)
        try:
            first = await self._requeue(fresh, params.now_ms)
        except DriverError as exc:
            if not _live_key_taken(exc):
                raise
            # A concurrent enqueue took a key after the statement's snapshot: the statement
            # wrote nothing. Id by id, in order, the one whose key went answers DUPLICATE.
            first = {}
            for job_id, run_id in fresh.items():
                try:
                    first.update(await self._requeue({job_id: run_id}, params.now_ms))
                except DriverError as one:
                    if not _live_key_taken(one):
                        raise
                    first[job_id] = RequeueAnswer.DUPLICATE
        again = {
            i: RequeueAnswer.LIVE if a is RequeueAnswer.REQUEUED else a for i, a in first.items()
        }
        return _in_call_order(job_ids, first, again)

    async def _requeue(self, fresh: dict[str, str | None], now_ms: int) -> dict[str, RequeueAnswer]:
        """One `JOB_REQUEUE_MANY` of the ids of `fresh` (each with its fresh run id, or None)."""
        values = {"ids": list(fresh), "fresh": list(fresh.values()), "now_ms": now_ms}
        rows = await self._rows("JOB_REQUEUE_MANY", values)
        out = dict.fromkeys(fresh, RequeueAnswer.NOT_FOUND)
        for job_id, state, requeued, unwound in rows:
            if requeued:
                out[job_id] = RequeueAnswer.REQUEUED
            elif state in _LIVE_VALUES:
                out[job_id] = RequeueAnswer.LIVE
            elif unwound and fresh[job_id] is None:
                out[job_id] = RequeueAnswer.UNWOUND
            else:
                # Finished, and a live row (perhaps one requeued by this very call) holds its key.
                out[job_id] = RequeueAnswer.DUPLICATE
        return out

    # -- listing --------------------------------------------------------------------------------

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        rows = await self._read("JOB_LIST", list_values(f, after, limit, scan))
        taken: list[JobSummary] = []
        last: ListKey | None = None
        for kind, *r in rows:
            row = dict(zip(job_stmts.SUMMARY_COLUMNS, r, strict=False))
            if kind == "t":
                # The walk's tail: the last key examined, and whether any row follows it.
                last = ListKey(row["created_at_ms"], row["id"]) if r[-1] else None
                continue
            row["state"] = _STATES[row["state"]]
            taken.append(JobSummary(**row))
        # Walk order; Python compares ids by code point, as COLLATE "C" does.
        taken.sort(key=lambda j: (j.created_at_ms, j.id), reverse=True)
        return JobSlice(tuple(taken), last)

    async def _job_purge(self, params: PurgeParams) -> int:
        def before(keep: int | None) -> int | None:
            return None if keep is None else params.now_ms - keep

        rows = await self._rows(
            "JOB_PURGE",
            {
                "limit": params.limit,
                "completed_before": before(params.completed_ms),
                "cancelled_before": before(params.cancelled_ms),
                "failed_before": before(params.failed_ms),
                "dead_before": before(params.dead_ms),
            },
        )
        return int(rows[0][0])

    async def _job_get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        rows = await self._read("JOB_GET_MANY", {"ids": list(job_ids)})
        out: dict[str, JobRecord] = {}
        n = len(job_stmts.RECORD_COLUMNS)
        for r in rows:
            row = dict(zip(job_stmts.RECORD_COLUMNS, r[:n], strict=True))
            out[row["id"]] = _record(row, r[n:])
        # The contract's answer is by id; keep the asked order for people reading it.
        return {i: out[i] for i in job_ids if i in out}

    # -- pauses ---------------------------------------------------------------------------------

    async def _pause_add(self, pause: Pause) -> bool:
        rows = await self._rows("PAUSE_ADD", {"kind": pause.kind, "value": pause.value})
        return bool(rows)

    async def _pause_list(self) -> list[Pause]:
        rows = await self._read("PAUSE_LIST", {})
        return [Pause(kind, value) for kind, value in rows]

    async def _pause_remove(self, pause: Pause) -> bool:
        rows = await self._rows("PAUSE_REMOVE", {"kind": pause.kind, "value": pause.value})
        return bool(rows)

    # -- queues ---------------------------------------------------------------------------------

    async def _queue_demand(self, queues: Sequence[str], now_ms: int) -> dict[str, int]:
        rows = await self._read(
            "QUEUE_DEMAND", {"queues": list(dict.fromkeys(queues)), "now_ms": now_ms}
        )
        counts = {q: int(n) for q, n in rows}
        return {q: counts[q] for q in queues}

    async def _queue_stats(self, now_ms: int) -> list[QueueStats]:
        rows = await self._read("QUEUE_STATS", {"now_ms": now_ms})
        counts: dict[str, dict[JobState, int]] = {}
        oldest: dict[str, int | None] = {}
        for kind, queue, state, n in rows:
            if kind == "c":
                counts.setdefault(queue, dict.fromkeys(JobState, 0))[_STATES[state]] = int(n)
            else:
                oldest[queue] = None if n is None else int(n)
        return [
            QueueStats(queue, tuple(by_state.items()), oldest.get(queue))
            for queue, by_state in counts.items()
        ]

    # -- steps and events -----------------------------------------------------------------------

    async def _step_list(self, run_id: str) -> list[StepRecord]:
        rows = await self._read("STEP_LIST", {"run_id": run_id})
        return [StepRecord(*r) for r in rows]

    async def _step_put(self, puts: Sequence[StepPut]) -> list[bool]:
        rows = await self._rows(
            "STEP_PUT",
            {
                "id": [p.fence.job_id for p in puts],
                "claims": [p.fence.claims for p in puts],
                "worker_id": [p.fence.worker_id for p in puts],
                "name": [p.name for p in puts],
                "output_json": [p.output_json for p in puts],
                "now_ms": [p.now_ms for p in puts],
            },
        )
        held = {int(r[0]) for r in rows}
        return [i + 1 in held for i in range(len(puts))]

    async def _event_find(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        async with self._conn() as conn:
            return await self._find_on(conn, wait, now_ms)

    async def _find_on(
        self, conn: psycopg.AsyncConnection[tuple[Any, ...]], wait: EventWait, now_ms: int
    ) -> EventRecord | None:
        """The first event of `wait.event` (by publish time, id) for its tenant or every tenant,
        published in `[since_ms, until_ms)`, unexpired at `now_ms`, that `wait` matches; pages
        through the name's events until one does."""
        match = _object(wait.match_json)
        after: tuple[int, str] = (wait.since_ms, "")
        until = MAX_TIME_MS + 1 if wait.until_ms is None else wait.until_ms
        while True:
            rows = await self._on(
                conn,
                "EVENT_FIND",
                {
                    "name": wait.event,
                    "after_ms": after[0],
                    "after_id": after[1],
                    "until_ms": until,
                    "tenant": wait.tenant_id or "",
                    "now_ms": now_ms,
                    "limit": EVENT_PAGE,
                },
            )
            for r in rows:
                event = EventRecord(*r)
                if event_matches(match, loads(event.data_json)):
                    return event
            if len(rows) < EVENT_PAGE:
                return None
            after = (rows[-1][3], rows[-1][0])

    async def _event_publish(self, event: EventRecord) -> int:
        """One transaction: the name's lock (`EVENT_LOCK`), the event stored with the waits of
        its name (and tenant, unless it is for every tenant) it reaches read and locked
        (`EVENT_PUBLISH`, `EVENT_PUBLISH_ALL_TENANTS`), then, for the waits it matches (decided
        in Python), the rows woken and their queues notified (`EVENT_WAKE`)."""
        data = loads(event.data_json)

        async def attempt(conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> int:
            await self._on(conn, "EVENT_LOCK", {"keys": [self._event_key(event.name)]})
            rows = await self._on(
                conn,
                "EVENT_PUBLISH_ALL_TENANTS" if event.all_tenants else "EVENT_PUBLISH",
                {
                    "id": event.id,
                    "name": event.name,
                    "data_json": event.data_json,
                    "published_at_ms": event.published_at_ms,
                    "expires_at_ms": event.expires_at_ms,
                    "tenant_id": event.tenant_id,
                    "tenant": event.tenant_id or "",
                },
            )
            ids = [
                job_id
                for job_id, match_json in rows
                if job_id is not None and event_matches(_object(match_json), data)
            ]
            if not ids:
                return 0
            woken = await self._on(
                conn,
                "EVENT_WAKE",
                {
                    "ids": ids,
                    "run_at_ms": event.published_at_ms,
                    "channel": self.channel if self._wake else None,
                },
            )
            return int(woken[0][0])

        return await self._in_transaction(attempt)

    async def _event_purge(self, now_ms: int, limit: int) -> int:
        rows = await self._rows("EVENT_PURGE", {"now_ms": now_ms, "limit": limit})
        return int(rows[0][0])

    # -- leases ---------------------------------------------------------------------------------

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        """One transaction, one round trip: the keys' clocks moved and locked (`LEASE_CLOCK`,
        sorted), then `LEASE_TAKE` in a snapshot taken once they are held, at each key's time
        (see `statements.lease`)."""
        rows = await self._pipelined(
            [
                ("LEASE_CLOCK", {"keys": sorted({t.key for t in takes}), "now_ms": now_ms}),
                (
                    "LEASE_TAKE",
                    {
                        "key": [t.key for t in takes],
                        "holder": [t.holder for t in takes],
                        "lim": [t.limit for t in takes],
                        "ttl_ms": [t.ttl_ms for t in takes],
                        "stamp": [t.stamp for t in takes],
                        "now_ms": now_ms,
                        "tokens": self._lease_tokens,
                    },
                ),
            ]
        )
        granted = {int(ordinal): (int(token), int(ends)) for ordinal, token, ends in rows}
        out: list[Lease | None] = []
        for i, t in enumerate(takes, start=1):
            got = granted.get(i)
            out.append(None if got is None else Lease(t.key, t.holder, got[0], got[1], t.stamp))
        return out

    async def _lease_renew(self, renews: Sequence[LeaseRenew], now_ms: int) -> list[bool]:
        rows = await self._rows(
            "LEASE_RENEW",
            {
                "key": [r.key for r in renews],
                "token": [r.token for r in renews],
                "ttl_ms": [r.ttl_ms for r in renews],
                "now_ms": now_ms,
            },
        )
        return _answered(rows, len(renews))

    async def _lease_release(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        return await self._end_holdings("LEASE_RELEASE", refs, now_ms)

    async def _lease_abandon(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        return await self._end_holdings("LEASE_ABANDON", refs, now_ms)

    async def _end_holdings(self, name: str, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        rows = await self._rows(
            name,
            {"key": [r.key for r in refs], "token": [r.token for r in refs], "now_ms": now_ms},
        )
        return _answered(rows, len(refs))

    async def _lease_holders(self, key: str, now_ms: int) -> list[Lease]:
        rows = await self._read("LEASE_HOLDERS", {"key": key, "now_ms": now_ms})
        return [Lease(*r) for r in rows]

    async def _lease_purge(self, now_ms: int, limit: int) -> int:
        idle = now_ms - LEASE_CLOCK_KEEP_MS
        rows = await self._rows("LEASE_PURGE", {"now_ms": now_ms, "limit": limit, "idle_ms": idle})
        return int(rows[0][0])

    # -- tasks ----------------------------------------------------------------------------------

    async def _task_arm(self, names: Sequence[str], now_ms: int) -> list[TaskMark]:
        rows = await self._rows("TASK_ARM", {"name": list(names), "now_ms": now_ms})
        marks = {r[1]: TaskMark(*r[1:6]) for r in rows if r[6]}
        missing = [n for n in names if n not in marks]
        if missing:
            # Armed by a concurrent call that committed after our snapshot: a fresh one reads
            # them (marks are never deleted, so one look finds them all).
            marks.update(await self._task_marks(missing))
        if len(marks) != len(names):
            raise DriverError("a task armed here has no mark", detail=", ".join(missing)[:200])
        return [marks[n] for n in names]

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        """One autocommit statement (`TASK_FIRE`, see `statements.task`): the mark's lock, the
        fenced enqueue and the moved mark together. Run again only when it wrote nothing: an id
        race (as `_insert` says) or the key's holder committed after its snapshot."""
        job = fire.job
        stmt = self._q["TASK_FIRE"]
        slot = self._slot(job.created_at_ms)
        values = self._enqueue_values(job, slot)
        values.update(
            task=fire.name,
            expect_ms=fire.expect_ms,
            occurrence_ms=fire.occurrence_ms,
            watermark_ms=fire.watermark_ms,
            now_ms=fire.now_ms,
        )
        args = stmt.args(values)
        async with self._conn() as conn:
            for _ in range(5):
                cur = await self._insert(conn, stmt, args, job.id)
                row = await cur.fetchone()
                if row is None:
                    return TaskFireAnswer(None, None)  # never armed
                stored = TaskMark(*row[0:5])
                inserted, existing, holder = row[5], row[6], row[7]
                if row[8] is not None:
                    if inserted is not None:
                        if slot is not None and job.run_at_ms <= job.created_at_ms:
                            self._slot_spent(job.queue, slot)
                        enqueued = EnqueueResult(job.id, deduped=False)
                    elif existing is not None:
                        enqueued = EnqueueResult(job.id, deduped=True)
                    else:
                        enqueued = EnqueueResult(holder, deduped=True)
                    return TaskFireAnswer(enqueued, TaskMark(*row[8:13]))
                if stored.watermark_ms != fire.expect_ms:
                    return TaskFireAnswer(None, stored)
                # The fence held but the key's holder committed after the snapshot: nothing was
                # written; a fresh snapshot names it.
        raise DriverError("a task fire kept racing a concurrent enqueue", detail=fire.name)

    async def _task_marks(self, names: Sequence[str]) -> dict[str, TaskMark]:
        rows = await self._read("TASK_MARKS", {"names": list(names)})
        found = {r[0]: TaskMark(*r) for r in rows}
        return {n: found[n] for n in names if n in found}

    # -- counters -------------------------------------------------------------------------------

    async def _counter_read(self, params: CounterReadParams) -> list[CounterRow]:
        rows = await self._read(
            "COUNTER_READ",
            {
                "since_ms": params.since_ms,
                "until_ms": params.until_ms,
                "names": None if params.names is None else list(params.names),
                "queues": None if params.queues is None else list(params.queues),
            },
        )
        return [CounterRow(*r) for r in rows]

    async def _counter_fold(self, now_ms: int, limit: int) -> int:
        rows = await self._rows("COUNTER_FOLD", {"before": fold_before(now_ms), "limit": limit})
        folded = int(rows[0][0])
        if folded >= limit:
            return folded
        # A statement of its own, so it sees the hour rows the fold just wrote (the contract
        # drops after folding, and may drop what this very call folded).
        rows = await self._rows(
            "COUNTER_DROP", {"before": drop_before(now_ms), "limit": limit - folded}
        )
        return folded + int(rows[0][0])

    # -- workers --------------------------------------------------------------------------------

    async def _worker_beat(self, beat: WorkerBeat) -> None:
        await self._rows(
            "WORKER_BEAT",
            {
                "worker_id": beat.worker_id,
                "info_json": beat.info_json,
                "now_ms": beat.now_ms,
                "expires_at_ms": beat.now_ms + beat.ttl_ms,
            },
        )

    async def _worker_forget(self, worker_id: str) -> bool:
        return bool(await self._rows("WORKER_FORGET", {"worker_id": worker_id}))

    async def _worker_list(self, now_ms: int) -> list[WorkerInfo]:
        rows = await self._read("WORKER_LIST", {"now_ms": now_ms})
        return [WorkerInfo(w, info, beat, exp) for w, info, beat, exp in rows]

    async def _worker_purge(self, now_ms: int, limit: int) -> int:
        rows = await self._rows("WORKER_PURGE", {"now_ms": now_ms, "limit": limit})
        return int(rows[0][0])

    # -- sweeps ---------------------------------------------------------------------------------

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        """One autocommit statement (`SWEEP_START`, see `statements.sweep`): the fence, the
        sweep's entries locked, the blocker looked for and the run's entry written, together.
        Run again only when the fence held and it answered nothing: the run's entry was written
        by a concurrent start of the same run after its snapshot (a fresh one reads it)."""
        f = start.fence
        values = {
            "job_id": f.job_id,
            "claims": f.claims,
            "worker_id": f.worker_id,
            "run_id": start.run_id,
            "name": start.name,
            "scope": start.scope,
            "environment": start.environment,
            "kind": start.kind,
            "checksum": start.checksum,
            "expected": start.expected,
            "now_ms": start.now_ms,
        }
        for _ in range(5):
            rows = await self._rows("SWEEP_START", values)
            if not rows[0][0]:
                return SweepStartAnswer(None)
            by_tag = {r[1]: _sweep_record(r[2:]) for r in rows if r[1] is not None}
            if "b" in by_tag:
                return SweepStartAnswer(None, blocked_by=by_tag["b"])
            entry = by_tag.get("w") or by_tag.get("o")
            if entry is not None:
                return SweepStartAnswer(entry)
        raise DriverError("a sweep start kept racing a start of its run", detail=start.run_id)

    async def _sweep_advance(self, advance: SweepAdvance) -> bool:
        rows = await self._rows("SWEEP_ADVANCE", _advance_values(advance))
        return int(rows[0][0]) == 1

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        step = checkpoint.step
        rows = await self._rows(
            "SWEEP_CHECKPOINT",
            {
                **_advance_values(checkpoint.advance),
                "step_name": step.name,
                "output_json": step.output_json,
                "step_now_ms": step.now_ms,
            },
        )
        return int(rows[0][0]) == 1

    async def _sweep_finish(self, finish: SweepFinish) -> bool:
        f = finish.fence
        rows = await self._rows(
            "SWEEP_FINISH",
            {
                "job_id": f.job_id,
                "claims": f.claims,
                "worker_id": f.worker_id,
                "run_id": finish.run_id,
                "status": finish.status,
                "error": finish.error,
                "now_ms": finish.now_ms,
            },
        )
        return int(rows[0][0]) == 1

    async def _sweep_list(self, name: str | None, limit: int) -> list[SweepRecord]:
        rows = await self._read("SWEEP_LIST", {"name": name, "limit": limit})
        return [_sweep_record(r) for r in rows]

    # -- postings -------------------------------------------------------------------------------

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        """One autocommit statement (`POSTING_PUT`, see `statements.posting`): the fence, the
        posting's insert and its balance moves, together. Run again only when the fence held,
        nothing was inserted and no posting was seen: a transaction that committed the key after
        this statement's snapshot began (a fresh one reads it)."""
        f = put.fence
        lines_json = posting_lines_text(put.lines)
        values = {
            "job_id": f.job_id,
            "claims": f.claims,
            "worker_id": f.worker_id,
            "tenant_id": put.tenant_id or "",
            "key": put.key,
            "lines_json": lines_json,
            "now_ms": put.now_ms,
            "account": [line.account for line in put.lines],
            "currency": [line.currency for line in put.lines],
            "amount": [line.amount for line in put.lines],
        }
        for _ in range(5):
            rows = await self._rows("POSTING_PUT", values)
            held, written, _moved, job_id, stored_json, posted_at_ms = rows[0]
            if not held:
                return PostingPutAnswer("fence_lost", None)
            if written:
                record = PostingRecord(put.tenant_id, put.key, f.job_id, put.lines, put.now_ms)
                return PostingPutAnswer("applied", record)
            if job_id is not None:
                stored = PostingRecord(
                    put.tenant_id, put.key, job_id, posting_lines_of(stored_json), int(posted_at_ms)
                )
                if stored_json == lines_json:
                    return PostingPutAnswer("already_applied", stored)
                return PostingPutAnswer("conflict", stored)
        raise DriverError("a posting kept racing a posting of its key", detail=put.key)

    async def _posting_get(self, tenant_id: str | None, key: str) -> PostingRecord | None:
        rows = await self._read("POSTING_GET", {"tenant_id": tenant_id or "", "key": key})
        if not rows:
            return None
        job_id, lines_json, posted_at_ms = rows[0]
        return PostingRecord(
            tenant_id, key, job_id, posting_lines_of(lines_json), int(posted_at_ms)
        )

    async def _posting_balances(
        self, tenant_id: str | None, accounts: Sequence[str]
    ) -> list[BalanceRow]:
        rows = await self._read(
            "POSTING_BALANCES", {"tenant_id": tenant_id or "", "account": list(accounts)}
        )
        return [BalanceRow(a, c, int(d), int(cr)) for a, c, d, cr in rows]

    # -- consumers ------------------------------------------------------------------------------

    async def _consumer_cursor_get(self, name: str, tenant_id: str | None) -> ConsumerCursor | None:
        rows = await self._read("CONSUMER_CURSOR_GET", {"name": name, "tenant": tenant_id or ""})
        return _consumer(rows[0]) if rows else None

    async def _consumer_cursor_put(self, put: ConsumerPut) -> bool:
        rows = await self._rows("CONSUMER_CURSOR_PUT", consumer_put_values(put))
        return int(rows[0][0]) == 1

    async def _consumer_list(self, name: str | None, limit: int) -> list[ConsumerCursor]:
        rows = await self._read("CONSUMER_LIST", {"name": name, "limit": limit})
        return [_consumer(r) for r in rows]

    def consumer_cursor_put_sync(self, conn: Any, put: ConsumerPut) -> bool:
        """`consumer_cursor_put` inside the CALLER's open transaction on `conn` (a SQLAlchemy
        `Connection` or `Session`, a psycopg connection): the same statement, so it lands or
        not with the caller's commit, and a rollback takes it back with the caller's writes.
        Refused as the driver's put is, before anything is sent; never commits."""
        from jobs_pg.outbox import in_transaction_sync

        self.require("consumers", what="consumer_cursor_put_sync")
        check_consumer_put(put)
        stmt = self._q["CONSUMER_CURSOR_PUT"]
        raw = in_transaction_sync(conn)
        try:
            with psycopg.Cursor(raw) as cur:
                cur.execute(stmt.text, stmt.args(consumer_put_values(put)))
                row = cur.fetchone()
        except psycopg.Error as exc:
            raise translate(exc, self.schema, stmt.name) from exc
        return row is not None and int(row[0]) == 1

    async def consumer_cursor_put_async(self, conn: Any, put: ConsumerPut) -> bool:
        """`consumer_cursor_put_sync` on an async connection (a SQLAlchemy `AsyncConnection` or
        `AsyncSession`, a psycopg `AsyncConnection`), in the caller's open transaction."""
        from jobs_pg.outbox import in_transaction_async

        self.require("consumers", what="consumer_cursor_put_async")
        check_consumer_put(put)
        stmt = self._q["CONSUMER_CURSOR_PUT"]
        raw = await in_transaction_async(conn)
        try:
            async with psycopg.AsyncCursor(raw) as cur:
                await cur.execute(stmt.text, stmt.args(consumer_put_values(put)))
                row = await cur.fetchone()
        except psycopg.Error as exc:
            raise translate(exc, self.schema, stmt.name) from exc
        return row is not None and int(row[0]) == 1

    # -- webhooks -------------------------------------------------------------------------------
    # One statement per call (`statements/webhook.py`); a tenant travels as '' for None.

    async def _webhook_endpoint_put(self, put: WebhookEndpointPut) -> WebhookEndpoint:
        rows = await self._rows(
            "WEBHOOK_ENDPOINT_PUT",
            {
                "tenant_id": put.tenant_id or "",
                "endpoint": put.endpoint,
                "url": put.url,
                "now_ms": put.now_ms,
            },
        )
        return _webhook_endpoint(rows[0])

    async def _webhook_endpoint_get(
        self, tenant_id: str | None, endpoint: str
    ) -> WebhookEndpoint | None:
        rows = await self._read(
            "WEBHOOK_ENDPOINT_GET", {"tenant_id": tenant_id or "", "endpoint": endpoint}
        )
        return _webhook_endpoint(rows[0]) if rows else None

    async def _webhook_endpoint_list(self, limit: int) -> list[WebhookEndpoint]:
        rows = await self._read("WEBHOOK_ENDPOINT_LIST", {"limit": limit})
        return [_webhook_endpoint(r) for r in rows]

    async def _webhook_endpoint_enable(
        self, enable: WebhookEndpointEnable
    ) -> WebhookEndpoint | None:
        rows = await self._rows(
            "WEBHOOK_ENDPOINT_ENABLE",
            {
                "tenant_id": enable.tenant_id or "",
                "endpoint": enable.endpoint,
                "now_ms": enable.now_ms,
            },
        )
        return _webhook_endpoint(rows[0]) if rows else None

    async def _webhook_attempt_put(self, put: WebhookAttemptPut) -> WebhookAttemptAnswer:
        """One statement (`WEBHOOK_ATTEMPT_PUT`): the fence, the endpoint locked, the attempt
        recorded and the streak moved together; it answers the endpoint as moved, or as found
        when the claim's attempt was recorded before (a retried call), or nothing."""
        f = put.fence
        rows = await self._rows(
            "WEBHOOK_ATTEMPT_PUT",
            {
                "job_id": f.job_id,
                "claims": f.claims,
                "worker_id": f.worker_id,
                "tenant_id": put.tenant_id or "",
                "endpoint": put.endpoint,
                "event_id": put.event_id,
                "outcome": put.outcome,
                "status_code": put.status_code,
                "latency_ms": put.latency_ms,
                "excerpt": put.excerpt,
                "error": put.error,
                "disable_after": put.disable_after,
                "now_ms": put.now_ms,
            },
        )
        by_tag = {r[0]: _webhook_endpoint(r[1:]) for r in rows}
        after = by_tag.get("m") or by_tag.get("f")
        return WebhookAttemptAnswer(after is not None, after)

    async def _webhook_attempt_purge(self, before_ms: int, limit: int) -> int:
        rows = await self._rows("WEBHOOK_ATTEMPT_PURGE", {"before_ms": before_ms, "limit": limit})
        return int(rows[0][0])

    async def _webhook_attempt_list(self, params: WebhookAttemptListParams) -> list[WebhookAttempt]:
        rows = await self._read(
            "WEBHOOK_ATTEMPT_LIST",
            {
                "tenant_id": params.tenant_id or "",
                "endpoint": params.endpoint,
                "limit": params.limit,
            },
        )
        return [WebhookAttempt(r[0] or None, *r[1:]) for r in rows]

    # -- wake -----------------------------------------------------------------------------------

    async def wake_subscribe(
        self, queues: Sequence[str], on_wake: Callable[[str], None]
    ) -> WakeSubscription | None:
        """Hold ONE dedicated LISTEN session (not from the pool) delivering `queues`' wakes."""
        if not self._wake:
            return None
        from jobs_pg.wake import queue_wakes

        return self.listen(self.channel, queue_wakes(frozenset(queues), on_wake), self.send_probe)

    def listen(
        self,
        channel: str,
        deliver: Callable[[str], None],
        probe: Callable[[str], Awaitable[None]],
    ) -> PgWakeSubscription:
        """Hold ONE dedicated LISTEN session on `channel` (proven by `probe`, see `jobs_pg.wake`)
        handing its payloads to `deliver`; closed by the subscription's `close()` or this
        driver's."""
        from jobs_pg.wake import PgWakeSubscription

        sub = PgWakeSubscription(self, channel, deliver, probe)
        self._loops.get().subscriptions.add(sub)  # the session lives on the caller's loop
        sub.start()
        return sub

    def forget_subscription(self, sub: WakeSubscription) -> None:
        for here in self._loops.values():
            here.subscriptions.discard(sub)

    async def send_probe(self, payload: str, channel: str | None = None) -> None:
        """NOTIFY `payload` on `channel` (default: this schema's wake channel) through the pool
        (a wake's probe)."""
        await self._notify(channel or self.channel, payload)

    async def _notify(self, channel: str, payload: str) -> None:
        """`WAKE_PROBE` alone, one `Round` (its own transaction): a trailing wake, a probe."""
        stmt = self._q["WAKE_PROBE"]
        await self._alone(stmt, stmt.args({"channel": channel, "payload": payload}), False, None)


_Conn = psycopg.AsyncConnection[tuple[Any, ...]]
#: A pooled connection older than this is closed when it comes back (server-side memory, DNS).
POOL_MAX_LIFETIME_S: Final = 3600.0


class _Pool:
    """At most `max_size` connections; a caller needing one dials it itself when none is idle.

    No background task connects: during an outage every call fails at once with the server's
    own refusal (not after a pool-wide wait), and once the server is back the next call —
    including one that was already waiting for a free slot — dials a live connection. A broken
    or aged connection is closed when it comes back instead of being handed out again.
    """

    def __init__(
        self,
        conninfo: str,
        kwargs: dict[str, Any],
        *,
        max_size: int,
        timeout: float,
        on_connect: Callable[[_Conn], None] | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._kwargs = kwargs
        self.timeout = timeout
        self._on_connect = on_connect
        self._slots = asyncio.Semaphore(max_size)
        self._max_size = max_size
        self._idle: list[tuple[_Conn, float]] = []
        self._born: dict[int, float] = {}
        #: What the gathered rounds keep of each connection (`wire.Round`), dropped with it.
        self.sessions: dict[_Conn, Session] = {}
        self._closed = False

    async def getconn(self) -> _Conn:
        """A live-looking idle connection or a fresh one; PoolTimeout when no slot frees up."""
        if self._closed:
            raise psycopg.InterfaceError("the pool is closed")
        wait = self.timeout
        try:
            async with asyncio.timeout(wait):
                await self._slots.acquire()
        except TimeoutError:
            raise PoolTimeout(f"no free connection after {wait:.2f} sec") from None
        try:
            while self._idle:
                conn, _ = self._idle.pop()
                if not _stale(conn):
                    return conn
                await self._discard(conn)
            conn = await psycopg.AsyncConnection.connect(self._conninfo, **self._kwargs)
            self._born[id(conn)] = time.monotonic()
            if self._on_connect is not None:
                self._on_connect(conn)
            return conn
        except BaseException:
            self._slots.release()
            raise

    async def putconn(self, conn: _Conn) -> None:
        """Take a connection back: kept when idle and healthy, closed otherwise."""
        try:
            born = self._born.get(id(conn), 0.0)
            healthy = (
                not self._closed
                and not _stale(conn)
                and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                and time.monotonic() - born < POOL_MAX_LIFETIME_S
                # Over its size while `check` held the idle ones (calls meanwhile opened more).
                and len(self._born) <= self._max_size
            )
            if healthy:
                self._idle.append((conn, time.monotonic()))
            else:
                await self._discard(conn)
        finally:
            self._slots.release()

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[_Conn]:
        conn = await self.getconn()
        try:
            yield conn
        finally:
            await self.putconn(conn)

    async def check(self) -> None:
        """Close the idle connections the server no longer answers on. Calls meanwhile find
        none idle and open new ones: those checked that would take the pool past its size are
        closed too."""
        idle, self._idle = self._idle, []
        for conn, since in idle:
            try:
                await conn.execute("")
            except Exception:
                await self._discard(conn)
            else:
                if len(self._born) > self._max_size:
                    await self._discard(conn)
                else:
                    self._idle.append((conn, since))

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            await self._discard(conn)

    async def _discard(self, conn: _Conn) -> None:
        self._born.pop(id(conn), None)
        self.sessions.pop(conn, None)
        with contextlib.suppress(Exception):
            await conn.close()


def _stale(conn: _Conn) -> bool:
    """True when an idle connection cannot serve: closed, broken, or the server has spoken on it.

    An idle autocommit session receives nothing unasked; readable means the server ended it
    (a restart's "terminating connection", or EOF). One non-blocking poll, no round-trip.
    `poll`, not `select`: in a process holding over 1,024 descriptors `select` refuses the
    socket, which would read every connection as stale and dial anew on every call.
    """
    if conn.closed or conn.broken:
        return True
    try:
        fd = conn.pgconn.socket
        if _HAS_POLL:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


_HAS_POLL: Final = hasattr(select, "poll")


_BACKGROUND: set[asyncio.Task[None]] = set()


def _in_background(coro: Coroutine[Any, Any, None]) -> None:
    """Run `coro` in a task of its own, held until it ends (the loop keeps weak references)."""
    task = asyncio.get_running_loop().create_task(coro)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


def _abandon_loop(here: _LoopConns) -> None:
    """Close the sockets of a loop that is gone (it can no longer run the pool's close)."""
    if here.trails is not None:
        here.trails.abandon()
    here.pool = None
    here.hot = None
    for conn in list(here.conns):
        with contextlib.suppress(Exception):
            conn.pgconn.finish()


_A = TypeVar("_A")


def _in_call_order(
    job_ids: Sequence[str], first: Mapping[str, _A], again: Mapping[str, _A]
) -> list[_A]:
    """One answer per id of a bulk call: `first` at its first mention, `again` after."""
    seen: set[str] = set()
    out: list[_A] = []
    for job_id in job_ids:
        out.append(again[job_id] if job_id in seen else first[job_id])
        seen.add(job_id)
    return out


def _nack_columns(sel: Sequence[Nack], found: set[int]) -> dict[str, Any]:
    """`JOB_NACK`'s per-item columns. A park in `found` (by `id()`: its event is stored) goes
    `ready` at its `now_ms` and stores no wait; any other park with a wait stores it."""

    def waits(n: Nack) -> EventWait | None:
        return None if id(n) in found else n.wait

    return {
        "kind": [n.kind.value for n in sel],
        "now_ms": [n.now_ms for n in sel],
        "run_at_ms": [n.now_ms if id(n) in found else n.run_at_ms for n in sel],
        "error": [n.error for n in sel],
        "dead_letter": [n.dead_letter for n in sel],
        "progress_json": [n.progress_json for n in sel],
        "wait_event": [w.event if (w := waits(n)) else None for n in sel],
        "wait_match_json": [w.match_json if (w := waits(n)) else None for n in sel],
        "wait_since_ms": [w.since_ms if (w := waits(n)) else None for n in sel],
        "wait_tenant_id": [w.tenant_id if (w := waits(n)) else None for n in sel],
        "wait_until_ms": [w.until_ms if (w := waits(n)) else None for n in sel],
        "woken": [id(n) in found for n in sel],
        **_nack_attempt_columns(sel),
    }


# -- attempts --


def _nack_attempt_columns(sel: Sequence[Nack]) -> dict[str, Any]:
    """`JOB_NACK`'s per-item history columns: the ended claim's outcome and bounded error."""
    errors = [attempt_error(n.error) for n in sel]
    return {
        "a_outcome": [nack_attempt_outcome(n.kind, n.dead_letter).value for n in sel],
        "a_code": [e[0] for e in errors],
        "a_message": [e[1] for e in errors],
        "a_traceback": [e[2] for e in errors],
    }


def _history(raw: Any) -> tuple[AttemptRecord, ...]:
    """The `attempts` column (jsonb, read as Python values; NULL: none yet) as records."""
    if raw is None:
        return ()
    entries = json.loads(raw) if isinstance(raw, str) else raw
    return tuple(from_entry(e) for e in entries)


def _join_counts(after: Sequence[str], states: Mapping[str, str]) -> tuple[list[str], int]:
    """The dependencies of `after` still live (by `states`, read under their locks), and how
    many finished other than `completed` — an id naming no row among them."""
    live = [d for d in after if states.get(d) in _LIVE_VALUES]
    done = len(after) - len(live)
    return live, done - sum(1 for d in after if states.get(d) == JobState.COMPLETED.value)


def _join_state(cols: Sequence[Any]) -> JoinState | None:
    """A row's `join` from its (total, pending, failed, policy) columns; None: never joined."""
    total, pending, failed, policy = cols
    if total is None:
        return None
    return JoinState(total, pending, failed, JoinPolicy(policy))


def _record(row: dict[str, Any], rest: Sequence[Any]) -> JobRecord:
    """A `JobRecord` from its `RECORD_COLUMNS` (as a dict) and the `WAIT_COLUMNS` and
    `FLOW_COLUMNS` that follow them."""
    row["state"] = _STATES[row["state"]]
    event, match_json, since_ms, tenant_id, until_ms = rest[:5]
    parent_id, batch_id = rest[5:7]
    # All five are set together by a park that waits and cleared together.
    wait = None if event is None else EventWait(event, match_json, since_ms, tenant_id, until_ms)
    claimed_at_ms, attempts = rest[11:13]  # -- attempts --
    return JobRecord(
        **row,
        wait=wait,
        parent_id=parent_id,
        batch_id=batch_id,
        join=_join_state(rest[7:11]),
        claimed_at_ms=claimed_at_ms,
        attempts=_history(attempts),
    )


def _answered(rows: Sequence[tuple[Any, ...]], n: int) -> list[bool]:
    """Per item of `n`, whether a statement answering the ordinals that held named it."""
    held = {int(r[0]) for r in rows}
    return [i in held for i in range(1, n + 1)]


def consumer_put_values(put: ConsumerPut) -> dict[str, Any]:
    """`CONSUMER_CURSOR_PUT`'s parameters (the tenant of a cross-tenant consumer is '')."""
    f = put.fence
    return {
        "job_id": f.job_id,
        "claims": f.claims,
        "worker_id": f.worker_id,
        "name": put.name,
        "tenant": put.tenant_id or "",
        "source": put.source,
        "expect_json": put.expect_json,
        "cursor_json": put.cursor_json,
        "records": put.records,
        "lag": put.lag,
        "now_ms": put.now_ms,
    }


def _consumer(row: Sequence[Any]) -> ConsumerCursor:
    """An entry from its columns in `statements.consumer.RECORD_COLUMNS` order."""
    name, tenant, source, cursor_json, turns, records, lag, holder, job_id, updated = row
    return ConsumerCursor(
        name=name,
        tenant_id=tenant or None,
        source=source,
        cursor_json=cursor_json,
        turns=int(turns),
        records=int(records),
        lag=None if lag is None else int(lag),
        holder=holder,
        job_id=job_id,
        updated_at_ms=int(updated),
    )


def _webhook_endpoint(row: Sequence[Any]) -> WebhookEndpoint:
    """An endpoint from its columns in `statements.webhook.ENDPOINT_COLUMNS` order."""
    tenant, *rest = row
    return WebhookEndpoint(tenant or None, *rest)


def _sweep_record(row: Sequence[Any]) -> SweepRecord:
    """A ledger entry from its columns in `statements.sweep.RECORD_COLUMNS` order."""
    return SweepRecord(*row)


def _object(match_json: str) -> Mapping[str, object]:
    """A wait's match as an object (`check_wait` refused any other JSON)."""
    match: object = loads(match_json)
    if not isinstance(match, dict):
        raise DriverError("a stored wait's match is not a JSON object", detail=match_json[:80])
    return match


def _live_key_taken(exc: JobsError) -> bool:
    """The statement failed because a row it made live met a live row holding its key."""
    cause = exc.__cause__
    return isinstance(cause, psycopg.errors.UniqueViolation) and (
        _constraint(cause) == "jobs_live_key"
    )


class _EnqueueColumns:
    """An `enqueue_many` batch as columns, each read once: from a `NewJobs` without building
    a `NewJob` a record (the facade's batches), or from a list of records. `shared` is a
    record whose `SHARED_COLUMNS` fields every record holds, None when they differ; `acts_for`
    is None when every record's is None (the statement then reads NULL for each)."""

    __slots__ = ("acts_for", "ids", "input_jsons", "jobs", "keys", "run_ids", "shared")

    def __init__(self, jobs: Sequence[NewJob]) -> None:
        self.jobs = jobs
        acts: Sequence[str | None] | None
        if type(jobs) is NewJobs:
            self.ids: Sequence[str] = list(jobs.ids)
            self.run_ids: Sequence[str] = list(jobs.run_ids)
            self.keys: Sequence[str] = jobs.keys
            self.input_jsons: Sequence[str] = jobs.input_jsons
            self.shared: NewJob | None = jobs.shared
            acts = jobs.acts_for
            if acts is None and jobs.shared.acts_for is not None:
                acts = [jobs.shared.acts_for] * len(self.ids)
        else:
            self.ids = [j.id for j in jobs]
            self.run_ids = [j.run_id for j in jobs]
            self.keys = [j.idempotency_key for j in jobs]
            self.input_jsons = [j.input_json for j in jobs]
            first = _shared_fields(jobs[0])
            self.shared = jobs[0] if all(_shared_fields(j) == first for j in jobs) else None
            acts = [j.acts_for for j in jobs]
        self.acts_for = None if acts is None or all(a is None for a in acts) else acts

    def namespace_key(self) -> Callable[[int], Any]:
        """A sort key of positions that orders records as `_namespace` orders them."""
        if self.shared is None:
            jobs = self.jobs
            return lambda i: _namespace(jobs[i])
        # One name and tenant for all: the keys alone order them.
        return self.keys.__getitem__


def _namespace(job: NewJob) -> tuple[str, str, str]:
    """The idempotency namespace, ordered as the statements order it (code points)."""
    return (job.name, job.tenant_id or "", job.idempotency_key)


def _restartable(exc: JobsError) -> bool:
    """A failed transaction that, started over, can succeed: a conflict or an id race."""
    if isinstance(exc, DriverConflictError):
        return True
    cause = exc.__cause__
    return isinstance(cause, psycopg.errors.UniqueViolation) and _constraint(cause) == "jobs_pkey"


def _raced(exc: psycopg.Error, conn: psycopg.AsyncConnection[Any]) -> bool:
    """An enqueue outside a transaction lost its id to an insert that committed between its
    snapshot and its write: nothing of it was written, and run again a fresh snapshot sees
    that id and answers it deduped. Inside a transaction the error aborted it all."""
    return (
        isinstance(exc, psycopg.errors.UniqueViolation)
        and _constraint(exc) == "jobs_pkey"
        and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    )


def _constraint(exc: psycopg.Error) -> str | None:
    diag = getattr(exc, "diag", None)
    name = getattr(diag, "constraint_name", None)
    return name if isinstance(name, str) else None


def translate(exc: BaseException, schema: str, statement: str | None = None) -> JobsError:
    """`classify`, but a missing table says the jobs schema needs its migrations; `statement`
    (a statement's name) is named in the message of a server error."""
    if statement is not None and isinstance(exc, psycopg.Error) and exc.sqlstate is not None:
        exc.add_note(_STATEMENT_NOTE + statement)
    if isinstance(exc, _SCHEMA_MISSING):
        return DriverSchemaMissingError(
            f"the jobs schema {schema!r} is not installed or is behind this version"
            " (run `ujobs db upgrade --driver URL` or `alembic upgrade head`)",
            detail=_reason(exc),
        )
    return classify(exc)


#: What a statement of ours meets on a schema never installed (its tables, its functions, the
#: schema itself) or behind this version (a column or function a later migration adds). Every
#: statement is tested against the newest schema, so in use these mean the schema, not the SQL.
_SCHEMA_MISSING: Final = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedColumn,
    psycopg.errors.UndefinedFunction,
    psycopg.errors.InvalidSchemaName,
)


def classify(exc: BaseException) -> JobsError:
    """The typed error for a psycopg or pool failure, by the server's SQLSTATE when it gave one.

    Out of reach (no SQLSTATE, class 08, 57P01–57P03, 53300): `X_DRIVER_UNAVAILABLE`. Deadlock
    or serialization failure (40P01, 40001) the retries did not clear: `X_DRIVER_CONFLICT`. A
    cancelled statement (57014: `statement_timeout`, `pg_cancel_backend`): `X_DRIVER_CANCELLED`.
    A data exception (class 22) or program limit (class 54): `X_DRIVER_LIMIT`, naming the
    fields behind the column or index the server named. Anything else: `X_DRIVER_ERROR`. Every
    message carries the SQLSTATE and never a connection string.
    """
    state = getattr(exc, "sqlstate", None)
    if not isinstance(state, str):
        if isinstance(exc, _UNAVAILABLE):
            return DriverUnavailableError(detail=_reason(exc))
        return DriverError(detail=f"{type(exc).__name__}: {_reason(exc)}")
    notes = [n for n in getattr(exc, "__notes__", ()) if n.startswith(_STATEMENT_NOTE)]
    where = f" in {notes[-1].removeprefix(_STATEMENT_NOTE)}" if notes else ""
    why = f"SQLSTATE {state}{where}: {_reason(exc)}"
    if state.startswith("08") or state in _GONE_STATES:
        return DriverUnavailableError(detail=why)
    if state in _CONFLICT_STATES:
        return DriverConflictError(detail=why)
    if state == "57014":
        return DriverCancelledError(detail=why)
    if state.startswith(("22", "54")):
        fields = _fields(exc)
        return DriverLimitError(detail=f"{fields}; {why}" if fields else why)
    return DriverError(detail=why)


def _fields(exc: BaseException) -> str | None:
    """The record fields behind the column, constraint or index a server error names."""
    diag = getattr(exc, "diag", None)
    column = getattr(diag, "column_name", None)
    if isinstance(column, str):
        return column
    named = _constraint(exc) if isinstance(exc, psycopg.Error) else None
    if named is None:
        # "index row size … for index "jobs_live_key"": the index is only in the message.
        text = str(exc)
        named = next((i for i in _INDEX_FIELDS if f'"{i}"' in text), None)
    return _INDEX_FIELDS.get(named) if named is not None else None


def _reason(exc: BaseException) -> str:
    """A one-line reason that never repeats a connection string (it may hold a password)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "://" in text or "password" in text.lower():
        return type(exc).__name__
    return text


__all__ = ["STATEMENTS", "PgDriver", "classify", "translate", "unique_runs", "wake_channel"]


def _advance_values(advance: SweepAdvance) -> dict[str, Any]:
    """SWEEP_ADVANCE's parameters (and SWEEP_CHECKPOINT's advance)."""
    f = advance.fence
    return {
        "job_id": f.job_id,
        "claims": f.claims,
        "worker_id": f.worker_id,
        "run_id": advance.run_id,
        "batch": advance.batch,
        "span": advance.span,
        "rows": advance.rows,
        "errors": advance.errors,
        "cursor_json": advance.cursor_json,
        "now_ms": advance.now_ms,
    }
