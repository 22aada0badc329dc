"""The parity state machine: random walks over the contract, a driver and the model side by side.

Every rule calls the driver under test and the `ReferenceModel` with the same arguments and the
same fake time, and fails on the first answer that differs (values, bools, `CancelAnswer`,
`ClaimResult` order, or the error code of a refusal). After every step the observable state —
every job row ever named, the pauses, the live workers — must match too. A failure names the
step and the rule (with its arguments) that caused it, and every driver call that step made.

JSON is compared by meaning AND type: `1`, `1.0` and `true` differ (Python's `==` would not
tell them apart), while spacing and key order do not (a driver may store jsonb).

The walk counts what it reached (rules fired, reclaims, buries, dedupes, fence misses…) as
Hypothesis events (`pytest --hypothesis-show-statistics`) and in `machine.tally`, a `Counter`
each class from `make_machine` keeps across its examples.

Hypothesis machines are synchronous; each machine instance drives its async driver through one
event loop (`WalkLoop`), opened in `__init__` and closed in `teardown`.
"""

from __future__ import annotations

import functools
import inspect
from collections import Counter
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Final, Literal, TypeAlias, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    invariant,
    precondition,
    rule,
)

from jobs_core.driver import (
    MAX_BULK_IDS,
    MAX_ENQUEUE_BATCH,
    MAX_KEY_BYTES,
    MAX_NAME_BYTES,
    MAX_PURGE_LIMIT,
    MAX_TIME_MS,
    JobDriver,
)
from jobs_core.errors import JobsError
from jobs_core.jsonform import utf8_length
from jobs_core.records import (
    Ack,
    ClaimedJob,
    ClaimParams,
    ClaimResult,
    EnqueueResult,
    EventWait,
    Fence,
    Heartbeat,
    JobFilter,
    JobRecord,
    Nack,
    NackKind,
    NewJob,
    Pause,
    Progress,
    PurgeParams,
    RequeueParams,
    StepPut,
    WorkerBeat,
)
from jobs_core.semantics import namespace_of
from jobs_core.states import LIVE_STATES, JobState
from jobs_core.testing.compare import (
    Check,
    DriverNotEmptyError,
    PairedMachine,
    WalkLoop,
    exactly_bytes,
)
from jobs_core.testing.model import ReferenceModel

#: Makes a fresh, empty driver; entering it opens the driver, leaving it drops everything.
DriverFactory: TypeAlias = Callable[[], AbstractAsyncContextManager[JobDriver]]

T = TypeVar("T")

#: Where the fake clock starts (2027-01-15, well inside the allowed range).
T0 = 1_800_000_000_000


#: Where `belongs_to` writes the family a rule's walk is.
_HOME = "parity_family"


def belongs_to(family: str) -> Callable[[T], T]:
    """Put a rule in `family`'s walk rather than in that of its class's family."""

    def mark(rule: T) -> T:
        setattr(rule, _HOME, family)
        return rule

    return mark


#: Values exactly at the byte limits, of 2-, 3- and 4-byte characters: a driver that counts
#: characters, truncates a column or sizes an index in characters differs on them.
LONG_NAME = exactly_bytes("n", "ü☃😀", MAX_NAME_BYTES)
LONG_QUEUE = exactly_bytes("q", "é", MAX_NAME_BYTES)
LONG_TENANT = exactly_bytes("t", "☃", MAX_NAME_BYTES)
#: acts-for: the orgs a row acts for (None: a `tenant="none"` job); "t1" is also an enqueuer's
#: tenant, so a listing that reads one for the other keeps the wrong rows.
ACTS_FOR: tuple[str | None, ...] = (None, "t1", "org_1", LONG_TENANT)
LONG_KEY = exactly_bytes("k", "😀☃ü", MAX_KEY_BYTES)
#: With a 4-digit serial, an id exactly MAX_NAME_BYTES long.
LONG_ID_PREFIX = exactly_bytes("", "😀", MAX_NAME_BYTES - 4)

_LONG_VALUES = frozenset({LONG_NAME, LONG_QUEUE, LONG_TENANT, LONG_KEY})

# Small pools, so that namespaces, queues and fences collide often.
NAMES = ("a", "b", "q'uo%te\n☃", LONG_NAME)
QUEUES = ("q1", "q2", LONG_QUEUE)
KEYS = ("k1", "k2", LONG_KEY)
WORKERS = ("w1", "w2")
#: Id prefixes whose order differs between code-point order and any locale's collation.
ID_PREFIXES = ("a", "B", "_", "é", "f", "☃", "q'", "%", "n\nl", "\U0010ffff", LONG_ID_PREFIX)
#: JSON whose types matter: `1`, `1.0` and `true` are three different values.
INPUTS = (
    '{"n":1}',
    '{"n":1.0}',
    "[1, 2.5, null, true, 0, false]",
    '"s"',
    '{"b": {"a": [true, false]}, "a": "☃ q\'uo"}',
    "[12345678901234567890, -7, 0.5]",
)
RESULTS = (None, '{"ok":true}', '{"ok":1}', "null", '"done"', "1", "1.0", "true")
PROGRESSES = (None, '{"pct": 50}', '{"pct": 50.0}', '[1,{"x":"y"}]')
ERRORS = (None, "boom", "q'uo%te\n☃")
INFOS = ('{"host":"h1"}', '{"pid": 2, "tags": ["x"]}')
#: Trace contexts a record may carry (tracing stamps the enqueuer's span on the row).
TRACEPARENTS = (None, None, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
PAUSES = tuple(Pause("queue", q) for q in QUEUES) + tuple(Pause("name", n) for n in NAMES)
#: An id no rule ever inserts: every state check also asks for it.
UNKNOWN_ID = "no-such-job"
#: Steps and events over small pools, so names and matches collide.
STEP_NAMES = ("charge", "ship", "q'uo%te\n☃")
EVENT_NAMES = ("shipped", "paid")
#: Lease keys of different limits; one with quotes, a newline and non-ASCII text.
LEASE_KEYS = ("job:send", "job-key:4:sync:acct-1", "lock:ü'%\n\"x")
#: Scheduled task names: most are job names too (`NAMES`), so a task pause meets jobs of its
#: name; one at the byte limit.
TASK_NAMES = ("a", "nightly", "q'uo%te\n☃", LONG_NAME)
#: Event data and matches where JSON equality is tested: 1 equals 1.0, never true or "1".
EVENT_DATA = (
    '{"order":1}',
    '{"order":1.0,"x":true}',
    '{"order":2}',
    '{"order":"1"}',
    '{"order":true}',
    "[1]",
    "{}",
)
MATCHES = ("{}", '{"order":1}', '{"order":"1"}', '{"order":true}', '{"x":true}')
#: The tenants a wait acts for and an event is published for (None: no tenant), so that one
#: tenant's event meets another's wait often; `ALL_TENANTS` is an event for every tenant.
EVENT_TENANTS: tuple[str | None, ...] = (None, "t1")
ALL_TENANTS = "*"


#: The final states in `PurgeParams`' order of retentions.
PURGE_STATES = (JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED, JobState.DEAD)


def row_namespace(r: JobRecord) -> tuple[str, str, str]:
    """The (name, tenant, key) a live row holds."""
    return namespace_of(r.name, r.tenant_id, r.idempotency_key)


def _other_worker(worker: str) -> str:
    return WORKERS[1] if worker == WORKERS[0] else WORKERS[0]


def _purgeable(r: JobRecord, params: PurgeParams) -> bool:
    keep = params.keep_ms(r.state)
    return (
        keep is not None
        and r.finished_at_ms is not None
        and r.finished_at_ms + keep <= params.now_ms
    )


@dataclass(frozen=True, slots=True)
class IdSpec:
    """Which id a record carries: a fresh one (`n % 3` is a slot shared inside one batch, so a
    batch repeats ids) or a stored row's (`n` back from the latest)."""

    kind: Literal["new", "old"]
    n: int
    prefix: str


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A `NewJob` before the clock and the id pool resolve it."""

    id: IdSpec
    name: str
    tenant_id: str | None
    key: str
    queue: str
    priority: int
    run_at_offset: int
    max_attempts: int
    input_json: str
    enqueued_by: str | None
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class FenceSpec:
    """Which fence a settle presents.

    `past`: one a claim handed out (`n` back from the latest; it may be stale). `held`: the
    fence a running row holds now. `skewed`: that fence with its count off by one (`skew` 1,
    2), its worker swapped for the other (3: the count alone must not pass), or both (4).
    `forged`: any stored id with `skew` as the count and `worker_id`.
    """

    kind: Literal["past", "held", "skewed", "forged"]
    n: int
    worker_id: str
    skew: int


#: Latest-first positions: mostly recent rows or fences, sometimes far older ones.
recent = st.sampled_from((0, 0, 0, 1, 1, 2, 3, 5, 8, 13, 40))
id_specs = st.builds(
    IdSpec,
    kind=st.sampled_from(("new", "new", "new", "old")),
    n=recent,
    prefix=st.sampled_from(ID_PREFIXES),
)


def job_specs(tenants: tuple[str | None, ...]) -> st.SearchStrategy[JobSpec]:
    """Records over the small pools; `tenants` decides how often the refused '' shows up."""
    return st.builds(
        JobSpec,
        id=id_specs,
        # The long values now and then, so that the short ones still collide.
        name=st.sampled_from((*NAMES[:3], *NAMES)),
        tenant_id=st.sampled_from(tenants),
        key=st.sampled_from((*KEYS[:2], *KEYS)),
        queue=st.sampled_from((*QUEUES[:2], *QUEUES)),
        priority=st.sampled_from((0, 1, 100)),
        run_at_offset=st.sampled_from((-1000, 0, 1000)),
        # Final attempts (buried when they lapse) beside rows a lapse hands to a new claim.
        max_attempts=st.sampled_from((1, 1, 2, 2, 3, 5)),
        input_json=st.sampled_from(INPUTS),
        enqueued_by=st.sampled_from((None, "u1")),
        traceparent=st.sampled_from(TRACEPARENTS),
    )


def acts_for_of(spec: JobSpec) -> str | None:
    """acts-for: the org a spec's row acts for, read off fields already drawn (a draw of its
    own would move every family's walks off the seeds their teeth were tuned on); apart from
    the enqueuer's tenant, so a driver that stores or filters one for the other disagrees."""
    return ACTS_FOR[(len(spec.key) + spec.priority + spec.max_attempts) % len(ACTS_FOR)]


# '' is refused by the ABC today (a tenant must be a non-empty string); seen now and then.
single_job_specs = job_specs((None, None, None, "t1", "t1", "t1", LONG_TENANT, ""))
batch_job_specs = job_specs((None, None, "t1", "t1", LONG_TENANT))
fence_specs = st.builds(
    FenceSpec,
    kind=st.sampled_from(("past", "past", "held", "held", "skewed", "skewed", "forged")),
    n=recent,
    worker_id=st.sampled_from(WORKERS),
    skew=st.sampled_from((1, 2, 3, 3, 4)),
)
#: A purge's retention of each final state (completed, cancelled, failed, dead); None keeps.
retentions = st.tuples(*[st.sampled_from((None, None, 0, 0, 1, 1000, 3000))] * 4)
#: How a rule aims its first fence at a running row (`_aimed_fence`): the one it holds, mostly,
#: or a near miss that must not hold.
aimed_fences = st.sampled_from(
    ("held", "held", "held", "other worker", "stale count", "next count")
)
#: A heartbeat's lease, from now: fixed, or relative to the fenced row's lease end — just
#: short of it (a beat may shorten a lease), exactly at it, or past it.
BEAT_LEASES = ("shorter", "shorter", "same end", "longer", 1000, 3000)
#: Claim queue lists: mostly one or both queues (in either order), now and then none (refused).
Q1, Q2, QL = QUEUES
claim_queues = st.sampled_from(
    ((), (Q1,), (Q2,), (Q1, Q2), (Q2, Q1), (Q1, Q2), (Q1, Q1, Q2), (QL,), (Q2, QL, Q1))
)
#: Which row a cancel or requeue names: one in a given state, any, or none at all (every
#: operation meets every live state: a parked row under requeue and cancel, too).
TARGET_KINDS = ("ready", "running", "parked", "live", "finished", "finished", "any", "unknown")
target_ids = st.tuples(st.sampled_from(TARGET_KINDS), recent)
#: Bulk calls name one to four targets; the same id may come twice.
target_lists = st.lists(target_ids, min_size=1, max_size=4)
offsets = st.sampled_from((None, -1000, 0, 1000, 3000))
#: Listing filters over the walk's small pools (a tenant filter never matches `None` rows); a
#: third of the time none at all, so that pages fill and `created_at_ms` ties meet on one page.
_some_filters = st.builds(
    JobFilter,
    states=st.sampled_from(
        (
            frozenset(),
            frozenset({JobState.READY}),
            frozenset(),
            frozenset({JobState.RUNNING, JobState.PARKED}),
            frozenset({JobState.DEAD, JobState.FAILED, JobState.CANCELLED}),
            frozenset({JobState.COMPLETED}),
        )
    ),
    queue=st.sampled_from((None, QUEUES[0], None, QUEUES[1])),
    name=st.sampled_from((None, NAMES[0], None, *NAMES[1:3])),
    tenant_id=st.sampled_from(("t1", None, None, LONG_TENANT)),
    acts_for=st.sampled_from((None, None, *ACTS_FOR[1:])),  # acts-for
)
list_filters = st.one_of(st.just(JobFilter()), _some_filters, _some_filters)
#: Cursors no listing handed out: malformed, or a real-looking one of the wrong version.
BAD_CURSORS = ("", "garbage", "c1.", "c1.bm90IGpzb24", "c1.WzEsImEiXQ", "c2.WzEsImEiLCJ4Il0")


#: Ids a fresh walk's first records take (every walk starts with a batch): a driver that still
#: holds an earlier walk's rows holds some of these.
_FIRST_IDS = tuple(f"{p}{n:04d}" for p in ID_PREFIXES for n in range(1, 9))


async def check_empty(driver: JobDriver) -> None:
    """Raise `DriverNotEmptyError` unless `driver` shows none of the rows a walk would make."""
    found: list[str] = []
    rows = await driver.job_get_many([*_FIRST_IDS, UNKNOWN_ID])
    if rows:
        found.append(f"job rows {sorted(rows)[:5]}")
    demand = await driver.queue_demand([*QUEUES, "q", "other"], MAX_TIME_MS)
    if any(demand.values()):
        found.append(f"ready rows by queue {demand}")
    caps = driver.capabilities()
    pauses = await driver.pause_list() if caps.pauses else []
    if pauses:
        found.append(f"pauses {pauses}")
    workers = await driver.worker_list(0) if caps.workers else []
    if workers:
        found.append(f"workers {[w.worker_id for w in workers]}")
    if caps.events:
        for name in EVENT_NAMES:
            for tenant in EVENT_TENANTS:
                if await driver.event_find(EventWait(name, "{}", 0, tenant), 0) is not None:
                    found.append(f"events named {name!r} for tenant {tenant!r}")
    if caps.leases:
        for key in LEASE_KEYS:
            if await driver.lease_holders(key, 0):
                found.append(f"lease holdings of {key!r}")
    if caps.tasks:
        marks = await driver.task_marks(TASK_NAMES)
        if marks:
            found.append(f"task marks of {sorted(marks)}")
    if caps.sweeps:
        entries = await driver.sweep_list(None, 5)
        if entries:
            found.append(f"sweep entries of runs {[e.run_id for e in entries]}")
    if caps.postings:
        from jobs_core.testing.posting_rules import ACCOUNTS, TENANTS

        for tenant in TENANTS:
            if await driver.posting_balances(tenant, list(ACCOUNTS)):
                found.append(f"posting balances of tenant {tenant!r}")
    if caps.consumers:
        cursors = await driver.consumer_list(None, 5)
        if cursors:
            found.append(f"consumer cursors of {[e.name for e in cursors]}")
    if caps.webhooks:
        endpoints = await driver.webhook_endpoint_list(5)
        if endpoints:
            found.append(f"webhook endpoints {[e.endpoint for e in endpoints]}")
    if found:
        raise DriverNotEmptyError(
            "the driver was not empty: "
            + "; ".join(found)
            + ". The factory must answer a fresh, empty driver on every call, and leaving its"
            " context must drop what it stored."
        )


class ParityMachine(PairedMachine[JobDriver]):
    """Drives `make_driver()`'s driver and a `ReferenceModel` through the same random calls.

    Bind a driver with `make_machine(factory)`; this class itself has none.
    """

    #: What the walks reached, across every example of this class (see `make_machine`).
    tally: ClassVar[Counter[str]] = Counter()
    EDGES_LABEL: ClassVar[str] = "reclaims and buries"
    #: The family a rules class adds, and the families a bound machine walks.
    FAMILY: ClassVar[str] = "jobs"
    FAMILIES_ON: ClassVar[frozenset[str]] = frozenset({"jobs"})

    @staticmethod
    def make_driver() -> AbstractAsyncContextManager[JobDriver]:
        raise NotImplementedError("bind a driver factory with make_machine(factory)")

    def __init__(self) -> None:
        super().__init__()
        self.model = ReferenceModel()
        self.now = T0
        #: Every id any call has named (inserted or not), in first-use order.
        self.ids: list[str] = []
        #: Every fence any claim has handed out, oldest first.
        self.fences: list[Fence] = []
        #: Every cursor a listing handed out, with the filter it was for, oldest first.
        self.cursors: list[tuple[JobFilter, str]] = []
        #: Every run that ever recorded a step: its steps are compared after each step.
        self.step_runs: set[str] = set()
        self.driver = self._open(WalkLoop(), self.make_driver(), check_empty)
        # The walk exercises the families the driver declares, the core family always (a rule
        # of an undeclared family never runs); `wake` is a scenario (`scenario_wake`).
        self.capabilities = self.driver.capabilities()

    # -- plumbing -----------------------------------------------------------------------------

    def _fresh_id(self, prefix: str) -> str:
        self._serial += 1
        job_id = f"{prefix}{self._serial:04d}"
        self.ids.append(job_id)
        return job_id

    def _put_steps(self, puts: list[StepPut]) -> object:
        """`step_put` on both. The runs of the fenced rows are compared from now on, even when a
        later call of the same rule deletes their steps (a purge, a fresh requeue)."""
        rows = (self.model.rows.get(p.fence.job_id) for p in puts)
        self.step_runs.update(r.run_id for r in rows if r is not None)
        return self._both(
            "step_put",
            functools.partial(self.model.step_put, puts),
            functools.partial(self.driver.step_put, puts),
        )

    def _fresh_run_id(self) -> str:
        """A run id no row has held: what a fresh requeue hands in."""
        self._serial += 1
        return f"fresh-{self._serial:04d}"

    def _used_id(self, n: int) -> str | None:
        """The `n`-th latest id of a stored row (the model's rows keep insertion order)."""
        stored = list(self.model.rows)
        return stored[-1 - n % len(stored)] if stored else None

    def _new_job(self, spec: JobSpec, fresh: dict[int, str]) -> NewJob:
        job_id = self._used_id(spec.id.n) if spec.id.kind == "old" else None
        if job_id is None:
            slot = spec.id.n % 3
            if slot not in fresh:
                fresh[slot] = self._fresh_id(spec.id.prefix)
            job_id = fresh[slot]
        run_id = f"run-{job_id}"
        if utf8_length(run_id) > MAX_NAME_BYTES:
            # An id at the byte limit: its run id is as long (reversed, so still unique).
            run_id = job_id[::-1]
        return NewJob(
            id=job_id,
            run_id=run_id,
            name=spec.name,
            queue=spec.queue,
            tenant_id=spec.tenant_id,
            idempotency_key=spec.key,
            input_json=spec.input_json,
            priority=spec.priority,
            run_at_ms=self.now + spec.run_at_offset,
            max_attempts=spec.max_attempts,
            created_at_ms=self.now,
            enqueued_by=spec.enqueued_by,
            traceparent=spec.traceparent,
            acts_for=acts_for_of(spec),
        )

    def _fence(self, spec: FenceSpec) -> Fence:
        if spec.kind == "past" and self.fences:
            return self.fences[-1 - spec.n % len(self.fences)]
        held = [
            Fence(r.id, r.claims, r.claimed_by)
            for r in self.model.rows.values()
            if r.state == JobState.RUNNING and r.claimed_by is not None
        ]
        if spec.kind in ("held", "skewed") and held:
            f = held[-1 - spec.n % len(held)]
            if spec.kind == "held":
                return f
            other = _other_worker(f.worker_id)
            return {
                1: replace(f, claims=f.claims - 1 if f.claims > 1 else 2),
                2: replace(f, claims=f.claims + 1),
                3: replace(f, worker_id=other),
                4: Fence(f.job_id, f.claims + 1, other),
            }[spec.skew]
        return Fence(self._used_id(spec.n) or UNKNOWN_ID, spec.skew, spec.worker_id)

    def _target(self, pick: tuple[str, int]) -> str:
        kind, n = pick
        if kind == "unknown":
            return UNKNOWN_ID

        def fits(state: JobState) -> bool:
            if kind == "any":
                return True
            if kind in ("live", "finished"):
                return (state in LIVE_STATES) is (kind == "live")
            return state.value == kind

        rows = [r.id for r in self.model.rows.values() if fits(r.state)]
        return rows[-1 - n % len(rows)] if rows else UNKNOWN_ID

    def _state_of(self, job_id: str) -> str:
        r = self.model.rows.get(job_id)
        return "unknown" if r is None else r.state.value

    def _at(self, offset: int | None) -> int | None:
        return None if offset is None else self.now + offset

    def _lease_ends(self) -> list[int]:
        return sorted(
            r.lease_until_ms
            for r in self.model.rows.values()
            if r.state == JobState.RUNNING
            and r.lease_until_ms is not None
            and r.lease_until_ms + 1 > self.now
        )

    # -- time ---------------------------------------------------------------------------------

    @rule(dt=st.sampled_from((0, 1, 999, 1000, 1001, 2999, 3000, 3001)) | st.integers(0, 6000))
    def advance(self, dt: int) -> None:
        self._begin("advance", dt=dt)
        self.now += dt

    @precondition(lambda self: bool(self._lease_ends()))
    @rule(pick=st.integers(0, 7), delta=st.sampled_from((-1, 0, 0, 1)))
    def advance_to_lease_end(self, pick: int, delta: int) -> None:
        """Jump to a running row's lease end (or one ms either side): the edge claims test."""
        self._begin("advance_to_lease_end", pick=pick, delta=delta)
        ends = self._lease_ends()
        self.now = max(self.now, ends[pick % len(ends)] + delta)

    def _due_later(self) -> list[int]:
        """The run_at of every ready or parked row not due yet, soonest first."""
        return sorted(
            r.run_at_ms
            for r in self.model.rows.values()
            if r.state in (JobState.READY, JobState.PARKED)
            and r.run_at_ms is not None
            and r.run_at_ms > self.now
        )

    @precondition(lambda self: bool(self._due_later()))
    @rule(pick=st.integers(0, 7), delta=st.sampled_from((-1, 0, 0, 1)))
    def advance_to_due(self, pick: int, delta: int) -> None:
        """Jump to a waiting row's run_at (or one ms either side): the millisecond it becomes
        claimable, counted in the demand, shown as its queue's oldest due row."""
        self._begin("advance_to_due", pick=pick, delta=delta)
        due = self._due_later()
        self.now = max(self.now, due[pick % len(due)] + delta)
        self._note("clock at a row's run_at")

    def _jump(self, at: str, pick: int) -> None:
        """Move the clock as a claim rule's `at` says: not, by a second, to a lease's end, or
        to the run_at of a row not due yet."""
        ends = self._lease_ends()
        if at == "+1000":
            self.now += 1000
        elif at == "run at":
            due = self._due_later()
            self.now = due[pick % len(due)] if due else self.now
        elif at != "now" and ends:
            self.now = max(self.now, ends[pick % len(ends)] + (at == "lease end + 1"))

    def _running(self) -> list[JobRecord]:
        return [
            r
            for r in self.model.rows.values()
            if r.state == JobState.RUNNING and r.lease_until_ms is not None
        ]

    def _held_rows(self) -> list[JobRecord]:
        """The running rows, claiming some first when none runs: a rule about held leases
        always has one to work on (unless pauses hold every row back)."""
        if not self._running():
            self._claim_some(WORKERS[0], 2)
        return self._running()

    def _claim_some(self, worker: str, limit: int, lease_ms: int = 1000) -> list[ClaimedJob]:
        """Claim up to `limit` rows of every queue now; when none is claimable, enqueue `limit`
        fresh rows due now and claim again, so that a rule whose edge needs claimed rows finds
        some whatever rules ran before it."""
        params = ClaimParams(QUEUES, worker, limit, lease_ms, self.now)
        got = self._claim(params)
        if isinstance(got, ClaimResult) and not got.jobs:
            fresh: dict[int, str] = {}
            serial = self._serial
            specs = [
                JobSpec(
                    IdSpec("new", i, ID_PREFIXES[(serial + i) % len(ID_PREFIXES)]),
                    NAMES[i % 2],
                    None,
                    f"fresh-{serial}-{i}",
                    QUEUES[i % 2],
                    0,
                    0,
                    1 + i % 3,
                    INPUTS[i % len(INPUTS)],
                    None,
                )
                for i in range(min(limit, 3))
            ]
            jobs = [self._new_job(spec, fresh) for spec in specs]
            self._both(
                "job_enqueue_many",
                lambda: self.model.job_enqueue_many(jobs),
                lambda: self.driver.job_enqueue_many(jobs),
            )
            got = self._claim(params)
        return list(got.jobs) if isinstance(got, ClaimResult) else []

    @rule(
        pick=st.integers(0, 7),
        delta=st.sampled_from((0, 0, 0, 1, 1000, -1)),
        worker=st.sampled_from(WORKERS),
        limit=st.integers(1, 4),
        lease_ms=st.sampled_from((1000, 3000)),
        drop=st.frozensets(st.sampled_from(NAMES)),
        more=st.sampled_from(((), (), (Q1,), QUEUES)),
        pause=st.sampled_from((None, "name", "queue")),
        every=st.sampled_from((False, False, True)),
    )
    def reclaim(
        self,
        pick: int,
        delta: int,
        worker: str,
        limit: int,
        lease_ms: int,
        drop: frozenset[str],
        more: tuple[str, ...],
        pause: str | None,
        every: bool,
    ) -> None:
        """Jump to a running row's lease end (mostly exactly there; or to the last lease end, so
        that every lease lapsed at once) and claim its queue, now and then under a pause of its
        name or queue (lifted after): lapsed leases are handed to a new claim, held back, or
        buried — several by one claim — far more often than the clock alone makes them."""
        running = self._held_rows()
        if not running:
            return
        r = running[-1 - pick % len(running)]
        if every:
            r = max(running, key=lambda row: row.lease_until_ms or 0)
            more = QUEUES
        assert r.lease_until_ms is not None
        self.now = max(self.now, r.lease_until_ms + delta)
        held = None
        if pause is not None and self.capabilities.pauses:
            held = Pause("queue", r.queue) if pause == "queue" else Pause("name", r.name)
            self._both(
                "pause_add", lambda: self.model.pause_add(held), lambda: self.driver.pause_add(held)
            )
        self._claim(
            ClaimParams((r.queue, *more), worker, limit, lease_ms, self.now, drop_exhausted=drop)
        )
        if held is not None:
            self._both(
                "pause_remove",
                lambda: self.model.pause_remove(held),
                lambda: self.driver.pause_remove(held),
            )

    @rule(
        first=st.integers(1, 4),
        second=st.integers(1, 4),
        edge=st.sampled_from((0, 0, -1, 1)),
        after=st.sampled_from((0, 1, 1000)),
        drop=st.frozensets(st.sampled_from(NAMES)),
        limit=st.integers(1, 4),
    )
    def reclaim_after_outage(
        self,
        first: int,
        second: int,
        edge: int,
        after: int,
        drop: frozenset[str],
        limit: int,
    ) -> None:
        """Two workers claim under leases ending a second apart; both lapse while the store is
        down, and a worker back from the outage claims with `reclaim_until_ms` at the first
        lease end (mostly exactly there, or a ms either side): the leases that ended by the
        bound are reclaimed or buried, the later ones left to their holders, due rows claimed."""
        self._claim(ClaimParams(QUEUES, "w1", first, 1000, self.now))
        self._claim(ClaimParams(QUEUES, "w2", second, 2000, self.now))
        bound = self.now + 1000 + edge
        self.now += 2000 + after
        self._claim(
            ClaimParams(
                QUEUES, "w1", limit, 1000, self.now, drop_exhausted=drop, reclaim_until_ms=bound
            )
        )

    @rule(
        first=st.integers(2, 4),
        second=st.integers(1, 4),
        # Mostly the first worker's leases lapse last, so lease order and id order disagree.
        leases=st.sampled_from(((1000, 3000), (3000, 1000), (3000, 1000), (1000, 1000))),
        delta=st.sampled_from((0, 0, 1)),
        drop=st.frozensets(st.sampled_from(NAMES)),
        limit=st.integers(1, 4),
        last=st.booleans(),
    )
    def workers_die(
        self,
        first: int,
        second: int,
        leases: tuple[int, int],
        delta: int,
        drop: frozenset[str],
        limit: int,
        last: bool,
    ) -> None:
        """Two workers claim under different leases and die; once every lease lapsed a third
        worker claims: the final attempts are buried together (answered by id, whatever order
        their leases lapsed in), the others handed to it. With `last`, each worker first gets
        a row on its last attempt, the first worker's id sorting before the second's."""
        if last:
            self._last_attempts()
            first = 1
        self._claim(ClaimParams(QUEUES, "w1", first, leases[0], self.now))
        if second:
            self._claim(ClaimParams(QUEUES, "w2", second, leases[1], self.now))
        ends = [r.lease_until_ms for r in self._running() if r.lease_until_ms is not None]
        if ends:
            self.now = max(self.now, max(ends) + delta)
        self._claim(ClaimParams(QUEUES, "w1", limit, 1000, self.now, drop_exhausted=drop))

    def _last_attempts(self) -> None:
        """Enqueue two rows of one attempt, due before any other, ids in claim order: what two
        claims at once take first."""
        jobs = []
        for i, prefix in enumerate(("a", "☃")):
            job_id = self._fresh_id(prefix)
            jobs.append(
                NewJob(
                    id=job_id,
                    run_id=f"run-{job_id}",
                    name=NAMES[i],
                    queue=QUEUES[i],
                    tenant_id=None,
                    idempotency_key=job_id,
                    input_json=INPUTS[0],
                    priority=0,
                    run_at_ms=self.now - 2_000_000 + i,
                    max_attempts=1,
                    created_at_ms=self.now,
                )
            )
        self._both(
            "job_enqueue_many",
            lambda: self.model.job_enqueue_many(jobs),
            lambda: self.driver.job_enqueue_many(jobs),
        )

    @rule(
        pick=st.integers(0, 7),
        past=st.sampled_from((0, 0, 1, 1000)),
        pause=st.sampled_from(("name", "queue", None)),
        rival=st.sampled_from((True, False, False)),
        then=st.sampled_from(("ack", NackKind.RETRY, NackKind.FAIL, NackKind.PARK, "heartbeat")),
        other=st.sampled_from((False, False, True)),
    )
    def settle_after_lapse(
        self, pick: int, past: int, pause: str | None, rival: bool, then: str, other: bool
    ) -> None:
        """A worker settles a row whose lease lapsed `past` ms ago: nobody claimed it since (a
        pause of its name or queue held a claim back, or none came), so its fence still holds;
        or, with `rival`, a claim of the other worker took it first and the fence is gone.
        With `other`, the settle presents the held count under the other worker's id."""
        running = self._held_rows()
        if not running:
            return
        r = running[-1 - pick % len(running)]
        assert r.lease_until_ms is not None and r.claimed_by is not None
        self.now = max(self.now, r.lease_until_ms + past)
        held = None
        if pause is not None and self.capabilities.pauses:
            held = Pause("queue", r.queue) if pause == "queue" else Pause("name", r.name)
            self._both(
                "pause_add", lambda: self.model.pause_add(held), lambda: self.driver.pause_add(held)
            )
        rival_worker = _other_worker(r.claimed_by)
        if rival:
            self._claim(ClaimParams((r.queue,), rival_worker, 4, 1000, self.now))
        f = Fence(r.id, r.claims, rival_worker if other else r.claimed_by)
        if self._held_now(f):
            self._note("settle of a lapsed lease nobody claimed since")
        if then == "ack":
            self._ack([Ack(f, self.now, '"late"')])
        elif then == "heartbeat":
            self._heartbeat([Heartbeat(f, 1000, self.now)])
        else:
            self._nack([Nack(f, NackKind(then), self.now, self.now + 1000, "late")])
        if held is not None:
            self._both(
                "pause_remove",
                lambda: self.model.pause_remove(held),
                lambda: self.driver.pause_remove(held),
            )

    def _held_now(self, f: Fence) -> bool:
        """`f` holds now, its lease lapsed (the edge a settle after a lapse is about)."""
        r = self.model.rows.get(f.job_id)
        return (
            r is not None
            and r.state == JobState.RUNNING
            and (r.claims, r.claimed_by) == (f.claims, f.worker_id)
            and r.lease_until_ms is not None
            and r.lease_until_ms <= self.now
        )

    # -- jobs ---------------------------------------------------------------------------------

    @initialize(
        specs=st.lists(batch_job_specs, min_size=1, max_size=8),
        claims=st.lists(
            st.tuples(
                st.integers(1, 4),
                st.sampled_from((1000, 3000)),
                st.sampled_from(("hold", "hold", "park", "park until woken")),
            ),
            min_size=0,
            max_size=2,
        ),
    )
    def seed(self, specs: list[JobSpec], claims: list[tuple[int, int, str]]) -> None:
        """Start every walk with rows, some of them already running under one or two leases or
        parked, whichever rules this example's swarm left enabled."""
        self.enqueue_many(specs)
        for i, (limit, lease_ms, then) in enumerate(claims):
            got = self._claim(ClaimParams(QUEUES, WORKERS[i % 2], limit, lease_ms, self.now))
            if then != "hold" and isinstance(got, ClaimResult) and got.jobs:
                at = self.now + 1000 if then == "park" else None
                self._nack([Nack(j.fence, NackKind.PARK, self.now, at) for j in got.jobs])

    @rule(spec=single_job_specs)
    def enqueue(self, spec: JobSpec) -> None:
        job = self._new_job(spec, {})
        got = self._both(
            "job_enqueue",
            lambda: self.model.job_enqueue(job),
            lambda: self.driver.job_enqueue(job),
        )
        if isinstance(got, EnqueueResult):
            self._enqueued([job], [got])

    @rule(specs=st.lists(batch_job_specs, max_size=5))
    def enqueue_many(self, specs: list[JobSpec]) -> None:
        fresh: dict[int, str] = {}
        jobs = [self._new_job(s, fresh) for s in specs]
        got = self._both(
            "job_enqueue_many",
            lambda: self.model.job_enqueue_many(jobs),
            lambda: self.driver.job_enqueue_many(jobs),
        )
        if isinstance(got, list):
            self._enqueued(jobs, got)

    def _enqueued(self, jobs: list[NewJob], answers: list[EnqueueResult]) -> None:
        for job, answer in zip(jobs, answers, strict=True):
            if answer.deduped:
                self._note("dedupe by id" if answer.id == job.id else "dedupe by key")
            elif {job.idempotency_key, job.name, job.queue, job.tenant_id} & _LONG_VALUES:
                self._note("insert of values at the byte limits")

    @rule(
        queues=claim_queues,
        worker=st.sampled_from(WORKERS),
        limit=st.integers(1, 4),
        lease_ms=st.sampled_from((1000, 3000)),
        drop=st.frozensets(st.sampled_from(NAMES)),
        beat=st.none() | st.tuples(st.sampled_from((1000, 5000)), st.sampled_from(INFOS)),
        at=st.sampled_from(
            ("now", "now", "lease end", "lease end", "lease end + 1", "+1000", "run at")
        ),
        pick=st.integers(0, 7),
    )
    def claim(
        self,
        queues: tuple[str, ...],
        worker: str,
        limit: int,
        lease_ms: int,
        drop: frozenset[str],
        beat: tuple[int, str] | None,
        at: str,
        pick: int,
    ) -> None:
        """Claim now, or first jump to a running row's lease end (exactly, or just past it) or to
        a waiting row's run_at: left to the clock alone, a walk almost never reclaims or buries
        a lapsed lease, nor claims a row in the very millisecond it is due."""
        self._jump(at, pick)
        params = ClaimParams(
            queues=queues,
            worker_id=worker,
            limit=limit,
            lease_ms=lease_ms,
            now_ms=self.now,
            drop_exhausted=drop,
            beat=(
                None
                if beat is None or not self.capabilities.workers
                else WorkerBeat(worker, beat[1], beat[0], self.now)
            ),
        )
        self._claim(params)

    @rule(
        queues=claim_queues,
        worker=st.sampled_from(WORKERS),
        lease_ms=st.sampled_from((1000, 3000)),
        then=st.sampled_from(
            (
                *NackKind,
                NackKind.PARK,
                "ack",
                "ack",
                "heartbeat",
                "progress",
                "hold",
                "hold",
                "step",
            )
        ),
        offset=offsets,
        error=st.sampled_from(ERRORS),
        result=st.sampled_from(RESULTS),
        limit=st.integers(1, 3),
        at=st.sampled_from(("now", "now", "lease end")),
        pick=st.integers(0, 7),
        dead_letter=st.booleans(),
        # Waits first: a derandomized walk draws the first choices most (it starts simple).
        wait=st.sampled_from(
            (
                *(
                    (name, match, since)
                    for since in (-5000, 0)
                    for match in MATCHES
                    for name in EVENT_NAMES
                ),
                None,
            )
        ),
    )
    def work(
        self,
        queues: tuple[str, ...],
        worker: str,
        lease_ms: int,
        then: str,
        offset: int | None,
        error: str | None,
        result: str | None,
        limit: int,
        at: str,
        pick: int,
        dead_letter: bool,
        wait: tuple[str, str, int] | None,
    ) -> None:
        """What a worker does: claim (now, or once a running row's lease lapsed), then settle
        what it got at once (a random walk alone rarely lands a settle on a fresh fence). A
        park may wait for an event (since a moment ago, or since now)."""
        self._jump(at, pick)
        got = self._claim(ClaimParams(queues, worker, limit, lease_ms, self.now))
        if not isinstance(got, ClaimResult):
            return
        for job in got.jobs:
            f = job.fence
            if then == "ack":
                self._ack([Ack(f, self.now, result)])
            elif then == "heartbeat":
                # Shorter or longer than the claim's lease: a beat that changes nothing tells
                # nothing about how a driver moves a lease.
                self._heartbeat([Heartbeat(f, (lease_ms // 2, lease_ms * 2)[pick % 2], self.now)])
            elif then == "progress":
                self._progress([Progress(f, '{"pct": 10}', self.now)])
            elif then == "step":
                if self.capabilities.steps and "durable" in self.FAMILIES_ON:
                    # A step recorded on a fresh fence, then parked: a sleep, as the API does it.
                    put = [StepPut(f, STEP_NAMES[pick % len(STEP_NAMES)], '{"ok":true}', self.now)]
                    self._put_steps(put)
                    self._note("step recorded")
                if pick % 2:
                    # Done: the run's steps stay with its row until it is purged or removed.
                    self._ack([Ack(f, self.now, result)])
                else:
                    # Asleep: a step recorded, then parked, as a sleep does it.
                    self._nack([Nack(f, NackKind.PARK, self.now, self._at(offset))])
            elif then != "hold":
                kind = NackKind(then)
                run_at = self._at(offset)
                if kind is NackKind.RETRY and run_at is None:
                    run_at = self.now
                waits = None
                durable = "durable" in self.FAMILIES_ON and self.capabilities.events
                if kind is NackKind.PARK and wait is not None and durable:
                    # A wait's timeout, or none: parked until the event comes. As the step API
                    # parks, the timeout is the wait's until too.
                    run_at = None if pick % 2 else self.now + 3000
                    since = max(0, self.now + wait[2])
                    # The second worker's runs act for a tenant (the durable family's rules draw
                    # theirs; this rule's draws stay the job family's own).
                    tenant = EVENT_TENANTS[WORKERS.index(worker)]
                    waits = EventWait(wait[0], wait[1], since, tenant, run_at)
                    self._note("park waiting for an event")
                    if pick % 3 == 0:
                        # Its event is already there: the park must not sleep past it (unless
                        # it expired by now).
                        self._before_park(waits, ("live", "at expiry", "just live")[pick // 3])
                nack = Nack(f, kind, self.now, run_at, error, dead_letter=dead_letter, wait=waits)
                self._nack([nack])
                if waits is not None:
                    self._read_parked(f.job_id)

    def _ack(self, acks: list[Ack]) -> object:
        before = {a.fence.job_id: self.model.rows.get(a.fence.job_id) for a in acks}
        got = self._both(
            "job_ack", lambda: self.model.job_ack(acks), lambda: self.driver.job_ack(acks)
        )
        if isinstance(got, list):
            self._settled("ack", got)
            for a, landed in zip(acks, got, strict=True):
                old = before[a.fence.job_id]
                if landed and a.result_json is None and old and old.result_json is not None:
                    self._note("ack without a result over a stored result")
        return got

    def _nack(self, nacks: list[Nack]) -> object:
        before = {n.fence.job_id: self.model.rows.get(n.fence.job_id) for n in nacks}
        got = self._both(
            "job_nack", lambda: self.model.job_nack(nacks), lambda: self.driver.job_nack(nacks)
        )
        if isinstance(got, list):
            self._settled("nack", got)
            for n, landed in zip(nacks, got, strict=True):
                old = before[n.fence.job_id]
                if not landed or old is None:
                    continue
                self._note(f"nack {n.kind.value}")
                writes_error = n.kind in (NackKind.RETRY, NackKind.FAIL, NackKind.REFUSE)
                if writes_error and n.error is None and old.last_error is not None:
                    self._note("nack without an error over a stored error")
        return got

    def _settled(self, what: str, answers: list[bool]) -> None:
        if not all(answers):
            self._note(f"{what} fence miss")

    def _heartbeat(self, beats: list[Heartbeat]) -> object:
        before = {b.fence.job_id: self.model.rows.get(b.fence.job_id) for b in beats}
        got = self._both(
            "job_heartbeat",
            lambda: self.model.job_heartbeat(beats),
            lambda: self.driver.job_heartbeat(beats),
        )
        if isinstance(got, list):
            self._settled("heartbeat", got)
            for b, landed in zip(beats, got, strict=True):
                old = before[b.fence.job_id]
                if landed and old is not None and (old.lease_until_ms or 0) > b.now_ms + b.lease_ms:
                    self._note("heartbeat shortening a lease")
                if not landed and old is not None and old.state == JobState.RUNNING:
                    same = old.claims == b.fence.claims
                    if same and old.claimed_by != b.fence.worker_id:
                        self._note("heartbeat of the held count by another worker")
        return got

    def _progress(self, items: list[Progress]) -> object:
        got = self._both(
            "job_progress",
            lambda: self.model.job_progress(items),
            lambda: self.driver.job_progress(items),
        )
        if isinstance(got, list):
            self._settled("progress", got)
        return got

    def _claim(self, params: ClaimParams) -> ClaimResult | JobsError:
        before = dict(self.model.rows)
        got = self._both(
            "job_claim",
            lambda: self.model.job_claim(params),
            lambda: self.driver.job_claim(params),
        )
        if isinstance(got, ClaimResult):
            self.fences.extend(j.fence for j in got.jobs)
            self._claim_events(params, before, got)
        return got

    def _claim_alone(self, queue: str, worker: str) -> ClaimedJob | None:
        """The one row `worker` claims from `queue` now (a 1 s lease), or None."""
        got = self._claim(ClaimParams((queue,), worker, 1, 1000, self.now))
        if isinstance(got, ClaimResult) and got.jobs:
            return got.jobs[0]
        return None

    def _refusal_fence(self) -> Fence:
        """The fence a refused call is sent under: a running row's, else one of no row (the
        refusal must come first either way)."""
        rows = self._held_rows()
        if rows:
            return Fence(rows[0].id, rows[0].claims, rows[0].claimed_by or WORKERS[0])
        return Fence("no-such-job", 1, WORKERS[0])

    def _plain_job(
        self,
        job_id: str,
        queue: str,
        *,
        run_id: str | None = None,
        name: str = NAMES[0],
        key: str | None = None,
    ) -> NewJob:
        """A row a family's edge rule writes under: no tenant, due now, three attempts, `{}`
        input; its run `run-<id>` and its key its id unless given."""
        return NewJob(
            id=job_id,
            run_id=run_id if run_id is not None else f"run-{job_id}",
            name=name,
            queue=queue,
            tenant_id=None,
            idempotency_key=key if key is not None else job_id,
            input_json="{}",
            priority=0,
            run_at_ms=self.now,
            max_attempts=3,
            created_at_ms=self.now,
        )

    def _own_row(self, job: NewJob, what: str) -> ClaimedJob | None:
        """`job`, in a queue of its own, enqueued on both and claimed now by the first worker:
        the row a family's edge rule writes under (`what` names it in a divergence)."""
        self._both(
            f"job_enqueue({what})",
            functools.partial(self.model.job_enqueue, job),
            functools.partial(self.driver.job_enqueue, job),
        )
        return self._claim_alone(job.queue, WORKERS[0])

    def _claim_events(self, params: ClaimParams, before: dict[str, Any], got: ClaimResult) -> None:
        now = params.now_ms
        bound = params.reclaim_until_ms
        self._note("claim")
        for j in got.jobs:
            old = before[j.id]
            if old.state == JobState.RUNNING:
                self._edges += 1
                self._note("reclaim of a lapsed lease")
                if old.lease_until_ms == now:
                    self._note("reclaim at exactly lease_until_ms")
                if old.lease_until_ms == bound:
                    self._note("reclaim at exactly reclaim_until_ms")
                if old.attempt + 1 == old.max_attempts:
                    self._note("reclaim into the last attempt")
            elif old.state == JobState.PARKED:
                self._note("claim of a parked row")
                joined = self.model.joins.get(j.id)
                if joined is not None and joined[0] and joined[1] == old.claims:
                    self._note("claim of a waiter at its run_at, its join pending")
            if j.join is not None and old.state == JobState.READY and not j.join.pending:
                self._note("claim of a waiter its join released")
            if old.state != JobState.RUNNING and old.run_at_ms == now:
                self._note("claim at exactly run_at_ms")
        for b in got.buried:
            self._edges += 1
            self._note("bury")
            if before[b.id].lease_until_ms == now:
                self._note("bury at exactly lease_until_ms")
            if before[b.id].lease_until_ms == bound:
                self._note("bury at exactly reclaim_until_ms")
        if len(got.buried) > 1:
            self._note("several rows buried by one claim")
            ends = [(before[b.id].lease_until_ms or 0, b.id) for b in got.buried]
            if sorted(ends) != sorted(ends, key=lambda e: e[1]):
                self._note("several rows buried, lease order not id order")
        for r in before.values():
            lapsed = (
                r.state == JobState.RUNNING
                and r.queue in params.queues
                and r.lease_until_ms is not None
                and r.lease_until_ms <= now
            )
            if not lapsed or self.model.rows[r.id].claims != r.claims:
                continue
            if bound is not None and r.lease_until_ms > bound:
                self._note("lapsed lease held back by reclaim_until_ms")
            elif r.attempt < r.max_attempts:
                held = self.model._paused(r)
                self._note("lapsed lease held back by a pause" if held else "lapsed lease left")

    @rule(
        items=st.lists(
            st.tuples(fence_specs, st.sampled_from(RESULTS), st.sampled_from(PROGRESSES)),
            min_size=1,
            max_size=3,
        )
    )
    def ack(self, items: list[tuple[FenceSpec, str | None, str | None]]) -> None:
        acks = [Ack(self._fence(f), self.now, result, progress) for f, result, progress in items]
        self._ack(acks)

    @rule(
        items=st.lists(
            st.tuples(
                fence_specs,
                st.sampled_from(tuple(NackKind)),
                offsets,
                st.sampled_from(ERRORS),
                st.booleans(),
                st.sampled_from(PROGRESSES),
            ),
            min_size=1,
            max_size=3,
        )
    )
    def nack(
        self,
        items: list[tuple[FenceSpec, NackKind, int | None, str | None, bool, str | None]],
    ) -> None:
        nacks = [
            Nack(self._fence(f), kind, self.now, self._at(off), error, dead_letter, progress)
            for f, kind, off, error, dead_letter, progress in items
        ]
        self._nack(nacks)

    @rule(
        pick=recent,
        who=aimed_fences,
        lease=st.sampled_from(BEAT_LEASES),
        items=st.lists(st.tuples(fence_specs, st.sampled_from(BEAT_LEASES)), max_size=2),
    )
    def heartbeat(
        self, pick: int, who: str, lease: str | int, items: list[tuple[FenceSpec, str | int]]
    ) -> None:
        """Beat a running row under its fence or a near miss of it (`_aimed_fence`), then
        under fences held, stale, skewed or forged; for leases that end before, at or after
        the fenced row's current end."""
        beats = []
        for f in self._aimed_fence(pick, who):
            beats.append(Heartbeat(f, self._beat_lease(f, lease), self.now))
        for spec, lease in items:
            f = self._fence(spec)
            beats.append(Heartbeat(f, self._beat_lease(f, lease), self.now))
        self._heartbeat(beats)

    def _aimed_fence(self, pick: int, who: str) -> list[Fence]:
        """A running row's fence (claiming one first when none runs) as `who` says: the one it
        holds, its count under the other worker's id, or its count one off."""
        running = self._held_rows()
        if not running:
            return []
        r = running[-1 - pick % len(running)]
        assert r.claimed_by is not None
        worker = _other_worker(r.claimed_by) if who == "other worker" else r.claimed_by
        # A count below 1 is refused by the ABC before any fence is read: an earlier one then.
        stale = r.claims - 1 if r.claims > 1 else r.claims + 2
        claims = {"stale count": stale, "next count": r.claims + 1}.get(who, r.claims)
        return [Fence(r.id, claims, worker)]

    def _beat_lease(self, f: Fence, lease: str | int) -> int:
        """`lease` in ms from now (`BEAT_LEASES`), for the lease of the row `f` names."""
        r = self.model.rows.get(f.job_id)
        if isinstance(lease, int) or r is None or r.lease_until_ms is None:
            return lease if isinstance(lease, int) else 1000
        left = r.lease_until_ms - self.now
        return max(1, {"shorter": left - 1, "same end": left, "longer": left + 1}[lease])

    @rule(
        items=st.lists(
            st.tuples(fence_specs, st.sampled_from(PROGRESSES[1:])), min_size=1, max_size=3
        )
    )
    def progress(self, items: list[tuple[FenceSpec, str]]) -> None:
        self._progress([Progress(self._fence(f), text, self.now) for f, text in items])

    @precondition(lambda self: self.capabilities.operator)
    @rule(pick=target_ids)
    def cancel(self, pick: tuple[str, int]) -> None:
        job_id = self._target(pick)
        self._note(f"cancel of a {self._state_of(job_id)} row")
        self._both(
            "job_cancel",
            lambda: self.model.job_cancel(job_id, self.now),
            lambda: self.driver.job_cancel(job_id, self.now),
        )

    @precondition(lambda self: self.capabilities.operator)
    @rule(pick=st.tuples(st.sampled_from(("parked", "parked", *TARGET_KINDS)), recent))
    def requeue(self, pick: tuple[str, int]) -> None:
        """Requeue a row of any state, parked most (the live state a requeue most easily takes
        for finished: a row parked for a second first when none is)."""
        if pick[0] == "parked" and not any(
            r.state == JobState.PARKED for r in self.model.rows.values()
        ):
            for job in self._claim_some(WORKERS[0], 1):
                self._nack([Nack(job.fence, NackKind.PARK, self.now, self.now + 1000)])
        self._requeue(self._target(pick))

    def _requeue(self, job_id: str, fresh: bool = False) -> None:
        self._note(f"requeue of a {self._state_of(job_id)} row")
        run_id = self._fresh_run_id() if fresh else None
        got = self._both(
            "job_requeue",
            lambda: self.model.job_requeue(job_id, self.now, fresh_run_id=run_id),
            lambda: self.driver.job_requeue(job_id, self.now, fresh_run_id=run_id),
        )
        if isinstance(got, JobsError):
            self._note(f"requeue refused {got.code}")
        elif fresh:
            self._note("fresh requeue")

    @precondition(
        lambda self: (
            self.capabilities.operator
            and any(r.state not in LIVE_STATES for r in self.model.rows.values())
        )
    )
    @rule(
        n=recent,
        tenant=st.sampled_from(("same", "other", "other")),
        prefix=st.sampled_from(ID_PREFIXES[:4]),
    )
    def requeue_beside_twin(self, n: int, tenant: str, prefix: str) -> None:
        """Enqueue a twin of a finished row (its name and key, its tenant or another), then
        requeue the row: the duplicate refusal must read the tenant like every namespace."""
        done = [r for r in self.model.rows.values() if r.state not in LIVE_STATES]
        r = done[-1 - n % len(done)]
        others = [t for t in (None, "t1", LONG_TENANT) if t != r.tenant_id]
        twin_tenant = r.tenant_id if tenant == "same" else others[n % len(others)]
        twin = NewJob(
            id=self._fresh_id(prefix),
            run_id=f"run-twin-{self._serial}",
            name=r.name,
            queue=r.queue,
            tenant_id=twin_tenant,
            idempotency_key=r.idempotency_key,
            input_json=r.input_json,
            priority=r.priority,
            run_at_ms=self.now,
            max_attempts=r.max_attempts,
            created_at_ms=self.now,
        )
        self._both(
            "job_enqueue",
            lambda: self.model.job_enqueue(twin),
            lambda: self.driver.job_enqueue(twin),
        )
        if r.tenant_id is not None or twin_tenant is not None:
            self._note(f"requeue beside a twin of {tenant} tenant, a tenant set")
        self._requeue(r.id)

    @precondition(lambda self: self.capabilities.operator)
    @rule(
        n=recent,
        then=st.sampled_from(("ack", "ack", NackKind.RETRY, NackKind.FAIL, NackKind.REFUSE)),
        keep=st.booleans(),
        first=st.sampled_from((RESULTS[1], RESULTS[2], RESULTS[-1])),
    )
    def rerun(self, n: int, then: str, keep: bool, first: str) -> None:
        """An operator requeues a finished row (one that stored a result or an error, when there
        is one; one that ran to `first`, a result, when no row is finished) and a worker runs
        it again, settling with no result or no error: the settle must overwrite what the
        earlier run stored, not keep it."""
        if all(r.state in LIVE_STATES for r in self.model.rows.values()):
            for job in self._claim_some(WORKERS[0], 1):
                self._ack([Ack(job.fence, self.now, first)])
        held = {row_namespace(r) for r in self.model.rows.values() if r.state in LIVE_STATES}
        done = [r for r in self.model.rows.values() if r.state not in LIVE_STATES]
        free = [r for r in done if row_namespace(r) not in held] or done
        stored = [r for r in free if r.result_json is not None or r.last_error is not None]
        if not free:
            return
        r = (stored or free)[-1 - n % len(stored or free)]
        self._requeue(r.id)
        # Enough of a claim to take the requeued row beside whatever else is due in its queue.
        got = self._claim(ClaimParams((r.queue,), WORKERS[n % 2], 10, 1000, self.now))
        if not isinstance(got, ClaimResult):
            return
        for job in got.jobs:
            if job.id != r.id:
                continue
            progress = None if keep else '{"again": true}'
            if then == "ack":
                self._ack([Ack(job.fence, self.now, None, progress)])
            else:
                kind = NackKind(then)
                self._nack([Nack(job.fence, kind, self.now, self.now, None, True, progress)])

    @belongs_to("retention")
    @precondition(lambda self: self.capabilities.retention)
    @rule(
        keeps=retentions,
        # Mostly fewer than the expired rows, so the order and the limit both show.
        limit=st.sampled_from((1, 1, 1, 2, 10)),
        again=st.none() | batch_job_specs,
    )
    def purge(
        self,
        keeps: tuple[int | None, int | None, int | None, int | None],
        limit: int,
        again: JobSpec | None,
    ) -> None:
        """Purge finished rows past their retention (`keeps`: completed, cancelled, failed,
        dead); with `again`, enqueue a record under the first purged id, which is free now."""
        gone = self._purge(PurgeParams(self.now, limit, *keeps))
        if again is not None and gone:
            job = replace(self._new_job(replace(again, id=IdSpec("old", 0, "")), {}), id=gone[0])
            self._both(
                "job_enqueue(a purged id)",
                lambda: self.model.job_enqueue(job),
                lambda: self.driver.job_enqueue(job),
            )

    @rule(
        kind=st.sampled_from(
            (
                "priority",
                "nan",
                "empty_tenant",
                "empty_name",
                "batch_cap",
                "ack_nan",
                "retry_at",
                "bulk_cap",
                "traceparent",
            )
        ),
        specs=st.lists(batch_job_specs, min_size=1, max_size=3),
        pos=st.integers(0, 3),
        fence=fence_specs,
    )
    def refused_call(self, kind: str, specs: list[JobSpec], pos: int, fence: FenceSpec) -> None:
        """A batch with one bad item is refused whole: the invariant then sees nothing changed."""
        refusal: object
        if kind == "bulk_cap" and not self.capabilities.operator:
            kind = "batch_cap"  # the bulk calls are the operator family's
        if kind == "ack_nan":
            f = self._fence(fence)
            acks = [Ack(f, self.now, '{"ok":1}'), Ack(f, self.now, "NaN")]
            if pos % 2:
                acks.reverse()
            refusal = self._ack(acks)
        elif kind == "retry_at":
            f = self._fence(fence)
            nacks = [Nack(f, NackKind.SHED, self.now), Nack(f, NackKind.RETRY, self.now)]
            if pos % 2:
                nacks.reverse()
            refusal = self._nack(nacks)
        elif kind == "bulk_cap":
            # Real ids, one too many: the cap is checked before any row is touched.
            many = [self._used_id(i) or UNKNOWN_ID for i in range(MAX_BULK_IDS + 1)]
            call = ("job_remove", "job_cancel_many", "job_requeue_many", "job_promote")[pos]
            requeue = RequeueParams(tuple(many), self.now)
            model_call: Callable[[], object] = {
                "job_remove": lambda: self.model.job_remove(many),
                "job_cancel_many": lambda: self.model.job_cancel_many(many, self.now),
                "job_requeue_many": lambda: self.model.job_requeue_many(requeue),
                "job_promote": lambda: self.model.job_promote(many, self.now),
            }[call]
            driver_call: Callable[[], Coroutine[Any, Any, object]] = {
                "job_remove": lambda: self.driver.job_remove(many),
                "job_cancel_many": lambda: self.driver.job_cancel_many(many, self.now),
                "job_requeue_many": lambda: self.driver.job_requeue_many(requeue),
                "job_promote": lambda: self.driver.job_promote(many, self.now),
            }[call]
            refusal = self._both(f"{call}(too many ids)", model_call, driver_call)
        else:
            fresh: dict[int, str] = {}
            batch = [self._new_job(s, fresh) for s in specs]
            if kind == "batch_cap":
                # The same record many times over: the cap is checked before anything else.
                batch = [batch[0]] * (MAX_ENQUEUE_BATCH + 1)
            else:
                base = self._new_job(replace(specs[0], id=IdSpec("new", 0, "bad")), {})
                bad = {
                    "priority": replace(base, priority=101),
                    "nan": replace(base, input_json="NaN"),
                    "empty_tenant": replace(base, tenant_id=""),
                    "empty_name": replace(base, name=""),
                    "traceparent": replace(base, traceparent="00-not-a-trace-01"),
                }[kind]
                batch.insert(min(pos, len(batch)), bad)
            refusal = self._both(
                "job_enqueue_many(bad batch)",
                lambda: self.model.job_enqueue_many(batch),
                lambda: self.driver.job_enqueue_many(batch),
            )
        assert isinstance(refusal, JobsError), f"the machine built a call nobody refuses: {kind}"

    @belongs_to("retention")
    @precondition(lambda self: self.capabilities.retention)
    @rule(keeps=retentions, limit=st.sampled_from((1, 2, 10)), edge=st.sampled_from((0, 0, 1)))
    def purge_at_retention_end(
        self,
        keeps: tuple[int | None, int | None, int | None, int | None],
        limit: int,
        edge: int,
    ) -> None:
        """Purge with the retention of the latest finished row's state ending exactly now (0:
        it goes) or a millisecond later (1: it stays); a row finished now first if none is."""
        if all(r.finished_at_ms is None for r in self.model.rows.values()):
            for job in self._claim_some(WORKERS[0], 1):
                self._ack([Ack(job.fence, self.now)])
        done = [r for r in self.model.rows.values() if r.finished_at_ms is not None]
        if not done:
            return
        r = max(done, key=lambda r: (r.finished_at_ms or 0, r.id))
        assert r.finished_at_ms is not None
        retention = list(keeps)
        retention[PURGE_STATES.index(r.state)] = self.now - r.finished_at_ms + edge
        if edge == 0:
            self._note("purge at a row's exact retention end")
        self._purge(PurgeParams(self.now, limit, *retention))

    @belongs_to("retention")
    @precondition(lambda self: self.capabilities.retention)
    @rule(limit=st.sampled_from((1, 1, 2, 3)), reverse=st.booleans(), apart=st.booleans())
    def finish_then_purge(self, limit: int, reverse: bool, apart: bool) -> None:
        """Finish the rows a claim takes, each in another final state (completed, dead, failed,
        cancelled; in id order, or the reverse), a millisecond `apart` or all in one, then purge
        with no retention and `limit` below their number: one budget for every state, the
        oldest finished first whatever their ids say, ties by id."""
        jobs = self._claim_some(WORKERS[0], 4)
        for i, job in enumerate(sorted(jobs, key=lambda j: j.id, reverse=reverse)):
            self.now += apart
            if i % 4 == 0:
                self._ack([Ack(job.fence, self.now)])
            elif i % 4 == 3 and self.capabilities.operator:
                self._both(
                    "job_cancel",
                    functools.partial(self.model.job_cancel, job.id, self.now),
                    functools.partial(self.driver.job_cancel, job.id, self.now),
                )
            else:
                nack = Nack(job.fence, NackKind.FAIL, self.now, error="x", dead_letter=i % 4 == 1)
                self._nack([nack])
        self._purge(PurgeParams(self.now, limit, 0, 0, 0, 0))

    def _purge(self, params: PurgeParams) -> list[str]:
        """Purge on both; the ids that went. Counts the purges whose limit cut the purgeable
        rows: where the order decides."""
        before = dict(self.model.rows)
        self._both(
            "job_purge",
            lambda: self.model.job_purge(params),
            lambda: self.driver.job_purge(params),
        )
        ids = sorted(set(before) - set(self.model.rows))
        gone = [before[i] for i in ids]
        left = [r for r in self.model.rows.values() if _purgeable(r, params)]
        if not gone or not left:
            return ids
        self._note("purge cut by its limit")
        last = max((r.finished_at_ms or 0, r.id) for r in gone)
        if any(r.finished_at_ms == last[0] for r in left):
            self._note("purge cut between rows finished in one millisecond")
        if any(r.id < last[1] for r in left):
            self._note("purge cut where id order is not finish order")
        if len({r.state for r in gone + left}) > 1:
            self._note("purge cut across final states")
        return ids

    # -- pauses, queues, workers --------------------------------------------------------------

    @precondition(lambda self: self.capabilities.pauses)
    @rule(pause=st.sampled_from(PAUSES), add=st.booleans())
    def pause(self, pause: Pause, add: bool) -> None:
        """Add or lift a pause (one rule, so the walk spends its steps on jobs)."""
        if add:
            self._both(
                "pause_add",
                lambda: self.model.pause_add(pause),
                lambda: self.driver.pause_add(pause),
            )
        else:
            self._both(
                "pause_remove",
                lambda: self.model.pause_remove(pause),
                lambda: self.driver.pause_remove(pause),
            )

    @rule(
        queues=st.lists(st.sampled_from((*QUEUES, "q3")), max_size=3),
        waiting=st.sampled_from((True, True, False)),
    )
    def queue_demand(self, queues: list[str], waiting: bool) -> None:
        """Ask the demand of `queues`; with `waiting`, of the queues of parked rows and of
        ready rows not due yet too (neither is demand)."""
        rows = self.model.rows.values()
        if waiting:
            later = [
                r.queue
                for r in rows
                if r.state == JobState.PARKED
                or (r.state == JobState.READY and (r.run_at_ms or 0) > self.now)
            ]
            queues = list(dict.fromkeys([*later, *queues]))[:4]
        if any(r.state == JobState.PARKED and r.queue in queues for r in rows):
            self._note("demand beside a parked row")
        self._both(
            "queue_demand",
            lambda: self.model.queue_demand(queues, self.now),
            lambda: self.driver.queue_demand(queues, self.now),
        )

    @precondition(lambda self: self.capabilities.workers)
    @rule(
        op=st.sampled_from(("beat", "beat", "forget", "list", "expiry", "expiry")),
        worker=st.sampled_from((*WORKERS, "w3")),
        ttl_ms=st.sampled_from((1000, 5000)),
        info=st.sampled_from(INFOS),
        ahead=st.sampled_from((0, 999, 1000, 5000)),
        delta=st.sampled_from((-1, 0, 0, 1)),
        forget=st.booleans(),
    )
    def worker(
        self, op: str, worker: str, ttl_ms: int, info: str, ahead: int, delta: int, forget: bool
    ) -> None:
        """Beat, forget, or list the registry (`ahead` ms from now); or step through a row's
        expiry (beating it first if it has none), listing a millisecond before it (listed), at
        it (not) and `delta` ms from it, then, with `forget`, forget that row — an expired row is
        still there to forget until it is forgotten or purged."""
        if op == "beat":
            beat = WorkerBeat(worker, info, ttl_ms, self.now)
            self._both(
                "worker_beat",
                lambda: self.model.worker_beat(beat),
                lambda: self.driver.worker_beat(beat),
            )
        elif op == "forget":
            self._forget(worker)
        elif op == "expiry":
            if worker not in self.model.workers:
                beat = WorkerBeat(worker, info, ttl_ms, self.now)
                self._both(
                    "worker_beat",
                    lambda: self.model.worker_beat(beat),
                    lambda: self.driver.worker_beat(beat),
                )
            w = self.model.workers[worker]
            # A millisecond before its expiry (listed), then at it (not), then `delta` on.
            for at in (w.expires_at_ms - 1, w.expires_at_ms, w.expires_at_ms + delta):
                if at > self.now:
                    self.now = at
                    self._list_workers(at)
                    if at == w.expires_at_ms:
                        self._note("registry read at a row's expiry")
            if forget:
                if w.expires_at_ms <= self.now:
                    self._note("forget of an expired registry row")
                self._forget(w.worker_id)
        else:
            self._list_workers(self.now + ahead)

    @precondition(lambda self: self.capabilities.workers)
    @rule(
        worker=st.sampled_from((*WORKERS, "w3")),
        ttl_ms=st.sampled_from((1000, 5000)),
        delta=st.sampled_from((-1, 0, 0, 1)),
        forget=st.booleans(),
    )
    def purge_workers(self, worker: str, ttl_ms: int, delta: int, forget: bool) -> None:
        """Purge the registry at `worker`'s row's expiry (beating it first if it has none;
        `delta` ms from it, the clock moved there when it is ahead). With `forget`, a purge of
        one row at most, `worker` and another beaten now to end in the same millisecond (which
        one goes is the ids' order), then each row that had expired by then forgotten: which
        ones went shows. Else a purge of every expired row."""
        if forget:
            twin = WORKERS[1] if worker == WORKERS[0] else WORKERS[0]
            for w in (worker, twin):
                self._beat(WorkerBeat(w, INFOS[0], ttl_ms, self.now))
        elif worker not in self.model.workers:
            self._beat(WorkerBeat(worker, INFOS[0], ttl_ms, self.now))
        rows = self.model.workers
        end = rows[worker].expires_at_ms
        at = end + delta
        self.now = max(self.now, at)
        limit = 1 if forget else MAX_PURGE_LIMIT
        expired = sorted(
            (r for r in rows.values() if r.expires_at_ms <= at),
            key=lambda r: (r.expires_at_ms, r.worker_id),
        )
        if at == end:
            self._note("registry purge at a row's exact expiry")
        if len(expired) > limit:
            self._note("registry purge cut by its limit")
            if expired[limit - 1].expires_at_ms == expired[limit].expires_at_ms:
                self._note("registry purge cut between rows ending in one millisecond")
        self._both(
            "worker_purge",
            lambda: self.model.worker_purge(at, limit),
            lambda: self.driver.worker_purge(at, limit),
        )
        if forget:
            for r in expired:
                self._forget(r.worker_id)

    def _beat(self, beat: WorkerBeat) -> None:
        self._both(
            "worker_beat",
            lambda: self.model.worker_beat(beat),
            lambda: self.driver.worker_beat(beat),
        )

    def _forget(self, worker: str) -> None:
        self._both(
            "worker_forget",
            lambda: self.model.worker_forget(worker),
            lambda: self.driver.worker_forget(worker),
        )

    def _list_workers(self, at: int) -> None:
        self._both(
            "worker_list",
            lambda: self.model.worker_list(at),
            lambda: self.driver.worker_list(at),
        )

    def _before_park(self, wait: EventWait, how: str = "live") -> None:
        """Publish, before a park waits for it, an event `wait` matches (the event family)."""

    def _read_parked(self, job_id: str) -> None:
        """Read a row just parked with a wait, before anything else moves it: a step seldom
        ends with a row still waiting (its event is often stored or published in the same
        step), so the wait it shows is compared here too."""
        if self.model.wait_of(job_id) is not None:
            self._note("row compared while it waits")
        self._both(
            "job_get_many",
            lambda: self.model.job_get_many([job_id]),
            lambda: self.driver.job_get_many([job_id]),
        )

    # -- the observable state -----------------------------------------------------------------

    def _walks(self, family: str) -> bool:
        """Whether this walk covers `family`: its state is compared only then."""
        return family in self.FAMILIES_ON

    def _family_checks(self) -> list[Check]:
        """What each family adds to the state compared after every step (none for jobs)."""
        return []

    @invariant()
    def same_state(self) -> None:
        """Every row ever named (each field, and the wait a parked row holds) and the state of
        each family the walk covers and the driver declares (pauses, live workers, counter
        buckets, queue stats, steps, events, lease holders, task marks) match the model.

        Runs after every step, so a difference is blamed on the step that made it (named with
        its rule, arguments and driver calls), never on a later step that noticed it.
        """
        if self._not_empty is not None:
            return
        ids = [*self.ids, UNKNOWN_ID]
        checks: list[Check] = [
            (
                "job_get_many",
                lambda: self.model.job_get_many(ids),
                lambda: self.driver.job_get_many(ids),
            ),
        ]
        # Pauses and the registry are the job family's walk's to compare (a task pause, the
        # task family's): another walk never moves them but within one step.
        if self.capabilities.pauses and (self._walks("jobs") or self._walks("tasks")):
            checks.append(("pause_list", self.model.pause_list, self.driver.pause_list))
        if self.capabilities.workers and self._walks("jobs"):
            checks.append(
                (
                    "worker_list",
                    lambda: self.model.worker_list(self.now),
                    lambda: self.driver.worker_list(self.now),
                )
            )
        self._compare_state(checks + self._family_checks())


#: Every family a walk may cover. `make_machine(factory, {family})` walks one: its own rules
#: and the job rules it borrows (`BORROWS`); the job family's walk draws every job rule.
FAMILIES: frozenset[str] = frozenset(
    {
        "jobs",
        "operator",
        "counters",
        "durable",
        "leases",
        "tasks",
        "retention",
        "flows",
        "sweeps",
        "postings",
        # -- consumers --
        "consumers",
        # -- webhooks --
        "webhooks",
    }
)

#: The job family's rules each other family's walk draws beside its own: what makes the rows,
#: fences and times its edges are about, and no more (a borrowed rule takes steps from the
#: family's own). The job family's own walk draws them all.
BORROWS: dict[str, frozenset[str]] = {
    "jobs": frozenset(),
    "operator": frozenset({"seed", "enqueue_many", "claim", "work", "advance_to_due"}),
    "counters": frozenset({"seed", "work", "workers_die", "ack", "cancel"}),
    "durable": frozenset({"seed", "enqueue_many", "work", "claim", "advance", "cancel"}),
    "leases": frozenset({"advance"}),
    "tasks": frozenset({"seed", "enqueue_many", "claim", "advance"}),
    "retention": frozenset({"seed", "work", "workers_die", "cancel", "advance"}),
    # What finishes the rows a random join names (every finishing path but the operator's
    # remove, which the family's own rules aim) and what claims a waiter at its run_at.
    "flows": frozenset(
        {"seed", "enqueue_many", "work", "claim", "workers_die", "cancel", "advance_to_due"}
    ),
    # What moves the fences a ledger write is fenced on: claims (reclaims of lapsed leases
    # among them), settles, cancels, and the clock to a lease's end.
    "sweeps": frozenset({"seed", "work", "claim", "cancel", "advance", "advance_to_lease_end"}),
    # The same for a posting: what moves the fences it is written under.
    "postings": frozenset({"seed", "work", "claim", "cancel", "advance", "advance_to_lease_end"}),
    # -- consumers -- what moves the fences a cursor put is fenced on.
    "consumers": frozenset({"seed", "work", "claim", "cancel", "advance", "advance_to_lease_end"}),
    # -- webhooks -- what moves the fences an attempt is written under (claims, settles,
    # cancels, the clock to a lease's end); the family's own rules make their rows.
    "webhooks": frozenset({"seed", "work", "claim", "cancel", "advance_to_lease_end"}),
}


def make_machine(
    factory: DriverFactory, families: frozenset[str] | set[str] = FAMILIES
) -> type[ParityMachine]:
    """A `ParityMachine` class whose every instance drives a fresh driver from `factory`,
    walking `families` (all of them by default): each one's rules, and the job rules each
    borrows. One family's walk (`{family}`) spends its steps on that family's edges, however
    many families the suite has; the suite walks each family apart."""
    unknown = set(families) - FAMILIES
    if unknown:
        raise ValueError(f"no such families: {sorted(unknown)}")
    every = _every_rule()
    borrowed = frozenset().union(*(BORROWS[f] for f in families))
    namespace: dict[str, object] = {
        "tally": Counter(),
        "FAMILIES_ON": frozenset(families),
        "make_driver": staticmethod(factory),
    }
    for name in _rule_names(every):
        if _home(every, name) not in families and name not in borrowed:
            namespace[name] = _not_drawn(getattr(every, name))
    bound: type[ParityMachine] = type("BoundParityMachine", (every,), namespace)
    return bound


@functools.cache
def _every_rule() -> type[ParityMachine]:
    """One class with every family's rules and state checks (a walk switches some off)."""
    from jobs_core.testing.consumer_rules import ConsumerRules
    from jobs_core.testing.durable_rules import DurableRules
    from jobs_core.testing.flow_rules import FlowRules
    from jobs_core.testing.lease_rules import LeaseRules
    from jobs_core.testing.operator_rules import OperatorRules
    from jobs_core.testing.posting_rules import PostingRules
    from jobs_core.testing.sweep_rules import SweepRules
    from jobs_core.testing.task_rules import TaskRules
    from jobs_core.testing.webhook_rules import WebhookRules

    families = (
        OperatorRules,
        DurableRules,
        LeaseRules,
        TaskRules,
        FlowRules,
        SweepRules,
        PostingRules,
        ConsumerRules,
        WebhookRules,
    )
    _one_owner_each(families)
    return type("EveryFamily", (*families, ParityMachine), {})


#: What every family's class defines and chains with `super()`: shared on purpose.
_COOPERATIVE: Final = frozenset({"FAMILY", "_family_checks"})


def _one_owner_each(families: tuple[type[ParityMachine], ...]) -> None:
    """Refuse two family classes defining one name: the class that walks every family would
    run one family's method for both (the first in its MRO), silently."""
    owner: dict[str, str] = {}
    for klass in families:
        for name in vars(klass):
            if name.startswith("__") or name in _COOPERATIVE:
                continue
            if name in owner:
                raise TypeError(f"{owner[name]} and {klass.__name__} both define {name!r}")
            owner[name] = klass.__name__


def _rule_names(machine: type[ParityMachine]) -> list[str]:
    """The names of `machine`'s rules and initializers."""
    # The markers `@rule` and `@initialize` set, read as Hypothesis itself reads them (every
    # release this package allows has them; `setup_state` came later).
    markers = ("hypothesis_stateful_rule", "hypothesis_stateful_initialize_rule")
    return sorted(
        name
        for name, member in inspect.getmembers(machine)
        if any(getattr(member, m, None) is not None for m in markers)
    )


def _home(machine: type[ParityMachine], name: str) -> str:
    """The family whose walk draws rule `name`: the one `belongs_to` names, else the family
    of the class that defines it."""
    for klass in machine.__mro__:
        if name in vars(klass):
            home: str = getattr(vars(klass)[name], _HOME, None) or klass.FAMILY  # type: ignore[attr-defined]
            return home
    raise AssertionError(f"no rule {name}")


def _not_drawn(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` as a plain method: still there for another rule to call, never drawn."""

    def call(self: ParityMachine, *args: Any, **kwargs: Any) -> Any:
        return method(self, *args, **kwargs)

    return call
