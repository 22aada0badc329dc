"""The outbox state machine: random walks over `OutboxStore`, a store and the model side by side.

Every rule makes the same call on the store under test (or its harness's stage) and on the model,
with the same fake time, and fails on the first answer (or refusal code) that differs; after every
step the whole outbox (`outbox_pending`, every row with its claim) must match too. A failure names
the step, its rule with the arguments it resolved to, and every store call that step made.

The walk stages batches (committed or rolled back; fresh ids whose code-point order is not their
staging order, `created_at_ms` ties and stamps behind earlier rows), claims, publishes and
releases under current, lapsed, stale, overtaken and unknown tokens naming what they took, other
tokens' rows, unknown and repeated ids; runs a relay's own passes (claim then publish, release
with or without an error, or both; or stall past the lease while a rival claims, then publish);
moves the clock onto lease ends and retry times; and makes refused calls, each of which must
change nothing. It counts what it reached in `tally` (and as Hypothesis events).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar, cast

from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    invariant,
    precondition,
    rule,
)

from jobs_core.driver import MAX_LEASE_MS, MAX_NAME_BYTES, MAX_TIME_MS
from jobs_core.errors import JobsError
from jobs_core.jsonform import utf8_length
from jobs_core.outbox.records import OutboxClaim, OutboxRelease, OutboxRow
from jobs_core.outbox.store import (
    MAX_OUTBOX_BATCH,
    MAX_OUTBOX_ERROR_CHARS,
    MAX_OUTBOX_PENDING,
    OutboxStore,
)
from jobs_core.records import NewJob
from jobs_core.testing.compare import (
    Check,
    DriverNotEmptyError,
    PairedMachine,
    WalkLoop,
    comparable,
    difference,
    exactly_bytes,
    short,
)
from jobs_core.testing.machine import (
    ID_PREFIXES,
    INPUTS,
    KEYS,
    LONG_TENANT,
    NAMES,
    QUEUES,
    TRACEPARENTS,
)
from jobs_core.testing.outbox.harness import OutboxFactory, OutboxHarness
from jobs_core.testing.outbox.model import OutboxModel

T = TypeVar("T")

#: Where the fake clock starts (2027-01-15, as the driver machine's).
T0 = 1_800_000_000_000
#: An id no stage ever writes and a token no claim ever hands out.
UNKNOWN_ID = "no-such-row"
UNKNOWN_TOKEN = "no-such-token"
#: With a 4-digit serial, a token exactly MAX_NAME_BYTES long.
LONG_TOKEN_PREFIX = exactly_bytes("c", "é😀", MAX_NAME_BYTES - 4)
#: Token prefixes whose code-point order differs from their handing-out order.
TOKEN_PREFIXES = ("c", "C", "é", "☃", "q'\n%", LONG_TOKEN_PREFIX)
#: Past the stored cut (2,000 characters), of 1- to 3-byte characters.
LONG_ERROR = "é☃'\nx" * 450
#: A release's error: none (only frees), an empty one (still a failed publish), text that a
#: careless store mangles, and one the ABC cuts.
ERRORS = (None, None, "boom", "", "q'uo%te\n☃", LONG_ERROR)
#: Stamps around the clock: ties (0), just behind or ahead, and far enough behind to sort
#: before rows staged steps earlier.
CREATED_OFFSETS = (-2000, -1, 0, 0, 0, 0, 1, 700)

CLAIM_LIMITS = (1, 2, 3, 5, MAX_OUTBOX_BATCH)
LEASES = (1, 500, 1000, 3000)
claim_args = st.tuples(
    st.sampled_from(CLAIM_LIMITS), st.sampled_from(LEASES), st.sampled_from(TOKEN_PREFIXES)
)
#: A release's retry time, from now.
retry_offsets = st.sampled_from((-1000, 0, 0, 1, 1000, 3000))
#: Latest-first positions: mostly recent tokens and rows, sometimes older ones.
recent = st.sampled_from((0, 0, 0, 1, 1, 2, 3, 5, 8))


@dataclass(frozen=True, slots=True)
class JobShape:
    """Everything of a staged job but its id and times, which the walk resolves."""

    name: str
    queue: str
    tenant_id: str | None
    key: str
    input_json: str
    priority: int
    run_at_offset: int
    max_attempts: int
    enqueued_by: str | None
    traceparent: str | None


_SHAPE_POOLS: tuple[tuple[object, ...], ...] = (
    NAMES,
    QUEUES,
    (None, "t1", None, LONG_TENANT),
    KEYS,
    INPUTS,
    (0, 1, 100),
    (-1000, 0, 5000),
    (1, 3, 1000),
    (None, "u1"),
    TRACEPARENTS,
)
#: A store only carries a job through, so a few shapes that between them hold every value of
#: the driver machine's pools (the byte limits, quotes and newlines, JSON whose types matter)
#: test its round trip as well as every combination would, at a fraction of the draws.
SHAPES: tuple[JobShape, ...] = tuple(
    JobShape(*(pool[i % len(pool)] for pool in _SHAPE_POOLS))  # type: ignore[arg-type]
    for i in range(12)
)


@dataclass(frozen=True, slots=True)
class RowSpec:
    """A staged record before the clock and the id serial resolve it."""

    prefix: str
    created_offset: int
    shape: JobShape


row_specs = st.builds(
    RowSpec,
    prefix=st.sampled_from(ID_PREFIXES),
    created_offset=st.sampled_from(CREATED_OFFSETS),
    shape=st.sampled_from(SHAPES),
)
#: Which token a publish or release presents: one holding rows now, one holding a lapsed row,
#: one that held rows and holds none now, one a row of which another token claimed since (a
#: relay that stalled past its lease), one that never claimed.
TOKEN_KINDS = ("holder", "holder", "holder", "lapsed", "lapsed", "stale", "overtaken", "unknown")
token_picks = st.tuples(st.sampled_from(TOKEN_KINDS), recent)
#: Which ids it names: what its claim handed it (one, all in claim order, all reversed: a relay
#: names what it claimed, whoever holds it now), one it still holds, one another token holds, a
#: free row, a published or a rolled-back id, an unknown id, a repeat.
ID_KINDS = (
    *("took", "took", "all", "all", "all reversed", "held", "held"),
    *("other", "other", "free", "published", "rolled back", "unknown", "again"),
)
id_picks = st.lists(st.tuples(st.sampled_from(ID_KINDS), recent), min_size=1, max_size=4)
#: Every refusal the walk tries; each call is otherwise valid and aimed at held rows.
REFUSALS = (
    "claim: empty token",
    "claim: token holding NUL",
    "claim: token past the byte limit",
    "claim: limit 0",
    "claim: limit past the batch",
    "claim: limit True",
    "claim: lease 0",
    "claim: lease past the cap",
    "claim: now negative",
    "claim: now past the range",
    "pending: limit 0",
    "pending: limit past the cap",
    "publish: empty token",
    "publish: ids as one string",
    "publish: ids past the batch",
    "publish: an empty id",
    "release: empty token",
    "release: an id holding NUL",
    "release: ids past the batch",
    "release: retry negative",
    "release: retry past the range",
    "release: error holding NUL",
    "stage: an invalid record",
    "stage: batch past the cap",
)
#: Records a stage refuses, each wrong in one field.
BAD_FIELDS: tuple[tuple[str, object], ...] = (
    ("id", ""),
    ("name", "n\x00ul"),
    ("input_json", "{"),
    ("created_at_ms", -1),
    ("priority", 101),
    ("tenant_id", ""),
    ("traceparent", "00-bad"),
    ("idempotency_key", "k" * 1025),
)


def _rows(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(r, OutboxRow) for r in value)


def _rows_difference(got: list[OutboxRow], want: list[OutboxRow]) -> str:
    """Which rows one side has and the other lacks, or their order, or the fields that differ."""
    got_ids, want_ids = [r.job.id for r in got], [r.job.id for r in want]
    if got_ids != want_ids:
        extra = [i for i in got_ids if i not in want_ids]
        missing = [i for i in want_ids if i not in got_ids]
        if extra or missing:
            return (
                f"{len(got)} rows against {len(want)}: the store has "
                f"{short(extra, 300)} that the model has not, and lacks {short(missing, 300)}"
            )
        return f"the rows' order: {short(got_ids, 600)} against {short(want_ids, 600)}"
    fields = {
        i: difference(comparable(g), comparable(w))
        for i, g, w in zip(got_ids, got, want, strict=True)
        if comparable(g) != comparable(w)
    }
    return short(fields, 4000)


class OutboxNotEmptyError(DriverNotEmptyError):
    """The factory answered an outbox store that already held rows."""


async def check_outbox_empty(store: OutboxStore) -> None:
    """Raise `OutboxNotEmptyError` unless `store` holds no row, claimed or not."""
    rows = await store.outbox_pending(MAX_OUTBOX_PENDING)
    if rows:
        first = [r.job.id for r in rows[:5]]
        raise OutboxNotEmptyError(
            f"the outbox store was not empty: {len(rows)} rows (first {first}); the factory "
            "must answer a fresh store each call and drop its rows on exit"
        )


async def _check_harness_empty(harness: OutboxHarness) -> None:
    await check_outbox_empty(harness.store)


class OutboxMachine(PairedMachine[OutboxHarness]):
    """Drives `make_harness()`'s store and an `OutboxModel` through the same random calls.

    Bind a store with `make_outbox_machine(factory)`; this class itself has none.
    """

    #: What the walks reached, across every example of this class.
    tally: ClassVar[Counter[str]] = Counter()
    SIDE: ClassVar[str] = "store"
    EDGES_LABEL: ClassVar[str] = "outbox edges"

    @staticmethod
    def make_harness() -> AbstractAsyncContextManager[OutboxHarness]:
        raise NotImplementedError("bind a harness factory with make_outbox_machine(factory)")

    def __init__(self) -> None:
        super().__init__()
        self.model = OutboxModel()
        self.now = T0
        #: Every token a claim handed out, oldest first, and the ids each one took.
        self.tokens: list[str] = []
        self.took: dict[str, list[str]] = {}
        self.published: list[str] = []
        self.rolled_back: list[str] = []
        self.harness = self._open(WalkLoop(), self.make_harness(), _check_harness_empty)
        self.store = self.harness.store

    def _explain(self, got: object, want: object) -> str:
        """Rows told apart by id first, then field by field; other answers cut short."""
        if _rows(got) and _rows(want):
            return _rows_difference(cast(list[OutboxRow], got), cast(list[OutboxRow], want))
        return short(difference(comparable(got), comparable(want)), 4000)

    async def _stage(self, records: Sequence[NewJob], commit: bool) -> None:
        # The harness's stage is any awaitable; the runner takes coroutines.
        await self.harness.stage(records, commit)

    # -- resolving draws against the state ----------------------------------------------------

    def _fresh(self, prefix: str) -> str:
        self._serial += 1
        return f"{prefix}{self._serial:04d}"

    def _record(self, spec: RowSpec) -> NewJob:
        job_id = self._fresh(spec.prefix)
        run_id = f"run-{job_id}"
        if utf8_length(run_id) > MAX_NAME_BYTES:
            run_id = job_id[::-1]  # an id at the byte limit: its run id as long, still unique
        shape = spec.shape
        return NewJob(
            id=job_id,
            run_id=run_id,
            name=shape.name,
            queue=shape.queue,
            tenant_id=shape.tenant_id,
            idempotency_key=shape.key,
            input_json=shape.input_json,
            priority=shape.priority,
            run_at_ms=self.now + shape.run_at_offset,
            max_attempts=shape.max_attempts,
            created_at_ms=self.now + spec.created_offset,
            enqueued_by=shape.enqueued_by,
            traceparent=shape.traceparent,
        )

    def _holds(self, token: str) -> list[str]:
        return [r.job.id for r in self.model.held_by(token)]

    def _token(self, kind: str, n: int) -> str:
        """The token a publish or release presents; the latest one when none is of `kind`."""
        if kind == "unknown" or not self.tokens:
            return UNKNOWN_TOKEN
        rows = self.model.rows.values()

        def fits(token: str) -> bool:
            if kind == "holder":
                return any(r.claimed_by == token for r in rows)
            if kind == "lapsed":
                return any(
                    r.claimed_by == token and (r.lease_until_ms or 0) <= self.now for r in rows
                )
            if kind == "overtaken":
                took = set(self.took.get(token, []))
                return any(r.claimed_by not in (None, token) and r.job.id in took for r in rows)
            return not any(r.claimed_by == token for r in rows)  # stale

        found = [t for t in reversed(self.tokens) if fits(t)]
        if kind == "stale":
            # The ones that took rows first: their rows moved on (published, released, or
            # claimed again by another token), which is what fencing is about.
            found = [t for t in found if self.took.get(t)] or found
        return found[n % len(found)] if found else self.tokens[-1]

    def _ids(self, token: str, picks: list[tuple[str, int]]) -> list[str]:
        """The ids a publish or release names, resolved in order (an empty kind: unknown)."""
        rows = self.model.ordered()
        took = self.took.get(token, [])
        pools: dict[str, list[str]] = {
            "took": took,
            "held": self._holds(token),
            "other": [r.job.id for r in rows if r.claimed_by not in (None, token)],
            "free": [r.job.id for r in rows if r.claimed_by is None],
            "published": self.published,
            "rolled back": self.rolled_back,
        }
        out: list[str] = []
        for kind, n in picks:
            if kind in ("all", "all reversed"):
                out.extend(took if kind == "all" else took[::-1])
                continue
            pool = out if kind == "again" else pools.get(kind, [])
            out.append(pool[-1 - n % len(pool)] if pool else UNKNOWN_ID)
        return out

    # -- time ---------------------------------------------------------------------------------

    @rule(dt=st.sampled_from((0, 1, 499, 500, 999, 1000, 1001, 3000)) | st.integers(0, 5000))
    def advance(self, dt: int) -> None:
        self._begin("advance", dt=dt)
        self.now += dt

    def _times_ahead(self) -> list[int]:
        """Lease ends and times rows become claimable, from now on."""
        times = {r.available_at_ms for r in self.model.rows.values()}
        times |= {r.lease_until_ms for r in self.model.rows.values() if r.lease_until_ms}
        return sorted(t for t in times if t >= self.now)

    @precondition(lambda self: bool(self._times_ahead()))
    @rule(pick=st.integers(0, 7), delta=st.sampled_from((-1, 0, 0, 1)))
    def advance_to_edge(self, pick: int, delta: int) -> None:
        """Jump onto (or a millisecond around) a lease end or a retry time."""
        times = self._times_ahead()
        at = times[pick % len(times)] + delta
        self._begin("advance_to_edge", to=f"now{at - self.now:+d}")
        self.now = max(self.now, at)

    # -- stage --------------------------------------------------------------------------------

    @initialize(
        specs=st.lists(row_specs, min_size=2, max_size=8),
        claims=st.lists(claim_args, min_size=1, max_size=2),
    )
    def begin(self, specs: list[RowSpec], claims: list[tuple[int, int, str]]) -> None:
        """Every walk starts with committed rows and a claim or two on them: a walk whose
        rules happen to leave `stage` out still meets rows to claim, publish and release."""
        self.stage(specs, True)
        self.same_state()
        for limit, lease_ms, prefix in claims:
            self.claim(limit, lease_ms, prefix)
            self.same_state()

    @rule(
        specs=st.lists(row_specs, max_size=5),
        commit=st.sampled_from((True, True, True, False)),
    )
    def stage(self, specs: list[RowSpec], commit: bool) -> None:
        records = [self._record(s) for s in specs]
        self._begin("stage", ids=[r.id for r in records], commit=commit)
        stored = [(r.job.created_at_ms, r.job.id) for r in self.model.rows.values()]
        answer = self._both(
            "stage",
            lambda: self.model.stage(records, commit),
            lambda: self._stage(records, commit),
        )
        if isinstance(answer, JobsError):
            return
        if not commit:
            self.rolled_back.extend(r.id for r in records)
            if records:
                self._note("stage rolled back", edge=True)
            return
        keys = [(r.created_at_ms, r.id) for r in records]
        if stored and any(k < max(stored) for k in keys):
            self._note("stage sorting before a staged row", edge=True)
        stamps = [k[0] for k in [*stored, *keys]]
        if len(set(stamps)) < len(stamps):
            self._note("stage beside a created_at_ms tie")
        if keys != sorted(keys):
            self._note("stage of a batch out of stage order")

    # -- the relay's calls --------------------------------------------------------------------

    @rule(
        limit=st.sampled_from(CLAIM_LIMITS),
        lease_ms=st.sampled_from(LEASES),
        prefix=st.sampled_from(TOKEN_PREFIXES),
    )
    def claim(self, limit: int, lease_ms: int, prefix: str) -> None:
        token = self._fresh(prefix)
        params = OutboxClaim(token=token, limit=limit, lease_ms=lease_ms, now_ms=self.now)
        self._begin("claim", token=token, limit=limit, lease_ms=lease_ms)
        before = self.model.ordered()
        answer = self._both(
            "outbox_claim",
            lambda: self.model.claim(params),
            lambda: self.store.outbox_claim(params),
        )
        self.tokens.append(token)
        if isinstance(answer, JobsError):
            return
        self.took[token] = [r.job.id for r in answer]
        self._claim_events(before, answer, limit)

    def _claim_events(self, before: list[OutboxRow], taken: list[OutboxRow], limit: int) -> None:
        now = self.now
        ids = {r.job.id for r in taken}
        was = {r.job.id: r for r in before}
        for r in taken:
            old = was[r.job.id]
            if old.claimed_by is not None:
                self._note("claim of a lapsed lease", edge=True)
                if old.lease_until_ms == now:
                    self._note("claim at exactly lease_until_ms", edge=True)
            if old.available_at_ms == now:
                self._note("claim at exactly available_at_ms", edge=True)
            if old.attempts:
                self._note("claim of a row released with an error", edge=True)
        last = max((before.index(was[i]) for i in ids), default=-1)
        passed = before if len(taken) < limit else before[:last]
        for r in passed:
            if r.job.id in ids:
                continue
            if r.claimed_by is not None and (r.lease_until_ms or 0) > now:
                self._note("claim passed a live lease", edge=True)
            elif r.available_at_ms > now:
                released = r.available_at_ms != r.job.created_at_ms
                self._note(
                    "claim passed a released row before its retry time"
                    if released
                    else "claim passed a row stamped ahead",
                    edge=released,
                )
        if len(taken) == limit and len(taken) < len(before):
            self._note("claim cut by its limit")

    @rule(token=token_picks, picks=id_picks)
    def publish(self, token: tuple[str, int], picks: list[tuple[str, int]]) -> None:
        tok = self._token(*token)
        ids = self._ids(tok, picks)
        self._begin("publish", token=tok, ids=ids)
        self._publish(tok, ids)

    def _publish(self, tok: str, ids: list[str]) -> None:
        before = dict(self.model.rows)
        answer = self._both(
            "outbox_publish",
            lambda: self.model.publish(tok, ids),
            lambda: self.store.outbox_publish(tok, ids),
        )
        if isinstance(answer, JobsError):
            return
        self.published.extend(answer)
        self._named_events("publish", tok, ids, before, answer)
        if any((before[i].lease_until_ms or 0) <= self.now for i in answer):
            self._note("publish under a lapsed lease landed", edge=True)

    @rule(token=token_picks, picks=id_picks, retry=retry_offsets, error=st.sampled_from(ERRORS))
    def release(
        self, token: tuple[str, int], picks: list[tuple[str, int]], retry: int, error: str | None
    ) -> None:
        tok = self._token(*token)
        ids = self._ids(tok, picks)
        self._begin("release", token=tok, ids=ids, retry_at=f"now{retry:+d}", error=error)
        self._release(tok, ids, retry, error)

    def _release(self, tok: str, ids: list[str], retry: int, error: str | None) -> None:
        params = OutboxRelease(tok, tuple(ids), max(0, self.now + retry), error)
        before = dict(self.model.rows)
        answer = self._both(
            "outbox_release",
            lambda: self.model.release(params),
            lambda: self.store.outbox_release(params),
        )
        if isinstance(answer, JobsError):
            return
        self._named_events("release", tok, ids, before, answer)
        if not answer:
            return
        if error is None:
            if any(before[i].last_error is not None for i in answer):
                self._note("release without an error over a stored error", edge=True)
        else:
            self._note("release with an error")
            if error == "":
                self._note("release with an empty error", edge=True)
            if len(error) > MAX_OUTBOX_ERROR_CHARS:
                self._note("release of an error past the cut", edge=True)
        if retry > 0:
            self._note("release with a retry time ahead")

    @rule(
        claim=claim_args,
        then=st.sampled_from(
            ("publish", "release", "release", "split", "stall", "stall release", "fail then stop")
        ),
        retry=retry_offsets,
        error=st.sampled_from(ERRORS),
    )
    def relay_pass(
        self, claim: tuple[int, int, str], then: str, retry: int, error: str | None
    ) -> None:
        """What a relay does: claim, then publish what it took, give it back (a failed publish,
        or a stop), or publish the first half and give back the rest; or stall past its lease
        while a rival claims, then publish or give back (landing only what the rival did not
        take); or fail a publish, then claim the rows again and stop (a release without an
        error keeps the failure's)."""
        limit, lease_ms, prefix = claim
        self._begin("relay_pass", claim=claim, then=then, retry=f"now{retry:+d}", error=error)
        self.claim(limit, lease_ms, prefix)
        token = self.tokens[-1]
        took = self.took.get(token, [])
        if then == "publish":
            self._publish(token, took)
        elif then == "release":
            self._release(token, took, retry, error)
        elif then == "split":
            half = len(took) // 2
            self._publish(token, took[:half])
            self._release(token, took[half:], retry, error)
        elif then == "fail then stop":
            self._release(token, took, 0, error or "boom")
            self.claim(limit, lease_ms, prefix)
            again = self.tokens[-1]
            self._release(again, self.took.get(again, []), retry, None)
        else:
            self.now += lease_ms
            self.claim(limit, lease_ms, prefix)
            if then == "stall":
                self._publish(token, took)
            else:
                self._release(token, took, retry, error)

    def _named_events(
        self,
        verb: str,
        token: str,
        ids: list[str],
        before: dict[str, OutboxRow],
        answer: list[str],
    ) -> None:
        if answer:
            self._note(f"{verb} landed")
        if len(set(ids)) < len(ids):
            self._note(f"{verb} named an id twice", edge=True)
        others = [i for i in ids if i in before and before[i].claimed_by not in (None, token)]
        if others:
            self._note(f"{verb} named a row another token holds", edge=True)
        if any(i in self.took.get(token, []) for i in others):
            self._note(f"{verb} by a token whose row was claimed again", edge=True)
        if any(i not in before for i in ids):
            self._note(f"{verb} named an id not staged")
        if token == UNKNOWN_TOKEN:
            self._note(f"{verb} by an unknown token")

    @rule(limit=st.sampled_from((1, 2, 3, MAX_OUTBOX_PENDING)))
    def pending(self, limit: int) -> None:
        self._begin("pending", limit=limit)
        self._both(
            "outbox_pending",
            lambda: self.model.pending(limit),
            lambda: self.store.outbox_pending(limit),
        )
        if limit < len(self.model.rows):
            self._note("pending cut by its limit")

    # -- refusals -----------------------------------------------------------------------------

    @rule(
        kind=st.sampled_from(REFUSALS),
        bad=st.sampled_from(BAD_FIELDS),
        specs=st.lists(row_specs, min_size=1, max_size=3),
        pos=st.integers(0, 3),
    )
    def refused_call(
        self, kind: str, bad: tuple[str, object], specs: list[RowSpec], pos: int
    ) -> None:
        """One otherwise valid call, aimed at held rows, wrong in one argument: refused with its
        code by both, and (the state check after the step) nothing changed."""
        holders = [t for t in reversed(self.tokens) if self._holds(t)]
        token = holders[0] if holders else UNKNOWN_TOKEN
        ids = self._holds(token) or [UNKNOWN_ID]
        self._begin("refused_call", kind=kind, token=token)
        call: tuple[Callable[[], object], Callable[[], Coroutine[Any, Any, object]]]
        if kind.startswith("stage"):
            call = self._refused_stage(kind, bad, specs, pos)
        elif kind.startswith("claim"):
            params = self._bad_claim(kind)
            call = (lambda: self.model.claim(params), lambda: self.store.outbox_claim(params))
        elif kind.startswith("pending"):
            limit = 0 if kind.endswith("0") else MAX_OUTBOX_PENDING + 1
            call = (lambda: self.model.pending(limit), lambda: self.store.outbox_pending(limit))
        elif kind.startswith("publish"):
            tok, named = self._bad_named(kind, token, ids)
            call = (
                lambda: self.model.publish(tok, named),
                lambda: self.store.outbox_publish(tok, named),
            )
        else:
            rel = self._bad_release(kind, token, ids)
            call = (lambda: self.model.release(rel), lambda: self.store.outbox_release(rel))
        answer = self._both(kind, *call)
        if not isinstance(answer, JobsError):
            raise AssertionError(f"{self._context()}the model accepted {kind!r}: {answer!r}")
        self._note(f"refused {answer.code}")

    def _refused_stage(
        self, kind: str, bad: tuple[str, object], specs: list[RowSpec], pos: int
    ) -> tuple[Callable[[], object], Callable[[], Coroutine[Any, Any, object]]]:
        if kind == "stage: batch past the cap":
            first = self._record(specs[0])
            serial = self._serial
            records = [
                replace(first, id=f"over{serial}-{n}", run_id=f"run-over{serial}-{n}")
                for n in range(MAX_OUTBOX_BATCH + 1)
            ]
        else:
            records = [self._record(s) for s in specs]
            field, value = bad
            at = pos % len(records)
            records[at] = replace(records[at], **cast(dict[str, Any], {field: value}))
            self.rolled_back.extend(r.id for r in records if r.id)
        return (
            lambda: self.model.stage(records, True),
            lambda: self._stage(records, True),
        )

    def _bad_claim(self, kind: str) -> OutboxClaim:
        good = OutboxClaim(self._fresh("c"), MAX_OUTBOX_BATCH, 1000, self.now)
        changes: dict[str, dict[str, object]] = {
            "claim: empty token": {"token": ""},
            "claim: token holding NUL": {"token": "c\x00"},
            "claim: token past the byte limit": {"token": LONG_TOKEN_PREFIX + "☃☃"},
            "claim: limit 0": {"limit": 0},
            "claim: limit past the batch": {"limit": MAX_OUTBOX_BATCH + 1},
            "claim: limit True": {"limit": True},
            "claim: lease 0": {"lease_ms": 0},
            "claim: lease past the cap": {"lease_ms": MAX_LEASE_MS + 1},
            "claim: now negative": {"now_ms": -1},
            "claim: now past the range": {"now_ms": MAX_TIME_MS + 1},
        }
        return replace(good, **cast(dict[str, Any], changes[kind]))

    def _bad_named(self, kind: str, token: str, ids: list[str]) -> tuple[str, list[str]]:
        if kind.endswith("empty token"):
            return "", ids
        if kind.endswith("ids as one string"):
            return token, cast(list[str], ids[0])
        if kind.endswith("ids past the batch"):
            return token, ids * (MAX_OUTBOX_BATCH // len(ids) + 1)
        if kind.endswith("an empty id"):
            return token, [*ids, ""]
        return token, [*ids, "x\x00"]  # an id holding NUL

    def _bad_release(self, kind: str, token: str, ids: list[str]) -> OutboxRelease:
        if kind.startswith("release: retry"):
            at = -1 if kind.endswith("negative") else MAX_TIME_MS + 1
            return OutboxRelease(token, tuple(ids), at, "boom")
        if kind == "release: error holding NUL":
            return OutboxRelease(token, tuple(ids), self.now, "bo\x00om")
        tok, named = self._bad_named(kind, token, ids)
        return OutboxRelease(tok, tuple(named), self.now, "boom")

    # -- the observable state -----------------------------------------------------------------

    @invariant()
    def same_state(self) -> None:
        """Every row, claimed or not, with every field, in stage order, matches the model.

        Runs after every step, so a difference is blamed on the step that made it.
        """
        if self._not_empty is not None:
            return
        checks: list[Check] = [
            (
                "outbox_pending",
                lambda: self.model.pending(MAX_OUTBOX_PENDING),
                lambda: self.store.outbox_pending(MAX_OUTBOX_PENDING),
            )
        ]
        self._compare_state(checks)


def make_outbox_machine(factory: OutboxFactory) -> type[OutboxMachine]:
    """An `OutboxMachine` class whose every instance drives a fresh harness from `factory`,
    with a `tally` of its own."""
    namespace = {"tally": Counter(), "make_harness": staticmethod(factory)}
    bound: type[OutboxMachine] = type("BoundOutboxMachine", (OutboxMachine,), namespace)
    return bound
