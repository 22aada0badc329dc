"""The flow family's rules: rows that wait for other rows to finish (`join_enqueue`, a PARK
nack's `join`), released by the very write that finishes the last of them; parent and batch
links, listed by; watched rows. Every row ever named — its `join`, `parent_id` and `batch_id`
with the rest — is compared after each step, so each finishing path the walk draws (an ack, a
FAIL or REFUSE nack, a claim's bury, a cancel, the remove of a live row) is compared on the
waiters it moves. Only runs when the driver declares `flows` in `capabilities()`.

The edges are aimed at, not left to luck (the aimed rules build the rows they need, each in a
queue of its own, so it claims exactly the row it means): the last dependency of a join, each
by every finishing path; two dependencies finished by one ack call; a dependency finished,
requeued and finished again while its waiter still waits; a waiter claimed at its run_at (or
cancelled) before its last dependency finishes, and one that then parks on its join again (a
recount); the clock moved between a join and the finish that releases it. Random joins name
stored rows of every state, a batch's earlier record, and now and then an id naming no row.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from jobs_core.driver import MAX_BULK_IDS, MAX_ENQUEUE_BATCH, MAX_JOIN_IDS
from jobs_core.errors import JobsError
from jobs_core.records import (
    Ack,
    ClaimedJob,
    ClaimParams,
    ClaimResult,
    EventWait,
    JobFilter,
    JobListParams,
    JobPage,
    JoinEnqueue,
    JoinEnqueueAnswer,
    JoinPolicy,
    Nack,
    NackKind,
    NewJob,
)
from jobs_core.states import LIVE_STATES, JobState
from jobs_core.testing.compare import Check
from jobs_core.testing.machine import (
    NAMES,
    UNKNOWN_ID,
    WORKERS,
    FenceSpec,
    JobSpec,
    ParityMachine,
    batch_job_specs,
    fence_specs,
    recent,
    target_lists,
)

#: Which row a random join names: one in a given state, any, one this call enqueues before it
#: ("earlier"), or none at all ("unknown": `join_enqueue` refuses it, a park counts it failed).
DEP_KINDS = ("live", "finished", "finished", "ready", "running", "parked", "any", "earlier")
dep_picks = st.lists(
    st.tuples(st.sampled_from((*DEP_KINDS, *DEP_KINDS, "unknown")), recent),
    min_size=1,
    max_size=3,
)
#: A record's parent: none, the walk's first row, the latest stored row, or an id naming no
#: row (a link, not a reference): a parent's children meet on one listing often.
PARENTS = (None, None, "first", "first", "latest", "unknown")
BATCHES = (None, None, "b1", "b2")
#: How an aimed rule finishes a dependency; the last one is never removed (see `_finish_step`).
PATHS = ("ack", "fail", "refuse", "cancel", "bury", "remove")
LAST_PATHS = ("ack", "fail", "refuse", "cancel", "bury")
#: How an aimed rule's waiter waits: enqueued on its join, or parked on it for good or until a
#: time (past the rule's finishes).
waiters = st.sampled_from(("enqueue", "park", "park until"))
#: How far the clock moves between a join and its finishes: a release is at the finish's time.
gaps = st.sampled_from((1, 1000, 0, 1))
policies = st.sampled_from(tuple(JoinPolicy))
#: Calls the ABC refuses before any write.
JOIN_REFUSALS = (
    "after empty",
    "after twice",
    "after as a list",
    "after too long",
    "after empty id",
    "policy",
    "bad job",
    "too many items",
    "join on a retry",
    "join empty",
    "join twice",
    "join with a wait",
)


class FlowRules(ParityMachine):
    """The flow family, over the job family's rows."""

    FAMILY = "flows"

    # -- random joins ---------------------------------------------------------------------------

    @precondition(lambda self: self.capabilities.flows)
    @rule(
        items=st.lists(
            st.tuples(
                batch_job_specs,
                dep_picks,
                st.sampled_from(tuple(JoinPolicy)),
                st.sampled_from(PARENTS),
                st.sampled_from(BATCHES),
            ),
            min_size=1,
            max_size=3,
        )
    )
    def join_enqueue(
        self,
        items: list[tuple[JobSpec, list[tuple[str, int]], JoinPolicy, str | None, str | None]],
    ) -> None:
        """Enqueue records to wait for stored rows (of every state; a record of this very call
        before it; now and then an id naming no row), with a parent and a batch or not."""
        fresh: dict[int, str] = {}
        made: list[JoinEnqueue] = []
        for spec, picks, policy, parent, batch in items:
            job = self._new_job(spec, fresh)
            job = _linked(job, self._parent(parent), batch)
            after = self._after(picks, [m.job.id for m in made])
            made.append(JoinEnqueue(job, after, policy))
        self._join_enqueue(made)

    @precondition(lambda self: self.capabilities.flows)
    @rule(
        worker=st.sampled_from(WORKERS),
        count=st.integers(1, 2),
        picks=dep_picks,
        until=st.sampled_from((None, None, 1000, 3000)),
        together=st.booleans(),
        sibling=st.booleans(),
    )
    def park_on_join(
        self,
        worker: str,
        count: int,
        picks: list[tuple[str, int]],
        until: int | None,
        together: bool,
        sibling: bool,
    ) -> None:
        """Claim rows and park them on joins of stored rows (an id naming no row counts as
        finished, not completed), until a time or for good; with `sibling`, each on the other
        row of the claim too (still running: pending); in one nack call or one by one."""
        jobs = self._claim_some(worker, count)
        nacks = []
        for job in jobs:
            others = [j.id for j in jobs if j.id != job.id and sibling]
            after = self._after(picks, others, exclude=job.id)
            after = tuple(dict.fromkeys((*others, *after)))
            run_at = None if until is None else self.now + until
            nacks.append(Nack(job.fence, NackKind.PARK, self.now, run_at, join=after))
        for batch in [nacks] if together else [[n] for n in nacks]:
            if batch:
                self._park(batch)

    # -- the edges, aimed at ----------------------------------------------------------------------

    @precondition(lambda self: self.capabilities.flows)
    @rule(
        last=st.sampled_from(LAST_PATHS),
        first=st.sampled_from((None, None, *PATHS)),
        waiter=waiters,
        extra=st.sampled_from((None, None, "finished", "unknown")),
        gap=gaps,
        policy=policies,
        claim_after=st.booleans(),
        pick=recent,
    )
    def last_dependency(
        self,
        last: str,
        first: str | None,
        waiter: str,
        extra: str | None,
        gap: int,
        policy: JoinPolicy,
        claim_after: bool,
        pick: int,
    ) -> None:
        """A waiter on one or two fresh dependencies (and maybe a finished row, or an id naming
        no row), the clock moved, then its dependencies finished: the last one by `last`, which
        releases it at that finish's time; claimed after, with its join, or not."""
        paths = [last] if first is None else [first, last]
        self._flow(paths, waiter, extra, False, gap, None, policy, claim_after, pick)

    @precondition(lambda self: self.capabilities.flows)
    @rule(
        acks=st.integers(2, 3),
        first=st.sampled_from((None, None, *PATHS)),
        waiter=waiters,
        extra=st.sampled_from((None, None, "finished", "live")),
        gap=gaps,
        pick=recent,
    )
    def ack_batch(
        self, acks: int, first: str | None, waiter: str, extra: str | None, gap: int, pick: int
    ) -> None:
        """A waiter whose two or three dependencies (after another one, maybe) are finished by
        ONE ack call: each counts, and the call releases it when they were the last."""
        paths = ["ack"] * acks if first is None else [first, *["ack"] * acks]
        self._flow(paths, waiter, extra, True, gap, None, JoinPolicy.SUCCESS, True, pick)

    @precondition(lambda self: self.capabilities.flows and self.capabilities.operator)
    @rule(
        first=st.sampled_from(("ack", "fail", "refuse", "cancel", "bury")),
        last=st.sampled_from(LAST_PATHS),
        waiter=waiters,
        gap=gaps,
        pick=recent,
    )
    def refinish(self, first: str, last: str, waiter: str, gap: int, pick: int) -> None:
        """A waiter on two dependencies: the first finishes, is requeued and finishes again
        (acked) while the waiter still waits — counted once, as it first ended —, then the
        last one."""
        self._flow(
            [first, last], waiter, None, False, gap, "refinish", JoinPolicy.ALWAYS, True, pick
        )

    @precondition(lambda self: self.capabilities.flows)
    @rule(
        twist=st.sampled_from(("leave", "repark", "repark", "cancel waiter", "bury takes it")),
        paths=st.lists(st.sampled_from(LAST_PATHS), min_size=1, max_size=2),
        extra=st.sampled_from((None, None, "unknown")),
        gap=gaps,
        pick=recent,
    )
    def waiter_leaves(
        self, twist: str, paths: list[str], extra: str | None, gap: int, pick: int
    ) -> None:
        """A waiter parked until a time leaves `parked` before its last dependency finishes:
        claimed at its run_at ("leave": the finish moves it no more), and then parked on its
        join again ("repark": recounted from the rows as they stand, released by the last
        finish), or cancelled ("cancel waiter"); or claimed at its run_at by the very claim
        whose bury finishes its last dependency ("bury takes it")."""
        waiter = "park" if twist == "cancel waiter" and pick % 2 else "park until"
        if twist == "bury takes it":
            paths = [*paths[:-1], "bury"]
        self._flow(paths, waiter, extra, False, gap, twist, JoinPolicy.SUCCESS, True, pick)

    @precondition(lambda self: self.capabilities.flows and self.capabilities.operator)
    @rule(last=st.sampled_from(LAST_PATHS), waiter=waiters, gap=gaps, pick=recent)
    def remove_dependency(self, last: str, waiter: str, gap: int, pick: int) -> None:
        """A live dependency removed (a finish that did not complete), then the last one."""
        self._flow(["remove", last], waiter, None, False, gap, None, JoinPolicy.ALWAYS, True, pick)

    def _flow(
        self,
        paths: list[str],
        waiter: str,
        extra: str | None,
        batch: bool,
        gap: int,
        twist: str | None,
        policy: JoinPolicy,
        claim_after: bool,
        pick: int,
    ) -> None:
        """Make fresh dependencies (one per path, each in a queue of its own) and a waiter on
        them (enqueued on its join, or claimed and parked on it, for good or until a time; with
        `extra`, its join names a finished row, an id naming no row, or a live row of the walk
        too); move the clock `gap` ms; then finish the dependencies in order, each by its path —
        with `batch`, every "ack" one in a single ack call. `twist`: after the first finish,
        requeue that dependency and finish it again ("refinish"); before the last one, claim
        the waiter at its run_at ("leave"), also park it on its join again ("repark"), or
        cancel it ("cancel waiter"). With `claim_after`, claim the waiter's queue at the end."""
        # A row of the walk first: the fresh dependencies are the newest rows, so far likelier.
        other = UNKNOWN_ID if extra in (None, "unknown") else self._target((extra, pick))
        # Children of the walk's first row, members of one batch: what the listings page by.
        links = {"parent": self._parent("first"), "batch": f"batch-{self._serial}"}
        deps = [self._flow_job("dep-", **links) for _ in paths]
        self._both(
            "job_enqueue_many(dependencies)",
            functools.partial(self.model.job_enqueue_many, deps),
            functools.partial(self.driver.job_enqueue_many, deps),
        )
        after = [d.id for d in deps]
        if extra is not None and (other != UNKNOWN_ID or extra == "unknown"):
            after.insert(pick % (len(after) + 1), other)
        join = tuple(after)
        w = self._make_waiter(waiter, join, policy, len(paths))
        if w is None:
            return
        self.now += gap
        steps = _steps(paths, batch)
        for i, step in enumerate(steps):
            takes = twist == "bury takes it" or (
                # A waiter due at a time whose last dependency is buried: the bury's claim is
                # at its run_at (no other rule moves a waiter's clock there).
                twist in (None, "refinish") and waiter == "park until" and paths[-1] == "bury"
            )
            if i == len(steps) - 1 and takes:
                # The last dependency's bury is claimed at the waiter's run_at or later: that
                # claim takes the waiter with its join as it stood, and its bury moves it no more.
                r = self.model.rows.get(w.id)
                if r is not None and r.run_at_ms is not None:
                    self.now = max(self.now, r.run_at_ms)
            elif i == len(steps) - 1 and twist in ("leave", "repark", "cancel waiter"):
                self._twist(w, twist, join)
            self._finish_step([(deps[k], paths[k]) for k in step], w)
            if i == 0 and twist == "refinish":
                self._refinish(deps[step[0]], w)
        if claim_after:
            got = self._claim(ClaimParams((w.queue,), WORKERS[pick % 2], 1, 1000, self.now))
            if isinstance(got, ClaimResult) and got.jobs:
                self._note("claim of a waiter after its dependencies finished")

    def _make_waiter(
        self, how: str, after: tuple[str, ...], policy: JoinPolicy, n: int
    ) -> NewJob | None:
        """A waiter on `after`, in a queue of its own: enqueued on its join, or claimed and
        parked on it (for good, or until a time past the rule's finishes but for the last)."""
        job = self._flow_job("join-")
        if how == "enqueue":
            got = self._join_enqueue([JoinEnqueue(job, after, policy)])
            return job if isinstance(got, list) and got[0].enqueued is not None else None
        self._both(
            "job_enqueue(a waiter)",
            functools.partial(self.model.job_enqueue, job),
            functools.partial(self.driver.job_enqueue, job),
        )
        got = self._claim(ClaimParams((job.queue,), WORKERS[1], 1, 1000, self.now))
        if not isinstance(got, ClaimResult) or not got.jobs:
            return None
        run_at = None if how == "park" else self.now + 1000 * n + 1
        self._park([Nack(got.jobs[0].fence, NackKind.PARK, self.now, run_at, join=after)])
        return job

    def _twist(self, w: NewJob, twist: str, after: Sequence[str]) -> None:
        """Before the last finish: claim the waiter at its run_at (and park it on its join
        again), or cancel it."""
        if twist == "cancel waiter":
            if self.capabilities.operator and self.model.pending_of(w.id):
                self._note("waiter cancelled, a dependency pending")
                self._cancel(w.id)
            return
        r = self.model.rows.get(w.id)
        if r is None or r.state != JobState.PARKED or r.run_at_ms is None:
            return
        self.now = max(self.now, r.run_at_ms)
        got = self._claim(ClaimParams((w.queue,), WORKERS[0], 1, 1000, self.now))
        if not isinstance(got, ClaimResult) or not got.jobs:
            return
        self._note("waiter claimed at its run_at, a dependency pending")
        if twist == "repark":
            self._note("park on a join again: recounted")
            self._park([Nack(got.jobs[0].fence, NackKind.PARK, self.now, None, join=tuple(after))])

    def _finish_step(self, deps: list[tuple[NewJob, str]], w: NewJob) -> None:
        """Finish these dependencies: several (all "ack") in one ack call, one by its path."""
        if len(deps) > 1:
            claimed = self._claim_each([d for d, _ in deps])
            pending = self.model.pending_of(w.id) or frozenset()
            if len(pending & {j.id for j in claimed}) > 1:
                self._note("one ack call finishing two dependencies of a waiter")
            self._ack([Ack(j.fence, self.now, '{"ok":true}') for j in claimed])
            return
        ((dep, path),) = deps
        if path in ("cancel", "remove") and not self.capabilities.operator:
            path = "fail"
        if path == "remove" and self._releases(dep.id):
            # Which time a remove (it takes none) releases a waiter at is not written: cancel.
            path = "cancel"
        if path == "cancel":
            self._cancel(dep.id)
        elif path == "remove":
            self._both(
                "job_remove",
                functools.partial(self.model.job_remove, [dep.id]),
                functools.partial(self.driver.job_remove, [dep.id]),
            )
        elif path == "bury":
            for job in self._claim_each([dep]):
                assert job.lease_until_ms is not None
                self.now = max(self.now, job.lease_until_ms)
                # The bury's claim asks for the waiter's queue too: one it releases is not
                # among its candidates; one due at its run_at is, claimed with its join as is.
                r = self.model.rows.get(w.id)
                due = r is not None and r.run_at_ms is not None and r.run_at_ms <= self.now
                if r is not None and r.state == JobState.PARKED and due:
                    if dep.id in (self.model.pending_of(w.id) or ()):
                        self._note("claim of a due waiter whose dependency it buries")
                elif self._releases(dep.id):
                    self._note("claim whose bury releases a waiter of a queue it claims")
                self._claim(ClaimParams((dep.queue, w.queue), WORKERS[0], 2, 1000, self.now))
        else:
            for job in self._claim_each([dep]):
                if path == "ack":
                    self._ack([Ack(job.fence, self.now, '"done"')])
                else:
                    kind = NackKind.FAIL if path == "fail" else NackKind.REFUSE
                    self._nack([Nack(job.fence, kind, self.now, None, "boom", path == "fail")])

    def _refinish(self, dep: NewJob, w: NewJob) -> None:
        """Requeue a finished dependency and finish it again, while its waiter still waits."""
        r = self.model.rows.get(dep.id)
        if r is None or r.state in LIVE_STATES or not self.capabilities.operator:
            return
        if self.model.pending_of(w.id):
            self._note("dependency finished again after a requeue, its waiter waiting")
        got = self._both(
            "job_requeue",
            functools.partial(self.model.job_requeue, dep.id, self.now),
            functools.partial(self.driver.job_requeue, dep.id, self.now),
        )
        if isinstance(got, JobsError):
            return
        for job in self._claim_each([dep]):
            self._ack([Ack(job.fence, self.now, '"again"')])

    def _releases(self, dep_id: str) -> bool:
        """Whether finishing `dep_id` now would release a waiter (its last pending dependency)."""
        return any(p == {dep_id} for p in self.model.waiters().values())

    def _claim_each(self, deps: list[NewJob]) -> list[ClaimedJob]:
        """Claim exactly these rows (each alone in its queue), in one claim."""
        queues = tuple(d.queue for d in deps)
        got = self._claim(ClaimParams(queues, WORKERS[0], len(deps), 1000, self.now))
        return list(got.jobs) if isinstance(got, ClaimResult) else []

    # -- watches, listings, refusals ---------------------------------------------------------------

    @precondition(lambda self: self.capabilities.flows)
    @rule(
        picks=target_lists,
        by=st.sampled_from(("parent", "batch", "batch", None)),
        limit=st.sampled_from((1, 2, 5)),
        pick=recent,
    )
    def watch_and_list(
        self, picks: list[tuple[str, int]], by: str | None, limit: int, pick: int
    ) -> None:
        """Watch some rows (finished, live, unknown: an answer as `job_get_many`'s), then page
        through the rows of one parent or one batch (a stored row's, or one nobody has)."""
        ids = list(dict.fromkeys(self._target(p) for p in picks))
        self._both(
            "job_watch",
            functools.partial(self.model.job_watch, ids),
            functools.partial(self.driver.job_watch, ids),
        )
        if by is None or not self.capabilities.operator:
            return
        values = sorted(
            {
                v
                for r in self.model.rows.values()
                if (v := r.parent_id if by == "parent" else r.batch_id) is not None
            }
        )
        value = values[pick % len(values)] if values else "nobody's"
        f = JobFilter(parent_id=value) if by == "parent" else JobFilter(batch_id=value)
        cursor = None
        for _ in range(3):
            params = JobListParams(f, limit, cursor, 2000)
            got = self._both(
                "job_list",
                functools.partial(self.model.job_list, params),
                functools.partial(self.driver.job_list, params),
            )
            if not isinstance(got, JobPage) or got.next_cursor is None:
                break
            self._note(f"list by {by} page with a cursor")
            cursor = got.next_cursor

    @precondition(lambda self: self.capabilities.flows)
    @rule(kind=st.sampled_from(JOIN_REFUSALS), spec=batch_job_specs, fence=fence_specs)
    def refused_join(self, kind: str, spec: JobSpec, fence: FenceSpec) -> None:
        """A join the ABC refuses, before any write: nothing is enqueued, parked or moved."""
        if kind.startswith("join"):
            f = self._fence(fence)
            nack = {
                "join on a retry": Nack(f, NackKind.RETRY, self.now, self.now, join=(UNKNOWN_ID,)),
                "join empty": Nack(f, NackKind.PARK, self.now, join=()),
                "join twice": Nack(f, NackKind.PARK, self.now, join=(UNKNOWN_ID, UNKNOWN_ID)),
                "join with a wait": Nack(
                    f,
                    NackKind.PARK,
                    self.now,
                    wait=EventWait("shipped", "{}", self.now),
                    join=(UNKNOWN_ID,),
                ),
            }[kind]
            if nack.wait is not None and not self.capabilities.events:
                nack = Nack(f, NackKind.SHED, self.now, join=(UNKNOWN_ID,))
            got: object = self._nack([nack])
        else:
            job = self._new_job(spec, {})
            known = self._target(("any", 0))
            item = JoinEnqueue(job, (known,), JoinPolicy.SUCCESS)
            bad: Any = {
                "after empty": (),
                "after twice": (known, known),
                "after as a list": [known],
                "after too long": tuple(f"x{i}" for i in range(MAX_JOIN_IDS + 1)),
                "after empty id": (known, ""),
            }.get(kind)
            items = [item]
            if bad is not None:
                items = [JoinEnqueue(job, bad, JoinPolicy.SUCCESS)]
            elif kind == "policy":
                items = [JoinEnqueue(job, (known,), "success")]  # type: ignore[arg-type]
            elif kind == "bad job":
                items = [JoinEnqueue(_linked(job, "", None), (known,))]
            elif kind == "too many items":
                items = [item] * (MAX_ENQUEUE_BATCH + 1)
            got = self._both(
                "join_enqueue(refused)",
                functools.partial(self.model.join_enqueue, items),
                functools.partial(self.driver.join_enqueue, items),
            )
        assert isinstance(got, JobsError), f"the machine built a call nobody refuses: {kind}"

    # -- helpers --------------------------------------------------------------------------------

    def _flow_job(
        self, prefix: str, *, parent: str | None = None, batch: str | None = None
    ) -> NewJob:
        """A fresh row in a queue of its own (only these rules claim it), due now, one attempt
        (so a lapse buries it), linked to a parent and a batch when given them."""
        job_id = self._fresh_id(prefix)
        return NewJob(
            id=job_id,
            run_id=f"run-{job_id}",
            name=NAMES[0],
            queue=f"{job_id}.q",
            tenant_id=None,
            idempotency_key=job_id,
            input_json="{}",
            priority=0,
            run_at_ms=self.now,
            max_attempts=1,
            created_at_ms=self.now,
            parent_id=parent,
            batch_id=batch,
        )

    def _after(
        self, picks: list[tuple[str, int]], earlier: list[str], exclude: str | None = None
    ) -> tuple[str, ...]:
        """The distinct ids `picks` name (`exclude` left out: a row parked on a join never
        waits for itself); an id naming no row when none is left."""
        out: list[str] = []
        for kind, n in picks:
            if kind == "earlier" and earlier:
                out.append(earlier[-1 - n % len(earlier)])
            else:
                out.append(self._target(("any" if kind == "earlier" else kind, n)))
        ids = tuple(dict.fromkeys(i for i in out if i != exclude))
        return ids or (UNKNOWN_ID,)

    def _parent(self, parent: str | None) -> str | None:
        if parent == "first" and self.ids:
            return self.ids[0]
        if parent == "latest":
            return self._used_id(0)
        return UNKNOWN_ID if parent == "unknown" else None

    def _join_enqueue(self, items: list[JoinEnqueue]) -> object:
        got = self._both(
            "join_enqueue",
            functools.partial(self.model.join_enqueue, items),
            functools.partial(self.driver.join_enqueue, items),
        )
        if isinstance(got, list):
            for item, answer in zip(items, got, strict=True):
                self._joined(item, answer)
        return got

    def _joined(self, item: JoinEnqueue, answer: JoinEnqueueAnswer) -> None:
        if answer.enqueued is None:
            self._note("join_enqueue refused: a dependency missing")
            return
        if answer.enqueued.deduped:
            self._note("join_enqueue deduped")
            return
        r = self.model.rows[item.job.id]
        self._note(f"join_enqueue {r.state.value}")
        if any(self.model.rows[d].state not in LIVE_STATES for d in item.after):
            self._note("join_enqueue beside a finished dependency")

    def _park(self, nacks: list[Nack]) -> None:
        landed = self._nack(nacks)
        if not isinstance(landed, list):
            return
        for n, ok in zip(nacks, landed, strict=True):
            r = self.model.rows.get(n.fence.job_id)
            if not ok or r is None or n.join is None:
                continue
            parked = r.state == JobState.PARKED
            self._note("park on a join" if parked else "park on a join, none pending")
            if any(d not in self.model.rows for d in n.join):
                self._note("park on a join naming no row")

    def _cancel(self, job_id: str) -> None:
        self._both(
            "job_cancel",
            functools.partial(self.model.job_cancel, job_id, self.now),
            functools.partial(self.driver.job_cancel, job_id, self.now),
        )

    def _family_checks(self) -> list[Check]:
        checks = super()._family_checks()
        if self._walks("flows") and self.capabilities.flows:
            ids = [*self.ids, UNKNOWN_ID][-MAX_BULK_IDS:]
            checks.append(
                (
                    "join_pending",
                    lambda: self.model.join_pending(ids),
                    lambda: self.driver.join_pending(ids),
                )
            )
        # What the finishes of this step moved (the rows themselves are compared with the rest).
        if self._walks("flows"):
            for _, _, how, released in self.model.moves:
                self._note(f"waiter {'released' if released else 'moved'} by {how}")
        self.model.moves.clear()
        return checks


def _linked(job: NewJob, parent: str | None, batch: str | None) -> NewJob:
    """`job` with a parent and a batch."""
    return replace(job, parent_id=parent, batch_id=batch)


def _steps(paths: list[str], batch: bool) -> list[list[int]]:
    """The dependencies' finishes in order: one each, or (with `batch`) every "ack" one in a
    single step where the first of them stands."""
    acks = [i for i, p in enumerate(paths) if p == "ack"]
    out: list[list[int]] = []
    for i, p in enumerate(paths):
        if batch and p == "ack" and len(acks) > 1:
            if i == acks[0]:
                out.append(acks)
        else:
            out.append([i])
    return out
