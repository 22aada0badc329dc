"""The operator family's rules (bulk calls and listing pages, with the queue stats compared after
each step) and the counter family's (reads and folds at the buckets' edges, with every counter
bucket compared after each step): `jobs_core.driver`'s operator and counter families.

Times are chosen relative to what is stored: a promote or the stats at the millisecond a row
falls due, a read bounded exactly at a bucket's start, a fold at exactly a minute bucket's
cut-off or an hour bucket's 30 days, settles at exactly a minute's start.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from jobs_core.driver import MAX_TIME_MS
from jobs_core.records import (
    Ack,
    CounterReadParams,
    JobFilter,
    JobListParams,
    JobPage,
    Nack,
    NackKind,
    RequeueParams,
)
from jobs_core.semantics import HOUR_MS, MINUTE_MS, hour_of
from jobs_core.states import LIVE_STATES, JobState
from jobs_core.testing.compare import Check
from jobs_core.testing.machine import (
    BAD_CURSORS,
    QUEUES,
    UNKNOWN_ID,
    IdSpec,
    JobSpec,
    ParityMachine,
    batch_job_specs,
    belongs_to,
    list_filters,
    recent,
    row_namespace,
    target_lists,
)

#: Every counter bucket of every name, whenever it began.
_EVERY_COUNTER = CounterReadParams(0, MAX_TIME_MS)
#: How long an hour bucket is kept (`drop_before`), restated.
_KEPT_HOURS_MS = 30 * 24 * HOUR_MS
#: What each bulk call puts first, most often what it must tell apart: rows due later, parked
#: with a time, or due exactly now for a promote; finished twins for a requeue.
BULK_EXTRAS = {
    "promote": ("waiting", "due now", "waiting", "none"),
    "requeue": ("twins", "twins", "waiting", "none"),
    "cancel": ("waiting", "twins", "none", "none"),
    "remove": ("running", "waiting", "running", "none"),
}
bulk_extras = st.integers(0, 3)
list_limits = st.sampled_from((3, 2, 1, 5, 50))
list_scans = st.sampled_from((3, 2, 1, 7, 2000))
#: A millisecond either side of an edge, or on it (twice as often).
edge_deltas = st.sampled_from((-1, 0, 0, 1))


class OperatorRules(ParityMachine):
    """The operator family, over the job family's rows."""

    FAMILY = "operator"

    # One rule per bulk call, each after the rows its call must tell apart (`_bulk`,
    # `BULK_EXTRAS`): the family's walk spends its steps on them.

    @precondition(lambda self: self.capabilities.operator)
    @rule(picks=target_lists, extra=bulk_extras)
    def promote(self, picks: list[tuple[str, int]], extra: int) -> None:
        self._bulk("promote", picks, BULK_EXTRAS["promote"][extra], None)

    @precondition(lambda self: self.capabilities.operator)
    @rule(picks=target_lists, extra=bulk_extras, again=st.one_of(batch_job_specs, st.none()))
    def remove(self, picks: list[tuple[str, int]], extra: int, again: JobSpec | None) -> None:
        self._bulk("remove", picks, BULK_EXTRAS["remove"][extra], again)

    @precondition(lambda self: self.capabilities.operator)
    @rule(picks=target_lists, extra=bulk_extras, spec=batch_job_specs)
    def cancel_many(self, picks: list[tuple[str, int]], extra: int, spec: JobSpec) -> None:
        self._bulk("cancel", picks, BULK_EXTRAS["cancel"][extra], spec)

    @precondition(lambda self: self.capabilities.operator)
    @rule(picks=target_lists, extra=bulk_extras, spec=batch_job_specs)
    def requeue_many(self, picks: list[tuple[str, int]], extra: int, spec: JobSpec) -> None:
        self._bulk("requeue", picks, BULK_EXTRAS["requeue"][extra], spec)

    @precondition(lambda self: self.capabilities.operator)
    @rule(
        f=list_filters,
        limit=list_limits,
        scan=list_scans,
        pages=st.integers(1, 6),
    )
    def list_pages(self, f: JobFilter, limit: int, scan: int, pages: int) -> None:
        """Walk a listing's pages from the newest row (see `_list_pages`)."""
        self._list_pages(f, limit, scan, pages, "new", "")

    @precondition(lambda self: self.capabilities.operator)
    @rule(
        f=list_filters,
        limit=list_limits,
        scan=list_scans,
        pages=st.integers(1, 6),
        resume=st.sampled_from(("latest", "latest", "foreign", "bad")),
        bad=st.sampled_from(BAD_CURSORS),
    )
    def list_resumed(
        self, f: JobFilter, limit: int, scan: int, pages: int, resume: str, bad: str
    ) -> None:
        """Walk a listing's pages on from a cursor: the latest one handed out, one of another
        filter, or garbage (see `_list_pages`)."""
        self._list_pages(f, limit, scan, pages, resume, bad)

    @belongs_to("counters")
    @precondition(lambda self: self.capabilities.counters)
    @rule(
        hours=st.sampled_from((3, 2, 24, 1, 0, 31 * 24)),
        limit=st.sampled_from((1, 2, 10, 10_000)),
    )
    def counter_fold(self, hours: int, limit: int) -> None:
        """Fold the counters some hours ahead (see `_counter_fold`)."""
        self._counter_fold(self.now + hours * HOUR_MS, limit)

    @belongs_to("counters")
    @precondition(lambda self: self.capabilities.counters)
    @rule(
        at=st.sampled_from(("fold edge", "hour after", "drop edge")),
        delta=edge_deltas,
        pick=recent,
        limit=st.sampled_from((1, 2, 10, 10_000)),
    )
    def fold_at_edge(self, at: str, delta: int, pick: int, limit: int) -> None:
        """Fold the counters `delta` ms from a stored bucket's edge: where a minute bucket
        folds (two hours after its hour began; an hour before, it must not) or an hour bucket
        drops (30 days after it began; with room in the limit to fold the minutes before it)."""
        if at == "drop edge":
            limit = max(limit, 10)
        self._counter_fold(self._fold_time(at, delta, pick), limit)

    @belongs_to("counters")
    @precondition(lambda self: self.capabilities.counters)
    @rule(
        picks=st.tuples(recent, recent),
        deltas=st.tuples(edge_deltas, edge_deltas),
        names=st.sampled_from((None, None, "one", "none")),
        queues=st.sampled_from((None, None, "one", "none")),
    )
    def counter_read(
        self, picks: tuple[int, int], deltas: tuple[int, int], names: str, queues: str
    ) -> None:
        """Read the counters from and up to stored buckets' starts (`deltas` ms off them), of
        every name and queue, of one stored one, or of none."""
        buckets = sorted({b for (_, _, b, _) in self.model.counters}) or [self.now]
        ends = [buckets[-1 - p % len(buckets)] + d for p, d in zip(picks, deltas, strict=True)]
        since, until = sorted(ends)
        stored = sorted(self.model.counters)
        first = stored[-1 - picks[0] % len(stored)] if stored else ("a", QUEUES[0], 0, 0)
        params = CounterReadParams(
            max(0, since),
            until,
            {"one": (first[0],), "none": ()}.get(names),
            {"one": (first[1],), "none": ()}.get(queues),
        )
        if any(b in (since, until) for b in buckets) and since < until:
            self._note("counter read bounded at a bucket's start")
        self._both(
            "counter_read",
            lambda: self.model.counter_read(params),
            lambda: self.driver.counter_read(params),
        )

    @belongs_to("counters")
    @precondition(lambda self: self.capabilities.counters)
    @rule(
        unit=st.sampled_from((MINUTE_MS, MINUTE_MS, HOUR_MS)),
        delta=edge_deltas,
        then=st.sampled_from(("ack", "retry", "dead", "drop", "shed")),
    )
    def settle_at_minute(self, unit: int, delta: int, then: str) -> None:
        """Jump to the next minute's (or hour's) start, `delta` ms off it, and settle what a
        claim takes there (a failure dead-lettered or dropped): a settle at a bucket's first
        millisecond counts in that bucket."""
        self.now = (self.now // unit + 1) * unit + delta
        for job in self._claim_some("w1", 2):
            if self.now % MINUTE_MS == 0:
                self._note("settle at exactly a minute's start")
            if then == "ack":
                self._ack([Ack(job.fence, self.now)])
            else:
                kind = {"retry": NackKind.RETRY, "shed": NackKind.SHED}.get(then, NackKind.FAIL)
                at = self.now + 1000
                self._nack([Nack(job.fence, kind, self.now, at, "x", dead_letter=then != "drop")])

    def _bulk(
        self, op: str, picks: list[tuple[str, int]], extra: str, again: JobSpec | None
    ) -> None:
        """One operator bulk call over a few targets (an id may come twice). `extra` puts
        first a ready row due later and a parked row with a time, parking one if none is
        (what a promote must tell apart); or a ready row due exactly now (jumping to one's
        run_at if need be); or a running row (claiming one if none runs); or two finished rows
        of one idempotency key (the second a twin built from `again`, enqueued, cancelled).
        After a remove, `again` enqueues a twin of the first removed row (a live one's, if one
        went) under its very id."""
        ids = [self._target(p) for p in picks]
        if extra == "due now":
            ids.insert(0, self._due_now())
        elif extra == "twins":
            ids[:0] = self._finished_twins(again)
        elif extra == "waiting":
            ids[:0] = self._waiting_later()
        elif extra == "running":
            running = self._held_rows()
            ids[:0] = [r.id for r in running[-1:]]
        before = dict(self.model.rows)
        got: object
        if op == "cancel":
            got = self._both(
                "job_cancel_many",
                lambda: self.model.job_cancel_many(ids, self.now),
                lambda: self.driver.job_cancel_many(ids, self.now),
            )
        elif op == "requeue":
            params = RequeueParams(tuple(ids), self.now)
            got = self._both(
                "job_requeue_many",
                lambda: self.model.job_requeue_many(params),
                lambda: self.driver.job_requeue_many(params),
            )
        elif op == "promote":
            got = self._both(
                "job_promote",
                lambda: self.model.job_promote(ids, self.now),
                lambda: self.driver.job_promote(ids, self.now),
            )
        else:
            got = self._both(
                "job_remove",
                lambda: self.model.job_remove(ids),
                lambda: self.driver.job_remove(ids),
            )
        if isinstance(got, list):
            for answer in set(got):
                self._note(f"{op} answered {answer.value}")
        gone = [before[i] for i in dict.fromkeys(ids) if i in before and i not in self.model.rows]
        if again is not None and gone:
            # A twin of the first removed row (its name, tenant and key) under its very id: both
            # were freed with the row, so this inserts.
            r = next((r for r in gone if r.state in LIVE_STATES), gone[0])
            base = self._new_job(replace(again, id=IdSpec("old", 0, "")), {})
            twin = replace(
                base, id=r.id, name=r.name, tenant_id=r.tenant_id, idempotency_key=r.idempotency_key
            )
            self._note("enqueue of a removed row's twin")
            self._both(
                "job_enqueue(a removed row's twin)",
                lambda: self.model.job_enqueue(twin),
                lambda: self.driver.job_enqueue(twin),
            )

    def _list_pages(
        self, f: JobFilter, limit: int, scan: int, pages: int, resume: str, bad: str
    ) -> None:
        """Walk up to `pages` pages of a listing, from the newest row or from a cursor handed out
        earlier (for this filter — rows may have moved since —, for another one, or garbage)."""
        cursor: str | None = None
        if resume == "latest" and self.cursors:
            f, cursor = self.cursors[-1]
        elif resume == "foreign":
            others = [(g, c) for g, c in self.cursors if g != f]
            if others:
                cursor = others[-1][1]
                self._note("list with a foreign cursor")
        elif resume == "bad":
            cursor = bad
        for _ in range(pages):
            params = JobListParams(f, limit, cursor, scan)
            got = self._both(
                "job_list",
                functools.partial(self.model.job_list, params),
                functools.partial(self.driver.job_list, params),
            )
            if not isinstance(got, JobPage):
                self._note(f"list refused {got.code}")
                return
            if got.next_cursor is None:
                self._note("list reached the end")
                return
            self._note("list page with a cursor" if got.jobs else "list page empty, not the end")
            self.cursors.append((f, got.next_cursor))
            cursor = got.next_cursor

    def _fold_time(self, at: str, delta: int, pick: int) -> int:
        """When a fold runs: `delta` ms from the time a stored minute bucket folds (`hour_of
        (bucket) + 2 h`), from an hour before it (a bucket starting an hour folds there if
        `<=` is read for `<`), or from when a stored hour bucket (or the one a stored minute
        bucket folds into) drops (30 days after it began, exclusive); now when none is stored."""
        minutes = sorted(b for (_, _, b, w) in self.model.counters if w == MINUTE_MS)
        # A bucket starting an hour first: the one a `<=` for `<` folds an hour early.
        minutes = [m for m in minutes if m % HOUR_MS == 0] or minutes
        if at in ("fold edge", "hour after") and minutes:
            m = minutes[-1 - pick % len(minutes)]
            if at == "fold edge":
                self._note("fold at a minute bucket's cut-off")
                return hour_of(m) + 2 * HOUR_MS + delta
            if m % HOUR_MS == 0 and delta >= 0:
                self._note("fold an hour after a minute bucket starting an hour")
            return hour_of(m) + HOUR_MS + delta
        hours_stored = sorted({hour_of(b) for (_, _, b, _) in self.model.counters})
        if at == "drop edge" and hours_stored:
            self._note("fold at an hour bucket's 30-day cut-off")
            return hours_stored[-1 - pick % len(hours_stored)] + _KEPT_HOURS_MS + delta
        return self.now

    def _counter_fold(self, at: int, limit: int) -> None:
        """Fold counters as of `at` (the clock does not move: a fold reads only its `now_ms`),
        so old minute buckets fold and, far enough ahead, hour buckets drop."""
        got = self._both(
            "counter_fold",
            lambda: self.model.counter_fold(at, limit),
            lambda: self.driver.counter_fold(at, limit),
        )
        if isinstance(got, int) and got:
            self._note("counter buckets folded or dropped")

    def _waiting_later(self) -> list[str]:
        """A ready row due later and a parked row with a time (a sleep): a row of each state,
        the row parked for a second first if no parked row has a time."""
        if not any(r.state == JobState.PARKED and r.run_at_ms for r in self.model.rows.values()):
            for job in self._claim_some("w1", 1):
                self._nack([Nack(job.fence, NackKind.PARK, self.now, self.now + 1000)])
        out = []
        for state in (JobState.READY, JobState.PARKED):
            later = [
                r.id
                for r in self.model.rows.values()
                if r.state == state and r.run_at_ms is not None and r.run_at_ms > self.now
            ]
            out += later[-1:]
        return out

    def _due_now(self) -> str:
        """A ready row due exactly now, the clock moved to the soonest one's run_at if none is;
        `UNKNOWN_ID` when no ready row is due now or later."""
        ready = [
            r
            for r in self.model.rows.values()
            if r.state == JobState.READY and r.run_at_ms is not None and r.run_at_ms >= self.now
        ]
        if not ready:
            return UNKNOWN_ID
        r = min(ready, key=lambda r: (r.run_at_ms or 0, r.id))
        assert r.run_at_ms is not None
        self.now = r.run_at_ms
        self._note("bulk naming a row due exactly now")
        return r.id

    def _finished_twins(self, spec: JobSpec | None) -> list[str]:
        """Two finished rows of one (name, tenant, key), when a finished row has no live twin:
        a twin of it is enqueued and cancelled. None otherwise."""
        holders = {row_namespace(r) for r in self.model.rows.values() if r.state in LIVE_STATES}
        done = [r for r in self.model.rows.values() if r.state not in LIVE_STATES]
        free = [r for r in done if row_namespace(r) not in holders]
        if not free or spec is None:
            return []
        r = free[-1]
        twin = replace(
            self._new_job(replace(spec, id=IdSpec("new", 0, spec.id.prefix)), {}),
            name=r.name,
            tenant_id=r.tenant_id,
            idempotency_key=r.idempotency_key,
        )
        self._both(
            "job_enqueue(a finished row's twin)",
            lambda: self.model.job_enqueue(twin),
            lambda: self.driver.job_enqueue(twin),
        )
        self._both(
            "job_cancel(the twin)",
            lambda: self.model.job_cancel(twin.id, self.now),
            lambda: self.driver.job_cancel(twin.id, self.now),
        )
        self._note("bulk naming two finished twins")
        return [r.id, twin.id]

    def _family_checks(self) -> list[Check]:
        checks = super()._family_checks()
        if self.capabilities.counters and self._walks("counters"):
            checks.append(
                (
                    "counter_read",
                    lambda: self.model.counter_read(_EVERY_COUNTER),
                    lambda: self.driver.counter_read(_EVERY_COUNTER),
                )
            )
        if self.capabilities.operator and self._walks("operator"):
            due = [
                r.run_at_ms
                for r in self.model.rows.values()
                if r.state == JobState.READY and r.run_at_ms is not None and r.run_at_ms <= self.now
            ]
            if due and self.now in due:
                self._note("stats with a row due exactly now")
            checks.append(
                (
                    "queue_stats",
                    lambda: self.model.queue_stats(self.now),
                    lambda: self.driver.queue_stats(self.now),
                )
            )
        return checks
