"""The `JobDriver` contract: every operation a backend implements, and the checks all share.

Methods are named entity first, verb second, alphabetical inside a family. Each public method
validates its arguments here, once for every backend, then calls the driver's `_`-prefixed
implementation; a refusal therefore happens before anything is written, identically everywhere.
The parity suite (`jobs_core.testing`) pins what each method must do.

The CORE job family is what every driver implements (its `_` methods are abstract): enqueue
(`job_enqueue`, `job_enqueue_many`), claim, ack, nack, heartbeat, progress (`job_*`), get
(`job_get_many`) and demand (`queue_demand`). Every other family is OPTIONAL, declared by a flag
of `Capabilities` (`capabilities()`): operator (cancel, requeue, promote, remove, listing,
`queue_stats`), pauses (`pause_*`), workers (the registry, `worker_*`), counters
(`counter_*`, moved by the settling writes), retention (`job_purge`), steps and events
(`step_*`, `event_*`), leases (`lease_*`), tasks (`task_*`), flows (`join_enqueue`,
`job_watch`), sweeps (`sweep_*`), postings (`posting_*`), consumers (`consumer_*`), webhooks
(`webhook_*`), wake (`wake_subscribe`). A public
method of a family the driver does not declare refuses with `X_DRIVER_CAPABILITY_MISSING`
naming the family, before anything else; so does whatever needs the family (`require`). A
driver written for the core family keeps working, unchanged, as families are added.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from types import TracebackType
from typing import ClassVar, Final, Literal, Protocol, TypeAlias, get_args

from jobs_core.errors import (
    BatchTooLargeError,
    CapabilityMissingError,
    ClaimQueuesEmptyError,
    JobNotFoundError,
    LedgerAccountInvalidError,
    LedgerAmountInvalidError,
    LedgerCurrencyInvalidError,
    LedgerLinesInvalidError,
    LedgerUnbalancedError,
    NotRequeueableError,
    RecordInvalidError,
    RequeueDuplicateError,
    RequeueUnwoundError,
    shown,
)
from jobs_core.ids import FreshIds
from jobs_core.jsonform import check_text, unstorable, utf8_length
from jobs_core.records import (
    SWEEP_KINDS,
    WEBHOOK_OUTCOMES,
    Ack,
    BalanceRow,
    CancelAnswer,
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
    JobListParams,
    JobPage,
    JobRecord,
    JobSlice,
    JoinEnqueue,
    JoinEnqueueAnswer,
    JoinPolicy,
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
    PostingLine,
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
from jobs_core.semantics import decode_cursor, encode_cursor
from jobs_core.states import JobState

#: The version of this contract (the `_` methods, their families and `Capabilities`), printed by
#: the parity suite. It grows when a `_` method's contract changes or a family is added; a
#: driver that passed the suite of one version passes that of the next unless the change names
#: a family it declares.
CONTRACT_VERSION: Final = 8
#: The core family's name: what every driver implements, never a flag.
CORE_FAMILY: Final = "jobs"
#: The most records one `job_enqueue_many` call accepts.
MAX_ENQUEUE_BATCH: Final = 10_000
#: Records per statement / script call inside `job_enqueue_many`.
ENQUEUE_CHUNK: Final = 1_000
#: The most jobs one claim may ask for.
MAX_CLAIM_LIMIT: Final = 1_000
PRIORITY_MIN: Final = 0
PRIORITY_MAX: Final = 100
MAX_ATTEMPTS_LIMIT: Final = 1_000
#: Times stay below 2**42 ms (year 2109), so a Redis score can pack priority beside them.
MAX_TIME_MS: Final = 2**42 - 1
MAX_LEASE_MS: Final = 7 * 24 * 3600 * 1000
#: Names, queues, tenants, ids and worker ids: at most this many UTF-8 bytes. Limits are in bytes,
#: not characters, so that no backend's own limit can be reached: the widest Postgres index row
#: (name, tenant, key) stays far below btree's 2,704 bytes.
MAX_NAME_BYTES: Final = 200
#: Idempotency keys: at most this many UTF-8 bytes.
MAX_KEY_BYTES: Final = 1_024
#: The most rows one `job_purge` call removes (and counter rows one `counter_fold` changes).
MAX_PURGE_LIMIT: Final = 10_000
#: The most rows one `job_list` page holds.
MAX_LIST_LIMIT: Final = 500
#: The most rows one `job_list` call may examine (`JobListParams.scan`; default `LIST_SCAN`).
MAX_LIST_SCAN: Final = 10_000
#: The most ids one bulk call (`job_cancel_many`, `job_promote`, `job_remove`,
#: `job_requeue_many`) names.
MAX_BULK_IDS: Final = 1_000
#: The most holders one lease key may allow (`LeaseTake.limit`).
MAX_LEASE_LIMIT: Final = 10_000
#: Lease keys: at most this many UTF-8 bytes (a job name and an idempotency-sized key fit).
MAX_LEASE_KEY_BYTES: Final = 1_400
#: The most distinct jobs one join waits for (`JoinEnqueue.after`, `Nack.join`).
MAX_JOIN_IDS: Final = 10_000
#: The most items one `lease_*` batch call names.
MAX_LEASE_BATCH: Final = 1_000
#: The most tasks one `task_arm` / `task_marks` call names.
MAX_TASK_BATCH: Final = 1_000
#: A sweep's cursor (`SweepAdvance.cursor_json`): at most this many UTF-8 bytes of JSON text.
MAX_SWEEP_CURSOR_BYTES: Final = 8_192
#: A sweep's declaration checksum: at most this many bytes.
MAX_SWEEP_CHECKSUM_BYTES: Final = 128
#: The most entries one `sweep_list` call answers.
MAX_SWEEP_LIST: Final = 1_000
#: Row counts a sweep records stay below this (a Redis number is exact below 2**53).
MAX_SWEEP_ROWS: Final = 2**53 - 1
# -- postings --
#: The most lines one posting holds.
MAX_POSTING_LINES: Final = 100
#: An amount's magnitude, in minor units, stays at or below this: it fits a Postgres bigint and
#: travels to Redis as decimal text, so no store rounds it. Balances are kept exact at any size
#: (Postgres numeric, Redis decimal text), never as floats.
MAX_POSTING_AMOUNT: Final = 10**18 - 1
#: The most accounts one `posting_balances` call names.
MAX_BALANCE_ACCOUNTS: Final = 1_000
#: An account: ASCII letters, digits and `_ . : / -`, starting with a letter or digit, at most
#: 200 characters — no space, markup, quote, control character or anything a terminal acts on.
ACCOUNT_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,199}")
#: A currency: an ISO 4217 code (`EUR`) or a longer code of your own (`USDC`, `POINTS`): 3 to
#: 12 capital letters and digits, starting with a letter.
CURRENCY_PATTERN: Final = re.compile(r"[A-Z][A-Z0-9]{2,11}")
# -- consumers --
#: A consumer's cursor (`ConsumerPut.cursor_json`, `expect_json`): at most this many UTF-8 bytes.
MAX_CONSUMER_CURSOR_BYTES: Final = 8_192
#: The most records one consumer turn hands its handler (`ConsumerPut.records`).
MAX_CONSUMER_BATCH: Final = 10_000
#: The most entries one `consumer_list` call answers.
MAX_CONSUMER_LIST: Final = 1_000
# -- webhooks --
#: A webhook endpoint's URL: at most this many UTF-8 bytes.
MAX_WEBHOOK_URL_BYTES: Final = 2_048
#: A webhook attempt's response excerpt: at most this many UTF-8 bytes.
MAX_WEBHOOK_EXCERPT_BYTES: Final = 1_024
#: The longest failure streak an endpoint may be given before it is disabled.
MAX_WEBHOOK_DISABLE_AFTER: Final = 10_000
#: The longest attempt a webhook records (a day, in ms).
MAX_WEBHOOK_LATENCY_MS: Final = 86_400_000
#: The most endpoints or attempts one `webhook_*_list` call answers.
MAX_WEBHOOK_LIST: Final = 1_000
#: A W3C trace context header: version 00, a trace id, a parent span id, flags.
_TRACEPARENT: Final = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


#: An optional family: a flag of `Capabilities`.
Family: TypeAlias = Literal[
    "wake",
    "operator",
    "pauses",
    "workers",
    "counters",
    "retention",
    "steps",
    "events",
    "leases",
    "tasks",
    "flows",
    "sweeps",
    "postings",
    "consumers",
    "webhooks",
]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """The optional families a driver offers beyond the core job family; read by everything that
    needs one (the worker, the operator, the scheduler, the suite). Each flag defaults to False:
    a driver declares only what it implements, and the parity suite walks only what it declares.
    """

    #: `wake_subscribe` delivers enqueue wake-ups across processes.
    wake: bool = False
    #: The operator family (`job_cancel_many`, `job_list`, `job_promote`, `job_remove`,
    #: `job_requeue_many`, `queue_stats`): listing, steering and counting jobs.
    operator: bool = False
    #: The pause family (`pause_add`, `pause_list`, `pause_remove`), honoured by the claim.
    pauses: bool = False
    #: The worker registry (`worker_beat`, `worker_forget`, `worker_list`, a claim's `beat`).
    workers: bool = False
    #: The counter family (`counter_fold`, `counter_read`), moved by every settling write.
    counters: bool = False
    #: Retention (`job_purge`): the worker removes finished rows once their time is up.
    retention: bool = False
    #: The step family (`step_list`, `step_put`): durable steps and sleeps.
    steps: bool = False
    #: The event family (`event_publish`, `event_find`, `event_purge`, waits on PARK).
    events: bool = False
    #: The lease family (`lease_*`): fleet-wide concurrency, rate limits, locks, a leader.
    leases: bool = False
    #: The task family (`task_*`): the scheduler's durable watermarks and its fenced fires.
    tasks: bool = False
    #: The flow family (`join_enqueue`, `job_watch`, a PARK nack's `join`, `NewJob.parent_id`
    #: and `batch_id`, the listing's filters on them): rows that wait for other rows to finish,
    #: released by the very write that finishes the last of them; watched rows announced.
    flows: bool = False
    #: The sweep ledger (`sweep_start`, `sweep_advance`, `sweep_checkpoint`, `sweep_finish`,
    #: `sweep_list`; `sweep_checkpoint` also needs `steps`): what
    #: the factories (`backfill()`, `import_rows()`, `export_rows()`) swept, keyed by run.
    sweeps: bool = False
    # -- postings --
    #: The posting ledger (`posting_put`, `posting_get`, `posting_balances`): `ledger()`'s
    #: balanced postings, one per (tenant, key), written fenced on the posting job's claim.
    postings: bool = False
    # -- consumers --
    #: Consumer cursors (`consumer_cursor_get`, `consumer_cursor_put`, `consumer_list`): where
    #: each `consumer()` stands in its source, moved by its turns, fenced on the turn's claim.
    consumers: bool = False
    #: The webhook ledger (`webhook_endpoint_*`, `webhook_attempt_*`): the endpoints `webhook()`
    #: sends to, their failure streaks, and every attempt, recorded fenced on its claim and
    #: purged by age (`webhook_attempt_purge`).
    webhooks: bool = False

    def declared(self) -> frozenset[str]:
        """Every family these capabilities declare, the core `jobs` family included."""
        return frozenset({CORE_FAMILY, *(f for f in OPTIONAL_FAMILIES if getattr(self, f))})


#: Every optional family, in `Capabilities`' order.
OPTIONAL_FAMILIES: Final[tuple[Family, ...]] = get_args(Family)


class WakeSubscription(Protocol):
    """A live wake channel. The poll stays the guarantee; this only shortens the wait."""

    def is_live(self) -> bool:
        """True once a probe has crossed the channel and it has not dropped since."""
        ...

    async def close(self) -> None: ...


class JobDriver(abc.ABC):
    """A store of jobs. Every method is async; every time comes from the caller.

    A backend implements the core family's `_`-prefixed abstract methods below, and the `_`
    methods of each optional family it declares in `capabilities()` (each docstring is its
    contract; `jobs_core.testing` pins them against a reference model, walking the declared
    families only), plus optionally `open`, `close`, `describe`, `migrate` and
    `wake_subscribe`. The public methods have already checked every argument (types, ranges,
    byte limits, JSON text) and the family's declaration when a `_` method runs, so an
    implementation never re-validates and never sees a refused record.

    Threads and loops: the async callers' event loop calls a driver, and so does the loop of
    `Jobs.enqueue_sync`'s portal — a private event loop on one daemon thread, which runs every
    sync caller's calls (from any number of threads) interleaved on that one loop. A driver
    used from both therefore sees calls from two threads at once: in-process state needs a
    thread lock (an asyncio lock is not enough), and anything bound to one event loop (a
    connection pool) must not be shared across loops.

    Plugging into `ujobs`: a distribution declares an entry point in the `ujobs.drivers` group,
    named after its URL scheme, pointing at a `from_url(url: str) -> JobDriver` callable that
    answers a new, unopened driver (`jobs_core.urls.driver_from_url` loads it).
    """

    #: Whether `_job_enqueue_many` takes a batch as it came (a `NewJobs`, read by its
    #: columns); False: it is handed a list of `NewJob` built from it.
    enqueue_columns: ClassVar[bool] = False

    def capabilities(self) -> Capabilities:
        """The optional families this driver implements (none: the core job family alone)."""
        return Capabilities()

    def require(self, *families: Family, what: str) -> None:
        """Refuse with `X_DRIVER_CAPABILITY_MISSING`, naming the first of `families` this driver
        does not declare, unless it declares them all; `what` says what needs them."""
        caps = self.capabilities()
        for family in families:
            if not getattr(caps, family):
                raise CapabilityMissingError(
                    f"{self.describe()} does not declare the {family} family, which {what} needs",
                    detail=family,
                )

    async def open(self) -> None:  # noqa: B027 - optional hook, most drivers connect lazily
        """Connect; idempotent. Methods open lazily, so calling it is optional."""

    async def close(self) -> None:  # noqa: B027 - optional hook, a memory store holds nothing
        """Release connections; idempotent. A store living in this process (memory, or a
        throwaway test store) may drop its rows here: the parity suite's factory relies on
        leaving the context emptying what it stored."""

    async def __aenter__(self) -> JobDriver:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def describe(self) -> str:
        """A one-line description for people, with any password masked."""
        return type(self).__name__

    async def migrate(self) -> str | None:
        """Install or upgrade the store's schema to this version; idempotent. Answers one line
        for people (created, upgraded from → to, or current), or None: no schema to keep."""
        return None

    # -- counters -------------------------------------------------------------------------------
    # Optional: a driver offering them says `counters=True` in `capabilities()`.

    async def counter_fold(self, now_ms: int, limit: int) -> int:
        """Fold old minute buckets into hour buckets, then drop expired hour buckets; answers
        how many buckets it folded or dropped (at most `limit`: fewer means nothing is left)."""
        self.require("counters", what="counter_fold")
        _check_time(now_ms, "now_ms")
        _check_int(limit, "limit", 1, MAX_PURGE_LIMIT)
        return await self._counter_fold(now_ms, limit)

    async def counter_read(self, params: CounterReadParams) -> list[CounterRow]:
        """The counter buckets starting in `[since_ms, until_ms)`, by (name, queue, bucket,
        width)."""
        self.require("counters", what="counter_read")
        _check_time(params.since_ms, "since_ms")
        _check_time(params.until_ms, "until_ms")
        for what, values in (("names", params.names), ("queues", params.queues)):
            if values is not None:
                for v in values:
                    _check_str(v, what)
                if not values:
                    return []
        if params.since_ms >= params.until_ms:
            return []
        rows = await self._counter_read(params)
        return sorted(rows, key=lambda r: (r.name, r.queue, r.bucket_ms, r.width_ms))

    # -- events -------------------------------------------------------------------------------
    # Optional: a driver offering them says `events=True` in `capabilities()`.

    async def event_find(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        """The oldest unexpired event `wait` matches: for its tenant (or every tenant),
        published in `[since_ms, until_ms)`."""
        self.require("events", what="event_find")
        check_wait(wait)
        _check_time(now_ms, "now_ms")
        return await self._event_find(wait, now_ms)

    async def event_publish(self, event: EventRecord) -> int:
        """Store `event` (unless its id is stored: then 0) and wake every parked run whose wait
        it matches — of its tenant only, unless it is for every tenant; answers how many."""
        self.require("events", what="event_publish")
        _check_str(event.id, "id")
        _check_str(event.name, "name")
        check_text(event.data_json, "data_json")
        _check_time(event.published_at_ms, "published_at_ms")
        _check_time(event.expires_at_ms, "expires_at_ms")
        if event.tenant_id is not None:
            _check_str(event.tenant_id, "tenant_id")
        if not isinstance(event.all_tenants, bool):
            raise RecordInvalidError("must be a bool", detail="all_tenants")
        if event.all_tenants and event.tenant_id is not None:
            raise RecordInvalidError(
                "an event for every tenant names no tenant (tenant_id None)", detail="tenant_id"
            )
        return await self._event_publish(event)

    async def event_purge(self, now_ms: int, limit: int) -> int:
        """Delete up to `limit` expired events (`expires_at_ms <= now_ms`); answers how many."""
        self.require("events", what="event_purge")
        _check_time(now_ms, "now_ms")
        _check_int(limit, "limit", 1, MAX_PURGE_LIMIT)
        return await self._event_purge(now_ms, limit)

    # -- flows ----------------------------------------------------------------------------------
    # Optional: a driver offering them says `flows=True` in `capabilities()`.

    async def join_enqueue(self, items: Sequence[JoinEnqueue]) -> list[JoinEnqueueAnswer]:
        """Enqueue each job to wait, parked, until every job of its `after` finished; an item
        naming an unknown dependency is refused (`missing`) and writes nothing."""
        self.require("flows", what="join_enqueue")
        if len(items) > MAX_ENQUEUE_BATCH:
            raise BatchTooLargeError(detail=f"{len(items)} > {MAX_ENQUEUE_BATCH}")
        for item in items:
            check_new_job(item.job)
            check_join_ids(item.after, "after")
            if not isinstance(item.policy, JoinPolicy):
                raise RecordInvalidError("must be a JoinPolicy", detail="policy")
        if not items:
            return []
        return await self._join_enqueue(items)

    async def join_pending(self, job_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """For each of these rows parked on a join, the dependencies it still waits for (what
        `ctx.step.gather` reads to refuse a wait that would close a cycle). Reads only."""
        self.require("flows", what="join_pending")
        _check_ids(job_ids)
        if not job_ids:
            return {}
        return await self._join_pending(job_ids)

    async def job_watch(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """Mark these rows watched (their finish is announced to `finish_subscribe`) and answer
        them as `job_get_many` does, in one atomic step."""
        self.require("flows", what="job_watch")
        _check_ids(job_ids)
        if not job_ids:
            return {}
        return await self._job_watch(job_ids)

    async def finish_subscribe(self, on_finish: Callable[[str], None]) -> WakeSubscription | None:
        """Start delivering the id of every WATCHED row that finishes (any path) to
        `on_finish`; None when unsupported (a waiter then polls). Delivery is a hint: a waiter
        reads the row again, and keeps a bounded poll as its guarantee."""
        return None

    # -- sweeps ---------------------------------------------------------------------------------
    # Optional: a driver offering the ledger says `sweeps=True` in `capabilities()`. Every
    # write is fenced on the claim of the run it records (as `step_put` is): a run that lost its
    # claim writes nothing, and neither does a claim of another run.

    async def sweep_advance(self, advance: SweepAdvance) -> bool:
        """Record batches `advance.batch - advance.span + 1` to `advance.batch` of a running
        entry, once; answers whether it moved."""
        self.require("sweeps", what="sweep_advance")
        _check_fence(advance.fence)
        _check_str(advance.run_id, "run_id")
        _check_int(advance.batch, "batch", 1, MAX_SWEEP_ROWS)
        _check_int(advance.span, "span", 1, advance.batch)
        _check_int(advance.rows, "rows", 0, MAX_SWEEP_ROWS)
        _check_int(advance.errors, "errors", 0, MAX_SWEEP_ROWS)
        _check_sweep_cursor(advance.cursor_json)
        _check_time(advance.now_ms, "now_ms")
        return await self._sweep_advance(advance)

    async def sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        """Record a batch's step and its advance together, fenced once (see `_sweep_checkpoint`);
        answers whether the fence held for the run (the step then recorded)."""
        self.require("steps", "sweeps", what="sweep_checkpoint")
        step, advance = checkpoint.step, checkpoint.advance
        check_step_put(step)
        if step.fence != advance.fence:
            raise RecordInvalidError("the step and the advance share one fence", detail="fence")
        _check_str(advance.run_id, "run_id")
        _check_int(advance.batch, "batch", 1, MAX_SWEEP_ROWS)
        _check_int(advance.span, "span", 1, advance.batch)
        _check_int(advance.rows, "rows", 0, MAX_SWEEP_ROWS)
        _check_int(advance.errors, "errors", 0, MAX_SWEEP_ROWS)
        _check_sweep_cursor(advance.cursor_json)
        _check_time(advance.now_ms, "now_ms")
        return await self._sweep_checkpoint(checkpoint)

    async def sweep_finish(self, finish: SweepFinish) -> bool:
        """End a running entry, `completed` or `failed` with its code; answers whether it did."""
        self.require("sweeps", what="sweep_finish")
        _check_fence(finish.fence)
        _check_str(finish.run_id, "run_id")
        if finish.status not in ("completed", "failed"):
            raise RecordInvalidError("must be 'completed' or 'failed'", detail="status")
        if finish.status == "completed" and finish.error is not None:
            raise RecordInvalidError("a completed sweep carries no error", detail="error")
        if finish.status == "failed":
            _check_str(finish.error, "error")
        _check_time(finish.now_ms, "now_ms")
        return await self._sweep_finish(finish)

    async def sweep_list(self, name: str | None, limit: int) -> list[SweepRecord]:
        """The ledger's entries (of declaration `name`, or all), newest first; at most `limit`."""
        self.require("sweeps", what="sweep_list")
        if name is not None:
            _check_str(name, "name")
        _check_int(limit, "limit", 1, MAX_SWEEP_LIST)
        rows = await self._sweep_list(name, limit)
        return sorted(rows, key=lambda r: (r.started_at_ms, r.run_id), reverse=True)[:limit]

    async def sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        """Open or resume run `start.run_id`'s entry, unless a completed run of the same sweep
        blocks it (see `_sweep_start`)."""
        self.require("sweeps", what="sweep_start")
        _check_fence(start.fence)
        _check_str(start.run_id, "run_id")
        _check_str(start.name, "name")
        _check_str(start.scope, "scope")
        _check_str(start.environment, "environment")
        if start.kind not in SWEEP_KINDS:
            raise RecordInvalidError(f"must be one of {', '.join(SWEEP_KINDS)}", detail="kind")
        _check_str(start.checksum, "checksum", MAX_SWEEP_CHECKSUM_BYTES)
        if start.expected is not None:
            _check_int(start.expected, "expected", 0, MAX_SWEEP_ROWS)
        _check_time(start.now_ms, "now_ms")
        return await self._sweep_start(start)

    # -- postings -------------------------------------------------------------------------------
    # Optional: a driver offering the posting ledger says `postings=True` in `capabilities()`.
    # A posting is written fenced on the claim of the job whose idempotency key is its key, so
    # it lands only while that run holds its claim, and at most once per (tenant, key).

    async def posting_balances(
        self, tenant_id: str | None, accounts: Sequence[str]
    ) -> list[BalanceRow]:
        """The totals of `accounts` in `tenant_id`'s ledger (None: the cross-tenant one), one row
        per account and currency it holds, by (account, currency); an account never posted to
        answers no row."""
        self.require("postings", what="posting_balances")
        if tenant_id is not None:
            _check_str(tenant_id, "tenant_id")
        check_accounts(accounts)
        rows = await self._posting_balances(tenant_id, accounts)
        return sorted(rows, key=lambda r: (r.account, r.currency))

    async def posting_get(self, tenant_id: str | None, key: str) -> PostingRecord | None:
        """The posting stored under `key` in `tenant_id`'s ledger, or None."""
        self.require("postings", what="posting_get")
        if tenant_id is not None:
            _check_str(tenant_id, "tenant_id")
        _check_str(key, "key", MAX_KEY_BYTES)
        return await self._posting_get(tenant_id, key)

    async def posting_put(self, put: PostingPut) -> PostingPutAnswer:
        """Post `put.lines` under `put.key` once, fenced (see `_posting_put`). Lines that are
        not balanced per currency, or hold a refused account, currency or amount, are refused
        with their `X_LEDGER_*` code before anything is read or written."""
        self.require("postings", what="posting_put")
        _check_fence(put.fence)
        if put.tenant_id is not None:
            _check_str(put.tenant_id, "tenant_id")
        _check_str(put.key, "key", MAX_KEY_BYTES)
        lines = check_posting_lines(put.lines)
        _check_time(put.now_ms, "now_ms")
        return await self._posting_put(
            PostingPut(put.fence, put.tenant_id, put.key, lines, put.now_ms)
        )

    # -- webhooks -------------------------------------------------------------------------------
    # Optional: a driver offering the endpoint ledger says `webhooks=True` in `capabilities()`.
    # Endpoints are keyed by (tenant, endpoint): one tenant never reads or moves another's.

    async def webhook_attempt_list(self, params: WebhookAttemptListParams) -> list[WebhookAttempt]:
        """One endpoint's recorded attempts, newest first (`at_ms`, then job id and claims
        descending); at most `params.limit`."""
        self.require("webhooks", what="webhook_attempt_list")
        _check_tenant(params.tenant_id)
        _check_str(params.endpoint, "endpoint")
        _check_int(params.limit, "limit", 1, MAX_WEBHOOK_LIST)
        rows = await self._webhook_attempt_list(params)
        rows.sort(key=lambda a: (a.at_ms, a.job_id, a.claims), reverse=True)
        return rows[: params.limit]

    async def webhook_attempt_purge(self, before_ms: int, limit: int) -> int:
        """Delete up to `limit` recorded attempts made before `before_ms` (`at_ms < before_ms`),
        oldest first; answers how many went. Endpoints and their streaks are never touched."""
        self.require("webhooks", what="webhook_attempt_purge")
        _check_time(before_ms, "before_ms")
        _check_int(limit, "limit", 1, MAX_PURGE_LIMIT)
        return await self._webhook_attempt_purge(before_ms, limit)

    async def webhook_attempt_put(self, put: WebhookAttemptPut) -> WebhookAttemptAnswer:
        """Record one attempt under its claim and move its endpoint's failure streak, in one
        fenced write (see `_webhook_attempt_put`)."""
        self.require("webhooks", what="webhook_attempt_put")
        check_webhook_attempt(put)
        return await self._webhook_attempt_put(put)

    async def webhook_endpoint_enable(
        self, enable: WebhookEndpointEnable
    ) -> WebhookEndpoint | None:
        """Enable an endpoint and clear its failure streak; answers it after (None: unknown)."""
        self.require("webhooks", what="webhook_endpoint_enable")
        _check_tenant(enable.tenant_id)
        _check_str(enable.endpoint, "endpoint")
        _check_time(enable.now_ms, "now_ms")
        return await self._webhook_endpoint_enable(enable)

    async def webhook_endpoint_get(
        self, tenant_id: str | None, endpoint: str
    ) -> WebhookEndpoint | None:
        """Endpoint `endpoint` of `tenant_id` (None: of no tenant), or None."""
        self.require("webhooks", what="webhook_endpoint_get")
        _check_tenant(tenant_id)
        _check_str(endpoint, "endpoint")
        return await self._webhook_endpoint_get(tenant_id, endpoint)

    async def webhook_endpoint_list(self, limit: int) -> list[WebhookEndpoint]:
        """Every tenant's endpoints by (tenant, endpoint) in code-point order, no tenant first;
        at most `limit`."""
        self.require("webhooks", what="webhook_endpoint_list")
        _check_int(limit, "limit", 1, MAX_WEBHOOK_LIST)
        rows = await self._webhook_endpoint_list(limit)
        rows.sort(key=lambda e: (e.tenant_id or "", e.endpoint))
        return rows[:limit]

    async def webhook_endpoint_put(self, put: WebhookEndpointPut) -> WebhookEndpoint:
        """Register the endpoint at `put.url` (enabled, no failures), or move a registered one
        there, its state kept; answers it after."""
        self.require("webhooks", what="webhook_endpoint_put")
        _check_tenant(put.tenant_id)
        _check_str(put.endpoint, "endpoint")
        _check_str(put.url, "url", MAX_WEBHOOK_URL_BYTES)
        _check_time(put.now_ms, "now_ms")
        return await self._webhook_endpoint_put(put)

    # -- jobs ---------------------------------------------------------------------------------
    # The core family, but for the operator's calls (`job_cancel*`, `job_list`, `job_promote`,
    # `job_remove`, `job_requeue*`: `operator=True`) and retention's `job_purge`
    # (`retention=True`).

    async def job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        """Complete each held job; answers, per item, whether its fence still held."""
        for a in acks:
            check_ack(a)
        if not acks:
            return []
        return await self._job_ack(acks)

    async def job_cancel(self, job_id: str, now_ms: int) -> CancelAnswer:
        """Cancel a live row (a running one's worker learns it at its next heartbeat)."""
        return (await self.job_cancel_many([job_id], now_ms))[0]

    async def job_cancel_many(self, job_ids: Sequence[str], now_ms: int) -> list[CancelAnswer]:
        """`job_cancel` of each id in order, in one call; one answer per id."""
        self.require("operator", what="job_cancel_many")
        _check_ids(job_ids)
        _check_time(now_ms, "now_ms")
        if not job_ids:
            return []
        return await self._job_cancel_many(job_ids, now_ms)

    async def job_claim(self, params: ClaimParams) -> ClaimResult:
        """Claim due rows in (priority, run_at, id) order, burying lapsed final attempts."""
        if not params.queues:
            raise ClaimQueuesEmptyError(detail="queues")
        for q in params.queues:
            _check_str(q, "queues")
        _check_str(params.worker_id, "worker_id")
        for n in params.drop_exhausted:
            _check_str(n, "drop_exhausted")
        _check_int(params.limit, "limit", 1, MAX_CLAIM_LIMIT)
        _check_int(params.lease_ms, "lease_ms", 1, MAX_LEASE_MS)
        _check_time(params.now_ms, "now_ms")
        if params.reclaim_until_ms is not None:
            _check_time(params.reclaim_until_ms, "reclaim_until_ms")
        if params.beat is not None:
            self.require("workers", what="a claim carrying a registry beat")
            _check_beat(params.beat)
        return await self._job_claim(params)

    async def job_enqueue(self, job: NewJob) -> EnqueueResult:
        """Insert `job` unless its id names a row or a live row holds its key (then `deduped`)."""
        check_new_job(job)
        self._require_links(job)
        return await self._job_enqueue(job)

    def _require_links(self, job: NewJob) -> None:
        if job.parent_id is not None or job.batch_id is not None:
            self.require("flows", what="a job enqueued with a parent or a batch")

    async def job_enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """`job_enqueue` for each record, in order, as if one after another; all checks first."""
        if len(jobs) > MAX_ENQUEUE_BATCH:
            raise BatchTooLargeError(detail=f"{len(jobs)} > {MAX_ENQUEUE_BATCH}")
        if not jobs:
            return []
        if type(jobs) is NewJobs:
            check_new_jobs(jobs)
            self._require_links(jobs.shared)
            if not self.enqueue_columns:
                jobs = list(jobs)
        else:
            for j in jobs:
                check_new_job(j)
                self._require_links(j)
        return await self._job_enqueue_many(jobs)

    async def job_get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """The rows of these ids that exist, by id."""
        _check_id_list(job_ids, "job_ids")
        for i in job_ids:
            _check_str(i, "job_ids")
        if not job_ids:
            return {}
        return await self._job_get_many(job_ids)

    async def job_list(self, params: JobListParams) -> JobPage:
        """One page of the rows `params.filter` keeps, newest first by `(created_at_ms, id)`.

        A cursor not handed out for this very filter is `X_JOB_PAGE_INVALID`. A page may be
        short while `next_cursor` is set (each call examines at most `params.scan` rows).
        """
        self.require("operator", what="job_list")
        f = params.filter
        if f.parent_id is not None or f.batch_id is not None:
            self.require("flows", what="a listing by parent or batch")
        _check_filter(f)
        _check_int(params.limit, "limit", 1, MAX_LIST_LIMIT)
        _check_int(params.scan, "scan", 1, MAX_LIST_SCAN)
        after = None if params.cursor is None else decode_cursor(params.cursor, f)
        got = await self._job_list(f, after, params.limit, params.scan)
        last = got.last_examined
        return JobPage(got.jobs, None if last is None else encode_cursor(last, f))

    async def job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        """Extend each held lease; answers, per item, whether its fence still held."""
        for b in beats:
            _check_fence(b.fence)
            _check_int(b.lease_ms, "lease_ms", 1, MAX_LEASE_MS)
            _check_time(b.now_ms, "now_ms")
        if not beats:
            return []
        return await self._job_heartbeat(beats)

    async def job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        """Give each held job back as its `kind` says; answers whether each fence still held."""
        for n in nacks:
            if n.wait is not None:
                self.require("events", what="a park that waits for an event")
            if n.join is not None:
                self.require("flows", what="a park that waits for other jobs")
            check_nack(n)
        if not nacks:
            return []
        return await self._job_nack(nacks)

    async def job_progress(self, items: Sequence[Progress]) -> list[bool]:
        """Record each held job's progress; answers whether each fence still held."""
        for p in items:
            _check_fence(p.fence)
            _check_time(p.now_ms, "now_ms")
            check_text(p.progress_json, "progress_json")
        if not items:
            return []
        return await self._job_progress(items)

    async def job_promote(self, job_ids: Sequence[str], now_ms: int) -> list[PromoteAnswer]:
        """Make each delayed `ready` row due now; one answer per id, in order."""
        self.require("operator", what="job_promote")
        _check_ids(job_ids)
        _check_time(now_ms, "now_ms")
        if not job_ids:
            return []
        return await self._job_promote(job_ids, now_ms)

    async def job_purge(self, params: PurgeParams) -> int:
        """Delete up to `limit` finished rows whose retention ran out; answers how many went.

        A row is purgeable when its state is final, that state has a retention (`*_ms` not
        None) and `finished_at_ms + keep_ms <= now_ms`. The purgeable rows go oldest
        `finished_at_ms` first, ties by id in code-point order, so every driver removes the same
        rows. Live rows are never touched. A purged row is gone with everything stored for it:
        `job_get_many` no longer answers it and its id is free again (an enqueue with that id
        inserts). Several callers at once remove each row once (their answers split the count).
        """
        self.require("retention", what="job_purge")
        _check_time(params.now_ms, "now_ms")
        _check_int(params.limit, "limit", 1, MAX_PURGE_LIMIT)
        keeps = (
            ("completed_ms", params.completed_ms),
            ("cancelled_ms", params.cancelled_ms),
            ("failed_ms", params.failed_ms),
            ("dead_ms", params.dead_ms),
        )
        for what, keep in keeps:
            if keep is not None:
                _check_time(keep, what)
        if all(keep is None for _, keep in keeps):
            return 0
        return await self._job_purge(params)

    async def job_remove(self, job_ids: Sequence[str]) -> list[RemoveAnswer]:
        """Delete each row that is not running, with everything stored for it; in order."""
        self.require("operator", what="job_remove")
        _check_ids(job_ids)
        if not job_ids:
            return []
        return await self._job_remove(job_ids)

    async def job_requeue(
        self, job_id: str, now_ms: int, *, fresh_run_id: str | None = None
    ) -> None:
        """Make a finished row ready now with fresh attempts, in one write.

        Refuses a missing id (`X_JOB_NOT_FOUND`), a live row (`X_JOB_NOT_REQUEUEABLE`), a saga
        run that failed for good when no `fresh_run_id` is given (`X_JOB_REQUEUE_UNWOUND`: its
        steps are undone) and a key another live row holds now (`X_JOB_REQUEUE_DUPLICATE`).
        Without `fresh_run_id` the run id stays (a requeued run replays its recorded steps);
        with it the row starts a fresh run under that id, with no recorded step. `claims`,
        `last_error`, `result_json` and `progress_json` stay: history for the operator until
        the next settle overwrites them.
        """
        fresh = None if fresh_run_id is None else (fresh_run_id,)
        answer = (await self.job_requeue_many(RequeueParams((job_id,), now_ms, fresh)))[0]
        match answer:
            case RequeueAnswer.NOT_FOUND:
                raise JobNotFoundError(detail=job_id)
            case RequeueAnswer.LIVE:
                raise NotRequeueableError(detail=job_id)
            case RequeueAnswer.UNWOUND:
                raise RequeueUnwoundError(detail=job_id)
            case RequeueAnswer.DUPLICATE:
                raise RequeueDuplicateError(detail=job_id)
            case RequeueAnswer.REQUEUED:
                return

    async def job_requeue_many(self, params: RequeueParams) -> list[RequeueAnswer]:
        """`job_requeue` of each id in order, answering instead of raising; one call. With
        `fresh_run_ids`, one per id, each requeued row starts a fresh run under its own."""
        self.require("operator", what="job_requeue_many")
        _check_ids(params.job_ids)
        _check_time(params.now_ms, "now_ms")
        fresh = params.fresh_run_ids
        if fresh is not None:
            if len(fresh) != len(params.job_ids):
                raise RecordInvalidError("one fresh run id per job id", detail="fresh_run_ids")
            for run_id in fresh:
                _check_str(run_id, "fresh_run_ids")
            if len(set(fresh)) != len(fresh):
                raise RecordInvalidError("a fresh run id is given twice", detail="fresh_run_ids")
        if not params.job_ids:
            return []
        return await self._job_requeue_many(params)

    # -- leases -------------------------------------------------------------------------------
    # Optional: a driver offering them says `leases=True` in `capabilities()`.
    #
    # A key has at most `limit` live holdings at a time (a holding is live while
    # `expires_at_ms > now_ms`). Each holding carries a fencing token from the store; every later
    # call names the holding by `(key, token)`, so a holder that lost it (expired, taken over)
    # can never renew or end someone else's. Every decision uses the caller's `now_ms`, never
    # the server's clock, through the KEY'S CLOCK (contract v6): each key keeps the latest time
    # any take, renewal, release or abandon of it used, and such a call works at the later of
    # its `now_ms` and that clock (which moves there), so a key's time never runs back. Callers
    # landing out of order, or on hosts whose clocks disagree, share one timeline per key: a
    # stale caller is judged as at the freshest time the key saw (the error on the safe side,
    # fewer starts), and no window of a rate's `per` ever holds more than `limit` stamps in
    # stamp times (a stamp's time is its `expires_at_ms - ttl_ms`).

    async def lease_abandon(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        """End each holding as if it never was (a rate stamp included: the start never
        happened); answers, per item, whether it was live."""
        self.require("leases", what="lease_abandon")
        _check_lease_refs(refs)
        _check_time(now_ms, "now_ms")
        if not refs:
            return []
        return await self._lease_abandon(refs, now_ms)

    async def lease_holders(self, key: str, now_ms: int) -> list[Lease]:
        """The live holdings of `key` at `now_ms`, by token."""
        self.require("leases", what="lease_holders")
        _check_str(key, "key", MAX_LEASE_KEY_BYTES)
        _check_time(now_ms, "now_ms")
        return sorted(await self._lease_holders(key, now_ms), key=lambda h: h.token)

    async def lease_purge(self, now_ms: int, limit: int) -> int:
        """Delete up to `limit` holdings (rate stamps included) no longer live at `now_ms`;
        answers how many went. Live holdings are never touched."""
        self.require("leases", what="lease_purge")
        _check_time(now_ms, "now_ms")
        _check_int(limit, "limit", 1, MAX_PURGE_LIMIT)
        return await self._lease_purge(now_ms, limit)

    async def lease_release(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        """End each holding now (a rate stamp stays counted until it expires); answers, per
        item, whether it was live."""
        self.require("leases", what="lease_release")
        _check_lease_refs(refs)
        _check_time(now_ms, "now_ms")
        if not refs:
            return []
        return await self._lease_release(refs, now_ms)

    async def lease_renew(self, renews: Sequence[LeaseRenew], now_ms: int) -> list[bool]:
        """Extend each live holding to `now_ms + ttl_ms`; answers whether each was live. A
        holding that expired is never renewed, even when nobody took its place."""
        self.require("leases", what="lease_renew")
        if len(renews) > MAX_LEASE_BATCH:
            raise BatchTooLargeError(detail=f"{len(renews)} > {MAX_LEASE_BATCH}")
        for r in renews:
            _check_str(r.key, "key", MAX_LEASE_KEY_BYTES)
            _check_int(r.token, "token", 1, 2**62)
            _check_int(r.ttl_ms, "ttl_ms", 1, MAX_LEASE_MS)
        _check_time(now_ms, "now_ms")
        if not renews:
            return []
        return await self._lease_renew(renews, now_ms)

    async def lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        """Grant each take while its key has room, in order; None where it had none.

        Takes of one key in one call must agree on `limit` and name distinct holders.
        """
        self.require("leases", what="lease_take")
        if len(takes) > MAX_LEASE_BATCH:
            raise BatchTooLargeError(detail=f"{len(takes)} > {MAX_LEASE_BATCH}")
        limits: dict[str, int] = {}
        holders: set[tuple[str, str]] = set()
        for t in takes:
            _check_str(t.key, "key", MAX_LEASE_KEY_BYTES)
            _check_str(t.holder, "holder")
            _check_int(t.limit, "limit", 1, MAX_LEASE_LIMIT)
            _check_int(t.ttl_ms, "ttl_ms", 1, MAX_LEASE_MS)
            if not isinstance(t.stamp, bool):
                raise RecordInvalidError("must be a bool", detail="stamp")
            if limits.setdefault(t.key, t.limit) != t.limit:
                raise RecordInvalidError("takes of one key disagree on the limit", detail=t.key)
            if (t.key, t.holder) in holders:
                raise RecordInvalidError("one holder takes one key twice", detail=t.key)
            holders.add((t.key, t.holder))
        _check_time(now_ms, "now_ms")
        if not takes:
            return []
        return await self._lease_take(takes, now_ms)

    # -- pauses -------------------------------------------------------------------------------
    # Optional: a driver offering them says `pauses=True` in `capabilities()`; its claim then
    # passes paused rows over. Without them nothing is ever paused.

    async def pause_add(self, pause: Pause) -> bool:
        """Pause a queue or a job name; True when it was not paused before."""
        self.require("pauses", what="pause_add")
        _check_pause(pause)
        return await self._pause_add(pause)

    async def pause_list(self) -> list[Pause]:
        """Every pause, sorted."""
        self.require("pauses", what="pause_list")
        return sorted(await self._pause_list())

    async def pause_remove(self, pause: Pause) -> bool:
        """Lift a pause; True when it existed."""
        self.require("pauses", what="pause_remove")
        _check_pause(pause)
        return await self._pause_remove(pause)

    # -- queues -------------------------------------------------------------------------------
    # `queue_demand` is core; `queue_stats` is the operator family's.

    async def queue_demand(self, queues: Sequence[str], now_ms: int) -> dict[str, int]:
        """Per asked queue, the `ready` rows due by `now_ms`; a paused queue answers 0."""
        for q in queues:
            _check_str(q, "queues")
        _check_time(now_ms, "now_ms")
        if not queues:
            return {}
        return await self._queue_demand(queues, now_ms)

    async def queue_stats(self, now_ms: int) -> list[QueueStats]:
        """Per queue holding any row: its rows by state and its oldest due `ready` row's
        `run_at_ms`; sorted by queue."""
        self.require("operator", what="queue_stats")
        _check_time(now_ms, "now_ms")
        return sorted(await self._queue_stats(now_ms), key=lambda q: q.queue)

    # -- steps --------------------------------------------------------------------------------
    # Optional: a driver offering them says `steps=True` in `capabilities()`.

    async def step_list(self, run_id: str) -> list[StepRecord]:
        """Every recorded step of a run, by (recorded_at_ms, name), in ONE read."""
        self.require("steps", what="step_list")
        _check_str(run_id, "run_id")
        steps = await self._step_list(run_id)
        return sorted(steps, key=lambda s: (s.recorded_at_ms, s.name))

    async def step_put(self, puts: Sequence[StepPut]) -> list[bool]:
        """Record each step, fenced like `job_ack`; answers, per item, whether its fence held."""
        self.require("steps", what="step_put")
        for p in puts:
            check_step_put(p)
        if not puts:
            return []
        return await self._step_put(puts)

    # -- tasks --------------------------------------------------------------------------------
    # Optional: a driver offering them says `tasks=True` in `capabilities()`.
    #
    # Each scheduled task has a mark (`TaskMark`): its watermark and its last fire. A fire moves
    # the watermark AND enqueues the occurrence's job in one atomic step, fenced on the
    # watermark the firer read: two schedulers that both believe they lead fire an occurrence
    # once, whatever their leases say.

    async def task_arm(self, names: Sequence[str], now_ms: int) -> list[TaskMark]:
        """Each named task's mark, in order; a task without one is stored first with
        `watermark_ms = now_ms` (nothing before its first sight ever fires)."""
        self.require("tasks", what="task_arm")
        _check_task_names(names)
        _check_time(now_ms, "now_ms")
        if not names:
            return []
        return await self._task_arm(names, now_ms)

    async def task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        """Fire one occurrence if the task's watermark is still `fire.expect_ms`: the job is
        enqueued and the watermark moved together, or nothing is written."""
        self.require("tasks", what="task_fire")
        _check_str(fire.name, "name")
        _check_time(fire.expect_ms, "expect_ms")
        _check_time(fire.now_ms, "now_ms")
        _check_int(fire.occurrence_ms, "occurrence_ms", fire.expect_ms + 1, MAX_TIME_MS)
        _check_int(fire.watermark_ms, "watermark_ms", fire.occurrence_ms, MAX_TIME_MS)
        check_new_job(fire.job)
        return await self._task_fire(fire)

    async def task_marks(self, names: Sequence[str]) -> dict[str, TaskMark]:
        """The stored marks of the named tasks that have one, by name. Reads only."""
        self.require("tasks", what="task_marks")
        _check_task_names(names)
        if not names:
            return {}
        return await self._task_marks(names)

    # -- workers ------------------------------------------------------------------------------
    # Optional: a driver offering the registry says `workers=True` in `capabilities()`; without
    # it a worker runs unannounced and is never handed a claim's `beat`.

    async def worker_beat(self, beat: WorkerBeat) -> None:
        """Insert or refresh a worker's registry row until `now_ms + ttl_ms`."""
        self.require("workers", what="worker_beat")
        _check_beat(beat)
        await self._worker_beat(beat)

    async def worker_forget(self, worker_id: str) -> bool:
        """Remove a worker's registry row; True when it existed, expired or not.

        Expired rows are not listed but stay until forgotten (a stopping worker forgets itself).
        """
        self.require("workers", what="worker_forget")
        _check_str(worker_id, "worker_id")
        return await self._worker_forget(worker_id)

    async def worker_purge(self, now_ms: int, limit: int) -> int:
        """Delete up to `limit` registry rows expired at `now_ms` (a worker that died without
        forgetting itself); answers how many went. Live rows are never touched."""
        self.require("workers", what="worker_purge")
        _check_time(now_ms, "now_ms")
        _check_int(limit, "limit", 1, MAX_PURGE_LIMIT)
        return await self._worker_purge(now_ms, limit)

    async def worker_list(self, now_ms: int) -> list[WorkerInfo]:
        """Registry rows not yet expired at `now_ms`, by worker id."""
        self.require("workers", what="worker_list")
        _check_time(now_ms, "now_ms")
        return sorted(await self._worker_list(now_ms), key=lambda w: w.worker_id)

    # -- wake ---------------------------------------------------------------------------------

    async def wake_subscribe(
        self, queues: Sequence[str], on_wake: Callable[[str], None]
    ) -> WakeSubscription | None:
        """Start delivering a queue name to `on_wake` when work arrives; None when unsupported."""
        return None

    # -- consumers ------------------------------------------------------------------------------
    # Optional: a driver offering them says `consumers=True` in `capabilities()`. One entry per
    # (consumer name, tenant); a put lands only while its fence holds AND the stored cursor is
    # the one the turn started from, so a stale turn never moves a cursor back.

    async def consumer_cursor_get(self, name: str, tenant_id: str | None) -> ConsumerCursor | None:
        """Consumer `name`'s entry for `tenant_id` (None: the cross-tenant one), or None."""
        self.require("consumers", what="consumer_cursor_get")
        _check_str(name, "name")
        if tenant_id is not None:
            _check_str(tenant_id, "tenant_id")
        return await self._consumer_cursor_get(name, tenant_id)

    async def consumer_cursor_put(self, put: ConsumerPut) -> bool:
        """Move the cursor from `put.expect_json` to `put.cursor_json`, fenced; answers whether
        it landed (see `_consumer_cursor_put`)."""
        self.require("consumers", what="consumer_cursor_put")
        check_consumer_put(put)
        return await self._consumer_cursor_put(put)

    async def consumer_list(self, name: str | None, limit: int) -> list[ConsumerCursor]:
        """The entries (of consumer `name`, or all) by (name, tenant — the cross-tenant one
        first); at most `limit`."""
        self.require("consumers", what="consumer_list")
        if name is not None:
            _check_str(name, "name")
        _check_int(limit, "limit", 1, MAX_CONSUMER_LIST)
        rows = await self._consumer_list(name, limit)
        return sorted(rows, key=consumer_order)[:limit]

    # -- what each backend implements: the core job family ---------------------------------------
    # -- attempts -- (contract v5) Every write that ends a claim also appends ONE entry to the
    # row's history (`JobRecord.attempts`, `jobs_core.attempts`), in the same atomic write:
    # `_job_ack` (completed), `_job_nack` (`nack_attempt_outcome(kind, dead_letter)` with
    # `attempt_error(error)`), `_job_cancel_many` of a `running` row (cancelled), and
    # `_job_claim` for each lapsed `running` row it reclaims or buries (abandoned, with
    # `ABANDONED_ERROR`, settled at the claim's `now_ms`). The entry reads the row as the ended
    # claim held it (`attempt`, `claims`, `claimed_by`, `claimed_at_ms`); only the last
    # `ATTEMPT_HISTORY` are kept, oldest first. A write whose fence misses appends nothing.
    # Every claim sets `claimed_at_ms = now_ms`. `_job_get_many` and `_job_watch` answer both.

    @abc.abstractmethod
    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        """Complete each held job, in order; one bool per item, True where it landed.

        Fenced: applies only while the row is `running` with the fence's `claims` and
        `worker_id` (an expired lease alone does not break it). Writes `completed`,
        `finished_at_ms = now_ms`, `lease_until_ms = None` and `result_json` — an absent result
        OVERWRITES a stored one with None (a requeued row's earlier result goes); an absent
        `progress_json` keeps the stored progress. Nothing else changes; a miss writes nothing.
        With `counters`, moves the `completed` counter of each item that landed.
        """

    @abc.abstractmethod
    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        """One claim pass, atomic: beat, bury, then claim.

        A lease has LAPSED when `lease_until_ms <= now_ms` (exactly at the lease end counts)
        and, when `reclaim_until_ms` is set, `lease_until_ms <= reclaim_until_ms` too
        (`semantics.lapsed_by`): a bound a worker back from an outage passes, so the leases
        that ended after the store last answered it wait; ready and parked rows ignore it.

        1. Write `params.beat` when given (as `_worker_beat`; only a driver declaring `workers`
           is ever handed one).
        2. Bury every `running` row of the asked queues whose lease lapsed and whose
           `attempt >= max_attempts`, pauses or not: `failed` when its name is in
           `drop_exhausted`, else `dead`; `finished_at_ms = now_ms`, `lease_until_ms = None`,
           `last_error = LEASE_LAPSED_ERROR`. Answered in `buried`, sorted by id.
        3. Candidates: rows of the asked queues, neither queue nor name paused (a driver
           without `pauses` has none), that are `ready` or `parked` with a
           `run_at_ms <= now_ms`, or `running` with a lapsed lease and attempts left.
           Take the first `limit` by (priority, run_at_ms, id — code-point order); each
           becomes `running`, `attempt + 1`, `claims + 1`, `claimed_by = worker_id`,
           `lease_until_ms = now_ms + lease_ms`. Answered in `jobs`, in that order, each
           with the row's `join` (flows; None without the family). Candidates are read as the
           rows stood before step 2: a waiter that step 2's bury releases (flows) is not one;
           the next claim takes it (a Postgres claim is one statement, its finish trigger runs
           after the statement chose its rows).

        A bury and a claim of a parked row are finishes and departures under "Flows" below.
        """

    @abc.abstractmethod
    async def _job_enqueue(self, job: NewJob) -> EnqueueResult:
        """Insert `job` as `ready` (attempt 0, claims 0, every settle field None), unless a row
        has its id (any state: deduped with that id) or a LIVE row holds its namespace
        (name, tenant_id or '', idempotency_key) (deduped with that row's id). Atomic: two
        racing enqueues of one namespace insert one row. Text and JSON are stored exactly."""

    @abc.abstractmethod
    async def _job_enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """`_job_enqueue` of each record in order, one answer each: a later record dedupes
        against an earlier one of the same batch. Written in chunks of `ENQUEUE_CHUNK` per
        statement or script call; every refusal (a bad record, the batch cap) has been made by
        the public method before this runs, so none can strike after a first chunk is written.
        `jobs` is a list, or with `enqueue_columns` the batch as the caller gave it (the
        facade's a `NewJobs`: its columns can be read without building a `NewJob` each)."""

    @abc.abstractmethod
    async def _job_get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """The rows of these ids that exist, by id, with every field as stored (JSON as text
        of the same meaning and types: `1`, `1.0` and `true` stay apart); unknown ids absent.
        `wait` is the stored wait of a `parked` row (event, match of the same meaning and
        types, since), None for every row that holds none. With `flows`: `parent_id` and
        `batch_id` as enqueued, and `join` as it stands (see "Flows" below)."""

    @abc.abstractmethod
    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        """Fenced like `_job_ack`: set `lease_until_ms = now_ms + lease_ms` (from now, never
        from the old lease end); one bool per item; a miss writes nothing."""

    @abc.abstractmethod
    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        """Give each held job back, fenced like `_job_ack`; one bool per item, in order.

        Every landed nack sets `lease_until_ms = None` and keeps the stored progress unless
        `progress_json` is given. Then, by kind:

        - RETRY: `ready` at `run_at_ms`; the attempt stays spent; `last_error = error`.
        - FAIL: `dead` when `dead_letter`, else `failed`; `finished_at_ms = now_ms`;
          `last_error = error`.
        - PARK: `parked` with `run_at_ms` as given (None: until woken, never due); the
          attempt is given back (`attempt - 1`); `last_error` kept. With a `wait` (drivers
          offering events): the wait is stored with the row, every field of it (its tenant
          and `until_ms` too) — unless a stored event meets it, unexpired at `now_ms` (exactly
          `_event_find`'s rule), in which case the row is `ready` at `now_ms` instead, no wait
          stored. A row's wait goes when it leaves `parked` (claimed, woken by an event,
          cancelled, removed).
          With a `join` (flows): the row's join is replaced by `JoinState(total=len(join),
          pending, failed, ALWAYS)` counted as `_join_enqueue` counts (an id naming no row
          counts as finished, not completed); while `pending > 0` it waits as described under
          "Flows", else it is `ready` at `now_ms` instead.
        - SHED, INTERRUPT: `ready` at `run_at_ms`, or `now_ms` when None; attempt given back;
          `last_error` kept.
        - REFUSE: `failed`, `finished_at_ms = now_ms`, attempt given back, `last_error = error`.

        Where a kind writes `last_error`, an absent error OVERWRITES the stored one with None.
        With `counters`, each item that landed moves its `nack_outcome(kind, dead_letter)`
        counter.
        """

    @abc.abstractmethod
    async def _job_progress(self, items: Sequence[Progress]) -> list[bool]:
        """Fenced like `_job_ack`: store `progress_json`, nothing else; one bool per item."""

    @abc.abstractmethod
    async def _queue_demand(self, queues: Sequence[str], now_ms: int) -> dict[str, int]:
        """Per asked queue, the `ready` rows with `run_at_ms <= now_ms` (parked and running
        rows never count, name pauses are ignored); 0 for a paused or unknown queue."""

    # -- the optional families ----------------------------------------------------------------
    #
    # Each family's `_` methods raise until a driver implements them; a driver implements a
    # family whole and then declares it in `capabilities()` (the public methods refuse an
    # undeclared family first, so these defaults answer only a driver that declared a family it
    # did not implement).
    #
    # Counters (`counters=True`): every write that settles a row moves, IN THE SAME statement or
    # script, the counter of (row's name, row's queue, `minute_of(now_ms)`, width `MINUTE_MS`)
    # for its outcome: an ack `completed`; a nack `nack_outcome(kind, dead_letter)`; a claim's
    # bury `bury_outcome(state)`; a cancel of a live row `cancelled`. A settle that does not land
    # moves nothing. A counter row exists once one of its counts moved (a row of zeros is never
    # answered). A driver without the family moves no counter.

    async def _job_cancel_many(self, job_ids: Sequence[str], now_ms: int) -> list[CancelAnswer]:
        """Cancel each live row (ready, running or parked), in order: `cancelled`,
        `finished_at_ms = now_ms`, `lease_until_ms = None`, the rest kept, and its `cancelled`
        counter moved. `NOT_FOUND` for an unknown id, `FINISHED` (and nothing written) for a
        finished row — an id named twice is `FINISHED` the second time. Not fenced: an
        operator's call."""
        raise _unimplemented(self, "operator", "_job_cancel_many")

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        """Walk every row in listing order — `(created_at_ms, id)` DESCENDING, id by code point —
        starting strictly after `after` (None: at the newest), examining rows one by one until
        `limit` rows matching `f` were taken or `scan` rows were examined, whichever comes first.
        Answers the taken rows in walk order, and the key of the last row examined when at least
        one row follows it in the order (else None). Reads only; every row counts as examined,
        whatever its state."""
        raise _unimplemented(self, "operator", "_job_list")

    async def _job_promote(self, job_ids: Sequence[str], now_ms: int) -> list[PromoteAnswer]:
        """For each id in order: a `ready` row with `run_at_ms > now_ms` gets
        `run_at_ms = now_ms` (`PROMOTED`, nothing else changes); a `ready` row already due is
        `ALREADY_DUE`; a running, parked or finished row is `NOT_READY`; an unknown id
        `NOT_FOUND`. Only `PROMOTED` writes."""
        raise _unimplemented(self, "operator", "_job_promote")

    async def _job_remove(self, job_ids: Sequence[str]) -> list[RemoveAnswer]:
        """For each id in order: delete a row in any state but `running` with everything stored
        for it, exactly as `_job_purge` removes a row (its id and its live key are free again):
        `REMOVED`; `RUNNING` for a running row (nothing written); `NOT_FOUND` for an unknown id
        (a second mention of a removed id included). Counters do not move."""
        raise _unimplemented(self, "operator", "_job_remove")

    async def _job_requeue_many(self, params: RequeueParams) -> list[RequeueAnswer]:
        """For each id of `params.job_ids` in order, as one atomic write per row, the first that
        applies:

        - `NOT_FOUND` for an unknown id; `LIVE` for a live row (parked included);
        - `UNWOUND`, for a plain requeue (`fresh_run_ids` None) only: the row is `dead` or
          `failed` and its run holds the step `semantics.SAGA_STEP` (a saga that failed for
          good: its unwind job undoes, or undid, its steps — so this holds from its final
          settle on, whether the undoing ran yet or not);
        - `DUPLICATE` when another live row holds its namespace — tenant included, as in every
          namespace check (a row requeued earlier in the same call holds it too);
        - else `REQUEUED`: `ready` at `now_ms` with `attempt = 0`, `lease_until_ms` and
          `finished_at_ms` None, everything else kept (claims, claimed_by, last_error, result,
          progress) — and the run id kept, or, for a fresh requeue, set to the id's
          `fresh_run_ids` entry. A fresh requeue deletes the steps of the run it left (as a
          purge deletes a row's), except those of a row `UNWOUND` would have refused: its
          `ujobs.unwind` job, which holds that run id, still reads them (they go with it).

        Only `REQUEUED` writes."""
        raise _unimplemented(self, "operator", "_job_requeue_many")

    async def _queue_stats(self, now_ms: int) -> list[QueueStats]:
        """One `QueueStats` per queue holding at least one row (any state): `counts` lists every
        `JobState` in declaration order with its number of rows; `oldest_ready_at_ms` is the
        least `run_at_ms` of its `ready` rows with `run_at_ms <= now_ms` (None when none). Any
        order (the public method sorts)."""
        raise _unimplemented(self, "operator", "_queue_stats")

    async def _pause_add(self, pause: Pause) -> bool:
        """Store the pause (matched by exact value, never as a pattern); True when it is new."""
        raise _unimplemented(self, "pauses", "_pause_add")

    async def _pause_list(self) -> list[Pause]:
        """Every stored pause, in any order (the public method sorts)."""
        raise _unimplemented(self, "pauses", "_pause_list")

    async def _pause_remove(self, pause: Pause) -> bool:
        """Drop the pause; True when it existed."""
        raise _unimplemented(self, "pauses", "_pause_remove")

    async def _worker_beat(self, beat: WorkerBeat) -> None:
        """Insert or replace the worker's row: `info_json`, `last_beat_ms = now_ms`,
        `expires_at_ms = now_ms + ttl_ms`."""
        raise _unimplemented(self, "workers", "_worker_beat")

    async def _worker_forget(self, worker_id: str) -> bool:
        """Delete the worker's row; True when there was one, expired or not."""
        raise _unimplemented(self, "workers", "_worker_forget")

    async def _worker_purge(self, now_ms: int, limit: int) -> int:
        """Delete up to `limit` registry rows with `expires_at_ms <= now_ms`, soonest expired
        first, ties by worker id (code-point order); answers how many went. An expired row stays
        until a beat renews it, `_worker_forget` or this purge deletes it. Purgers running at
        once delete each row once."""
        raise _unimplemented(self, "workers", "_worker_purge")

    async def _worker_list(self, now_ms: int) -> list[WorkerInfo]:
        """Rows with `expires_at_ms > now_ms` (exclusive), in any order (the public one sorts)."""
        raise _unimplemented(self, "workers", "_worker_list")

    async def _counter_fold(self, now_ms: int, limit: int) -> int:
        """Fold, oldest `(bucket_ms, name, queue)` first, up to `limit` minute buckets starting
        before `fold_before(now_ms)`: each one's counts are added into the hour bucket of
        `(name, queue, hour_of(bucket_ms))` (created if absent) and the minute bucket is
        deleted, in one atomic step. With budget left (fewer than `limit` folded), delete up to
        the rest of `limit` hour buckets starting before `drop_before(now_ms)`, oldest
        `(bucket_ms, name, queue)` first. Answers how
        many buckets were folded plus dropped. Safe to run from several workers at once: a
        minute bucket is folded once."""
        raise _unimplemented(self, "counters", "_counter_fold")

    async def _counter_read(self, params: CounterReadParams) -> list[CounterRow]:
        """Every counter bucket (both widths) of `params.names` (None: every name) in
        `params.queues` (None: every queue) with `since_ms <= bucket_ms < until_ms`, in any
        order (the public method sorts)."""
        raise _unimplemented(self, "counters", "_counter_read")

    async def _job_purge(self, params: PurgeParams) -> int:
        """Delete up to `params.limit` finished rows whose state keeps them for `*_ms` after
        `finished_at_ms` and whose time is up (`finished_at_ms + keep <= now_ms`), oldest
        `finished_at_ms` first, ties by id; a state whose `*_ms` is None is kept forever, live
        rows are never touched. Every per-row structure goes with the row, and its id is free
        again. Answers how many rows it removed; safe to run from several workers at once."""
        raise _unimplemented(self, "retention", "_job_purge")

    async def _step_list(self, run_id: str) -> list[StepRecord]:
        """Every step recorded under `run_id`, in any order (the public method sorts)."""
        raise _unimplemented(self, "steps", "_step_list")

    async def _step_put(self, puts: Sequence[StepPut]) -> list[bool]:
        """For each item in order, fenced like `_job_ack` (running, same claims and worker):
        record `(the row's run_id, name) -> output_json` at `now_ms` unless that step is
        recorded already (the first record stays; the answer is still True). A miss writes
        nothing. Steps go with their row when it is purged or removed."""
        raise _unimplemented(self, "steps", "_step_put")

    # Events: an event MEETS a wait when it has the wait's name, `event_reaches` it — published
    # for the wait's `tenant_id` (None for None; never another tenant's) or with `all_tenants`,
    # at `published_at_ms` in `[since_ms, until_ms)` (`until_ms` None: no end; at `since_ms`
    # counts, at `until_ms` does not) — and `event_matches` its match. The same rule decides
    # `_event_find`, the park's look for a stored event (`_job_nack`) and the publish's wake.

    async def _event_find(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        """The event with the least `(published_at_ms, id)` among those that meet `wait` (see
        above) with `expires_at_ms > now_ms`; None when there is none. Answers it with its
        `tenant_id` and `all_tenants` as published. Reads only."""
        raise _unimplemented(self, "events", "_event_find")

    async def _event_publish(self, event: EventRecord) -> int:
        """In one atomic step: when no event has this id, store it (its tenant and
        `all_tenants` with it), then wake every `parked` row whose stored wait it meets (see
        above): `ready`, `run_at_ms = published_at_ms`, the wait dropped. Answers the rows woken
        (0 for a known id: nothing written)."""
        raise _unimplemented(self, "events", "_event_publish")

    async def _event_purge(self, now_ms: int, limit: int) -> int:
        """Delete up to `limit` events with `expires_at_ms <= now_ms`, least `(expires_at_ms,
        id)` first; answers how many. Safe from several callers at once."""
        raise _unimplemented(self, "events", "_event_purge")

    async def _lease_abandon(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        """For each item in order: True when `(key, token)` is a live holding at its key's time
        (see `_lease_take`; every key named moves its clock, a forged token's too); the holding
        is deleted whatever its kind or age (an expired one answers False)."""
        raise _unimplemented(self, "leases", "_lease_abandon")

    async def _lease_holders(self, key: str, now_ms: int) -> list[Lease]:
        """The holdings of `key` with `expires_at_ms` past the key's time (the later of `now_ms`
        and its clock), in any order (the public method sorts by token). Reads only: the clock
        does not move."""
        raise _unimplemented(self, "leases", "_lease_holders")

    async def _lease_purge(self, now_ms: int, limit: int) -> int:
        """Delete up to `limit` holdings with `expires_at_ms <= now_ms` (rate stamps among
        them), soonest expired first, ties by key then token in code-point order; answers how
        many went. Each key a holding went from has its clock moved to the latest
        `expires_at_ms` deleted of it (never back): a caller behind must not find the room those
        holdings left. A key left with no holding keeps only its clock (and its token counter:
        tokens never repeat on a key). Before it deletes any holding, the purge examines the
        first `limit` clocks by (clock, key) with `semantics.lease_clock_droppable(clock,
        now_ms)` and drops those whose key holds nothing (as the purge begins): storage stays
        bounded, and a key comes back from its next caller's time. What is stored is exact: an
        expired holding stays until a take of its key, a release or abandon naming it, or this
        purge deletes it (a renewal never touches one). Purgers running at once delete each
        holding once."""
        raise _unimplemented(self, "leases", "_lease_purge")

    async def _lease_release(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        """For each item in order: True when `(key, token)` is a live holding at its key's time
        (see `_lease_take`; every key named moves its clock). A live slot is deleted (its room
        is free at once); a live stamp is left as it is, to expire at its time. An expired
        holding answers False and is deleted (as `_lease_abandon` does)."""
        raise _unimplemented(self, "leases", "_lease_release")

    async def _lease_renew(self, renews: Sequence[LeaseRenew], now_ms: int) -> list[bool]:
        """For each item in order: when `(key, token)` is a live holding at its key's time `at`
        (see `_lease_take`; every key named moves its clock), set its `expires_at_ms = at +
        ttl_ms` (from the key's time, never from the old end) and answer True; else write no
        holding and answer False — an expired holding stays lost even when nobody took its
        room."""
        raise _unimplemented(self, "leases", "_lease_renew")

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        """Atomic per key against every other caller. Each key the call names is worked on at
        its KEY'S TIME `at`: the later of `now_ms` and the key's clock (the latest time any
        take, renewal, release or abandon of the key used, or the latest end a purge deleted),
        and the clock moves to `at` — once per key and call, before any item. For each item in
        order:

        - when `holder` holds a live holding of `key`, that holding is replaced: a new token,
          `expires_at_ms = at + ttl_ms`, the item's `stamp`; granted (the count of holders
          does not change);
        - else, when fewer than `limit` live holdings of `key` exist, a new holding is stored
          with a new token and granted;
        - else None, nothing written.

        Live means `expires_at_ms > at`. Expired holdings never count: every holding of a key
        the call names that expired by `at` is deleted before its items are decided (whether
        they are granted or not), so what `_lease_purge` finds left is the same on every store.
        The answer's `expires_at_ms` is the stored end (`at + ttl_ms`, later than the caller's
        `now_ms + ttl_ms` when the key's clock is ahead of it). A new token is greater
        than every token this store granted before for the same key (a store-wide counter
        does). Two callers racing for the last room of a key: exactly one is granted, and a
        take is never refused while the key has room.
        """
        raise _unimplemented(self, "leases", "_lease_take")

    async def _task_arm(self, names: Sequence[str], now_ms: int) -> list[TaskMark]:
        """For each name in order (names are distinct): the stored mark; a name without one
        gets `TaskMark(name, watermark_ms=now_ms)` stored first. Two callers arming one name at
        once store one mark, and both answer it."""
        raise _unimplemented(self, "tasks", "_task_arm")

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        """In one atomic step against every other caller: when `fire.name` has a mark with
        `watermark_ms == fire.expect_ms`, enqueue `fire.job` exactly as `_job_enqueue` does
        (inserted, or deduped to the row holding its id or its live key; counted and woken
        alike), then set the mark's `watermark_ms = fire.watermark_ms`,
        `fired_ms = fire.occurrence_ms`, `fired_job_id` = the enqueue's id and
        `fired_at_ms = fire.now_ms`; answer the enqueue's result and the new mark. Otherwise
        write nothing and answer `enqueued=None` with the stored mark (None when unarmed)."""
        raise _unimplemented(self, "tasks", "_task_fire")

    async def _task_marks(self, names: Sequence[str]) -> dict[str, TaskMark]:
        """The stored marks of `names` (distinct) that exist, by name. Reads only."""
        raise _unimplemented(self, "tasks", "_task_marks")

    # Flows. A row FINISHES when a write moves it from a live state to a finished one: an ack,
    # a FAIL or REFUSE nack, a claim's bury, a cancel — or a `_job_remove` of a live (ready or
    # parked) row, which counts as a finish that did not complete. In the SAME atomic write,
    # every row that is `parked` on a join holding the finished row (a WAITER) moves: its
    # join's `pending` - 1, and `failed` + 1 unless the finish is `completed`; a waiter whose
    # `pending` reaches 0 is released: `ready`, `run_at_ms` = the finish's `now_ms` (for a
    # `_job_remove`, which takes no time, the waiter's own `created_at_ms`: due at once), its
    # join kept and answered by the claim. A claim's bury comes before its candidates, so the
    # claim that buries a row may take the waiters it released. A dependency counts once per
    # join: a row finished, requeued
    # and finished again moves no join it already counted in. A waiter that left `parked` by
    # another path (claimed at its `run_at_ms`, cancelled, removed) is not moved by later
    # finishes of its old join; parking again on a join starts that join afresh. When the
    # finished row is WATCHED (`_job_watch`), its id goes to every `finish_subscribe` listener
    # after the write commits. A driver without the family does none of this.

    async def _join_enqueue(self, items: Sequence[JoinEnqueue]) -> list[JoinEnqueueAnswer]:
        """For each item in order, atomically: when an id of `after` names no row, answer
        `JoinEnqueueAnswer(None, missing)` (those ids, in `after`'s order) and write nothing.
        Else enqueue `job` exactly as `_job_enqueue` (a deduped item writes nothing more), but
        an inserted row holds `JoinState(total=len(after), pending, failed, policy)`, where
        `pending` counts the dependencies not finished now and `failed` those finished other
        than `completed`; it is `parked` with `run_at_ms` None while `pending > 0`, else
        `ready` at `job.run_at_ms`. A later item may name an earlier item's job."""
        raise _unimplemented(self, "flows", "_join_enqueue")

    async def _join_pending(self, job_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """For each id of `job_ids` naming a row `parked` on a join that still waits for some
        of its dependencies (pending > 0: the dependencies not finished since it parked on that
        join), those dependencies' ids in code-point order; every other id absent (a row not
        parked, parked without a join or with nothing pending, a waiter that left `parked`, an
        unknown id). Reads only."""
        raise _unimplemented(self, "flows", "_join_pending")

    async def _job_watch(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """Mark each existing row of `job_ids` watched (kept until the row is removed or
        purged), then answer those rows as `_job_get_many` does; unknown ids absent."""
        raise _unimplemented(self, "flows", "_job_watch")

    # The sweep ledger: one entry per run of a sweep, keyed by `run_id`. A write is applied only
    # while its `fence` holds FOR ITS RUN: the fence's row is `running` with those `claims` and
    # that worker (as `_step_put`'s) AND that row's current `run_id` is the write's `run_id`. So
    # a run writes only its own entry: a held fence of a row in another run changes nothing —
    # another job's, or the same job's once a fresh requeue gave it a new run id. (A row that
    # shares the run id, as a saga's unwind job does, holds it for that run too.) Entries are
    # never removed by the family's own calls.

    async def _sweep_advance(self, advance: SweepAdvance) -> bool:
        """Atomically, when the fence holds for run `advance.run_id` and its entry is `running`
        with `batches == advance.batch - advance.span` (the advance starts where the entry
        stopped): `batches = advance.batch`, `rows += advance.rows`, `errors += advance.errors`,
        `cursor_json = advance.cursor_json`, `updated_at_ms = now_ms`; True. Otherwise (no
        entry, not running, any other start: a replayed window, one that overlaps the recorded
        batches, or one that skips some) nothing changes; False."""
        raise _unimplemented(self, "sweeps", "_sweep_advance")

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        """Atomically, when the fence holds for run `advance.run_id` (as `_sweep_advance`'s):
        record the step under that run as `_step_put` does (the first record of a name stays)
        AND apply the advance by `_sweep_advance`'s rule (it moves only a running entry at
        `batch - span`); True. Otherwise nothing is written; False.

        This default writes in three calls — never a step recorded without its advance applied
        first — and is correct for any driver of both families: while a fence holds, its row's
        run cannot change (only a requeue moves it, and a requeue takes no running row). A
        driver overrides it to spend one durable commit where this spends two."""
        step, advance = checkpoint.step, checkpoint.advance
        row = (await self._job_get_many([step.fence.job_id])).get(step.fence.job_id)
        if row is None or row.run_id != advance.run_id:
            return False
        await self._sweep_advance(advance)
        return (await self._step_put([step]))[0]

    async def _sweep_finish(self, finish: SweepFinish) -> bool:
        """Atomically, when the fence holds for run `finish.run_id` and its entry is `running`:
        `status = finish.status`, `error = finish.error`, `finished_at_ms = updated_at_ms =
        now_ms`; True. Otherwise nothing changes; False."""
        raise _unimplemented(self, "sweeps", "_sweep_finish")

    async def _sweep_list(self, name: str | None, limit: int) -> list[SweepRecord]:
        """The entries (those of declaration `name` when given), newest `started_at_ms` first,
        ties by `run_id` descending (code-point order); at most `limit`."""
        raise _unimplemented(self, "sweeps", "_sweep_list")

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        """Atomically, in this order:
        1. the fence does not hold for run `start.run_id` (not held, or its row's current run
           is another): nothing is written; `SweepStartAnswer(None)`;
        2. another run's entry with the same `name`, `scope`, `environment` and `checksum` is
           `completed`: nothing is written; `SweepStartAnswer(None, blocked_by=that entry)`
           (the one finished last when several are, ties by the greater `run_id`);
        3. run `start.run_id` has an entry: `completed` stays as it is; `failed` or `running`
           becomes `running` with `error` None, `finished_at_ms` None and `updated_at_ms =
           now_ms` (its `job_id`, batches, rows, errors, cursor, `started_at_ms`, `expected`
           and declaration fields kept); answered as it is after;
        4. else a new entry: `running`, `job_id` the fence's (so a row of that run), 0 batches,
           rows and errors, cursor None, `started_at_ms = updated_at_ms = now_ms`, the other
           fields from `start`.
        """
        raise _unimplemented(self, "sweeps", "_sweep_start")

    # -- postings --
    # The posting ledger: one posting per (tenant, key) — tenant None is the cross-tenant ledger,
    # apart from every org's — and per (tenant, account, currency) the sums of its debits and of
    # its credits. Postings are never changed or removed by the family's own calls.

    async def _posting_balances(
        self, tenant_id: str | None, accounts: Sequence[str]
    ) -> list[BalanceRow]:
        """For each of `accounts` (distinct) in `tenant_id`'s ledger, a row per currency it was
        ever posted in: `debits` the sum of its positive amounts, `credits` the sum of its
        negative amounts' magnitudes, both exact whatever their size (any order)."""
        raise _unimplemented(self, "postings", "_posting_balances")

    async def _posting_get(self, tenant_id: str | None, key: str) -> PostingRecord | None:
        """The posting stored under (`tenant_id`, `key`), its lines by (account, currency)."""
        raise _unimplemented(self, "postings", "_posting_get")

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        """Atomically, in this order (the lines arrive checked and sorted by account, currency):
        1. the fence does not hold — the fence's row is not `running` with those `claims` and
           that worker, OR that row's `idempotency_key` is not `put.key` (a run posts only
           under its own job's key) —: nothing is read or written; `("fence_lost", None)`;
        2. (`put.tenant_id`, `put.key`) holds a posting: nothing is written; `already_applied`
           when its lines equal `put.lines` (each account, currency and amount), else
           `conflict`; with that stored posting;
        3. else store `PostingRecord(put.tenant_id, put.key, fence.job_id, put.lines, now_ms)`
           and, for each line, add `amount` to the debits (positive) or `-amount` to the credits
           (negative) of (`put.tenant_id`, account, currency), a new row starting at 0 and 0;
           `("applied", that record)`.
        Two puts of one key at once: one applies, the other answers as 2 does after it."""
        raise _unimplemented(self, "postings", "_posting_put")

    # -- consumers --
    # One entry per (name, tenant_id), never removed by the family's calls. A put is applied only
    # while its `fence` holds (the fence's row `running` with those `claims` and that worker, as
    # `_step_put`'s) AND the stored cursor is `expect_json` byte for byte (None: no entry).

    async def _consumer_cursor_get(self, name: str, tenant_id: str | None) -> ConsumerCursor | None:
        """The entry of (`name`, `tenant_id`), or None; another tenant's is never answered."""
        raise _unimplemented(self, "consumers", "_consumer_cursor_get")

    async def _consumer_cursor_put(self, put: ConsumerPut) -> bool:
        """Atomically, when the fence holds and the entry of (`put.name`, `put.tenant_id`) has
        `cursor_json == put.expect_json` as text (`expect_json` None: there is no entry): the
        entry becomes `source`, `cursor_json` the put's, `turns + 1` (1 for a new entry),
        `records + put.records` (the put's for a new one), `lag = put.lag` (None too),
        `holder = fence.worker_id`, `job_id = fence.job_id`, `updated_at_ms = now_ms`; True.
        Otherwise (a lost fence, a stale or a skipped cursor) nothing changes; False."""
        raise _unimplemented(self, "consumers", "_consumer_cursor_put")

    async def _consumer_list(self, name: str | None, limit: int) -> list[ConsumerCursor]:
        """The entries (those of consumer `name` when given) by (name, tenant_id, None first;
        code-point order); at most `limit`."""
        raise _unimplemented(self, "consumers", "_consumer_list")

    # -- webhooks --
    # The webhook ledger: endpoints keyed by (tenant_id, endpoint) — a None tenant is its own
    # key, apart from every named one — and attempts keyed by (job_id, claims), the claim that
    # made each (one attempt per claim). Nothing in the family removes an endpoint; attempts go
    # by age alone (`_webhook_attempt_purge`), the retention of the history.

    async def _webhook_attempt_list(self, params: WebhookAttemptListParams) -> list[WebhookAttempt]:
        """The attempts recorded for endpoint (`params.tenant_id`, `params.endpoint`), newest
        `at_ms` first, ties by job id then claims descending (code-point order); at most
        `params.limit` (the ABC sorts: only which it picks under the limit shows)."""
        raise _unimplemented(self, "webhooks", "_webhook_attempt_list")

    async def _webhook_attempt_purge(self, before_ms: int, limit: int) -> int:
        """Delete the first `limit` attempts with `at_ms < before_ms` by (`at_ms`, job id,
        claims; code-point order); answers how many went. By age alone, whatever the state of
        the delivery that made them: its job row holds where it stands, the endpoint its streak,
        and neither is read or written here. (The one thing an attempt still does is answer a
        retried `_webhook_attempt_put` of its own claim as recorded; a claim held past the
        retention after its put is a stalled run, and its retried put records once more.)
        Purgers running at once delete each attempt once."""
        raise _unimplemented(self, "webhooks", "_webhook_attempt_purge")

    async def _webhook_attempt_put(self, put: WebhookAttemptPut) -> WebhookAttemptAnswer:
        """Atomically, in this order:
        1. the fence does not hold (as `_step_put`'s: the row `running` with those `claims` and
           that worker; a lapsed lease nobody reclaimed still holds), or endpoint
           (`tenant_id`, `endpoint`) does not exist: nothing is written;
           `WebhookAttemptAnswer(False, None)`;
        2. an attempt of (`fence.job_id`, `fence.claims`) is recorded already (a retried call):
           nothing is written; `WebhookAttemptAnswer(True, the endpoint as it is)`;
        3. else the attempt is recorded (`job_id`, `claims` the fence's, `at_ms = now_ms`, the
           rest from `put`) and the endpoint moves: `delivered` sets `failures = 0`; `failed`
           adds one, and when the endpoint is enabled and `failures` reaches `disable_after`
           it is disabled (`enabled` False, `disabled_at_ms = now_ms`); a disabled endpoint
           stays disabled either way. `updated_at_ms = now_ms`. Answers
           `WebhookAttemptAnswer(True, the endpoint after)`.
        """
        raise _unimplemented(self, "webhooks", "_webhook_attempt_put")

    async def _webhook_endpoint_enable(
        self, enable: WebhookEndpointEnable
    ) -> WebhookEndpoint | None:
        """Atomically: the endpoint, when it exists, becomes `enabled` with `failures = 0`,
        `disabled_at_ms` None and `updated_at_ms = now_ms`; answers it after, else None."""
        raise _unimplemented(self, "webhooks", "_webhook_endpoint_enable")

    async def _webhook_endpoint_get(
        self, tenant_id: str | None, endpoint: str
    ) -> WebhookEndpoint | None:
        """The endpoint stored under (`tenant_id`, `endpoint`), or None."""
        raise _unimplemented(self, "webhooks", "_webhook_endpoint_get")

    async def _webhook_endpoint_list(self, limit: int) -> list[WebhookEndpoint]:
        """The first `limit` endpoints by (tenant_id with None as '', endpoint), code-point
        order."""
        raise _unimplemented(self, "webhooks", "_webhook_endpoint_list")

    async def _webhook_endpoint_put(self, put: WebhookEndpointPut) -> WebhookEndpoint:
        """Atomically: a new endpoint is stored enabled, `failures` 0, `disabled_at_ms` None,
        `created_at_ms = updated_at_ms = now_ms`; an existing one takes `url` and
        `updated_at_ms = now_ms`, everything else kept. Answers it after."""
        raise _unimplemented(self, "webhooks", "_webhook_endpoint_put")


# -- the shared checks ----------------------------------------------------------------------------


def _unimplemented(driver: JobDriver, family: Family, method: str) -> CapabilityMissingError:
    """What a `_` method of an optional family raises until a driver implements it."""
    return CapabilityMissingError(
        f"{driver.describe()} declares the {family} family but does not implement {method}",
        detail=family,
    )


def name_refusal(value: object, max_bytes: int = MAX_NAME_BYTES) -> str | None:
    """Why the driver refuses `value` as a name, queue, tenant, key or id (not a non-empty
    string, past `max_bytes` UTF-8 bytes, or holding text no store can hold), or None."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    # A character is at most 4 UTF-8 bytes: short strings skip the encode.
    if len(value) * 4 > max_bytes and utf8_length(value) > max_bytes:
        return f"longer than {max_bytes} UTF-8 bytes"
    why = unstorable(value)
    return None if why is None else f"holds {why}"


def _check_str(value: object, what: str, max_bytes: int = MAX_NAME_BYTES) -> None:
    why = name_refusal(value, max_bytes)
    if why is not None:
        raise RecordInvalidError(why, detail=what)


def _check_int(value: object, what: str, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise RecordInvalidError(f"must be an integer in [{lo}, {hi}]", detail=what)


def _check_time(value: object, what: str) -> None:
    _check_int(value, what, 0, MAX_TIME_MS)


def _check_optional_json(value: str | None, what: str) -> None:
    if value is not None:
        check_text(value, what)


def _check_sweep_cursor(cursor_json: str | None) -> None:
    if cursor_json is None:
        return
    check_text(cursor_json, "cursor_json")
    if utf8_length(cursor_json) > MAX_SWEEP_CURSOR_BYTES:
        raise RecordInvalidError(
            f"must be at most {MAX_SWEEP_CURSOR_BYTES} bytes of UTF-8", detail="cursor_json"
        )


# -- consumers --


def consumer_order(entry: ConsumerCursor) -> tuple[str, str]:
    """The listing order of consumer entries: by name, then tenant (the cross-tenant one first:
    tenants are never empty)."""
    return (entry.name, entry.tenant_id or "")


def check_consumer_put(put: ConsumerPut) -> None:
    """Every refusal of a cursor put (`X_JOB_RECORD_INVALID`), before anything is written; the
    Postgres driver's in-transaction put makes the same checks."""
    if not isinstance(put, ConsumerPut):
        raise RecordInvalidError("must be a ConsumerPut", detail="put")
    _check_fence(put.fence)
    _check_str(put.name, "name")
    if put.tenant_id is not None:
        _check_str(put.tenant_id, "tenant_id")
    _check_str(put.source, "source")
    _check_consumer_cursor(put.cursor_json, "cursor_json")
    if put.expect_json is not None:
        _check_consumer_cursor(put.expect_json, "expect_json")
    _check_int(put.records, "records", 0, MAX_CONSUMER_BATCH)
    if put.lag is not None:
        _check_int(put.lag, "lag", 0, MAX_SWEEP_ROWS)
    _check_time(put.now_ms, "now_ms")


def _check_consumer_cursor(text: object, what: str) -> None:
    if not isinstance(text, str) or not text:
        raise RecordInvalidError("must be JSON text", detail=what)
    # The size first: a huge text is refused without being parsed.
    if utf8_length(text) > MAX_CONSUMER_CURSOR_BYTES:
        raise RecordInvalidError(
            f"must be at most {MAX_CONSUMER_CURSOR_BYTES} bytes of UTF-8", detail=what
        )
    check_text(text, what)


def _check_fence(fence: Fence) -> None:
    job_id, worker_id, claims = fence.job_id, fence.worker_id, fence.claims
    # Every settle checks its fence: the usual one (ASCII ids, so a byte a character, without
    # NUL) is answered without `name_refusal`'s calls; anything else takes the full checks.
    if (
        type(job_id) is str
        and type(worker_id) is str
        and 0 < len(job_id) <= MAX_NAME_BYTES
        and 0 < len(worker_id) <= MAX_NAME_BYTES
        and job_id.isascii()
        and worker_id.isascii()
        and "\x00" not in job_id
        and "\x00" not in worker_id
        and type(claims) is int
        and 1 <= claims <= 2**62
    ):
        return
    _check_str(fence.job_id, "fence.job_id")
    _check_str(fence.worker_id, "fence.worker_id")
    _check_int(fence.claims, "fence.claims", 1, 2**62)


def _check_beat(beat: WorkerBeat) -> None:
    _check_str(beat.worker_id, "worker_id")
    check_text(beat.info_json, "info_json")
    _check_int(beat.ttl_ms, "ttl_ms", 1, MAX_LEASE_MS)
    _check_time(beat.now_ms, "now_ms")


def _check_id_list(values: object, what: str) -> None:
    """Refuse what is no list of ids before it is read as one: a string was read as the ids of
    its characters (`job_cancel_many("abc", ...)` cancelled jobs "a", "b" and "c"), a number a
    bare TypeError from `len`, and an iterator was read through by the checks (`job_get_many`
    then asked the store for nothing); a set was read on one store and a TypeError on
    another (Redis slices the list)."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise RecordInvalidError("must be a list of ids, not one string", detail=what)


def _check_ids(job_ids: Sequence[str]) -> None:
    _check_id_list(job_ids, "job_ids")
    if len(job_ids) > MAX_BULK_IDS:
        raise BatchTooLargeError(detail=f"{len(job_ids)} ids > {MAX_BULK_IDS}")
    for i in job_ids:
        _check_str(i, "job_ids")


def _check_lease_refs(refs: Sequence[LeaseRef]) -> None:
    if len(refs) > MAX_LEASE_BATCH:
        raise BatchTooLargeError(detail=f"{len(refs)} > {MAX_LEASE_BATCH}")
    for r in refs:
        _check_str(r.key, "key", MAX_LEASE_KEY_BYTES)
        _check_int(r.token, "token", 1, 2**62)


def _check_filter(f: JobFilter) -> None:
    for s in f.states:
        if not isinstance(s, JobState):
            raise RecordInvalidError("states must be JobState members", detail="filter.states")
    fields = (
        ("queue", f.queue),
        ("name", f.name),
        ("tenant_id", f.tenant_id),
        ("parent_id", f.parent_id),
        ("batch_id", f.batch_id),
        ("acts_for", f.acts_for),
    )
    for what, value in fields:
        if value is not None:
            _check_str(value, f"filter.{what}")


def _check_task_names(names: Sequence[str]) -> None:
    if isinstance(names, str | bytes) or not isinstance(names, Sequence):
        raise RecordInvalidError("must be a sequence of task names", detail="names")
    if len(names) > MAX_TASK_BATCH:
        raise BatchTooLargeError(detail=f"{len(names)} > {MAX_TASK_BATCH}")
    for n in names:
        _check_str(n, "name")
    if len(set(names)) != len(names):
        raise RecordInvalidError("a task is named twice", detail="names")


def _check_pause(pause: Pause) -> None:
    if pause.kind not in ("queue", "name", "task"):
        raise RecordInvalidError("a pause is by 'queue', 'name' or 'task'", detail="kind")
    _check_str(pause.value, "value")


# -- webhooks --


def _check_tenant(tenant_id: str | None) -> None:
    if tenant_id is not None:
        _check_str(tenant_id, "tenant_id")


def check_webhook_excerpt(excerpt: object) -> None:
    """Refuse an excerpt no store can hold or past `MAX_WEBHOOK_EXCERPT_BYTES` (empty is fine)."""
    if not isinstance(excerpt, str):
        raise RecordInvalidError("must be a string", detail="excerpt")
    why = unstorable(excerpt)
    if why is not None:
        raise RecordInvalidError(f"holds {why}", detail="excerpt")
    if len(excerpt) * 4 > MAX_WEBHOOK_EXCERPT_BYTES and utf8_length(excerpt) > (
        MAX_WEBHOOK_EXCERPT_BYTES
    ):
        raise RecordInvalidError(
            f"longer than {MAX_WEBHOOK_EXCERPT_BYTES} UTF-8 bytes", detail="excerpt"
        )


def check_webhook_attempt(put: WebhookAttemptPut) -> None:
    """Every refusal of `webhook_attempt_put`, before anything is written."""
    _check_fence(put.fence)
    _check_tenant(put.tenant_id)
    _check_str(put.endpoint, "endpoint")
    _check_str(put.event_id, "event_id")
    if put.outcome not in WEBHOOK_OUTCOMES:
        raise RecordInvalidError("must be 'delivered' or 'failed'", detail="outcome")
    if put.outcome == "delivered":
        if put.error is not None:
            raise RecordInvalidError("a delivered attempt carries no error", detail="error")
    else:
        _check_str(put.error, "error")
    if put.status_code is not None:
        _check_int(put.status_code, "status_code", 100, 599)
    _check_int(put.latency_ms, "latency_ms", 0, MAX_WEBHOOK_LATENCY_MS)
    check_webhook_excerpt(put.excerpt)
    _check_int(put.disable_after, "disable_after", 1, MAX_WEBHOOK_DISABLE_AFTER)
    _check_time(put.now_ms, "now_ms")


#: Strings this short are within their byte bound whatever they hold (4 UTF-8 bytes a character).
_SHORT_NAME: Final = MAX_NAME_BYTES // 4
_SHORT_KEY: Final = MAX_KEY_BYTES // 4


def check_new_job(job: NewJob) -> None:
    """Refuse a record any driver would store wrongly (`X_JOB_RECORD_INVALID`, naming the field).

    Every batch record passes here: a record whose fields are plainly fine by a few cheap
    tests (exact types, ASCII strings with no NUL short enough for their bound) needs only its
    JSON text checked; any other goes through the field-by-field checks, which name the field
    at fault in the same order as always.
    """
    if _plainly_fine(job):
        check_text(job.input_json, "input_json")
    else:
        _check_new_job_fields(job)


def check_new_jobs(jobs: NewJobs) -> None:
    """`check_new_job` of every record of `jobs`, raising what it raises for the first record
    refused: the shared fields are checked once (with the first record), then each record's
    own five by the same cheap tests, a record failing them checked field by field. The JSON
    texts of a `dumped` batch are not checked again (`dumps` wrote them, valid)."""
    check_new_job(jobs.shared)
    dumped = jobs.dumped
    acts = jobs.acts_for
    n = len(jobs)
    own = zip(
        _unmade(jobs.ids, n),
        _unmade(jobs.run_ids, n),
        jobs.keys,
        jobs.input_jsons,
        [None] * n if acts is None else acts,
        strict=True,
    )
    # Written out as `_plainly_fine` is: a helper call per field costs as much as its tests.
    for at, (i, r, k, text, af) in enumerate(own):
        if (
            type(i) is str
            and 0 < len(i) <= _SHORT_NAME
            and i.isascii()
            and "\x00" not in i
            and type(r) is str
            and 0 < len(r) <= _SHORT_NAME
            and r.isascii()
            and "\x00" not in r
            and type(k) is str
            and 0 < len(k) <= _SHORT_KEY
            and k.isascii()
            and "\x00" not in k
            and (
                af is None
                or (
                    type(af) is str
                    and 0 < len(af) <= _SHORT_NAME
                    and af.isascii()
                    and "\x00" not in af
                )
            )
        ):
            if not dumped:
                check_text(text, "input_json")
        else:
            check_new_job(jobs[at])


#: What `check_new_jobs` reads for an id `FreshIds` will make: `new_id()`'s form, valid.
_MADE_ID: Final = "00000000-0000-7000-8000-000000000000"


def _unmade(column: Sequence[str], n: int) -> Iterable[str]:
    """`column`, or for ids `FreshIds` will make (valid by construction) as many stand-ins, so
    checking a batch does not make its ids before the first write."""
    return repeat(_MADE_ID, n) if type(column) is FreshIds else column


def _plainly_fine(job: NewJob) -> bool:
    """True when every field but `input_json` is surely valid; False only means "look closer"."""
    # Written out field by field on purpose: a helper call per field costs as much as its tests,
    # and this runs for every record of every batch.
    i, r, n, q, k = job.id, job.run_id, job.name, job.queue, job.idempotency_key
    t, b, tp = job.tenant_id, job.enqueued_by, job.traceparent
    p, a, at, c = job.priority, job.max_attempts, job.run_at_ms, job.created_at_ms
    return (
        type(i) is str
        and 0 < len(i) <= _SHORT_NAME
        and i.isascii()
        and "\x00" not in i
        and type(r) is str
        and 0 < len(r) <= _SHORT_NAME
        and r.isascii()
        and "\x00" not in r
        and type(n) is str
        and 0 < len(n) <= _SHORT_NAME
        and n.isascii()
        and "\x00" not in n
        and type(q) is str
        and 0 < len(q) <= _SHORT_NAME
        and q.isascii()
        and "\x00" not in q
        and type(k) is str
        and 0 < len(k) <= _SHORT_KEY
        and k.isascii()
        and "\x00" not in k
        and (
            t is None
            or (type(t) is str and 0 < len(t) <= _SHORT_NAME and t.isascii() and "\x00" not in t)
        )
        and (
            b is None
            or (type(b) is str and 0 < len(b) <= _SHORT_NAME and b.isascii() and "\x00" not in b)
        )
        and (tp is None or (type(tp) is str and _TRACEPARENT.fullmatch(tp) is not None))
        and type(p) is int
        and PRIORITY_MIN <= p <= PRIORITY_MAX
        and type(a) is int
        and 1 <= a <= MAX_ATTEMPTS_LIMIT
        and type(at) is int
        and 0 <= at <= MAX_TIME_MS
        and type(c) is int
        and 0 <= c <= MAX_TIME_MS
        and job.parent_id is None
        and job.batch_id is None
        # acts-for: the org as the tenant's limits (the same short, NUL-free text).
        and (
            (af := job.acts_for) is None
            or (
                type(af) is str and 0 < len(af) <= _SHORT_NAME and af.isascii() and "\x00" not in af
            )
        )
    )


def _check_new_job_fields(job: NewJob) -> None:
    _check_str(job.id, "id")
    _check_str(job.run_id, "run_id")
    _check_str(job.name, "name")
    _check_str(job.queue, "queue")
    if job.tenant_id is not None:
        _check_str(job.tenant_id, "tenant_id")
    _check_str(job.idempotency_key, "idempotency_key", MAX_KEY_BYTES)
    if job.enqueued_by is not None:
        _check_str(job.enqueued_by, "enqueued_by")
    if job.parent_id is not None:
        _check_str(job.parent_id, "parent_id")
    if job.batch_id is not None:
        _check_str(job.batch_id, "batch_id")
    if job.acts_for is not None:  # acts-for
        _check_str(job.acts_for, "acts_for")
    check_text(job.input_json, "input_json")
    _check_int(job.priority, "priority", PRIORITY_MIN, PRIORITY_MAX)
    _check_int(job.max_attempts, "max_attempts", 1, MAX_ATTEMPTS_LIMIT)
    _check_time(job.run_at_ms, "run_at_ms")
    _check_time(job.created_at_ms, "created_at_ms")
    if job.traceparent is not None and (
        not isinstance(job.traceparent, str) or not _TRACEPARENT.fullmatch(job.traceparent)
    ):
        raise RecordInvalidError(
            "must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)", detail="traceparent"
        )


def check_step_put(put: StepPut) -> None:
    """Refuse a step record `step_put` would refuse, before it joins a batch."""
    _check_fence(put.fence)
    _check_str(put.name, "name")
    check_text(put.output_json, "output_json")
    _check_time(put.now_ms, "now_ms")


def check_ack(ack: Ack) -> None:
    """Refuse an ack `job_ack` would refuse (`X_JOB_RECORD_INVALID`, naming the field).

    A worker checks each settle with this before it sends it, so one bad item fails its own job
    instead of the whole batch.
    """
    _check_fence(ack.fence)
    _check_time(ack.now_ms, "now_ms")
    _check_optional_json(ack.result_json, "result_json")
    _check_optional_json(ack.progress_json, "progress_json")


def check_wait(wait: EventWait) -> None:
    """Refuse a wait no driver could store (`X_JOB_RECORD_INVALID`, naming the field)."""
    _check_str(wait.event, "wait.event")
    check_text(wait.match_json, "wait.match_json")
    if not wait.match_json.lstrip().startswith("{"):
        raise RecordInvalidError("a match must be a JSON object", detail="wait.match_json")
    _check_time(wait.since_ms, "wait.since_ms")
    if wait.tenant_id is not None:
        _check_str(wait.tenant_id, "wait.tenant_id")
    if wait.until_ms is not None:
        _check_time(wait.until_ms, "wait.until_ms")


def check_join_ids(job_ids: Sequence[str], what: str) -> None:
    """Refuse a join's dependency list no driver takes: empty, past `MAX_JOIN_IDS`, an id
    refused as a name, or an id named twice (`X_JOB_RECORD_INVALID` / `X_JOB_BATCH_TOO_LARGE`)."""
    if isinstance(job_ids, str) or not isinstance(job_ids, tuple) or not job_ids:
        raise RecordInvalidError("must be a non-empty tuple of job ids", detail=what)
    if len(job_ids) > MAX_JOIN_IDS:
        raise BatchTooLargeError(detail=f"{len(job_ids)} {what} ids > {MAX_JOIN_IDS}")
    for i in job_ids:
        _check_str(i, what)
    if len(set(job_ids)) != len(job_ids):
        raise RecordInvalidError("names a job twice", detail=what)


def check_nack(nack: Nack) -> None:
    """Refuse a nack `job_nack` would refuse (`X_JOB_RECORD_INVALID`, naming the field)."""
    _check_fence(nack.fence)
    if nack.join is not None:
        if nack.kind is not NackKind.PARK:
            raise RecordInvalidError("only a park waits for other jobs", detail="join")
        if nack.wait is not None:
            raise RecordInvalidError(
                "a park waits for an event or for jobs, not both", detail="join"
            )
        check_join_ids(nack.join, "join")
    if nack.wait is not None:
        if nack.kind is not NackKind.PARK:
            raise RecordInvalidError("only a park waits for an event", detail="wait")
        check_wait(nack.wait)
    _check_time(nack.now_ms, "now_ms")
    if nack.kind is NackKind.RETRY and nack.run_at_ms is None:
        raise RecordInvalidError("a retry needs run_at_ms", detail="run_at_ms")
    if nack.run_at_ms is not None:
        _check_time(nack.run_at_ms, "run_at_ms")
    if nack.error is not None:
        why = unstorable(nack.error)
        if why is not None:
            raise RecordInvalidError(f"holds {why}", detail="error")
    _check_optional_json(nack.progress_json, "progress_json")


# -- postings --


def check_accounts(accounts: Sequence[str]) -> None:
    """Refuse a list of accounts `posting_balances` would refuse: a string, empty, past
    `MAX_BALANCE_ACCOUNTS`, an account named twice (`X_JOB_RECORD_INVALID`) or an account no
    ledger holds (`X_LEDGER_ACCOUNT_INVALID`)."""
    if isinstance(accounts, str) or not isinstance(accounts, Sequence) or not accounts:
        raise RecordInvalidError("must be a non-empty list of accounts", detail="accounts")
    if len(accounts) > MAX_BALANCE_ACCOUNTS:
        raise BatchTooLargeError(detail=f"{len(accounts)} accounts > {MAX_BALANCE_ACCOUNTS}")
    for a in accounts:
        check_account(a)
    if len(set(accounts)) != len(accounts):
        raise RecordInvalidError("an account is named twice", detail="accounts")


def check_account(account: object) -> str:
    """`account` when a ledger may hold it (`ACCOUNT_PATTERN`), else `X_LEDGER_ACCOUNT_INVALID`
    naming it as code would spell it (a NUL or a lone surrogate stays printable)."""
    if not isinstance(account, str) or ACCOUNT_PATTERN.fullmatch(account) is None:
        raise LedgerAccountInvalidError(
            "an account is 1 to 200 ASCII letters, digits, '_', '.', ':', '/' or '-', starting"
            " with a letter or digit",
            detail=shown(account),
        )
    return account


def check_currency(currency: object) -> str:
    """`currency` when a ledger may hold it (`CURRENCY_PATTERN`), else
    `X_LEDGER_CURRENCY_INVALID`."""
    if not isinstance(currency, str) or CURRENCY_PATTERN.fullmatch(currency) is None:
        raise LedgerCurrencyInvalidError(
            "a currency is 3 to 12 capital letters or digits, starting with a letter (EUR)",
            detail=shown(currency),
        )
    return currency


def check_amount(amount: object, where: str) -> int:
    """`amount` when it is a whole, non-zero number of minor units of magnitude at most
    `MAX_POSTING_AMOUNT`, else `X_LEDGER_AMOUNT_INVALID` (a float, even 1.0, a bool, a
    `Decimal` or a string is refused: an amount is never rounded or parsed)."""
    if type(amount) is not int or amount == 0 or abs(amount) > MAX_POSTING_AMOUNT:
        raise LedgerAmountInvalidError(
            f"an amount is a non-zero integer of minor units, at most {MAX_POSTING_AMOUNT} in"
            f" magnitude, not {shown(amount, 40)}",
            detail=where,
        )
    return amount


def check_posting_lines(lines: object) -> tuple[PostingLine, ...]:
    """`lines` sorted by (account, currency) when they make a posting, else the `X_LEDGER_*`
    refusal: not a list or tuple of `PostingLine`, fewer than 2 or more than
    `MAX_POSTING_LINES`, an (account, currency) twice (`X_LEDGER_LINES_INVALID`); a refused
    account, currency or amount; amounts not summing to zero in each currency
    (`X_LEDGER_UNBALANCED`, naming the first such currency)."""
    if not isinstance(lines, list | tuple):
        raise LedgerLinesInvalidError("a posting's lines are a list", detail="lines")
    if not 2 <= len(lines) <= MAX_POSTING_LINES:
        raise LedgerLinesInvalidError(
            f"a posting has 2 to {MAX_POSTING_LINES} lines, not {len(lines)}", detail="lines"
        )
    seen: set[tuple[str, str]] = set()
    sums: dict[str, int] = {}
    for i, line in enumerate(lines):
        if not isinstance(line, PostingLine):
            raise LedgerLinesInvalidError("a line is a PostingLine", detail=f"lines[{i}]")
        check_account(line.account)
        check_currency(line.currency)
        check_amount(line.amount, f"lines[{i}].amount")
        pair = (line.account, line.currency)
        if pair in seen:
            raise LedgerLinesInvalidError(
                "one line per account and currency", detail=f"{line.account} {line.currency}"
            )
        seen.add(pair)
        sums[line.currency] = sums.get(line.currency, 0) + line.amount
    for currency in sorted(sums):
        if sums[currency] != 0:
            raise LedgerUnbalancedError(
                f"the {currency} lines sum to {sums[currency]}, not 0", detail=currency
            )
    return tuple(sorted(lines, key=lambda line: (line.account, line.currency)))
