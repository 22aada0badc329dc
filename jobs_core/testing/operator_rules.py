"""The operator family's rules: bulk calls, listing pages and counter folds, with the queue
stats and every counter bucket compared after each step (`jobs_core.driver`'s operator family).
"""

from __future__ import annotations

import functools
from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from jobs_core.driver import MAX_TIME_MS
from jobs_core.records import (
    CounterReadParams,
    JobFilter,
    JobListParams,
    JobPage,
    RequeueParams,
)
from jobs_core.states import JobState
from jobs_core.testing.compare import Check
from jobs_core.testing.machine import (
    BAD_CURSORS,
    IdSpec,
    JobSpec,
    ParityMachine,
    batch_job_specs,
    list_filters,
    target_lists,
)

#: Every counter bucket of every name, whenever it began.
_EVERY_COUNTER = CounterReadParams(0, MAX_TIME_MS)


class OperatorRules(ParityMachine):
    """The operator family, over the job family's rows."""

    FAMILY = "operator"

    @precondition(lambda self: self.capabilities.operator)
    @rule(
        op=st.sampled_from(("promote", "remove", "cancel", "requeue")),
        picks=target_lists,
        extra=st.sampled_from(("delayed", "parked", "none")),
        again=st.one_of(batch_job_specs, st.none()),
    )
    def bulk(
        self, op: str, picks: list[tuple[str, int]], extra: str, again: JobSpec | None
    ) -> None:
        """One bulk call over a few targets (see `_bulk`)."""
        self._bulk(op, picks, extra, again)

    @precondition(lambda self: self.capabilities.operator)
    @rule(
        f=list_filters,
        limit=st.sampled_from((3, 2, 1, 5, 50)),
        scan=st.sampled_from((3, 2, 1, 7, 2000)),
        pages=st.integers(1, 6),
        resume=st.sampled_from(("new", "latest", "foreign", "new", "bad")),
        bad=st.sampled_from(BAD_CURSORS),
    )
    def list_pages(
        self, f: JobFilter, limit: int, scan: int, pages: int, resume: str, bad: str
    ) -> None:
        """Walk a listing's pages (see `_list_pages`)."""
        self._list_pages(f, limit, scan, pages, resume, bad)

    @precondition(lambda self: self.capabilities.counters)
    @rule(
        hours=st.sampled_from((3, 2, 24, 1, 0, 31 * 24)),
        limit=st.sampled_from((1, 2, 10, 10_000)),
    )
    def counter_fold(self, hours: int, limit: int) -> None:
        """Fold the counters some hours ahead (see `_counter_fold`)."""
        self._counter_fold(hours, limit)

    def _bulk(
        self, op: str, picks: list[tuple[str, int]], extra: str, again: JobSpec | None
    ) -> None:
        """One operator bulk call over a few targets (an id may come twice). `extra` puts a
        ready row due later or a parked row with a time first (what a promote must tell
        apart); after a remove, `again` enqueues a twin of the first removed row."""
        ids = [self._target(p) for p in picks]
        # A ready row due later and a parked row with a time (a sleep), when there are: what
        # a promote must tell apart.
        for wanted in {
            "delayed": (JobState.READY, JobState.PARKED),
            "parked": (JobState.PARKED,),
        }.get(extra, ()):
            later = [
                r.id
                for r in self.model.rows.values()
                if r.state == wanted and r.run_at_ms is not None and r.run_at_ms > self.now
            ]
            if later:
                ids.insert(0, later[-1])
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
            r = gone[0]
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

    def _counter_fold(self, hours: int, limit: int) -> None:
        """Fold counters `hours` ahead of now (the clock does not move: a fold reads only its
        `now_ms`), so old minute buckets fold and, far enough ahead, hour buckets drop."""
        at = self.now + hours * 3_600_000
        got = self._both(
            "counter_fold",
            lambda: self.model.counter_fold(at, limit),
            lambda: self.driver.counter_fold(at, limit),
        )
        if isinstance(got, int) and got:
            self._note("counter buckets folded or dropped")

    def _family_checks(self) -> list[Check]:
        checks = super()._family_checks()
        if self.capabilities.counters:
            checks.append(
                (
                    "counter_read",
                    lambda: self.model.counter_read(_EVERY_COUNTER),
                    lambda: self.driver.counter_read(_EVERY_COUNTER),
                )
            )
        if self.capabilities.operator:
            checks.append(
                (
                    "queue_stats",
                    lambda: self.model.queue_stats(self.now),
                    lambda: self.driver.queue_stats(self.now),
                )
            )
        return checks
