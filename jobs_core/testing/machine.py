"""The parity state machine: random walks over the contract, a driver and the model side by side.

Every rule calls the driver under test and the `ReferenceModel` with the same arguments and the
same fake time, and fails on the first answer that differs (values, bools, `CancelAnswer`,
`ClaimResult` order, or the error code of a refusal). After every step the observable state —
every job row ever named, the pauses, the live workers — must match too.

Hypothesis machines are synchronous; each machine instance drives its async driver through one
`asyncio.Runner`, opened in `__init__` and closed in `teardown`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from jobs_core.driver import MAX_ENQUEUE_BATCH, JobDriver
from jobs_core.errors import JobsError
from jobs_core.records import (
    Ack,
    ClaimParams,
    ClaimResult,
    Fence,
    Heartbeat,
    Nack,
    NackKind,
    NewJob,
    Pause,
    Progress,
    PurgeParams,
    WorkerBeat,
)
from jobs_core.states import LIVE_STATES, JobState
from jobs_core.testing.model import ReferenceModel

#: Makes a fresh, empty driver; entering it opens the driver, leaving it drops everything.
DriverFactory: TypeAlias = Callable[[], AbstractAsyncContextManager[JobDriver]]

T = TypeVar("T")

#: Where the fake clock starts (2027-01-15, well inside the allowed range).
T0 = 1_800_000_000_000

# Small pools, so that namespaces, queues and fences collide often.
NAMES = ("a", "b", "q'uo%te\n☃")
QUEUES = ("q1", "q2")
KEYS = ("k1", "k2")
WORKERS = ("w1", "w2")
#: Id prefixes whose order differs between code-point order and any locale's collation.
ID_PREFIXES = ("a", "B", "_", "é", "f", "☃", "q'", "%", "n\nl", "\U0010ffff")
INPUTS = ('{"n":1}', "[1, 2.5, null]", '"s"', '{"b": {"a": [true, false]}, "a": "☃ q\'uo"}')
RESULTS = (None, '{"ok":true}', "null", '"done"')
PROGRESSES = (None, '{"pct": 50}', '[1,{"x":"y"}]')
ERRORS = (None, "boom", "q'uo%te\n☃")
INFOS = ('{"host":"h1"}', '{"pid": 2, "tags": ["x"]}')
PAUSES = tuple(Pause("queue", q) for q in QUEUES) + tuple(Pause("name", n) for n in NAMES)
#: An id no rule ever inserts: every state check also asks for it.
UNKNOWN_ID = "no-such-job"


class ParityError(AssertionError):
    """The driver answered differently from the reference model."""


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


@dataclass(frozen=True, slots=True)
class FenceSpec:
    """Which fence a settle presents.

    `past`: one a claim handed out (`n` back from the latest; it may be stale). `held`: the
    fence a running row holds now. `skewed`: that fence with its count or worker off by one
    (`skew` 1..4). `forged`: any stored id with `skew` as the count and `worker_id`.
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
        name=st.sampled_from(NAMES),
        tenant_id=st.sampled_from(tenants),
        key=st.sampled_from(KEYS),
        queue=st.sampled_from(QUEUES),
        priority=st.sampled_from((0, 1, 100)),
        run_at_offset=st.sampled_from((-1000, 0, 1000)),
        max_attempts=st.sampled_from((1, 1, 2, 3)),
        input_json=st.sampled_from(INPUTS),
        enqueued_by=st.sampled_from((None, "u1")),
    )


# '' is refused by the ABC today (a tenant must be a non-empty string); seen now and then.
single_job_specs = job_specs((None, None, None, "t1", "t1", "t1", ""))
batch_job_specs = job_specs((None, "t1"))
fence_specs = st.builds(
    FenceSpec,
    kind=st.sampled_from(("past", "past", "held", "held", "skewed", "forged")),
    n=recent,
    worker_id=st.sampled_from(WORKERS),
    skew=st.integers(1, 4),
)
#: Claim queue lists: mostly one or both queues (in either order), now and then none (refused).
claim_queues = st.sampled_from(
    ((), ("q1",), ("q2",), ("q1", "q2"), ("q2", "q1"), ("q1", "q2"), ("q1", "q1", "q2"))
)
#: Which row a cancel or requeue names: a live one, a finished one, any, or none at all.
target_ids = st.tuples(st.sampled_from(("live", "finished", "any", "unknown")), recent)
offsets = st.sampled_from((None, -1000, 0, 1000, 3000))


def _canonical_json(text: object) -> object:
    # Drivers may store jsonb: compare what the text means, not how it is spelled.
    return ("json", json.loads(text)) if isinstance(text, str) else text


_JSON_FIELDS = frozenset({"input_json", "progress_json", "result_json", "info_json"})


def _comparable(value: object) -> object:
    """`value` as plain data for comparison and display: JSON texts parsed, enums and bools typed.

    Enum and bool answers keep their type, so a driver answering `"dead"` for `JobState.DEAD`
    or `1` for `True` differs (callers compare states with `is`).
    """
    if isinstance(value, JobsError):
        return ("raised", value.code)
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.value)
    if isinstance(value, bool):
        return ("bool", value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, object] = {"type": type(value).__name__}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            out[f.name] = _canonical_json(v) if f.name in _JSON_FIELDS else _comparable(v)
        return out
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    return value


def _difference(got: object, want: object) -> object:
    """The parts of two comparable values that differ, as (driver, model) pairs."""
    if isinstance(got, dict) and isinstance(want, dict):
        missing = object()
        keys = sorted(set(got) | set(want), key=str)
        return {
            k: _difference(got.get(k, missing), want.get(k, missing))
            for k in keys
            if got.get(k, missing) != want.get(k, missing)
        }
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        pairs = enumerate(zip(got, want, strict=True))
        return {f"[{i}]": _difference(g, w) for i, (g, w) in pairs if g != w}
    return (got, want)


def _assert_same(what: str, got: object, want: object) -> None:
    g, w = _comparable(got), _comparable(want)
    if g != w:
        raise ParityError(f"{what}: (driver, model) differ: {_difference(g, w)!r}")


class ParityMachine(RuleBasedStateMachine):
    """Drives `make_driver()`'s driver and a `ReferenceModel` through the same random calls.

    Bind a driver with `make_machine(factory)`; this class itself has none.
    """

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
        self._serial = 0
        self._runner = asyncio.Runner()
        self._driver_cm = self.make_driver()
        try:
            self.driver = self._runner.run(_enter(self._driver_cm))
        except BaseException:
            self._runner.close()
            raise
        # Optional families are asked of the driver; none of today's (`wake`) is exercised here.
        self.capabilities = self.driver.capabilities()

    def teardown(self) -> None:
        try:
            self._runner.run(_exit(self._driver_cm))
        finally:
            self._runner.close()

    # -- plumbing -----------------------------------------------------------------------------

    def _both(
        self,
        what: str,
        model_call: Callable[[], T],
        driver_call: Callable[[], Coroutine[Any, Any, T]],
    ) -> T | JobsError:
        """Run the same call on both; fail unless the answers (or refusal codes) agree."""
        want: T | JobsError
        got: T | JobsError
        try:
            want = model_call()
        except JobsError as exc:
            want = exc
        try:
            got = self._runner.run(driver_call())
        except JobsError as exc:
            got = exc
        _assert_same(what, got, want)
        return got

    def _fresh_id(self, prefix: str) -> str:
        self._serial += 1
        job_id = f"{prefix}{self._serial:04d}"
        self.ids.append(job_id)
        return job_id

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
        return NewJob(
            id=job_id,
            run_id=f"run-{job_id}",
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
            other = "w2" if f.worker_id == "w1" else "w1"
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
        live = kind == "live"
        rows = [
            r.id
            for r in self.model.rows.values()
            if kind == "any" or (r.state in LIVE_STATES) is live
        ]
        return rows[-1 - n % len(rows)] if rows else UNKNOWN_ID

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
        self.now += dt

    @precondition(lambda self: bool(self._lease_ends()))
    @rule(pick=st.integers(0, 7), delta=st.sampled_from((-1, 0, 0, 1)))
    def advance_to_lease_end(self, pick: int, delta: int) -> None:
        """Jump to a running row's lease end (or one ms either side): the edge claims test."""
        ends = self._lease_ends()
        self.now = max(self.now, ends[pick % len(ends)] + delta)

    # -- jobs ---------------------------------------------------------------------------------

    @initialize(specs=st.lists(batch_job_specs, min_size=1, max_size=8))
    def seed(self, specs: list[JobSpec]) -> None:
        """Start every walk with rows, whichever rules this example's swarm left enabled."""
        self.enqueue_many(specs)

    @rule(spec=single_job_specs)
    def enqueue(self, spec: JobSpec) -> None:
        job = self._new_job(spec, {})
        self._both(
            "job_enqueue",
            lambda: self.model.job_enqueue(job),
            lambda: self.driver.job_enqueue(job),
        )

    @rule(specs=st.lists(batch_job_specs, max_size=5))
    def enqueue_many(self, specs: list[JobSpec]) -> None:
        fresh: dict[int, str] = {}
        jobs = [self._new_job(s, fresh) for s in specs]
        self._both(
            "job_enqueue_many",
            lambda: self.model.job_enqueue_many(jobs),
            lambda: self.driver.job_enqueue_many(jobs),
        )

    @rule(
        queues=claim_queues,
        worker=st.sampled_from(WORKERS),
        limit=st.integers(1, 4),
        lease_ms=st.sampled_from((1000, 3000)),
        drop=st.frozensets(st.sampled_from(NAMES)),
        beat=st.none() | st.tuples(st.sampled_from((1000, 5000)), st.sampled_from(INFOS)),
    )
    def claim(
        self,
        queues: tuple[str, ...],
        worker: str,
        limit: int,
        lease_ms: int,
        drop: frozenset[str],
        beat: tuple[int, str] | None,
    ) -> None:
        params = ClaimParams(
            queues=queues,
            worker_id=worker,
            limit=limit,
            lease_ms=lease_ms,
            now_ms=self.now,
            drop_exhausted=drop,
            beat=None if beat is None else WorkerBeat(worker, beat[1], beat[0], self.now),
        )
        self._claim(params)

    @rule(
        queues=claim_queues,
        worker=st.sampled_from(WORKERS),
        lease_ms=st.sampled_from((1000, 3000)),
        then=st.sampled_from((*NackKind, "ack", "heartbeat", "progress", "hold")),
        offset=offsets,
        error=st.sampled_from(ERRORS),
    )
    def work(
        self,
        queues: tuple[str, ...],
        worker: str,
        lease_ms: int,
        then: str,
        offset: int | None,
        error: str | None,
    ) -> None:
        """What a worker does: claim, then settle what it got at once (a random walk alone
        rarely lands a settle on a fresh fence)."""
        got = self._claim(ClaimParams(queues, worker, 2, lease_ms, self.now))
        if not isinstance(got, ClaimResult):
            return
        for job in got.jobs:
            f = job.fence
            if then == "ack":
                self._ack([Ack(f, self.now, '{"r": 1}')])
            elif then == "heartbeat":
                self._heartbeat([Heartbeat(f, lease_ms, self.now)])
            elif then == "progress":
                self._progress([Progress(f, '{"pct": 10}', self.now)])
            elif then != "hold":
                kind = NackKind(then)
                at = self._at(offset)
                if kind is NackKind.RETRY and at is None:
                    at = self.now
                self._nack([Nack(f, kind, self.now, at, error, dead_letter=job.id < "m")])

    def _ack(self, acks: list[Ack]) -> object:
        return self._both(
            "job_ack", lambda: self.model.job_ack(acks), lambda: self.driver.job_ack(acks)
        )

    def _nack(self, nacks: list[Nack]) -> object:
        return self._both(
            "job_nack", lambda: self.model.job_nack(nacks), lambda: self.driver.job_nack(nacks)
        )

    def _heartbeat(self, beats: list[Heartbeat]) -> object:
        return self._both(
            "job_heartbeat",
            lambda: self.model.job_heartbeat(beats),
            lambda: self.driver.job_heartbeat(beats),
        )

    def _progress(self, items: list[Progress]) -> object:
        return self._both(
            "job_progress",
            lambda: self.model.job_progress(items),
            lambda: self.driver.job_progress(items),
        )

    def _claim(self, params: ClaimParams) -> ClaimResult | JobsError:
        got = self._both(
            "job_claim",
            lambda: self.model.job_claim(params),
            lambda: self.driver.job_claim(params),
        )
        if isinstance(got, ClaimResult):
            self.fences.extend(j.fence for j in got.jobs)
        return got

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
        items=st.lists(
            st.tuples(fence_specs, st.sampled_from((1000, 3000))), min_size=1, max_size=3
        )
    )
    def heartbeat(self, items: list[tuple[FenceSpec, int]]) -> None:
        self._heartbeat([Heartbeat(self._fence(f), lease_ms, self.now) for f, lease_ms in items])

    @rule(
        items=st.lists(
            st.tuples(fence_specs, st.sampled_from(PROGRESSES[1:])), min_size=1, max_size=3
        )
    )
    def progress(self, items: list[tuple[FenceSpec, str]]) -> None:
        self._progress([Progress(self._fence(f), text, self.now) for f, text in items])

    @rule(pick=target_ids)
    def cancel(self, pick: tuple[str, int]) -> None:
        job_id = self._target(pick)
        self._both(
            "job_cancel",
            lambda: self.model.job_cancel(job_id, self.now),
            lambda: self.driver.job_cancel(job_id, self.now),
        )

    @rule(pick=target_ids)
    def requeue(self, pick: tuple[str, int]) -> None:
        job_id = self._target(pick)
        self._both(
            "job_requeue",
            lambda: self.model.job_requeue(job_id, self.now),
            lambda: self.driver.job_requeue(job_id, self.now),
        )

    @rule(
        keeps=st.tuples(*[st.sampled_from((None, 0, 0, 1, 1000, 3000))] * 4),
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
        params = PurgeParams(self.now, limit, *keeps)
        before = set(self.model.rows)
        self._both(
            "job_purge",
            lambda: self.model.job_purge(params),
            lambda: self.driver.job_purge(params),
        )
        gone = sorted(before - set(self.model.rows))
        if again is not None and gone:
            job = replace(self._new_job(replace(again, id=IdSpec("old", 0, "")), {}), id=gone[0])
            self._both(
                "job_enqueue(a purged id)",
                lambda: self.model.job_enqueue(job),
                lambda: self.driver.job_enqueue(job),
            )

    @rule(
        kind=st.sampled_from(
            ("priority", "nan", "empty_tenant", "empty_name", "batch_cap", "ack_nan", "retry_at")
        ),
        specs=st.lists(batch_job_specs, min_size=1, max_size=3),
        pos=st.integers(0, 3),
        fence=fence_specs,
    )
    def refused_call(self, kind: str, specs: list[JobSpec], pos: int, fence: FenceSpec) -> None:
        """A batch with one bad item is refused whole: the invariant then sees nothing changed."""
        refusal: object
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
                }[kind]
                batch.insert(min(pos, len(batch)), bad)
            refusal = self._both(
                "job_enqueue_many(bad batch)",
                lambda: self.model.job_enqueue_many(batch),
                lambda: self.driver.job_enqueue_many(batch),
            )
        assert isinstance(refusal, JobsError), f"the machine built a call nobody refuses: {kind}"

    # -- pauses, queues, workers --------------------------------------------------------------

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

    @rule(queues=st.lists(st.sampled_from((*QUEUES, "q3")), max_size=3))
    def queue_demand(self, queues: list[str]) -> None:
        self._both(
            "queue_demand",
            lambda: self.model.queue_demand(queues, self.now),
            lambda: self.driver.queue_demand(queues, self.now),
        )

    @rule(
        op=st.sampled_from(("beat", "beat", "forget", "list")),
        worker=st.sampled_from((*WORKERS, "w3")),
        ttl_ms=st.sampled_from((1000, 5000)),
        info=st.sampled_from(INFOS),
        ahead=st.sampled_from((0, 999, 1000, 5000)),
    )
    def worker(self, op: str, worker: str, ttl_ms: int, info: str, ahead: int) -> None:
        """Beat, forget, or list the registry (`ahead` ms from now)."""
        if op == "beat":
            beat = WorkerBeat(worker, info, ttl_ms, self.now)
            self._both(
                "worker_beat",
                lambda: self.model.worker_beat(beat),
                lambda: self.driver.worker_beat(beat),
            )
        elif op == "forget":
            self._both(
                "worker_forget",
                lambda: self.model.worker_forget(worker),
                lambda: self.driver.worker_forget(worker),
            )
        else:
            at = self.now + ahead
            self._both(
                "worker_list",
                lambda: self.model.worker_list(at),
                lambda: self.driver.worker_list(at),
            )

    # -- the observable state -----------------------------------------------------------------

    @invariant()
    def same_state(self) -> None:
        """Every row ever named, every pause and every live worker match the model."""
        ids = [*self.ids, UNKNOWN_ID]
        self._both(
            "job_get_many",
            lambda: self.model.job_get_many(ids),
            lambda: self.driver.job_get_many(ids),
        )
        self._both("pause_list", self.model.pause_list, self.driver.pause_list)
        self._both(
            "worker_list",
            lambda: self.model.worker_list(self.now),
            lambda: self.driver.worker_list(self.now),
        )


async def _enter(cm: AbstractAsyncContextManager[JobDriver]) -> JobDriver:
    return await cm.__aenter__()


async def _exit(cm: AbstractAsyncContextManager[JobDriver]) -> None:
    await cm.__aexit__(None, None, None)


def make_machine(factory: DriverFactory) -> type[ParityMachine]:
    """A `ParityMachine` class whose every instance drives a fresh driver from `factory`."""

    class BoundParityMachine(ParityMachine):
        @staticmethod
        def make_driver() -> AbstractAsyncContextManager[JobDriver]:
            return factory()

    return BoundParityMachine
