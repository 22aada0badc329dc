"""`RedisDriver`: the `JobDriver` contract on Redis, one Lua script per operation.

Key layout (every key shares the hash tag `{prefix}`, so a Redis Cluster keeps one prefix in one
slot and every script declares every key it touches in KEYS):

- `{p}:job:state`   hash id -> the mutable row, 13 NUL-joined fields (`lua/includes/row.lua`):
  state, claims, claimed_by, attempt, lease_until, run_at, finished_at, priority, max_attempts,
  queue, name, tenant, key. Small, so a settle rewrites it whole; the idempotency namespace is
  its tail and the fence is a prefix test (`running NUL claims NUL worker NUL`).
- `{p}:job:data`    hash id -> run_id, created_at, enqueued_by, input_json, traceparent (written
  once; rows from before traceparent have four fields); and `id NUL "a"` -> the org the row
  acts for, when it has one (acts-for: `lua/includes/row.lua` put_data).
- `{p}:job:error|progress|result`  hash id -> last_error / progress_json / result_json.
- `{p}:job:claimed|attempts`  hash id -> the latest claim's time / its attempt history.
- `{p}:job:live`    hash (name NUL tenant NUL key) -> id of the live row holding the namespace.
- `{p}:lease:<queue>` zset id by lease end: the queue's running rows (so a claim reads the
  lapsed leases of the queues it asks for, and no others).
- `{p}:due:<queue>` zset id by `priority * 2**42 + run_at_ms` (< 2**49, exact in a double):
  ready rows and parked rows with a time; equal scores order by id bytewise, which is code-point
  order for UTF-8, so a zset range IS the (priority, run_at, id) order. `{p}:parked:<queue>`
  repeats the parked ones so `queue_demand` can count ready rows alone.
- `{p}:finished:<state>` zset id by finished_at_ms, one per final state: the rows
  `job_purge` may delete, in its order (equal scores by id bytewise). Every script that finishes
  a row adds it (ack, nack fail/refuse, cancel, the claim's bury); requeue removes it.
- `{p}:pause:queue`, `{p}:pause:name` sets (the claim reads both), `{p}:pause:task` (paused
  scheduled tasks: the scheduler reads it, no claim does); `{p}:worker` hash; `{p}:wake` hash
  queue -> slot.
- The operator family (`lua/includes/account.lua`, docs/redis.md): `{p}:job:created` (zset, lex
  order = listing order), `{p}:queue:count` (hash: per queue its total and final-state counts;
  ready, running and parked are derived from the queue's zsets), `{p}:schema`, and the settle
  counters `{p}:counter` (hash) with `{p}:counter:minute|hour` (zsets of buckets). Every settling
  script moves its counter itself; the bulk calls read their rows' queues first (one HMGET).
- `{p}:step:*`, `{p}:wait*`, `{p}:event*`: the step and event families
  (`lua/includes/durable.lua`); event matches compare canonical lines (`jobs_redis.match`).
  A script finds these keys among its KEYS by exact name, so a caller may place them anywhere
  before the keys a script reads from the end (the finished and accounting keys).
- `{p}:hold:<key>` (zset token by expiry), `{p}:holder:<key>` (hash token -> holder NUL stamp,
  NUL holder -> token) per lease key, and `{p}:hold-token` (INCR): the lease family
  (`lua/includes/lease.lua`). A lease key may hold any bytes, so a call hands each of its
  lease keys' pair in KEYS; `hold:` and `holder:` never collide with `lease:<queue>`.
- `{p}:task` hash task name -> mark (watermark NUL fired NUL fired_job_id NUL fired_at): the
  task family. `task_fire.lua` fences on the watermark and enqueues through
  `lua/includes/enqueue.lua`, the very code `job_enqueue.lua` runs, in the same script.
- The flow family (`lua/includes/flows.lua`): a row of it has four more state-row fields (join,
  flags, parent, batch; every other row keeps its 13), `{p}:join:waiters` and
  `{p}:join:pending` (zsets of edges, lex-ranged per dependency / per waiter), and the pub/sub
  channel `{p}:finish` a watched row's id is published on. A finish releasing a waiter names
  that waiter's `due`/`parked` keys itself (same slot): its caller cannot know them.
- `{p}:posting` (hash `tenant NUL key` -> a posting) and `{p}:balance` (hash `tenant NUL
  account` -> its sums per currency, decimal text): the posting family
  (`lua/includes/posting.lua`).
- `{p}:sweep` (hash run_id -> the ledger entry) and the zsets `{p}:sweep:started`,
  `{p}:sweep:name`, `{p}:sweep:done`: the sweep family (`lua/includes/sweep.lua`); counts are
  decimal text, never a Lua number, so they stay exact past 2**53.
- `{p}:consumer` (hash `name NUL tenant` -> the entry) and `{p}:consumer:names` (zset, the
  listing order): the consumer cursors (`lua/includes/consumer.lua`).

Why job rows live in a few fixed hashes rather than a key per job: the claim picks rows the
caller cannot name in advance, and a cluster-safe script may only touch keys it was handed. With
fixed hashes the claim's KEYS are known up front (the fixed keys plus `due`/`parked` of each
asked queue). The price: a settle must name the row's per-queue keys, so the driver remembers
the queue of the jobs it claimed and reads it first (one HMGET) for any other id.

Cluster: `redis+cluster://host:port` (or `rediss+cluster://`, or `cluster=True`) connects through
`RedisCluster`. One prefix lives in one slot, so a cluster gives failover, not sharding, within a
prefix; shard by giving applications different prefixes.

Durability is Redis's own: without AOF `appendfsync everysec`/`always`, a server crash loses the
jobs written since the last snapshot.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Final, cast

from jobs_core.attempts import (
    ABANDONED_ERROR,
    AttemptOutcome,
    AttemptRecord,
    attempt_error,
    from_entry,
    nack_attempt_outcome,
    tail_json,
)
from jobs_core.driver import (
    ENQUEUE_CHUNK,
    MAX_BULK_IDS,
    Capabilities,
    JobDriver,
    WakeSubscription,
)
from jobs_core.errors import (
    DriverError,
    DriverUnavailableError,
    DriverUrlInvalidError,
    RecordInvalidError,
)
from jobs_core.loops import LoopLocal
from jobs_core.lost_claims import ClaimCall, HeldBurials, LostClaim, LostClaims
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
    SweepKind,
    SweepRecord,
    SweepStart,
    SweepStartAnswer,
    SweepStatus,
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
    HOUR_MS,
    LEASE_CLOCK_KEEP_MS,
    LEASE_LAPSED_ERROR,
    MINUTE_MS,
    SAGA_STEP,
    drop_before,
    fold_before,
    lapsed_by,
    posting_lines_of,
    posting_lines_text,
)
from jobs_core.states import JobState
from jobs_core.urls import encode_userinfo, mask_text, mask_url
from jobs_core.wake import Trails
from jobs_redis.keys import Keys
from jobs_redis.match import lines_of_text
from jobs_redis.scripts import LuaScript, load_all

log = logging.getLogger("jobs.redis")

#: Due scores pack priority above run_at: `priority * 2**42 + run_at_ms`.
_PRIORITY_UNIT: Final = 2**42
#: How many job ids -> queue the driver remembers from its claims (for nack without a read).
_QUEUE_MEMORY: Final = 100_000
_STATES: Final = {s.value: s for s in JobState}
#: The one-character answers of the bulk scripts (`lua/job_*_many.lua`, promote, remove).
_CANCEL: Final = {
    "c": CancelAnswer.CANCELLED,
    "f": CancelAnswer.FINISHED,
    "n": CancelAnswer.NOT_FOUND,
}
_PROMOTE: Final = {
    "p": PromoteAnswer.PROMOTED,
    "a": PromoteAnswer.ALREADY_DUE,
    "x": PromoteAnswer.NOT_READY,
    "n": PromoteAnswer.NOT_FOUND,
}
_REMOVE: Final = {"x": RemoveAnswer.REMOVED, "r": RemoveAnswer.RUNNING, "n": RemoveAnswer.NOT_FOUND}
_REQUEUE: Final = {
    "r": RequeueAnswer.REQUEUED,
    "l": RequeueAnswer.LIVE,
    "d": RequeueAnswer.DUPLICATE,
    "n": RequeueAnswer.NOT_FOUND,
    "u": RequeueAnswer.UNWOUND,
}
#: How often a bulk call re-reads its rows' queues when a row moved queue under it.
_STALE_TRIES: Final = 5
#: About how many dependency ids one `join_enqueue` script call carries (an item is never cut).
_JOIN_CHUNK_IDS: Final = 20_000
#: Seconds `finish_subscribe` waits for its channel to prove itself before it returns.
_FINISH_PROVE_S: Final = 5.0
#: Lease keys' holdings indexed per `migrate_leases` call.
_HOLD_PAGE: Final = 500
#: The store layout this version writes (`migrate` marks it; see `Keys.schema`).
_SCHEMA: Final = "2"
#: The final states in the order the purge and requeue scripts take their `finished:*` keys.
_FINISHED_ORDER: Final = ("cancelled", "completed", "dead", "failed")

_CLUSTER_SCHEMES: Final = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def _redis_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(errors meaning the store is unreachable, errors meaning the store refused the command)."""
    from redis import exceptions as rx

    unavailable: tuple[type[BaseException], ...] = (
        rx.ConnectionError,
        rx.TimeoutError,
        rx.ClusterDownError,
        rx.MasterDownError,
        rx.TryAgainError,
        rx.ReadOnlyError,
        rx.RedisClusterException,
        OSError,
        TimeoutError,
    )
    return unavailable, (rx.ResponseError, rx.DataError)


class RedisDriver(JobDriver):
    """Jobs in Redis: as durable as the server's persistence settings.

    `url`: `redis://[:password@]host:port/db`, `rediss://…`, `unix:///path/redis.sock?db=0`, or
    `redis+cluster://host:port` for a Redis Cluster. `prefix` names this app's keys (a hash tag),
    so several apps or tests share one server. `client`, when given, is used instead of one
    made from `url` (it must decode responses; the driver never closes it) — fakeredis's
    `FakeAsyncRedis(decode_responses=True)` plugs in this way. `connect_timeout` and
    `socket_timeout` are seconds; a refused or dropped connection raises
    `DriverUnavailableError` at once (no retries: the worker's poll is the retry).
    `wake_slot_ms` bounds the wake PUBLISH to one per queue per slot of the enqueuer's clock.
    Callers on several event loops share one driver: each loop gets its own client, closed when
    that loop shuts down or by `close()` (a given `client` is shared as is: one loop only).
    """

    enqueue_columns: ClassVar[bool] = True

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "ujobs",
        client: Any = None,
        cluster: bool | None = None,
        connect_timeout: float = 1.0,
        socket_timeout: float = 30.0,
        wake_slot_ms: int = 5,
    ) -> None:
        self.url = url
        self.keys = Keys(prefix)
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        self.cluster = cluster if cluster is not None else scheme in _CLUSTER_SCHEMES
        if wake_slot_ms < 1:
            raise RecordInvalidError("must be at least 1", detail="wake_slot_ms")
        self.wake_slot_ms = wake_slot_ms
        self._unavailable, self._refused = _redis_errors()
        from redis.exceptions import NoScriptError

        #: Imported once here, not by every script call (`_run`).
        self._no_script: type[BaseException] = NoScriptError
        self._scripts = load_all()
        self._owned = client is None
        self._client: Any = (
            client
            if client is not None
            else self._make_client(url, scheme, connect_timeout, socket_timeout)
        )
        pool = getattr(self._client, "connection_pool", None)
        if pool is not None and not pool.connection_kwargs.get("decode_responses", False):
            raise RecordInvalidError("the client must use decode_responses=True", detail="client")
        self._queue_of: dict[str, str] = {}
        #: The claims in flight, answered and lost: those whose reply was lost give their rows
        #: back (`_lost_look` finds them, `_interrupt` gives them back).
        #: Rows a claim of a worker buried whose reply was lost, answered with its next claim.
        self._held_buried = HeldBurials(log)
        self._lost_claims = LostClaims(
            log,
            self._lost_look,
            self._interrupt,
            lambda: self._loops.peek() is None,
            # A claim's answer as its jobs and the rows it buried (`_job_claim`).
            lambda rows: (r.id for r in rows),
            self._lost_buried_look,
            self._held_buried.hold,
        )
        #: Queues rows have waited for events in (learned from parks and publishes): a publish
        #: names their keys up front, so it runs its script once, not twice.
        self._wait_queues: set[str] = set()
        # A redis-py asyncio client belongs to one event loop: the first loop to call takes the
        # one made above, each other loop gets its own (a given `client` serves every loop).
        self._client_args = (url, scheme, connect_timeout, socket_timeout)
        self._first_taken = False
        self._loops: LoopLocal[_LoopClient] = LoopLocal(
            self._new_loop_client, _close_loop_client, _abandon_loop_client
        )

    def _new_loop_client(self) -> _LoopClient:
        if not self._owned:
            held = _LoopClient(self._client, owned=False)
        elif not self._first_taken:
            self._first_taken = True
            held = _LoopClient(self._client, owned=True)
        else:
            held = _LoopClient(self._make_client(*self._client_args), owned=True)
        if self.capabilities().wake:
            channel = self.keys.channel
            held.trails = Trails(self.wake_slot_ms, lambda q: held.client.publish(channel(q), q))
        return held

    def _make_client(self, url: str, scheme: str, connect_timeout: float, timeout: float) -> Any:
        from redis.asyncio import Redis
        from redis.asyncio.cluster import RedisCluster
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        options: dict[str, Any] = {
            "decode_responses": True,
            "socket_connect_timeout": connect_timeout,
            "socket_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
        }
        # The password split where `mask_url` splits it, so an unencoded `@` or `/` in it
        # reaches the server whole (redis-py would cut it at the first `/`).
        url = encode_userinfo(url)
        try:
            if self.cluster:
                base = _CLUSTER_SCHEMES.get(scheme, scheme or "redis")
                plain = base + url[len(scheme) :] if scheme else url
                return RedisCluster.from_url(plain, **options)
            client = Redis.from_url(url, **options)
            # A connection is only built at the first call: build one now (no I/O), so an
            # option redis-py does not know is refused here, typed, not at that call.
            pool = client.connection_pool
            pool.connection_class(**pool.connection_kwargs)
            return client
        except TypeError as exc:
            unknown = re.search(r"unexpected keyword argument '([^']+)'", str(exc))
            if unknown is None:
                raise
            raise DriverUrlInvalidError(
                f"unknown URL option {unknown[1]!r}; the driver's own options are prefix,"
                " the rest go to redis-py",
                detail=mask_url(self.url),
            ) from None

    @property
    def client(self) -> Any:
        """The running loop's redis-py asyncio client (a `Redis` or a `RedisCluster`)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._client
        return self._loops.get().client

    def describe(self) -> str:
        kind = "redis cluster" if self.cluster else "redis"
        return f"{kind} {mask_url(self.url)} prefix={self.keys.prefix}"

    def capabilities(self) -> Capabilities:
        # A cluster's wake is pub/sub through redis-py's asyncio `RedisCluster`, which subscribes
        # from redis-py 8.0 on; with an older one the poll alone finds new jobs.
        return Capabilities(
            wake=not self.cluster or _cluster_subscribes(),
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

    async def open(self) -> None:
        """Check the server answers; `DriverUnavailableError` at once when it does not."""
        await self._read(self._loops.get().client.ping, "ping")

    async def close(self) -> None:
        """Close the clients of every loop that used this driver (a given `client` stays open)."""
        await self._loops.close_all()

    async def migrate(self) -> str:
        """Index rows stored by an older version (`ujobs db upgrade`); idempotent, safe beside
        running workers of this version.

        Finished rows go into the finished index retention reads; every row goes into the
        listing index and is counted in its queue (the schema "2" mark is set once the scan is
        through: from then on no settle checks whether a row is counted). Rows that workers of
        an OLDER version write while this runs may be missed: stop them first. Lease holdings
        go into the expiry index `lease_purge` reads, webhook attempts into the age index
        `webhook_attempt_purge` reads.
        """
        k = self.keys
        keys = (k.state, *(k.finished(s) for s in _FINISHED_ORDER), *k.account())
        client = self._loops.get().client
        was = await self._read(lambda: client.get(k.schema), "GET")
        added = 0
        stored = False
        async for page, done in self._hscan(k.state):
            stored = stored or bool(page)
            if page or done:
                added += int(await self._run("migrate", keys, ["1" if done else "0", *page]))
        added += await self._index_holdings()
        added += await self._index_attempts()
        if was == _SCHEMA:
            return f"schema {_SCHEMA} current ({added} index entries added)"
        if not stored and added == 0:
            return f"created schema {_SCHEMA} (a fresh prefix: nothing to index)"
        return f"upgraded to schema {_SCHEMA}: {added} index entries added"

    async def _index_holdings(self) -> int:
        """Put every lease holding into `hold-expiry` (holdings stored before the index existed:
        `lease_purge` reads only the index); answers how many were not in it. A SCAN of the
        prefix's `hold:<key>` zsets, `migrate_leases.lua` per page of them."""
        k = self.keys
        client = self._loops.get().client
        added = 0
        page: list[str] = []
        try:
            async for hold in client.scan_iter(match=k.pattern("hold:"), count=1000):
                page.append(hold)
                if len(page) >= _HOLD_PAGE:
                    added += int(await self._run("migrate_leases", (*page, k.hold_expiry), ()))
                    page = []
        except self._unavailable as exc:
            raise DriverUnavailableError(detail=f"SCAN: {_why(exc, self.url)}") from exc
        if page:
            added += int(await self._run("migrate_leases", (*page, k.hold_expiry), ()))
        return added

    async def _index_attempts(self) -> int:
        """Put every webhook attempt into `webhook:attempt-age` (attempts recorded before the
        index existed: `webhook_attempt_purge` reads only the index); answers how many were not
        in it. An HSCAN of `webhook:attempt`, `migrate_webhooks.lua` per page."""
        k = self.keys
        added = 0
        async for page, _ in self._hscan(k.webhook_attempt):
            if page:
                added += int(
                    await self._run(
                        "migrate_webhooks", (k.webhook_attempt, k.webhook_attempt_age), page
                    )
                )
        return added

    async def _hscan(self, key: str) -> AsyncIterator[tuple[list[str], bool]]:
        """The fields of hash `key`, a page (about 1,000) at a time, each with whether it is the
        last (which may be empty); a field written meanwhile may be missed or seen twice."""
        client = self._loops.get().client
        cursor: Any = 0
        while True:

            def scan(at: Any = cursor) -> Any:
                return client.hscan(key, at, count=1000)

            cursor, page = await self._read(scan, "HSCAN")
            done = int(cursor) == 0
            yield list(page), done
            if done:
                return

    # -- running a script ---------------------------------------------------------------------

    async def _run(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[object],
        here: _LoopClient | None = None,
    ) -> Any:
        """Run one operation's script by SHA, loading it on NOSCRIPT; errors become typed.
        `here`: the running loop's holder when the caller has it (finding it is a system call
        on Python 3.11: `asyncio.get_running_loop` asks for the process id)."""
        script: LuaScript = self._scripts[name]
        client = (self._loops.get() if here is None else here).client
        try:
            try:
                return await client.evalsha(script.sha, len(keys), *keys, *args)
            except self._no_script:
                await client.script_load(script.source)
                return await client.evalsha(script.sha, len(keys), *keys, *args)
        except self._unavailable as exc:
            raise DriverUnavailableError(detail=f"{name}: {_why(exc, self.url)}") from exc
        except self._refused as exc:
            raise DriverError(f"script {name} failed: {_why(exc, self.url)}", detail=name) from exc

    async def _read(self, call: Callable[[], Any], what: str) -> Any:
        try:
            return await call()
        except self._unavailable as exc:
            raise DriverUnavailableError(detail=f"{what}: {_why(exc, self.url)}") from exc
        except self._refused as exc:
            raise DriverError(f"{what} failed: {_why(exc, self.url)}", detail=what) from exc

    async def _queues_of(self, ids: Sequence[str]) -> dict[str, str]:
        """The queue of each id that exists: remembered from a claim, else read in one HMGET."""
        out = {i: self._queue_of[i] for i in ids if i in self._queue_of}
        missing = list(dict.fromkeys(i for i in ids if i not in out))
        if missing:
            k = self.keys
            client = self._loops.get().client
            rows = await self._read(lambda: client.hmget(k.state, missing), "HMGET")
            for i, row in zip(missing, rows, strict=True):
                if row is not None:
                    out[i] = row.split("\x00", 10)[9]
        return out

    # -- jobs -----------------------------------------------------------------------------------

    def _wake_slot(self, job: NewJob) -> str:
        if job.run_at_ms > job.created_at_ms:
            return ""
        return str(job.created_at_ms // self.wake_slot_ms)

    def _enqueue_call(self, job: NewJob) -> tuple[tuple[str, ...], tuple[object, ...]]:
        """The head of the KEYS and the ARGV `includes/enqueue.lua` reads in place (what
        `job_enqueue` and `task_fire` both start with)."""
        k = self.keys
        ns, state, data, score = _encode(job)
        keys = (k.state, k.data, k.live, k.due(job.queue), k.wake)
        args = (job.id, ns, state, data, score, self._wake_slot(job), job.queue)
        return keys, (*args, k.channel(job.queue))

    async def _job_enqueue(self, job: NewJob) -> EnqueueResult:
        keys, args = self._enqueue_call(job)
        here = self._loops.get()
        began = time.monotonic()
        got = await self._run("job_enqueue", (*keys, *self.keys.account()), args, here)
        trails = here.trails
        if trails is not None:
            if got == _INSERTED_QUIET:
                trails.quiet(job.queue, job.created_at_ms, began)
            elif got == 1 and args[5]:
                trails.published(job.queue, began)
        return _enqueued(job, got)

    async def _job_enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """One script call per chunk of `ENQUEUE_CHUNK`, in order; each chunk is atomic.

        Every record was checked (`JobDriver.job_enqueue_many`) before the first script call,
        and the script refuses nothing, so a refusal never leaves part of a batch. What can: an
        outage (or a server-side error such as OOM under `maxmemory`) after the first chunk ran
        leaves the chunks before it written and answers `X_DRIVER_UNAVAILABLE` (or the script's
        error); calling again with the same batch is safe, the written records answer deduped.
        """
        # Ids the facade just made: no row has one, so the script skips looking them up.
        fresh = type(jobs) is NewJobs and jobs.take_fresh()
        # Each chunk cut as it is packed: the facade's ids (`FreshIds`) are made as read.
        chunks = _Chunks(jobs)
        pool = getattr(self._loops.get().client, "connection_pool", None)
        if self.cluster or pool is None:
            out: list[EnqueueResult] = []
            for at in range(len(chunks)):
                chunk = chunks[at]
                keys, args = self._chunk_call(chunk, fresh)
                out += _chunk_answers(chunk, await self._run("job_enqueue_many", keys, args))
            return out
        return await self._enqueue_pipelined(pool, chunks, fresh)

    async def _enqueue_pipelined(
        self, pool: Any, chunks: _Chunks, fresh: bool
    ) -> list[EnqueueResult]:
        """The chunks in order on ONE connection, each sent while the server runs the last.

        Pipelining keeps the order (a later record still dedupes against an earlier one) and
        lets the client pack chunk n+1, and read chunk n-1's answers, while the server runs
        chunk n. The first chunk is answered before the second is sent: it loads the script
        should the server lack it. Each call is packed here (`_resp`), not by redis-py, whose
        packer cost about a µs a record.
        """
        from redis.exceptions import NoScriptError

        script = self._scripts["job_enqueue_many"]
        conn = await _pool_connection(pool)
        out: list[EnqueueResult] = []
        try:
            first = self._chunk_resp(script.sha, chunks[0], fresh)
            await conn.send_packed_command(first)
            # Packed while the server runs the first chunk; sent once that one is answered.
            ahead = self._chunk_resp(script.sha, chunks[1], fresh) if len(chunks) > 1 else b""
            try:
                got = await conn.read_response()
            except NoScriptError:
                await conn.send_command("SCRIPT", "LOAD", script.source)
                await conn.read_response()
                await conn.send_packed_command(first)
                got = await conn.read_response()
            out += _chunk_answers(chunks[0], got)
            if ahead:
                await conn.send_packed_command(ahead)
            for at in range(1, len(chunks)):
                # One chunk queued behind the one running, so the server never waits for us.
                if at + 1 < len(chunks):
                    await conn.send_packed_command(
                        self._chunk_resp(script.sha, chunks[at + 1], fresh)
                    )
                out += _chunk_answers(chunks[at], await conn.read_response())
        except BaseException as exc:
            # Replies may still be in flight on this connection: it cannot be reused.
            await conn.disconnect()
            if isinstance(exc, self._unavailable):
                raise DriverUnavailableError(
                    detail=f"job_enqueue_many: {_why(exc, self.url)}"
                ) from exc
            if isinstance(exc, self._refused):
                raise DriverError(
                    f"script job_enqueue_many failed: {_why(exc, self.url)}",
                    detail="job_enqueue_many",
                ) from exc
            raise
        finally:
            await pool.release(conn)
        return out

    def _chunk_resp(self, sha: str, jobs: Sequence[NewJob], fresh: bool) -> bytes:
        """One `job_enqueue_many` EVALSHA call as the bytes of its RESP command."""
        keys, args = self._chunk_call(jobs, fresh)
        return _resp(["EVALSHA", sha, str(len(keys)), *keys, *map(str, args)])

    def _chunk_call(
        self, jobs: Sequence[NewJob], fresh: bool = False
    ) -> tuple[list[str], list[object]]:
        """The KEYS and ARGV of one `job_enqueue_many` script call; `fresh`: no row has any of
        these ids (`NewJobs.take_fresh`), so the script need not look them up."""
        if type(jobs) is NewJobs:
            return self._columns_call(jobs, fresh)
        k = self.keys
        queue_index: dict[str, int] = {}
        slots: dict[str, str] = {}
        packs = _Packs()
        u = _U14
        for job in jobs:
            q = queue_index.get(job.queue)
            if q is None:
                q = queue_index[job.queue] = len(queue_index) + 1
            slot = self._wake_slot(job)
            if slot:
                slots.setdefault(job.queue, slot)
            ns, state, data, score = _encode(job)
            org = 0 if job.acts_for is None else _blen(job.acts_for)
            li, ls, ld = _blen(job.id), _blen(state), _blen(data)
            packs.add(
                f"{u[q]}{_U1[bool(slot)]}{_u49(score)}{u[_blen(_links(job))]}{u[li]}{u[ls]}"
                f"{u[_blen(ns)]}{u[org]}{_u21(ld)}{job.created_at_ms:013d}{job.id}{state}{data}",
                36 + li + ls + ld,
            )
        args: list[object] = [len(jobs), int(fresh), *packs.done()]
        keys = [k.state, k.data, k.live, k.wake]
        for queue in queue_index:
            keys.append(k.due(queue))
            args += (queue, k.channel(queue), slots.get(queue, ""))
        keys += k.account()
        return keys, args

    def _columns_call(self, jobs: NewJobs, fresh: bool) -> tuple[list[str], list[object]]:
        """`_chunk_call` of a batch as columns: the rows' shared parts built once, each
        record one string of the same form (`_encode`'s rows, one queue)."""
        k = self.keys
        s = jobs.shared
        slot = self._wake_slot(s)
        ns_head = f"{s.name}\x00{s.tenant_id or ''}\x00"
        state_head = (
            f"ready\x000\x00\x000\x00\x00{s.run_at_ms}\x00\x00"
            f"{s.priority}\x00{s.max_attempts}\x00{s.queue}\x00{ns_head}"
        )
        links = _links(s)
        ns_bytes, state_bytes = _blen(ns_head), _blen(state_head) + _blen(links)
        u = _U14
        # The head's fields every record shares: its queue (the one), due, score and tail.
        head = f"{u[1]}{_U1[bool(slot)]}{_u49(s.priority * _PRIORITY_UNIT + s.run_at_ms)}"
        head += u[_blen(links)]
        made = f"{s.created_at_ms:013d}"
        mid = f"\x00{s.created_at_ms}\x00{s.enqueued_by or ''}\x00"
        end = f"\x00{s.traceparent or ''}"
        # A record's bytes but its id, key and data row (`_Packs.add`'s size).
        fixed = 36 + state_bytes
        ends = _blen(mid) + _blen(end)
        packs = _Packs()
        rows = zip(jobs.ids, jobs.run_ids, jobs.keys, jobs.input_jsons, strict=True)
        acts = jobs.acts_for
        for at, (i, r, key, text) in enumerate(rows):
            # `isascii` is O(1): an ASCII text's byte length is its len().
            li = len(i) if i.isascii() else len(i.encode())
            kb = len(key) if key.isascii() else len(key.encode())
            ld = (len(r) if r.isascii() else len(r.encode())) + ends
            ld += len(text) if text.isascii() else len(text.encode())
            org = None if acts is None else acts[at]
            if org is None:
                packs.add(
                    f"{head}{u[li]}{u[state_bytes + kb]}{u[ns_bytes + kb]}{u[0]}{_u21(ld)}"
                    f"{made}{i}{state_head}{key}{links}{r}{mid}{text}{end}",
                    fixed + li + kb + ld,
                )
            else:
                ob = _blen(org)
                ld += 1 + ob
                packs.add(
                    f"{head}{u[li]}{u[state_bytes + kb]}{u[ns_bytes + kb]}{u[ob]}{_u21(ld)}"
                    f"{made}{i}{state_head}{key}{links}{r}{mid}{text}{end}\x00{org}",
                    fixed + li + kb + ld,
                )
        args: list[object] = [
            len(jobs),
            int(fresh),
            *packs.done(),
            s.queue,
            k.channel(s.queue),
            slot,
        ]
        return [k.state, k.data, k.live, k.wake, k.due(s.queue), *k.account()], args

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        k = self.keys
        queues = list(dict.fromkeys(params.queues))
        keys = [k.state, k.data, k.live, k.error, k.pause_queue, k.pause_name, k.worker]
        for q in queues:
            keys += (k.due(q), k.parked(q), k.lease(q))
        keys += (k.wait, k.wait_index, k.join_waiters, k.join_pending, k.claimed, k.attempts)
        keys += (k.finished("dead"), k.finished("failed"), *k.account())
        lease_end = params.now_ms + params.lease_ms
        drop = sorted(params.drop_exhausted)
        beat = params.beat
        args: list[object] = [
            params.now_ms,
            params.worker_id,
            params.limit,
            lease_end,
            LEASE_LAPSED_ERROR,
            len(queues),
            *queues,
            len(drop),
            *drop,
            beat.worker_id if beat is not None else "",
            _worker_row(beat) if beat is not None else "",
            lapsed_by(params),
            _ABANDONED_TAIL,  # -- attempts --
        ]
        lost_claims = self._lost_claims
        call = lost_claims.start(params)
        try:
            claimed, buried = await self._run("job_claim", keys, args)
        except (DriverUnavailableError, asyncio.CancelledError):
            # The reply unread: the connection dropped, timed out, or its caller went (redis-py
            # drops the connection of a command cancelled midway), the script perhaps run.
            lost_claims.lost(call)
            raise
        finally:
            # No await from here to `answered` below: a give-back sees this claim's rows either
            # in flight or answered, never neither.
            lost_claims.end(call)
        worker = params.worker_id
        jobs: list[ClaimedJob] = []
        remember = self._queue_of
        if len(remember) > _QUEUE_MEMORY:
            remember.clear()
        fields = claimed.split("\x00") if claimed else []
        for i in range(0, len(fields), 20):
            job_id = fields[i]
            s = fields[i + 1 : i + 14]
            d = fields[i + 15 : i + 20]
            remember[job_id] = s[9]
            jobs.append(
                ClaimedJob(
                    id=job_id,
                    run_id=d[0],
                    name=s[10],
                    queue=s[9],
                    tenant_id=s[11] or None,
                    idempotency_key=s[12],
                    input_json=d[3],
                    priority=int(s[7]),
                    attempt=int(s[3]),
                    max_attempts=int(s[8]),
                    claims=int(s[1]),
                    worker_id=worker,
                    lease_until_ms=lease_end,
                    created_at_ms=int(d[1]),
                    enqueued_by=d[2] or None,
                    traceparent=d[4] or None,
                    join=_join(fields[i + 14]),
                )
            )
        dead = sorted(
            (
                BuriedJob(buried[i], buried[i + 1], buried[i + 2], _STATES[buried[i + 3]])
                for i in range(0, len(buried), 4)
            ),
            key=lambda b: b.id,
        )
        taken = tuple(jobs)
        lost_claims.answered(call, (*taken, *dead))
        held = self._held_buried.take(worker)
        if held:
            dead = sorted([*dead, *held], key=lambda b: b.id)
        return ClaimResult(taken, tuple(dead))

    async def _lost_buried_look(self, lost: LostClaim) -> list[BuriedJob]:
        """The rows a claim whose reply was lost may have buried: finished `dead` or `failed`
        at its `now_ms` (the `finished:*` zsets), in its queues, `last_error` the lapse's."""
        k = self.keys
        client = self._loops.get().client
        params = lost.call.params
        at = params.now_ms
        queues = set(params.queues)
        ids: list[str] = []
        for key in (k.finished("dead"), k.finished("failed")):
            ids += await self._read(
                lambda: client.zrangebyscore(key, at, at),  # noqa: B023
                "ZRANGEBYSCORE",
            )
        if not ids:
            return []
        rows = await self._read(lambda: client.hmget(k.state, ids), "HMGET")
        errors = await self._read(lambda: client.hmget(k.error, ids), "HMGET")
        out = []
        for i, row, error in zip(ids, rows, errors, strict=True):
            s = row.split("\x00") if row is not None else []
            if s and s[0] in ("dead", "failed") and s[9] in queues and error == LEASE_LAPSED_ERROR:
                out.append(BuriedJob(i, s[10], s[9], _STATES[s[0]]))
        return sorted(out, key=lambda b: b.id)

    async def _interrupt(self, call: ClaimCall, fences: Sequence[Fence]) -> None:
        """`call`'s rows of `fences` back to `ready`: an interrupt nack at the claim's clock now,
        as a drain gives back what it held unstarted. Raises as the nack does."""
        now = call.now_ms()
        back = await self.job_nack([Nack(f, NackKind.INTERRUPT, now) for f in fences])
        log.info("jobs.redis.lost_claim_given_back: %d of %d jobs", sum(back), len(back))

    async def _lost_look(self, lost: LostClaim) -> list[Fence]:
        """The rows a claim whose reply was lost may have taken (`LostClaims`): its worker's,
        `running`, in its queues, leased to its lease end, claimed at its `now_ms`."""
        k = self.keys
        client = self._loops.get().client
        params = lost.call.params
        worker = params.worker_id
        ids: list[str] = []
        for key in (k.lease(q) for q in dict.fromkeys(params.queues)):
            ids += await self._read(
                lambda: client.zrangebyscore(key, lost.lease_end, lost.lease_end),  # noqa: B023
                "ZRANGEBYSCORE",
            )
        if not ids:
            return []
        rows = await self._read(lambda: client.hmget(k.state, ids), "HMGET")
        at = await self._read(lambda: client.hmget(k.claimed, ids), "HMGET")
        claimed_at = str(params.now_ms)
        fences = []
        for i, row, when in zip(ids, rows, at, strict=True):
            s = row.split("\x00") if row is not None else []
            if s and s[0] == "running" and s[2] == worker and when == claimed_at:
                fences.append(Fence(i, int(s[1]), worker))
        return fences

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        k = self.keys
        queue_of = await self._queues_of([a.fence.job_id for a in acks])
        keys = [k.state, k.live, k.result, k.progress]
        index: dict[str, int] = {}
        args: list[object] = []
        for a in acks:
            f = a.fence
            q = self._index(queue_of.get(f.job_id), index, keys, k.lease)
            args += (
                f.job_id,
                f"{f.claims}\x00{f.worker_id}\x00{a.now_ms}\x00{q}\x00"
                f"{a.result_json or ''}\x00{a.progress_json or ''}",
            )
        keys += (k.join_waiters, k.join_pending, k.claimed, k.attempts)
        keys += (k.finished("completed"), *k.account())
        got = await self._run("job_ack", keys, args)
        for a in acks:
            self._queue_of.pop(a.fence.job_id, None)
        return [c == "1" for c in got]

    @staticmethod
    def _index(
        queue: str | None,
        index: dict[str, int],
        keys: list[str],
        *key_of: Callable[[str], str],
    ) -> int:
        """The 1-based index of `queue` among a call's queues, adding its keys on first sight."""
        if queue is None:
            return 0
        q = index.get(queue)
        if q is None:
            q = index[queue] = len(index) + 1
            keys += (f(queue) for f in key_of)
        return q

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        k = self.keys
        queue_of = await self._queues_of([n.fence.job_id for n in nacks])
        index: dict[str, int] = {}
        keys = [k.state, k.live, k.error, k.progress]
        args: list[object] = []
        for n in nacks:
            f = n.fence
            q = self._index(queue_of.get(f.job_id), index, keys, k.due, k.parked, k.lease)
            run_at = "" if n.run_at_ms is None else n.run_at_ms
            error = "" if n.error is None else "=" + n.error
            args += (
                f.job_id,
                f"{f.claims}\x00{f.worker_id}\x00{n.kind.value}\x00{n.now_ms}\x00{run_at}\x00"
                f"{'1' if n.dead_letter else '0'}\x00{q}\x00{n.progress_json or ''}\x00{error}"
                f"\x00{self._wait_meta(n.wait, queue_of.get(f.job_id))}\x00{_join_meta(n.join)}"
                f"\x00{_nack_tail(n)}",
            )
        keys += (k.event, k.event_name, k.wait, k.wait_index, k.join_waiters, k.join_pending)
        keys += (k.claimed, k.attempts)
        keys += (k.finished("dead"), k.finished("failed"), *k.account())
        got = await self._run("job_nack", keys, args)
        for n in nacks:
            self._queue_of.pop(n.fence.job_id, None)
        return [c == "1" for c in got]

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        k = self.keys
        queue_of = await self._queues_of([b.fence.job_id for b in beats])
        keys = [k.state]
        index: dict[str, int] = {}
        args: list[object] = []
        for b in beats:
            f = b.fence
            q = self._index(queue_of.get(f.job_id), index, keys, k.lease)
            args += (f.job_id, f"{f.claims}\x00{f.worker_id}\x00{b.now_ms + b.lease_ms}\x00{q}")
        got = await self._run("job_heartbeat", keys, args)
        return [c == "1" for c in got]

    async def _job_progress(self, items: Sequence[Progress]) -> list[bool]:
        k = self.keys
        args: list[object] = []
        for p in items:
            f = p.fence
            args += (f.job_id, f"{f.claims}\x00{f.worker_id}\x00{p.progress_json}")
        got = await self._run("job_progress", (k.state, k.progress), args)
        return [c == "1" for c in got]

    # -- the operator's bulk calls ----------------------------------------------------------------

    async def _bulk(
        self,
        name: str,
        job_ids: Sequence[str],
        now_ms: int | None,
        fixed: Sequence[str],
        per_queue: Sequence[Callable[[str], str]],
        *,
        durable: Sequence[str] = (),
        account: bool,
        extras: Sequence[object] = (),
    ) -> str:
        """Run one bulk script (`lua/includes/bulk.lua`): one answer character per id; `extras`
        are the script's own arguments, after the queue names.

        A script's KEYS must name each row's queue keys up front, so the queues are read first
        (never from the claim memory: an id may have been purged and reused). A row re-enqueued
        into another queue between that read and the script makes the script answer "stale"
        having written nothing; the read and the call are then repeated.
        """
        for _ in range(_STALE_TRIES):
            for i in job_ids:
                self._queue_of.pop(i, None)
            queue_of = await self._queues_of(job_ids)
            keys = list(fixed)
            index: dict[str, int] = {}
            args: list[object] = ["" if now_ms is None else now_ms, len(job_ids)]
            for i in job_ids:
                args += (i, self._index(queue_of.get(i), index, keys, *per_queue))
            args += (*index, *extras)
            # The durable keys (found by name) after the queues' keys, which are read by index.
            keys += durable
            if account:
                keys += self.keys.account()
            got = await self._run(name, keys, args)
            if got != "stale":
                return str(got)
        raise DriverError(f"script {name}: rows kept moving between queues", detail=name)

    async def _job_cancel_many(self, job_ids: Sequence[str], now_ms: int) -> list[CancelAnswer]:
        k = self.keys
        got = await self._bulk(
            "job_cancel_many",
            job_ids,
            now_ms,
            (k.state, k.live, k.finished("cancelled")),
            (k.lease, k.due, k.parked),
            durable=(k.wait, k.wait_index, k.join_waiters, k.join_pending, k.claimed, k.attempts),
            account=True,
        )
        return [_CANCEL[c] for c in got]

    async def _job_promote(self, job_ids: Sequence[str], now_ms: int) -> list[PromoteAnswer]:
        k = self.keys
        got = await self._bulk("job_promote", job_ids, now_ms, (k.state,), (k.due,), account=False)
        return [_PROMOTE[c] for c in got]

    async def _job_remove(self, job_ids: Sequence[str]) -> list[RemoveAnswer]:
        k = self.keys
        got = await self._bulk(
            "job_remove",
            job_ids,
            None,
            (
                k.state,
                k.error,
                k.progress,
                k.result,
                k.live,
                *(k.finished(s) for s in _FINISHED_ORDER),
            ),
            (k.due, k.parked),
            durable=(
                k.wait,
                k.wait_index,
                k.step_out,
                k.step_index,
                k.join_waiters,
                k.join_pending,
                k.claimed,
                k.attempts,
            ),
            account=True,
        )
        return [_REMOVE[c] for c in got]

    async def _job_requeue_many(self, params: RequeueParams) -> list[RequeueAnswer]:
        k = self.keys
        got = await self._bulk(
            "job_requeue_many",
            params.job_ids,
            params.now_ms,
            (k.state, k.live, *(k.finished(s) for s in _FINISHED_ORDER)),
            (k.due,),
            durable=(k.step_out, k.step_index),
            account=True,
            extras=(SAGA_STEP, *(run or "" for _, run in params.items())),
        )
        return [_REQUEUE[c] for c in got]

    # -- the operator's reads ---------------------------------------------------------------------

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        k = self.keys
        start = "" if after is None else _created_member(after.created_at_ms, after.id)
        states = "\x00".join(sorted(s.value for s in f.states))
        taken, last = await self._run(
            "job_list",
            (k.created, k.state, k.data),
            (
                start,
                limit,
                scan,
                states,
                f.queue or "",
                f.name or "",
                f.tenant_id or "",
                f.parent_id or "",
                f.batch_id or "",
                f.acts_for or "",  # acts-for
            ),
        )
        jobs = tuple(
            _summary(taken[i][13:], int(taken[i][:13]), taken[i + 1], taken[i + 2])
            for i in range(0, len(taken), 3)
        )
        return JobSlice(jobs, ListKey(int(last[:13]), last[13:]) if last else None)

    async def _queue_stats(self, now_ms: int) -> list[QueueStats]:
        k = self.keys
        client = self._loops.get().client
        fields = await self._read(lambda: client.hkeys(k.queue_count), "HKEYS")
        queues = sorted({f.rsplit("\x00", 1)[0] for f in fields})
        if not queues:
            return []
        keys = [k.queue_count]
        for q in queues:
            keys += (k.due(q), k.parked(q), k.lease(q))
        got = await self._run("queue_stats", keys, (now_ms, *queues))
        out: list[QueueStats] = []
        for i, q in enumerate(queues):
            total, completed, failed, dead, cancelled, ready, running, oldest = got[
                8 * i : 8 * i + 8
            ]
            if not total:
                continue  # every row of it went since the HKEYS
            by_state = {
                JobState.READY: ready,
                JobState.RUNNING: running,
                JobState.COMPLETED: completed,
                JobState.FAILED: failed,
                JobState.DEAD: dead,
                JobState.CANCELLED: cancelled,
            }
            by_state[JobState.PARKED] = total - sum(by_state.values())
            counts = tuple((s, int(by_state[s])) for s in JobState)
            out.append(QueueStats(q, counts, int(oldest) if oldest else None))
        return out

    # -- counters -------------------------------------------------------------------------------

    async def _counter_fold(self, now_ms: int, limit: int) -> int:
        k = self.keys
        got = await self._run(
            "counter_fold",
            (k.counters, k.counter_minutes, k.counter_hours),
            (fold_before(now_ms), drop_before(now_ms), limit),
        )
        return int(got)

    async def _counter_read(self, params: CounterReadParams) -> list[CounterRow]:
        k = self.keys
        names, queues = params.names, params.queues
        got = await self._run(
            "counter_read",
            (k.counters, k.counter_minutes, k.counter_hours),
            (
                params.since_ms,
                params.until_ms,
                "0" if names is None else "1",
                "\x00".join(names or ()),
                "0" if queues is None else "1",
                "\x00".join(queues or ()),
            ),
        )
        out: list[CounterRow] = []
        for i in range(0, len(got), 11):
            width, member, *counts = got[i : i + 11]
            bucket, name, queue = member.split("\x00")
            out.append(
                CounterRow(
                    name,
                    queue,
                    int(bucket),
                    MINUTE_MS if width == "m" else HOUR_MS,
                    *(int(c) if c else 0 for c in counts),
                )
            )
        return out

    async def _job_purge(self, params: PurgeParams) -> int:
        k = self.keys
        keeps = {
            "cancelled": params.cancelled_ms,
            "completed": params.completed_ms,
            "dead": params.dead_ms,
            "failed": params.failed_ms,
        }
        cutoffs = [
            "" if keeps[s] is None else params.now_ms - keeps[s]  # type: ignore[operator]
            for s in _FINISHED_ORDER
        ]
        got = await self._run(
            "job_purge",
            (
                k.state,
                k.data,
                k.error,
                k.progress,
                k.result,
                *(k.finished(s) for s in _FINISHED_ORDER),
                k.wait,
                k.wait_index,
                k.step_out,
                k.step_index,
                k.join_waiters,
                k.join_pending,
                k.claimed,
                k.attempts,
                *k.account(),
            ),
            (params.limit, *cutoffs),
        )
        return int(got)

    async def _job_get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        return await self._records("job_get_many", job_ids)

    async def _records(self, script: str, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """`job_get_many`'s answer, from that script or one answering as it does: one call per
        `MAX_BULK_IDS` ids, so no read holds the server for long (each slice is read at once,
        the slices one after another)."""
        out: dict[str, JobRecord] = {}
        for at in range(0, len(job_ids), MAX_BULK_IDS):
            out |= await self._records_of(script, job_ids[at : at + MAX_BULK_IDS])
        return out

    async def _records_of(self, script: str, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        k = self.keys
        got = await self._run(
            script,
            (k.state, k.data, k.error, k.progress, k.result, k.wait, k.claimed, k.attempts),
            job_ids,
        )
        out: dict[str, JobRecord] = {}
        for i, job_id in enumerate(job_ids):
            state, data, error, progress, result, wait, acts, claimed, history = got[
                9 * i : 9 * i + 9
            ]
            if state is None:
                continue
            record = _record(job_id, state, data, error, progress, result, wait, acts)
            out[job_id] = replace(
                record, claimed_at_ms=_opt_int(claimed or ""), attempts=_history(history)
            )
        return out

    def _wait_meta(self, wait: EventWait | None, queue: str | None) -> str:
        """A nack item's wait fields: event NUL since NUL match lines NUL match JSON text NUL
        tenant NUL until ("" for none), or five NULs for no wait."""
        if wait is None:
            return "\x00" * 5
        if queue is not None:
            self._wait_queues.add(queue)
        fields = (
            wait.event,
            str(wait.since_ms),
            lines_of_text(wait.match_json),
            wait.match_json,
            wait.tenant_id or "",
            "" if wait.until_ms is None else str(wait.until_ms),
        )
        return "\x00".join(fields)

    # -- steps and events -----------------------------------------------------------------------

    async def _step_list(self, run_id: str) -> list[StepRecord]:
        k = self.keys
        got = await self._run("step_list", (k.step_out, k.step_index), (run_id,))
        out: list[StepRecord] = []
        for i in range(0, len(got), 2):
            at, output = got[i + 1].split("\x00", 1)
            out.append(StepRecord(run_id, got[i], output, int(at)))
        return out

    async def _step_put(self, puts: Sequence[StepPut]) -> list[bool]:
        k = self.keys
        args: list[object] = []
        for p in puts:
            f = p.fence
            args += (
                f.job_id,
                f"{f.claims}\x00{f.worker_id}\x00{p.now_ms}\x00{p.name}\x00{p.output_json}",
            )
        got = await self._run("step_put", (k.state, k.data, k.step_out, k.step_index), args)
        return [c == "1" for c in got]

    async def _event_find(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        k = self.keys
        until = "" if wait.until_ms is None else wait.until_ms
        args = (wait.event, wait.since_ms, until, wait.tenant_id or "", now_ms)
        got = await self._run(
            "event_find", (k.event, k.event_name), (*args, lines_of_text(wait.match_json))
        )
        if got is None:
            return None
        event_id, published, expires, data, tenant, everyone = got
        return EventRecord(
            event_id,
            wait.event,
            data,
            int(published),
            int(expires),
            tenant or None,
            everyone == "1",
        )

    async def _event_publish(self, event: EventRecord) -> int:
        """One script call, or more when a woken row lives in a queue this driver has not seen
        rows wait in: the script then writes nothing and names those queues (a cluster-safe
        script touches only the keys it was handed), and runs again with their keys."""
        k = self.keys
        lines = lines_of_text(event.data_json)
        while True:
            queues = sorted(self._wait_queues)
            keys = [k.state, k.event, k.event_name, k.event_expiry, k.wait, k.wait_index]
            args: list[object] = [
                event.id,
                event.name,
                event.published_at_ms,
                event.expires_at_ms,
                lines,
                event.data_json,
                event.tenant_id or "",
                "1" if event.all_tenants else "0",
                len(queues),
            ]
            for q in queues:
                keys += (k.due(q), k.parked(q))
                args += (q, k.channel(q))
            got = await self._run("event_publish", keys, args)
            if not isinstance(got, list):
                return int(got)
            self._wait_queues.update(got[1:])

    async def _event_purge(self, now_ms: int, limit: int) -> int:
        k = self.keys
        got = await self._run(
            "event_purge", (k.event, k.event_name, k.event_expiry), (now_ms, limit)
        )
        return int(got)

    # -- leases ---------------------------------------------------------------------------------

    def _holding_keys(self, keys: Sequence[str]) -> tuple[list[str], dict[str, int]]:
        """The KEYS of a lease call (each distinct lease key's `hold` and `holder`, in first-seen
        order) and each lease key's 1-based place among them (`lua/includes/lease.lua`)."""
        index: dict[str, int] = {}
        out: list[str] = []
        for key in keys:
            if key not in index:
                index[key] = len(index) + 1
                out += (self.keys.hold(key), self.keys.holder(key))
        return out, index

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        keys, index = self._holding_keys([t.key for t in takes])
        fields = "\x00".join(
            f"{index[t.key]}\x00{t.holder}\x00{t.limit}\x00{t.ttl_ms}\x00{int(t.stamp)}"
            for t in takes
        )
        k = self.keys
        got = await self._run(
            "lease_take", (*keys, k.hold_expiry, k.hold_clock, k.hold_token), (now_ms, fields)
        )
        return [
            Lease(t.key, t.holder, int(got[2 * i]), int(got[2 * i + 1]), t.stamp)
            if got[2 * i]
            else None
            for i, t in enumerate(takes)
        ]

    async def _lease_renew(self, renews: Sequence[LeaseRenew], now_ms: int) -> list[bool]:
        keys, index = self._holding_keys([r.key for r in renews])
        fields = "\x00".join(f"{index[r.key]}\x00{r.token}\x00{r.ttl_ms}" for r in renews)
        k = self.keys
        got = await self._run("lease_renew", (*keys, k.hold_expiry, k.hold_clock), (now_ms, fields))
        return [c == "1" for c in got]

    async def _lease_release(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        return await self._end_holdings("lease_release", refs, now_ms)

    async def _lease_abandon(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        return await self._end_holdings("lease_abandon", refs, now_ms)

    async def _end_holdings(self, name: str, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        keys, index = self._holding_keys([r.key for r in refs])
        fields = "\x00".join(f"{index[r.key]}\x00{r.token}" for r in refs)
        got = await self._run(
            name, (*keys, self.keys.hold_expiry, self.keys.hold_clock), (now_ms, fields)
        )
        return [c == "1" for c in got]

    async def _lease_holders(self, key: str, now_ms: int) -> list[Lease]:
        k = self.keys
        got = await self._run(
            "lease_holders", (k.hold(key), k.holder(key), k.hold_clock), (now_ms, key)
        )
        out: list[Lease] = []
        for i in range(0, len(got), 3):
            token, expires, row = got[i : i + 3]
            holder, stamp = row.rsplit("\x00", 1)
            out.append(Lease(key, holder, int(token), int(expires), stamp == "1"))
        return out

    async def _lease_purge(self, now_ms: int, limit: int) -> int:
        """One `lease_purge` script: the expiry index's head, each holding's keys named from it
        (see `lua/lease_purge.lua`); first, the clocks it may drop."""
        k = self.keys
        idle = now_ms - LEASE_CLOCK_KEEP_MS
        got = await self._run("lease_purge", (k.hold_expiry, k.hold_clock), (now_ms, limit, idle))
        return int(got)

    # -- tasks ----------------------------------------------------------------------------------

    async def _task_arm(self, names: Sequence[str], now_ms: int) -> list[TaskMark]:
        got = await self._run("task_arm", (self.keys.task,), (now_ms, *names))
        return [_mark(n, m) for n, m in zip(names, got, strict=True)]

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        """One `task_fire` script call: the fence, the enqueue (`includes/enqueue.lua`, shared
        with `job_enqueue`) and the mark's move happen together or not at all."""
        k = self.keys
        keys, args = self._enqueue_call(fire.job)
        got, mark = await self._run(
            "task_fire",
            (*keys, k.task, *k.account()),
            (
                *args,
                fire.name,
                fire.expect_ms,
                f"{fire.watermark_ms}\x00{fire.occurrence_ms}\x00",
                fire.now_ms,
            ),
        )
        stored = _mark(fire.name, mark) if mark is not None else None
        return TaskFireAnswer(None if got == 0 else _enqueued(fire.job, got), stored)

    async def _task_marks(self, names: Sequence[str]) -> dict[str, TaskMark]:
        got = await self._run("task_marks", (self.keys.task,), names)
        return {n: _mark(n, m) for n, m in zip(names, got, strict=True) if m is not None}

    # -- pauses, queues, workers ----------------------------------------------------------------

    async def _pause_add(self, pause: Pause) -> bool:
        k = self.keys
        got = await self._run("pause_add", _pause_keys(k), (pause.kind, pause.value))
        return bool(got == 1)

    async def _pause_remove(self, pause: Pause) -> bool:
        k = self.keys
        got = await self._run("pause_remove", _pause_keys(k), (pause.kind, pause.value))
        return bool(got == 1)

    async def _pause_list(self) -> list[Pause]:
        k = self.keys
        queues, names, tasks = await self._run("pause_list", _pause_keys(k), ())
        return (
            [Pause("queue", q) for q in queues]
            + [Pause("name", n) for n in names]
            + [Pause("task", t) for t in tasks]
        )

    async def _queue_demand(self, queues: Sequence[str], now_ms: int) -> dict[str, int]:
        k = self.keys
        asked = list(dict.fromkeys(queues))
        keys = [k.pause_queue]
        for q in asked:
            keys += (k.due(q), k.parked(q))
        got = await self._run("queue_demand", keys, (now_ms, *asked))
        return {q: int(n) for q, n in zip(asked, got, strict=True)}

    async def _worker_beat(self, beat: WorkerBeat) -> None:
        await self._run("worker_beat", (self.keys.worker,), (beat.worker_id, _worker_row(beat)))

    async def _worker_forget(self, worker_id: str) -> bool:
        got = await self._run("worker_forget", (self.keys.worker,), (worker_id,))
        return bool(got == 1)

    async def _worker_purge(self, now_ms: int, limit: int) -> int:
        return int(await self._run("worker_purge", (self.keys.worker,), (now_ms, limit)))

    async def _worker_list(self, now_ms: int) -> list[WorkerInfo]:
        got = await self._run("worker_list", (self.keys.worker,), (now_ms,))
        out: list[WorkerInfo] = []
        for i in range(0, len(got), 2):
            last, expires, info = got[i + 1].split("\x00", 2)
            out.append(WorkerInfo(got[i], info, int(last), int(expires)))
        return out

    # -- sweeps ---------------------------------------------------------------------------------
    # One script per call (`lua/sweep_*.lua`, keys in `lua/includes/sweep.lua`). Every count
    # travels as a Python int's decimal text and is stored as text: exact past 2**53.

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        k = self.keys
        f = start.fence
        got = await self._run(
            "sweep_start",
            (k.state, k.data, k.sweep, k.sweep_started, k.sweep_name, k.sweep_done),
            (
                f.job_id,
                f"{f.claims}\x00{f.worker_id}\x00",
                start.run_id,
                start.name,
                start.scope,
                start.environment,
                start.kind,
                start.checksum,
                "" if start.expected is None else str(start.expected),
                str(start.now_ms),
            ),
        )
        if got[0] == 0:
            return SweepStartAnswer(None)
        entry = _sweep(got[1], got[2])
        return SweepStartAnswer(entry) if got[0] == 1 else SweepStartAnswer(None, blocked_by=entry)

    async def _sweep_advance(self, advance: SweepAdvance) -> bool:
        k = self.keys
        got = await self._run("sweep_advance", (k.state, k.data, k.sweep), _advance_args(advance))
        return bool(got == 1)

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        k = self.keys
        step = checkpoint.step
        got = await self._run(
            "sweep_checkpoint",
            (k.state, k.data, k.sweep, k.step_out, k.step_index),
            (*_advance_args(checkpoint.advance), step.name, str(step.now_ms), step.output_json),
        )
        return bool(got == 1)

    async def _sweep_finish(self, finish: SweepFinish) -> bool:
        k = self.keys
        f = finish.fence
        got = await self._run(
            "sweep_finish",
            (k.state, k.data, k.sweep, k.sweep_done),
            (
                f.job_id,
                f"{f.claims}\x00{f.worker_id}\x00",
                finish.run_id,
                finish.status,
                finish.error or "",
                str(finish.now_ms),
            ),
        )
        return bool(got == 1)

    async def _sweep_list(self, name: str | None, limit: int) -> list[SweepRecord]:
        k = self.keys
        got = await self._run(
            "sweep_list",
            (k.sweep, k.sweep_started, k.sweep_name),
            ("0" if name is None else "1", name or "", str(limit)),
        )
        return [_sweep(got[i], got[i + 1]) for i in range(0, len(got), 2)]

    # -- postings -------------------------------------------------------------------------------
    # One script per call (`lua/posting_*.lua`, keys in `lua/includes/posting.lua`). Amounts
    # travel as a Python int's decimal text and balances are stored as text: exact at any size.

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        k = self.keys
        f = put.fence
        lines_json = posting_lines_text(put.lines)
        args: list[object] = [
            f.job_id,
            f"{f.claims}\x00{f.worker_id}\x00",
            put.tenant_id or "",
            put.key,
            lines_json,
            str(put.now_ms),
        ]
        for line in put.lines:
            args += [line.account, line.currency, str(line.amount)]
        got = await self._run("posting_put", (k.state, k.posting, k.balance), args)
        if got[0] == "fence_lost":
            return PostingPutAnswer("fence_lost", None)
        if got[0] == "applied":
            return PostingPutAnswer(
                "applied", PostingRecord(put.tenant_id, put.key, f.job_id, put.lines, put.now_ms)
            )
        stored = _posting(put.tenant_id, put.key, got[1])
        if got[0] == "already_applied":
            return PostingPutAnswer("already_applied", stored)
        return PostingPutAnswer("conflict", stored)

    async def _posting_get(self, tenant_id: str | None, key: str) -> PostingRecord | None:
        got = await self._run("posting_get", (self.keys.posting,), (tenant_id or "", key))
        return None if got is None else _posting(tenant_id, key, got)

    async def _posting_balances(
        self, tenant_id: str | None, accounts: Sequence[str]
    ) -> list[BalanceRow]:
        got = await self._run(
            "posting_balances", (self.keys.balance,), (tenant_id or "", *accounts)
        )
        out: list[BalanceRow] = []
        for i in range(0, len(got), 2):
            fields = got[i + 1].split("\x00")
            for j in range(0, len(fields), 3):
                out.append(BalanceRow(got[i], fields[j], int(fields[j + 1]), int(fields[j + 2])))
        return out

    # -- consumers ------------------------------------------------------------------------------
    # One script per call (`lua/consumer_*.lua`, keys in `lua/includes/consumer.lua`); counts
    # travel and are stored as decimal text.

    async def _consumer_cursor_get(self, name: str, tenant_id: str | None) -> ConsumerCursor | None:
        member = f"{name}\x00{tenant_id or ''}"
        got = await self._run("consumer_cursor_get", (self.keys.consumer,), (member,))
        return None if got is None else _consumer(member, got)

    async def _consumer_cursor_put(self, put: ConsumerPut) -> bool:
        k = self.keys
        f = put.fence
        got = await self._run(
            "consumer_cursor_put",
            (k.state, k.consumer, k.consumer_names),
            (
                f.job_id,
                f"{f.claims}\x00{f.worker_id}\x00",
                f"{put.name}\x00{put.tenant_id or ''}",
                "0" if put.expect_json is None else "1",
                put.expect_json or "",
                put.source,
                put.cursor_json,
                str(put.records),
                "" if put.lag is None else str(put.lag),
                f.worker_id,
                str(put.now_ms),
            ),
        )
        return bool(got == 1)

    async def _consumer_list(self, name: str | None, limit: int) -> list[ConsumerCursor]:
        k = self.keys
        got = await self._run(
            "consumer_list",
            (k.consumer, k.consumer_names),
            ("0" if name is None else "1", name or "", str(limit)),
        )
        return [_consumer(got[i], got[i + 1]) for i in range(0, len(got), 2)]

    # -- flows ----------------------------------------------------------------------------------

    async def _join_enqueue(self, items: Sequence[JoinEnqueue]) -> list[JoinEnqueueAnswer]:
        """One `join_enqueue` script call per chunk of items (each item atomic, in order; a
        chunk holds at most `ENQUEUE_CHUNK` items and about `_JOIN_CHUNK_IDS` dependency ids)."""
        out: list[JoinEnqueueAnswer] = []
        chunk: list[JoinEnqueue] = []
        ids = 0
        for item in items:
            if chunk and (len(chunk) >= ENQUEUE_CHUNK or ids + len(item.after) > _JOIN_CHUNK_IDS):
                out += await self._join_chunk(chunk)
                chunk, ids = [], 0
            chunk.append(item)
            ids += len(item.after)
        return out + await self._join_chunk(chunk)

    async def _join_chunk(self, items: Sequence[JoinEnqueue]) -> list[JoinEnqueueAnswer]:
        k = self.keys
        queue_index: dict[str, int] = {}
        for item in items:
            queue_index.setdefault(item.job.queue, len(queue_index) + 1)
        keys = [k.state, k.data, k.live, k.wake, k.join_waiters, k.join_pending]
        args: list[object] = [len(queue_index)]
        for queue in queue_index:
            keys.append(k.due(queue))
            args += (queue, k.channel(queue))
        for item in items:
            job = item.job
            ns, _, data, score = _encode(job)
            args += (
                job.id,
                ns,
                _flow_row(job),
                data,
                score,
                self._wake_slot(job),
                queue_index[job.queue],
                item.policy.value,
                len(item.after),
                *item.after,
            )
        got = await self._run("join_enqueue", (*keys, *k.account()), args)
        out: list[JoinEnqueueAnswer] = []
        for item, answer in zip(items, got, strict=True):
            if answer == "+":
                out.append(JoinEnqueueAnswer(EnqueueResult(item.job.id, deduped=False)))
            elif answer.startswith("="):
                out.append(JoinEnqueueAnswer(EnqueueResult(answer[1:], deduped=True)))
            else:
                out.append(JoinEnqueueAnswer(None, tuple(answer[1:].split("\x00"))))
        return out

    async def _join_pending(self, job_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        asked = list(dict.fromkeys(job_ids))
        got = await self._run("join_pending", (self.keys.state, self.keys.join_pending), asked)
        return {i: tuple(deps.split("\x00")) for i, deps in zip(asked, got, strict=True) if deps}

    async def _job_watch(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        return await self._records("job_watch", job_ids)

    async def finish_subscribe(self, on_finish: Callable[[str], None]) -> WakeSubscription | None:
        """Deliver the id of each WATCHED row a script finishes (pub/sub on the prefix's finish
        channel, through the wake's machinery); None where `capabilities()` declares no wake.

        Returns once a probe crossed the channel (at most `_FINISH_PROVE_S`), so a finish
        written after the call is heard; past that bound it returns unproven, and the waiter's
        bounded poll, its guarantee anyway, carries on alone until the channel proves itself.
        """
        from jobs_redis.wake import RedisWake

        if not self.capabilities().wake:
            return None
        sub = RedisWake.finishes(self, on_finish)
        sub.start()
        await sub.proven(_FINISH_PROVE_S)
        return sub

    # -- webhooks -------------------------------------------------------------------------------
    # One script per call (`lua/webhook_*.lua`, keys in `lua/includes/webhook.lua`); a tenant
    # travels as "" for None.

    async def _webhook_endpoint_put(self, put: WebhookEndpointPut) -> WebhookEndpoint:
        k = self.keys
        got = await self._run(
            "webhook_endpoint_put",
            (k.webhook_endpoint, k.webhook_endpoints),
            (put.tenant_id or "", put.endpoint, put.url, str(put.now_ms)),
        )
        return _webhook_endpoint(put.tenant_id, put.endpoint, got)

    async def _webhook_endpoint_get(
        self, tenant_id: str | None, endpoint: str
    ) -> WebhookEndpoint | None:
        got = await self._run(
            "webhook_endpoint_get", (self.keys.webhook_endpoint,), (tenant_id or "", endpoint)
        )
        return None if got is None else _webhook_endpoint(tenant_id, endpoint, got)

    async def _webhook_endpoint_list(self, limit: int) -> list[WebhookEndpoint]:
        k = self.keys
        got = await self._run(
            "webhook_endpoint_list", (k.webhook_endpoint, k.webhook_endpoints), (str(limit),)
        )
        out = []
        for i in range(0, len(got), 2):
            tenant, endpoint = got[i].split("\x00")
            out.append(_webhook_endpoint(tenant or None, endpoint, got[i + 1]))
        return out

    async def _webhook_endpoint_enable(
        self, enable: WebhookEndpointEnable
    ) -> WebhookEndpoint | None:
        got = await self._run(
            "webhook_endpoint_enable",
            (self.keys.webhook_endpoint,),
            (enable.tenant_id or "", enable.endpoint, str(enable.now_ms)),
        )
        return None if got is None else _webhook_endpoint(enable.tenant_id, enable.endpoint, got)

    async def _webhook_attempt_put(self, put: WebhookAttemptPut) -> WebhookAttemptAnswer:
        k = self.keys
        f = put.fence
        got = await self._run(
            "webhook_attempt_put",
            (
                k.state,
                k.webhook_endpoint,
                k.webhook_attempt,
                k.webhook_attempts,
                k.webhook_attempt_age,
            ),
            (
                f.job_id,
                f"{f.claims}\x00{f.worker_id}\x00",
                f"{f.claims:019d}",
                put.tenant_id or "",
                put.endpoint,
                put.event_id,
                put.outcome,
                "" if put.status_code is None else str(put.status_code),
                str(put.latency_ms),
                put.excerpt,
                put.error or "",
                str(put.disable_after),
                str(put.now_ms),
            ),
        )
        if got[0] == 0:
            return WebhookAttemptAnswer(False, None)
        return WebhookAttemptAnswer(True, _webhook_endpoint(put.tenant_id, put.endpoint, got[1]))

    async def _webhook_attempt_purge(self, before_ms: int, limit: int) -> int:
        k = self.keys
        return int(
            await self._run(
                "webhook_attempt_purge",
                (k.webhook_attempt, k.webhook_attempts, k.webhook_attempt_age),
                (before_ms, limit),
            )
        )

    async def _webhook_attempt_list(self, params: WebhookAttemptListParams) -> list[WebhookAttempt]:
        k = self.keys
        got = await self._run(
            "webhook_attempt_list",
            (k.webhook_attempt, k.webhook_attempts),
            (params.tenant_id or "", params.endpoint, str(params.limit)),
        )
        return [_webhook_attempt(got[i], got[i + 1]) for i in range(0, len(got), 2)]

    # -- wake -----------------------------------------------------------------------------------

    async def wake_subscribe(
        self, queues: Sequence[str], on_wake: Callable[[str], None]
    ) -> WakeSubscription | None:
        """Deliver a queue's name to `on_wake` when an enqueue publishes its wake (pub/sub); None
        where `capabilities()` declares no wake."""
        from jobs_redis.wake import RedisWake

        if not self.capabilities().wake:
            return None
        wake = RedisWake(self, list(dict.fromkeys(queues)), on_wake)
        wake.start()
        return wake


def _cluster_subscribes() -> bool:
    from redis.asyncio.cluster import RedisCluster

    return hasattr(RedisCluster, "pubsub")


async def _pool_connection(pool: Any) -> Any:
    """A connection taken from `pool`: redis-py before 5.3 requires a command name there, and
    later releases warn when one is given."""
    command = inspect.signature(pool.get_connection).parameters.get("command_name")
    if command is not None and command.default is inspect.Parameter.empty:
        return await pool.get_connection("EVALSHA")
    return await pool.get_connection()


# -- one client per event loop -------------------------------------------------------------------


class _LoopClient:
    """The client one event loop uses; `owned` when the driver made it (and so closes it), and
    the loop's trailing wake publishes (None where the driver declares no wake)."""

    __slots__ = ("client", "owned", "trails")

    def __init__(self, client: Any, *, owned: bool) -> None:
        self.client = client
        self.owned = owned
        self.trails: Trails | None = None


async def _close_loop_client(held: _LoopClient) -> None:
    if held.trails is not None:
        await held.trails.close()
    if held.owned:
        await held.client.aclose()


def _abandon_loop_client(held: _LoopClient) -> None:
    """A loop that is gone cannot run the close; its sockets go with the client's references."""
    if held.trails is not None:
        held.trails.abandon()
    held.client = None


# -- codecs ---------------------------------------------------------------------------------------


def _encode(job: NewJob) -> tuple[str, str, str, int]:
    """(namespace, state row, data row, due score) of a new job."""
    ns = f"{job.name}\x00{job.tenant_id or ''}\x00{job.idempotency_key}"
    state = (
        f"ready\x000\x00\x000\x00\x00{job.run_at_ms}\x00\x00"
        f"{job.priority}\x00{job.max_attempts}\x00{job.queue}\x00{ns}{_links(job)}"
    )
    data = (
        f"{job.run_id}\x00{job.created_at_ms}\x00{job.enqueued_by or ''}\x00{job.input_json}"
        f"\x00{job.traceparent or ''}"
    )
    if job.acts_for is not None:
        # acts-for: a sixth field the scripts store apart (lua/includes/row.lua put_data).
        data += f"\x00{job.acts_for}"
    return ns, state, data, job.priority * _PRIORITY_UNIT + job.run_at_ms


def _links(job: NewJob) -> str:
    """The state row's flow fields after its namespace (`lua/includes/flows.lua`): none for a
    job without a parent or a batch, so its row stays the 13 fields every other row has."""
    if job.parent_id is None and job.batch_id is None:
        return ""
    return f"\x00\x00\x00{job.parent_id or ''}\x00{job.batch_id or ''}"


def _flow_row(job: NewJob) -> str:
    """A joining job's state row: always with the four flow fields (the script fills the join)."""
    _, state, _, _ = _encode(job)
    return state if _links(job) else state + "\x00\x00\x00\x00"


def _join(text: str) -> JoinState | None:
    """A state row's join field ("total pending failed policy"; "" for none)."""
    if not text:
        return None
    total, pending, failed, policy = text.split(" ")
    return JoinState(int(total), int(pending), int(failed), JoinPolicy(policy))


def _join_meta(join: tuple[str, ...] | None) -> str:
    """A nack item's join fields: the number of ids NUL each id, or "" for no join."""
    if join is None:
        return ""
    return "\x00".join((str(len(join)), *join))


#: `job_enqueue.lua`'s answer for a due job inserted without a PUBLISH (its slot's gone out).
_INSERTED_QUIET: Final = 2


def _enqueued(job: NewJob, got: int | str) -> EnqueueResult:
    """`includes/enqueue.lua`'s answer: 1 when `job` was inserted (`job_enqueue.lua`: 2 when
    inserted quiet), else the id it deduped to."""
    if got == 1 or got == _INSERTED_QUIET:
        return EnqueueResult(job.id, deduped=False)
    return EnqueueResult(str(got), deduped=True)


class _Chunks:
    """A batch's chunks of `ENQUEUE_CHUNK` records, each cut when first read and kept, so a
    chunk's answers read the very records (and ids) it was packed with."""

    __slots__ = ("_cut", "_jobs")

    def __init__(self, jobs: Sequence[NewJob]) -> None:
        self._jobs = jobs
        self._cut: dict[int, Sequence[NewJob]] = {}

    def __len__(self) -> int:
        return -(-len(self._jobs) // ENQUEUE_CHUNK)

    def __getitem__(self, at: int) -> Sequence[NewJob]:
        chunk = self._cut.get(at)
        if chunk is None:
            start = at * ENQUEUE_CHUNK
            chunk = self._cut[at] = self._jobs[start : start + ENQUEUE_CHUNK]
        return chunk


def _chunk_answers(jobs: Sequence[NewJob], got: str) -> list[EnqueueResult]:
    ids = jobs.ids if type(jobs) is NewJobs else [job.id for job in jobs]
    if len(got) == len(ids) - 1 and not got.strip("\x00"):
        # Every record inserted (the usual answer): no split, and positional arguments, which
        # the dataclass takes faster than keywords.
        return [EnqueueResult(i, False) for i in ids]
    return [
        EnqueueResult(r, True) if r else EnqueueResult(i, False)
        for i, r in zip(ids, got.split("\x00"), strict=True)
    ]


#: The head numbers of a `job_enqueue_many` record (lua/job_enqueue_many.lua): n < 2^14 as two
#: characters of 7 bits each, high first. A record that passed `check_new_job` has no length
#: here above 2,200 bytes (and a call no more than `ENQUEUE_CHUNK` queues): 2^12 entries.
_U14: Final = tuple(chr(n >> 7) + chr(n & 127) for n in range(1 << 12))
_U1: Final = ("\x00", "\x01")


def _u21(n: int) -> str:
    """`n` < 2^21 (a data row's bytes: at most `MAX_JSON_BYTES` and a few hundred) as three
    characters of 7 bits each, high first."""
    if n < 4096:
        return "\x00" + _U14[n]
    return chr(n >> 14) + chr((n >> 7) & 127) + chr(n & 127)


class _Packs:
    """A call's records cut into arguments of about `_PACK_BYTES` (one argument per record cost
    the server more than the script's parsing of it; one for the whole call could pass Redis's
    512 MB argument bound)."""

    __slots__ = ("_at", "_out", "_size")

    def __init__(self) -> None:
        self._out: list[str] = []
        self._at: list[str] = []
        self._size = 0

    def add(self, record: str, size: int) -> None:
        """Append `record` of `size` bytes."""
        if self._size + size > _PACK_BYTES and self._at:
            self._out.append("".join(self._at))
            self._at, self._size = [], 0
        self._at.append(record)
        self._size += size

    def done(self) -> list[str]:
        """The number of packs, then each pack."""
        if self._at:
            self._out.append("".join(self._at))
        return [str(len(self._out)), *self._out]


#: The bytes a pack of records grows to before the next record starts another.
_PACK_BYTES: Final = 1 << 20


def _u49(n: int) -> str:
    """`n` < 2^49 (a due score: priority 100 at the last ms is below 101 * 2^42) as seven
    characters of 7 bits each, high first."""
    return "".join([chr((n >> shift) & 127) for shift in (42, 35, 28, 21, 14, 7, 0)])


def _resp(args: Sequence[str]) -> bytes:
    """`args` as one RESP command (an array of bulk strings), UTF-8."""
    parts = [f"*{len(args)}\r\n"]
    parts += [f"${len(a) if a.isascii() else len(a.encode())}\r\n{a}\r\n" for a in args]
    return "".join(parts).encode()


def _blen(text: str) -> int:
    """The UTF-8 byte length of `text` (`isascii` is O(1), so ASCII costs no encoding)."""
    return len(text) if text.isascii() else len(text.encode())


def _mark(name: str, raw: str) -> TaskMark:
    """A `{p}:task` field: watermark NUL fired NUL fired_job_id NUL fired_at ("" is None)."""
    watermark, fired, job_id, fired_at = raw.split("\x00")
    return TaskMark(name, int(watermark), _opt_int(fired), job_id or None, _opt_int(fired_at))


def _pause_keys(k: Keys) -> tuple[str, str, str]:
    """The pause sets in the pause scripts' order: by queue, by job name, by task."""
    return (k.pause_queue, k.pause_name, k.pause_task)


def _worker_row(beat: WorkerBeat) -> str:
    return f"{beat.now_ms}\x00{beat.now_ms + beat.ttl_ms}\x00{beat.info_json}"


def _created_member(created_at_ms: int, job_id: str) -> str:
    """The `job:created` member of a row: lex order over these IS the listing order."""
    return f"{created_at_ms:013d}{job_id}"


def _summary(job_id: str, created_at_ms: int, state: str, acts: str = "") -> JobSummary:
    s = state.split("\x00")
    flow = len(s) > 13
    return JobSummary(
        id=job_id,
        name=s[10],
        queue=s[9],
        tenant_id=s[11] or None,
        state=_STATES[s[0]],
        priority=int(s[7]),
        attempt=int(s[3]),
        max_attempts=int(s[8]),
        claimed_by=s[2] or None,
        lease_until_ms=_opt_int(s[4]),
        run_at_ms=_opt_int(s[5]),
        created_at_ms=created_at_ms,
        finished_at_ms=_opt_int(s[6]),
        parent_id=(s[15] or None) if flow else None,
        batch_id=(s[16] or None) if flow else None,
        acts_for=acts or None,
    )


def _consumer(member: str, raw: str) -> ConsumerCursor:
    """An entry from its `{p}:consumer` field and row (`lua/includes/consumer.lua`)."""
    name, tenant = member.split("\x00")
    source, cursor_json, turns, records, lag, holder, job_id, updated = raw.split("\x00")
    return ConsumerCursor(
        name=name,
        tenant_id=tenant or None,
        source=source,
        cursor_json=cursor_json,
        turns=int(turns),
        records=int(records),
        lag=_opt_int(lag),
        holder=holder,
        job_id=job_id,
        updated_at_ms=int(updated),
    )


def _webhook_endpoint(tenant_id: str | None, endpoint: str, raw: str) -> WebhookEndpoint:
    """An endpoint from its `{p}:webhook:endpoint` row (`lua/includes/webhook.lua`)."""
    url, enabled, failures, disabled, created, updated = raw.split("\x00")
    return WebhookEndpoint(
        tenant_id=tenant_id or None,
        endpoint=endpoint,
        url=url,
        enabled=enabled == "1",
        failures=int(failures),
        disabled_at_ms=int(disabled) if disabled else None,
        created_at_ms=int(created),
        updated_at_ms=int(updated),
    )


def _webhook_attempt(key: str, raw: str) -> WebhookAttempt:
    """An attempt from its `{p}:webhook:attempt` field and row (`lua/includes/webhook.lua`)."""
    job_id, claims = key.split("\x00")
    tenant, endpoint, event_id, outcome, status, latency, excerpt, error, at = raw.split("\x00")
    return WebhookAttempt(
        tenant_id=tenant or None,
        endpoint=endpoint,
        job_id=job_id,
        claims=int(claims),
        event_id=event_id,
        outcome="delivered" if outcome == "delivered" else "failed",
        status_code=int(status) if status else None,
        latency_ms=int(latency),
        excerpt=excerpt,
        error=error or None,
        at_ms=int(at),
    )


def _sweep(run_id: str, raw: str) -> SweepRecord:
    """A ledger entry from its `{p}:sweep` row (`lua/includes/sweep.lua` names the fields)."""
    (
        job_id,
        name,
        scope,
        environment,
        kind,
        checksum,
        status,
        batches,
        rows,
        errors,
        expected,
        cursor_json,
        error,
        started,
        updated,
        finished,
    ) = raw.split("\x00")
    return SweepRecord(
        run_id=run_id,
        job_id=job_id,
        name=name,
        scope=scope,
        environment=environment,
        kind=cast(SweepKind, kind),
        checksum=checksum,
        status=cast(SweepStatus, status),
        batches=int(batches),
        rows=int(rows),
        errors=int(errors),
        expected=_opt_int(expected),
        cursor_json=cursor_json or None,
        error=error or None,
        started_at_ms=int(started),
        updated_at_ms=int(updated),
        finished_at_ms=_opt_int(finished),
    )


def _opt_int(text: str) -> int | None:
    return int(text) if text else None


# -- attempts --
#: The members after settled_at of the entry a reclaimed or buried row's lapsed claim ends with.
_ABANDONED_TAIL: Final = tail_json(AttemptOutcome.ABANDONED, ABANDONED_ERROR)


def _nack_tail(n: Nack) -> str:
    """A nack's history members after settled_at: its outcome and bounded error."""
    return tail_json(nack_attempt_outcome(n.kind, n.dead_letter), attempt_error(n.error))


def _history(stored: str | None) -> tuple[AttemptRecord, ...]:
    """A `{p}:job:attempts` entry (compact JSON objects joined by newlines) as records."""
    if not stored:
        return ()
    return tuple(from_entry(json.loads(line)) for line in stored.split("\n"))


def _record(
    job_id: str,
    state: str,
    data: str,
    error: str | None,
    progress: str | None,
    result: str | None,
    wait: str | None,
    acts: str | None = None,
) -> JobRecord:
    s = state.split("\x00")
    d = data.split("\x00")
    flow = len(s) > 13
    return JobRecord(
        id=job_id,
        run_id=d[0],
        name=s[10],
        queue=s[9],
        tenant_id=s[11] or None,
        idempotency_key=s[12],
        input_json=d[3],
        state=_STATES[s[0]],
        priority=int(s[7]),
        attempt=int(s[3]),
        max_attempts=int(s[8]),
        claims=int(s[1]),
        claimed_by=s[2] or None,
        lease_until_ms=_opt_int(s[4]),
        run_at_ms=_opt_int(s[5]),
        created_at_ms=int(d[1]),
        finished_at_ms=_opt_int(s[6]),
        last_error=error,
        progress_json=progress,
        result_json=result,
        enqueued_by=d[2] or None,
        traceparent=(d[4] or None) if len(d) > 4 else None,
        wait=None if wait is None else _wait(wait),
        parent_id=(s[15] or None) if flow else None,
        batch_id=(s[16] or None) if flow else None,
        join=_join(s[13]) if flow else None,
        acts_for=acts,
    )


def _wait(stored: str) -> EventWait:
    """A `{p}:wait` entry (event NUL since NUL match lines NUL match JSON NUL tenant NUL until)
    as its `EventWait`.

    An entry stored before the JSON text was kept has the first three fields: its match is
    rebuilt from the lines (`json(key) TAB canonical(value)`), the same match by `json_equal`
    though a number may come back in another spelling (`1.0` as `1`). One stored before its
    tenant has the first four: no tenant, no end.
    """
    event, since, lines, *rest = stored.split("\x00")
    if rest:
        match_json = rest[0]
    else:
        pairs = (line.replace("\t", ":", 1) for line in lines.split("\n") if line)
        match_json = "{" + ",".join(pairs) + "}"
    tenant, until = (rest[1], rest[2]) if len(rest) == 3 else ("", "")
    return EventWait(event, match_json, int(since), tenant or None, _opt_int(until))


def _why(exc: BaseException, url: str) -> str:
    """The error's text, with every password of the URL (and any URL in the text) masked."""
    return mask_text(f"{type(exc).__name__}: {exc}", url)


def _advance_args(advance: SweepAdvance) -> tuple[str, ...]:
    """`sweep_advance`'s ARGV (and the head of `sweep_checkpoint`'s): the fence, the run, the
    batch before the advance's first (the entry's count it moves from) and its last batch as
    decimal text, the counts, the cursor, the time."""
    f = advance.fence
    return (
        f.job_id,
        f"{f.claims}\x00{f.worker_id}\x00",
        advance.run_id,
        str(advance.batch - advance.span),
        str(advance.batch),
        str(advance.rows),
        str(advance.errors),
        advance.cursor_json or "",
        str(advance.now_ms),
    )


def _posting(tenant_id: str | None, key: str, raw: str) -> PostingRecord:
    """A posting from its `{p}:posting` value (`lua/includes/posting.lua`)."""
    job_id, posted_at_ms, lines_json = raw.split("\x00", 2)
    return PostingRecord(tenant_id, key, job_id, posting_lines_of(lines_json), int(posted_at_ms))
