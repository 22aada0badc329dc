"""The sweep family's rules: the ledger factories write their runs into (`sweep_start`,
`sweep_advance`, `sweep_checkpoint`, `sweep_finish`, `sweep_list`), interleaved with the job
writes that move the fences it is written under (claims, reclaims of lapsed leases, acks,
retries, cancels, heartbeats). The whole ledger is compared after each step. Only runs when the
driver declares `sweeps` in `capabilities()`.

The edges are aimed at, each rule making the rows it needs (a row in a queue of its own, so it
claims exactly that row): a run's life from its start to its end — batches recorded once, a
replayed batch, a skipped one, a window of several batches (landing, replayed, overlapping the
recorded ones), a write after the run's claim was lost (reclaimed, acked,
cancelled) or only lapsed (it still holds), a failed run resumed by a later attempt, a completed
one its own later attempt finds as it is —; a run writing only its own entry (a held fence of
another row's run writes nothing, a row sharing the run does; after a fresh requeue the row's
new claim leaves its old run's entry alone and opens its new run's, after a plain one it
resumes); a completed run of the same sweep blocking a new one, each identity field that
differs letting it through (the kind does not), a failed or running run never blocking, two
completed runs finished in one millisecond (the greater run id blocks) or in an order that is
not their run ids'; listings whose limit cuts through entries started in one millisecond. A
batch is recorded by an advance alone or, where the driver keeps steps too, by a checkpoint (its
step and its advance in one write, as the factories record a batch): the run's steps are then
compared as well, a replayed batch's first record kept. Run
ids, names, scopes, environments and cursors hold quotes, newlines and non-ASCII text, some at
their byte limits.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from jobs_core.driver import (
    MAX_NAME_BYTES,
    MAX_SWEEP_CHECKSUM_BYTES,
    MAX_SWEEP_CURSOR_BYTES,
    MAX_SWEEP_LIST,
    MAX_SWEEP_ROWS,
)
from jobs_core.errors import JobsError
from jobs_core.jsonform import utf8_length
from jobs_core.records import (
    SWEEP_KINDS,
    Ack,
    ClaimedJob,
    ClaimParams,
    ClaimResult,
    Fence,
    Heartbeat,
    JobRecord,
    Nack,
    NackKind,
    NewJob,
    StepPut,
    SweepAdvance,
    SweepCheckpoint,
    SweepFinish,
    SweepKind,
    SweepRecord,
    SweepStart,
    SweepStartAnswer,
)
from jobs_core.states import JobState
from jobs_core.testing.compare import Check, exactly_bytes
from jobs_core.testing.machine import (
    ID_PREFIXES,
    LONG_NAME,
    WORKERS,
    ParityMachine,
    aimed_fences,
    recent,
)

#: Declarations' names: one with quotes, a newline and non-ASCII text, one at the byte limit.
SWEEP_NAMES = ("users", "q'uo%te\n☃", LONG_NAME)
SCOPES = ("none", "t1", "☃ org")
ENVIRONMENTS = ("default", "staging", "prød")
#: Two declarations' checksums, and one at the checksum's byte limit.
CHECKSUMS = ("c1", "c2", exactly_bytes("c", "é", MAX_SWEEP_CHECKSUM_BYTES))
#: A cursor exactly at the byte limit (a JSON string of 2-, 3- and 4-byte characters).
LONG_CURSOR = '"' + exactly_bytes("", "é☃😀", MAX_SWEEP_CURSOR_BYTES - 2) + '"'
#: Cursors whose JSON types matter (`10` is not `10.0`); None: a batch that ends the source.
CURSORS = (
    '{"id": 10}',
    '{"id": 10.0}',
    None,
    '["é☃", null, true]',
    '{"after": "q\'uo%te\\n"}',
    LONG_CURSOR,
)
#: A batch's rows and refused rows: one past 32 bits, all far from summing past 2**53.
ROWS = (0, 1, 7, 1000, 2**40 + 1)
EXPECTED = (None, 0, 7, MAX_SWEEP_ROWS)
#: The code a failed run ends with: an `X_*` code, or any text the ABC takes as a name.
FAIL_CODES = ("X_BACKFILL_STALLED", "X_JOB_LEASE_LOST", "é'%\n")
#: How an aimed run ends (`sweep_run`).
ENDS = (
    "fail then retry",
    "reclaimed",
    "complete then retry",
    "lapsed",
    "complete",
    "fail then retry",
    "reclaimed",
    "lapsed",
    "acked",
    "cancelled",
    "heartbeat",
    "stays running",
)
#: An identity's fields a new run may change from a completed one's (None: none changes).
CHANGES = (None, None, None, "name", "scope", "environment", "checksum", "kind")
#: How the runs a new run meets ended (`sweep_blocked`): one completed, failed or running; or
#: two completed together, in one millisecond or one after the other (by run id).
BLOCKER_CASES = (
    "same ms",
    "smaller run last",
    "completed",
    "failed",
    "greater run last",
    "running",
    "completed",
    "same ms",
)
#: Whose fence writes run R's entry besides R's row (`sweep_other_run`): another row's (in a
#: run of its own), a twin row of R (as a saga's unwind job is), or R's row's own after its job
#: was requeued fresh or plainly.
OTHER_RUN_CASES = (
    "another row",
    "another row",
    "twin",
    "requeued fresh",
    "requeued fresh",
    "requeued",
)
#: Calls the ABC refuses before any write.
SWEEP_REFUSALS = (
    "unknown kind",
    "checksum too long",
    "empty run id",
    "scope with a NUL",
    "expected below 0",
    "fence count 0",
    "batch 0",
    "span 0",
    "span past its batch",
    "rows below 0",
    "cursor too long",
    "cursor not JSON",
    "cursor with a NUL",
    "checkpoint of two fences",
    "checkpoint of an empty step name",
    "checkpoint of a step output not JSON",
    "completed with an error",
    "failed without an error",
    "unknown status",
    "list limit 0",
    "list limit past the cap",
    "list of an empty name",
)


@dataclass(frozen=True, slots=True)
class Identity:
    """What names one sweep: a completed run with the same name, scope, environment and
    checksum blocks a new one (the kind is recorded, not compared)."""

    name: str
    scope: str
    environment: str
    kind: SweepKind
    checksum: str

    def changed(self, field: str | None) -> Identity:
        """This identity with `field` given another value of its pool (None: as it is)."""
        if field is None:
            return self
        pool: tuple[str, ...] = {
            "name": SWEEP_NAMES,
            "scope": SCOPES,
            "environment": ENVIRONMENTS,
            "kind": SWEEP_KINDS,
            "checksum": CHECKSUMS,
        }[field]
        value = getattr(self, field)
        # A value of no pool (a checksum a rule made up) gives way to the pool's first.
        after = pool[(pool.index(value) + 1) % len(pool)] if value in pool else pool[0]
        # A pool's values are the field's: `kind` draws from `SWEEP_KINDS`.
        changes: dict[str, Any] = {field: after}
        return replace(self, **changes)


def identity_of(e: SweepRecord) -> Identity:
    return Identity(e.name, e.scope, e.environment, e.kind, e.checksum)


identities = st.builds(
    Identity,
    # The long values now and then, so that the short ones still collide.
    name=st.sampled_from((*SWEEP_NAMES[:2], *SWEEP_NAMES)),
    scope=st.sampled_from(SCOPES),
    environment=st.sampled_from(ENVIRONMENTS),
    kind=st.sampled_from(SWEEP_KINDS),
    checksum=st.sampled_from((*CHECKSUMS[:2], *CHECKSUMS)),
)


def _other(worker: str) -> str:
    return WORKERS[1] if worker == WORKERS[0] else WORKERS[0]


class SweepRules(ParityMachine):
    """The sweep family, over the job family's rows and fences."""

    FAMILY = "sweeps"
    #: Batches are recorded by `sweep_checkpoint` (with a step) rather than `sweep_advance`.
    _checkpointing = False

    # -- random calls -------------------------------------------------------------------------

    @precondition(lambda self: self.capabilities.sweeps)
    @rule(
        op=st.sampled_from(
            ("start", "start", "advance", "checkpoint", "finish", "list", "refused")
        ),
        pick=recent,
        who=aimed_fences,
        run=st.sampled_from(("own", "own", "own", "entry", "other row", "fresh")),
        like=st.sampled_from((None, None, *CHANGES)),
        ident=identities,
        prefix=st.sampled_from(ID_PREFIXES),
        expected=st.sampled_from(EXPECTED),
        which=st.sampled_from(("running", "running", "any")),
        fence=st.sampled_from(("holder", "holder", "holder", "past", "skewed", "other row")),
        batch=st.sampled_from(
            ("next", "next", "next", "replay", "skip", "first", "window", "window", "overlap")
        ),
        rows=st.sampled_from(ROWS),
        cursor=st.sampled_from(CURSORS),
        status=st.sampled_from(("completed", "completed", "failed")),
        code=st.sampled_from(FAIL_CODES),
        limit=st.sampled_from((1, 2, 3, MAX_SWEEP_LIST)),
        by_name=st.booleans(),
        refusal=st.sampled_from(SWEEP_REFUSALS),
    )
    def sweep(
        self,
        op: str,
        pick: int,
        who: str,
        run: str,
        like: str | None,
        ident: Identity,
        prefix: str,
        expected: int | None,
        which: str,
        fence: str,
        batch: str,
        rows: int,
        cursor: str | None,
        status: str,
        code: str,
        limit: int,
        by_name: bool,
        refusal: str,
    ) -> None:
        """One ledger call (one rule, so the walk keeps its steps for the aimed ones): a start
        under a running row's fence or a near miss of it, for its own run, an entry's, another
        row's or a fresh one, as a drawn sweep or like an entry's; an advance or a finish of an
        entry (running, mostly) under its holder's fence, a stale, skewed or another row's one,
        for the next batch, a replayed or a skipped one, a window of the next batches or one
        overlapping the last recorded; a listing; a refused call."""
        if op == "start":
            fences = self._aimed_fence(pick, who)
            if not fences:
                return
            f = fences[0]
            run_id = self._start_run_id(run, f, pick, prefix)
            if like is not None or run == "entry":
                ident = self._identity_like(pick, like) or ident
            self._ledger_start(f, run_id, ident, expected)
        elif op in ("advance", "checkpoint", "finish"):
            e = self._ledger_entry(which, pick)
            if e is None:
                return
            f = self._write_fence(e, fence, pick)
            if op != "finish":
                number, span = self._batch_number(e, batch)
                with self._recording(op):
                    self._ledger_advance(f, e.run_id, number, rows, rows // 2, cursor, span)
            else:
                self._ledger_finish(f, e.run_id, status, code)
        elif op == "list":
            self._ledger_list(self._ledger_name(pick) if by_name else None, limit)
        else:
            self._ledger_refused(refusal, pick)

    def _start_run_id(self, run: str, f: Fence, pick: int, prefix: str) -> str:
        """The run id a start names: the fenced row's own, an entry's, another row's, a fresh
        one."""
        r = self.model.rows.get(f.job_id)
        entries = list(self.model.sweeps)
        if run == "entry" and entries:
            return entries[-1 - pick % len(entries)]
        if run == "other row":
            others = [o.run_id for o in self.model.rows.values() if o.id != f.job_id]
            if others:
                self._note("sweep start for another row's run")
                return others[-1 - pick % len(others)]
        if run == "own" and r is not None:
            return r.run_id
        return self._fresh_sweep_run(prefix)

    def _identity_like(self, pick: int, change: str | None) -> Identity | None:
        """An entry's identity (a completed one's, mostly), with `change` changed."""
        entries = list(self.model.sweeps.values())
        done = [e for e in entries if e.status == "completed"]
        pool = done if done and pick % 4 else entries
        if not pool:
            return None
        return identity_of(pool[-1 - pick % len(pool)]).changed(change)

    def _ledger_entry(self, which: str, pick: int) -> SweepRecord | None:
        entries = list(self.model.sweeps.values())
        running = [e for e in entries if e.status == "running"]
        pool = running if which == "running" and running else entries
        return pool[-1 - pick % len(pool)] if pool else None

    def _write_fence(self, e: SweepRecord, how: str, pick: int) -> Fence:
        """The fence a write to `e` presents: the one its run's running row holds (as the run's
        body does), the latest one a claim handed out for its job (stale once reclaimed), that
        holder's skewed (another worker, a count off by one), or another running row's."""
        holder = self._run_holder(e.run_id) or self._job_holder(e.job_id)
        past = [f for f in self.fences if f.job_id == e.job_id]
        if how == "past" and past:
            return past[-1]
        if how == "other row":
            others = [
                Fence(r.id, r.claims, r.claimed_by)
                for r in self._held_rows()
                if r.claimed_by is not None and r.id != e.job_id
            ]
            if others:
                self._note("sweep write under another row's fence")
                return others[-1 - pick % len(others)]
        base = holder or (past[-1] if past else Fence(e.job_id, 1, WORKERS[0]))
        if how == "skewed":
            return [
                replace(base, worker_id=_other(base.worker_id)),
                replace(base, claims=base.claims + 1),
                replace(base, claims=base.claims - 1 if base.claims > 1 else 2),
            ][pick % 3]
        return base

    def _batch_number(self, e: SweepRecord, how: str) -> tuple[int, int]:
        """The last batch an advance of `how` records, and its span."""
        if how == "replay" and e.batches:
            return e.batches, 1
        if how == "skip":
            return e.batches + 2, 1
        if how == "first":
            return 1, 1
        if how == "window":
            return e.batches + 3, 3
        if how == "overlap" and e.batches:
            # Batches `batches` to `batches + 2`: the last one recorded, then two new ones.
            return e.batches + 2, 3
        return e.batches + 1, 1

    def _ledger_name(self, pick: int) -> str:
        names = sorted({e.name for e in self.model.sweeps.values()}) or list(SWEEP_NAMES)
        return names[pick % len(names)]

    # -- the edges, aimed at --------------------------------------------------------------------

    @precondition(lambda self: self.capabilities.sweeps)
    @rule(
        ident=identities,
        prefix=st.sampled_from(ID_PREFIXES),
        batches=st.integers(0, 3),
        twist=st.sampled_from(
            (
                None,
                "replay",
                "replay",
                "skip",
                "first again",
                "window",
                "window replayed",
                "overlap",
            )
        ),
        end=st.sampled_from(ENDS),
        delta=st.sampled_from((0, 0, 1)),
        cursors=st.lists(st.sampled_from(CURSORS), min_size=4, max_size=4),
        rows=st.sampled_from(ROWS),
        expected=st.sampled_from(EXPECTED),
        via=st.sampled_from(("checkpoint", "checkpoint", "advance")),
    )
    def sweep_run(
        self,
        ident: Identity,
        prefix: str,
        batches: int,
        twist: str | None,
        end: str,
        delta: int,
        cursors: list[str | None],
        rows: int,
        expected: int | None,
        via: str,
    ) -> None:
        """One run of a sweep, as a factory writes it: started under its claim, `batches`
        batches recorded (with `twist`, the last one replayed with other counts, a batch
        skipped, the first one again; a window of two batches, replayed, or one of three
        overlapping the last batch recorded), then `end`: completed; failed, then retried by a
        later attempt of the run (the failed entry resumes, its batches kept) and completed;
        completed, then retried (its own later attempt finds it completed, and can write
        nothing); its lease lapsed (`delta` ms past its end) and reclaimed by another worker
        (the old fence writes nothing, the new holder resumes); lapsed with nobody claiming (it
        still holds); its row acked or cancelled first; a heartbeat between batches. Its batches
        recorded `via` checkpoints (a step each) or advances alone."""
        with self._recording(via):
            self._sweep_run(ident, prefix, batches, twist, end, delta, cursors, rows, expected)

    def _sweep_run(
        self,
        ident: Identity,
        prefix: str,
        batches: int,
        twist: str | None,
        end: str,
        delta: int,
        cursors: list[str | None],
        rows: int,
        expected: int | None,
    ) -> None:
        job = self._sweep_row(prefix)
        if job is None:
            return
        f, run = job.fence, job.run_id
        if not self._opened_entry(self._ledger_start(f, run, ident, expected)):
            # A completed run of that sweep blocks it: a changed declaration is a new sweep.
            self._serial += 1
            ident = replace(ident, checksum=f"c{self._serial}")
            if not self._opened_entry(self._ledger_start(f, run, ident, expected)):
                return
        for b in range(1, batches + 1):
            self._ledger_advance(f, run, b, rows, b % 2, cursors[b % 4])
        done = self.model.sweeps[run].batches
        if twist == "replay" and done:
            self._ledger_advance(f, run, done, rows + 1, 1, cursors[0])
        elif twist == "skip":
            self._ledger_advance(f, run, done + 2, rows, 0, cursors[1])
        elif twist == "first again" and done:
            self._ledger_advance(f, run, 1, rows, 0, cursors[2])
        elif twist in ("window", "window replayed"):
            self._ledger_advance(f, run, done + 2, rows, 1, cursors[1], span=2)
            if twist == "window replayed":
                self._ledger_advance(f, run, done + 2, rows + 1, 0, cursors[2], span=2)
        elif twist == "overlap" and done:
            self._ledger_advance(f, run, done + 2, rows, 0, cursors[2], span=3)
        self._end_run(end, job, ident, expected, delta, cursors[3])

    def _end_run(
        self,
        end: str,
        job: ClaimedJob,
        ident: Identity,
        expected: int | None,
        delta: int,
        cursor: str | None,
    ) -> None:
        f, run = job.fence, job.run_id
        if end in ("complete", "complete then retry"):
            self._ledger_finish(f, run, "completed")
        elif end == "fail then retry":
            self._ledger_finish(f, run, "failed", FAIL_CODES[delta])
        if end in ("complete", "fail then retry"):
            # Ended, its fence still held: the entry takes no batch and no other end.
            self._ledger_advance(f, run, self._next_batch(run), 1, 0, cursor)
            other = "failed" if end == "complete" else "completed"
            self._ledger_finish(f, run, other, FAIL_CODES[2])
        if end in ("fail then retry", "complete then retry"):
            # The body fails after the ledger's write: its attempt is retried, same run.
            self._nack([Nack(f, NackKind.RETRY, self.now, self.now, "boom")])
            again = self._claim_alone(job.queue, _other(f.worker_id))
            if again is None:
                return
            self._ledger_start(again.fence, run, ident, expected)
            self._ledger_advance(f, run, self._next_batch(run), 1, 0, cursor)
            self._ledger_advance(again.fence, run, self._next_batch(run), 1, 0, cursor)
            self._ledger_finish(again.fence, run, "completed")
        elif end in ("reclaimed", "lapsed"):
            self.now = max(self.now, job.lease_until_ms + delta)
            if end == "lapsed":
                self._ledger_advance(f, run, self._next_batch(run), 1, 0, cursor)
                self._ledger_finish(f, run, "completed")
                return
            again = self._claim_alone(job.queue, _other(f.worker_id))
            self._ledger_advance(f, run, self._next_batch(run), 1, 0, cursor)
            self._ledger_finish(f, run, "completed")
            if again is not None:
                self._ledger_start(again.fence, run, ident, expected)
                self._ledger_advance(again.fence, run, self._next_batch(run), 1, 0, cursor)
        elif end == "acked":
            self._ack([Ack(f, self.now, '"done"')])
            self._ledger_finish(f, run, "completed")
        elif end == "cancelled":
            if self.capabilities.operator:
                self._both(
                    "job_cancel",
                    functools.partial(self.model.job_cancel, f.job_id, self.now),
                    functools.partial(self.driver.job_cancel, f.job_id, self.now),
                )
            else:
                self._nack([Nack(f, NackKind.FAIL, self.now, error="boom")])
            self._ledger_advance(f, run, self._next_batch(run), 1, 0, cursor)
        elif end == "heartbeat":
            self.now += 1 + delta
            self._heartbeat([Heartbeat(f, 1000, self.now)])
            self._ledger_advance(f, run, self._next_batch(run), 1, 0, cursor)

    @precondition(lambda self: self.capabilities.sweeps)
    @rule(
        ident=identities,
        case=st.sampled_from(BLOCKER_CASES),
        change=st.sampled_from(CHANGES),
        prefixes=st.tuples(*[st.sampled_from(ID_PREFIXES)] * 3),
        then=st.sampled_from((None, "completed", "failed")),
        gap=st.sampled_from((0, 1, 1000)),
    )
    def sweep_blocked(
        self,
        ident: Identity,
        case: str,
        change: str | None,
        prefixes: tuple[str, str, str],
        then: str | None,
        gap: int,
    ) -> None:
        """A run of a sweep ends as `case` says — completed, failed, still running; or two runs
        of it, both started before either ended, complete in one millisecond, or the greater or
        the smaller run id finishing last —; `gap` ms on, a new run starts as the same sweep
        with `change` changed (any field after one completed run, else its kind alone): only a
        completed run of the same name, scope, environment and checksum blocks it — whatever
        its kind —, the one finished last, ties by the greater run id; a failed or running one
        never does. With `then`, the new run ends too."""
        first = self._sweep_row(prefixes[0])
        if first is None:
            return
        if not self._opened_entry(self._ledger_start(first.fence, first.run_id, ident, None)):
            # Blocked already: a sweep of its own from here.
            self._serial += 1
            ident = replace(ident, checksum=f"b{self._serial}")
            if not self._opened_entry(self._ledger_start(first.fence, first.run_id, ident, None)):
                return
        if case != "completed":
            # A run that blocks nothing, or two that do: met as the same sweep (by kind aside).
            change = change if change in (None, "kind") else None
        if case in ("completed", "failed"):
            self._ledger_finish(first.fence, first.run_id, case, FAIL_CODES[0])
        elif case != "running":
            second = self._sweep_row(prefixes[1])
            if second is None or not self._opened_entry(
                self._ledger_start(second.fence, second.run_id, ident, None)
            ):
                return
            low, high = sorted((first, second), key=lambda j: j.run_id)
            for i, job in enumerate([high, low] if case == "smaller run last" else [low, high]):
                self.now += 1 if i and case != "same ms" else 0
                self._ledger_finish(job.fence, job.run_id, "completed")
        self.now += gap
        third = self._sweep_row(prefixes[2])
        if third is None:
            return
        answer = self._ledger_start(third.fence, third.run_id, ident.changed(change), None)
        if then is not None and self._opened_entry(answer):
            self._ledger_finish(third.fence, third.run_id, then, FAIL_CODES[1])

    @precondition(lambda self: self.capabilities.sweeps)
    @rule(
        ties=st.integers(0, 3),
        ident=identities,
        prefixes=st.lists(st.sampled_from(ID_PREFIXES), min_size=3, max_size=3),
        by_name=st.booleans(),
        limit=st.sampled_from((1, 1, 2, 3)),
        twin=st.sampled_from((False, False, True)),
    )
    def sweep_list_ties(
        self,
        ties: int,
        ident: Identity,
        prefixes: list[str],
        by_name: bool,
        limit: int,
        twin: bool,
    ) -> None:
        """Open `ties` entries in this very millisecond, each the run of a row of its own (run
        ids of code points whose order no collation keeps; with `twin`, the first opened by a
        second row of its run, enqueued after it, as a saga's unwind job holds the saga's run:
        the entry's job is that twin's, the fence's), then list the ledger (or one name's
        entries) with a limit that cuts through them: ties by the greater run id."""
        # A sweep of its own, so that no completed run blocks these entries.
        self._serial += 1
        ident = replace(ident, checksum=f"tie{self._serial}")
        jobs = [self._sweep_job(prefix) for prefix in prefixes[:ties]]
        if twin and jobs:
            jobs.append(self._sweep_job(prefixes[-1], run_id=jobs[0].run_id))
        claimed = self._claimed_together(jobs)
        # By run: the twin, enqueued last, is the one whose fence opens its run.
        fences = {j.run_id: claimed[j.id].fence for j in jobs if j.id in claimed}
        for job in jobs[:ties]:
            if job.run_id in fences:
                got = self._ledger_start(fences[job.run_id], job.run_id, ident, None)
                if self._opened_entry(got) and fences[job.run_id].job_id != job.id:
                    self._note("sweep entry opened by a twin row of its run")
        self._ledger_list(ident.name if by_name else None, limit)

    @precondition(lambda self: self.capabilities.sweeps)
    @rule(
        ident=identities,
        prefixes=st.tuples(*[st.sampled_from(ID_PREFIXES)] * 2),
        case=st.sampled_from(OTHER_RUN_CASES),
        batches=st.integers(0, 2),
        flip=st.booleans(),
        cursor=st.sampled_from(CURSORS),
    )
    def sweep_other_run(
        self,
        ident: Identity,
        prefixes: tuple[str, str],
        case: str,
        batches: int,
        flip: bool,
        cursor: str | None,
    ) -> None:
        """A run writes only its own entry. Run R's row opens R's entry (for "twin", a second
        row of R enqueued after it does when `flip`: the entry's job is then the twin's) and
        records `batches` batches; then, by `case`: another row's held fence (one some rule
        holds, else one made for it) tries every write of R and a start of a run no row holds,
        and nothing lands, while R's row records on; the twin records a batch and ends R
        (`failed` when `flip`); the job — R's entry ended when `flip` (`completed` after an odd
        number of batches: a fresh run of the sweep is then blocked by it), else left running —
        is acked, requeued fresh (to a run id that extends R's when it fits: a compare of the
        first bytes takes it for R) or plainly, and claimed again: after a fresh requeue its new
        fence writes nothing of R and opens the new run's entry, after a plain one it resumes
        R's."""
        jobs = [self._sweep_job(prefixes[0])]
        if case == "twin":
            jobs.append(self._sweep_job(prefixes[1], run_id=jobs[0].run_id))
        claimed = self._claimed_together(jobs)
        if len(claimed) != len(jobs):
            return
        job, twin = claimed[jobs[0].id], claimed.get(jobs[-1].id) if case == "twin" else None
        f, run = job.fence, job.run_id
        opener = twin.fence if twin is not None and flip else f
        if not self._opened_entry(self._ledger_start(opener, run, ident, None)):
            # A completed run of that sweep blocks it: a changed declaration is a new sweep.
            self._serial += 1
            ident = replace(ident, checksum=f"o{self._serial}")
            if not self._opened_entry(self._ledger_start(opener, run, ident, None)):
                return
        if opener != f:
            self._note("sweep entry opened by a twin row of its run")
        for b in range(1, batches + 1):
            self._ledger_advance(f, run, b, 1, 0, cursor)
        if twin is not None:
            self._note("sweep writes of a run under its twin row's fence")
            self._ledger_advance(twin.fence, run, self._next_batch(run), 1, 0, cursor)
            self._ledger_finish(twin.fence, run, "failed" if flip else "completed")
        elif case == "another row":
            self._other_rows_writes(job, ident, cursor)
        elif self.capabilities.operator:
            ended = ("failed", "completed")[batches % 2] if flip else None
            self._requeued(job, ident, case, ended, cursor)

    def _other_rows_writes(self, job: ClaimedJob, ident: Identity, cursor: str | None) -> None:
        """Another row's held fence (a row some other rule holds, in a run of its own, else one
        made for it) writes nothing of `job`'s run, nor opens a run no row holds; `job`'s own
        fence records on."""
        run = job.run_id
        others = [
            Fence(r.id, r.claims, r.claimed_by)
            for r in self._running()
            if r.claimed_by is not None and r.run_id != run
        ]
        if not others:
            made = self._sweep_row(ID_PREFIXES[0])
            if made is None:
                return
            others.append(made.fence)
        other = others[-1]
        self._note("sweep writes of a run under another row's held fence")
        self._note("sweep start for another row's run")
        self._writes_of(other, run, ident, cursor)
        self._ledger_start(other, self._fresh_sweep_run("nobody-"), ident, None)
        self._ledger_advance(job.fence, run, self._next_batch(run), 1, 0, cursor)

    def _requeued(
        self, job: ClaimedJob, ident: Identity, case: str, ended: str | None, cursor: str | None
    ) -> None:
        """`job`'s entry `ended` (or left running), the job acked, requeued as `case` says (in
        its run, or in a fresh one whose id extends the old one's) and claimed again by the
        other worker: the new claim writes the old run's entry after a plain requeue; after a
        fresh one it writes nothing of it and opens its new run's."""
        f, run = job.fence, job.run_id
        if ended is not None:
            self._ledger_finish(f, run, ended, FAIL_CODES[1])
        self._ack([Ack(f, self.now, None)])
        # Settled: the run's own fence holds no more.
        self._ledger_start(f, run, ident, None)
        fresh = None if case == "requeued" else self._fresh_sweep_run("fresh-")
        extended = f"{run}·{fresh}"
        if fresh is not None and utf8_length(extended) <= MAX_NAME_BYTES:
            # The old run id a prefix of the new one (a fresh id of its own when it would not
            # fit): only a compare of the whole id tells them apart.
            fresh = extended
        got = self._both(
            "job_requeue",
            functools.partial(self.model.job_requeue, job.id, self.now, fresh_run_id=fresh),
            functools.partial(self.driver.job_requeue, job.id, self.now, fresh_run_id=fresh),
        )
        if isinstance(got, JobsError):
            return
        again = self._claim_alone(job.queue, _other(f.worker_id))
        if again is None:
            return
        if fresh is None:
            self._note("sweep writes of a run after a plain requeue")
            self._ledger_start(again.fence, run, ident, None)
            self._ledger_advance(again.fence, run, self._next_batch(run), 1, 0, cursor)
            return
        self._note("sweep writes of a row's old run after a fresh requeue")
        if fresh.startswith(run):
            self._note("sweep writes of a run its row's fresh run id extends")
        self._writes_of(again.fence, run, ident, cursor)
        if self._opened_entry(self._ledger_start(again.fence, fresh, ident, None)):
            self._note("sweep start of a row's fresh run after a requeue")
            self._ledger_advance(again.fence, fresh, 1, 1, 0, cursor)

    def _writes_of(self, f: Fence, run_id: str, ident: Identity, cursor: str | None) -> None:
        """Every write of run `run_id`'s entry under `f`: a start, the next batch, an end."""
        self._ledger_start(f, run_id, ident, None)
        self._ledger_advance(f, run_id, self._next_batch(run_id), 1, 0, cursor)
        self._ledger_finish(f, run_id, "completed")

    # -- calls on both, and what they reached -----------------------------------------------------

    def _ledger_start(
        self, f: Fence, run_id: str, ident: Identity, expected: int | None
    ) -> SweepStartAnswer | JobsError:
        start = SweepStart(
            fence=f,
            run_id=run_id,
            name=ident.name,
            scope=ident.scope,
            environment=ident.environment,
            kind=ident.kind,
            checksum=ident.checksum,
            expected=expected,
            now_ms=self.now,
        )
        before = self.model.sweeps.get(run_id)
        near = self._near_blockers(start)
        got = self._both(
            "sweep_start",
            functools.partial(self.model.sweep_start, start),
            functools.partial(self.driver.sweep_start, start),
        )
        if not isinstance(got, SweepStartAnswer):
            return got
        if got.blocked_by is not None:
            self._note("sweep start blocked by a completed run")
            if got.blocked_by.kind != start.kind:
                self._note("sweep start blocked though its kind differs")
            self._note_blocker(start, got.blocked_by)
        elif got.record is None:
            if self.model._held(f) is None:
                self._note("sweep start off the fence")
            else:
                self._note("sweep start under a held fence of another run")
        else:
            if before is not None:
                self._note(f"sweep start of its own {before.status} entry")
                if before.status == "running" and before.batches:
                    self._note("sweep start resumed a running entry with batches")
            else:
                self._note("sweep start opened an entry")
            for what in near:
                self._note(f"sweep start not blocked: {what}")
        return got

    def _near_blockers(self, start: SweepStart) -> list[str]:
        """What lets `start` through beside an entry of another run that is almost its
        blocker: that entry failed or running, or one identity field differing."""
        out = []
        mine = (start.name, start.scope, start.environment, start.checksum)
        for e in self.model.sweeps.values():
            if e.run_id == start.run_id:
                continue
            theirs = (e.name, e.scope, e.environment, e.checksum)
            if theirs == mine and e.status != "completed":
                out.append(f"a {e.status} run of the same sweep")
            elif e.status == "completed":
                differ = [
                    what
                    for what, a, b in zip(
                        ("name", "scope", "environment", "checksum"), mine, theirs, strict=True
                    )
                    if a != b
                ]
                if len(differ) == 1:
                    out.append(f"its {differ[0]} differs")
        return sorted(set(out))

    def _note_blocker(self, start: SweepStart, by: SweepRecord) -> None:
        rivals = [
            e
            for e in self.model.sweeps.values()
            if e.run_id not in (start.run_id, by.run_id)
            and e.status == "completed"
            and (e.name, e.scope, e.environment, e.checksum)
            == (start.name, start.scope, start.environment, start.checksum)
        ]
        if any(e.finished_at_ms == by.finished_at_ms for e in rivals):
            self._note("sweep start blocked: two runs completed in one millisecond")
        if any(e.run_id > by.run_id for e in rivals):
            self._note("sweep start blocked by the last finished, not the greatest run id")
        if start.run_id in self.model.sweeps:
            self._note("sweep start blocked beside its own entry")

    @contextlib.contextmanager
    def _recording(self, via: str) -> Iterator[None]:
        """Batches recorded inside are recorded `via` checkpoints (where the driver keeps steps)
        or advances alone."""
        self._checkpointing = via == "checkpoint" and self.capabilities.steps
        try:
            yield
        finally:
            self._checkpointing = False

    def _ledger_advance(
        self,
        f: Fence,
        run_id: str,
        batch: int,
        rows: int,
        errors: int,
        cursor: str | None,
        span: int = 1,
    ) -> object:
        """Record the `span` batches up to `batch` of run `run_id`: an advance alone, or a
        checkpoint (the step `batch:<n>` with it, its output telling the counts: a replay with
        other counts must keep the first record)."""
        advance = SweepAdvance(f, run_id, batch, rows, errors, cursor, self.now, span)
        first = batch - span + 1
        before = self.model.sweeps.get(run_id)
        how = "checkpoint" if self._checkpointing else "advance"
        step = StepPut(f, f"batch:{batch}", f'{{"rows": {rows}, "errors": {errors}}}', self.now)
        recorded = self.model.steps.get((run_id, step.name))
        if self._checkpointing:
            self.step_runs.add(run_id)
            checkpoint = SweepCheckpoint(step, advance)
            got = self._both(
                "sweep_checkpoint",
                functools.partial(self.model.sweep_checkpoint, checkpoint),
                functools.partial(self.driver.sweep_checkpoint, checkpoint),
            )
        else:
            got = self._both(
                "sweep_advance",
                functools.partial(self.model.sweep_advance, advance),
                functools.partial(self.driver.sweep_advance, advance),
            )
        if got is True and self._checkpointing and recorded is not None:
            self._note("sweep checkpoint of a recorded step, its first record kept")
        if not isinstance(got, bool) or before is None:
            if before is None:
                self._note(f"sweep {how} of no entry")
            return got
        held = self.model._held(f)
        if before.status != "running":
            self._note(f"sweep {how} of a {before.status} entry")
        elif held is None:
            self._note(f"sweep {how} off the fence")
            if first == before.batches + 1:
                self._note(f"sweep {how} of the next batch off the fence")
        elif held.run_id != run_id:
            if first == before.batches + 1:
                self._note(f"sweep {how} of the next batch under a held fence of another run")
        elif batch <= before.batches:
            self._note(f"sweep {how} of a replayed {'window' if span > 1 else 'batch'}")
        elif first <= before.batches:
            self._note(f"sweep {how} of a window overlapping the recorded batches")
        elif first > before.batches + 1:
            self._note(f"sweep {how} of a skipped batch")
        elif got:
            self._note(f"sweep {how} landed")
            if span > 1:
                self._note(f"sweep {how} of a window landed")
            self._note_lapsed(held, how)
            if held.id != before.job_id:
                self._note(f"sweep {how} landed under another row of its run")
            if cursor is None and before.cursor_json is not None:
                self._note(f"sweep {how} clearing the cursor")
            if cursor is not None and utf8_length(cursor) == MAX_SWEEP_CURSOR_BYTES:
                self._note(f"sweep {how} of a cursor at the byte limit")
        return got

    def _ledger_finish(
        self, f: Fence, run_id: str, status: str, code: str = FAIL_CODES[0]
    ) -> object:
        finish = SweepFinish(
            f,
            run_id,
            "completed" if status == "completed" else "failed",
            None if status == "completed" else code,
            self.now,
        )
        before = self.model.sweeps.get(run_id)
        got = self._both(
            "sweep_finish",
            functools.partial(self.model.sweep_finish, finish),
            functools.partial(self.driver.sweep_finish, finish),
        )
        if not isinstance(got, bool) or before is None:
            return got
        held = self.model._held(f)
        if before.status != "running":
            self._note(f"sweep finish of a {before.status} entry")
        elif held is None:
            self._note("sweep finish off the fence")
        elif held.run_id != run_id:
            self._note("sweep finish under a held fence of another run")
        elif got:
            self._note(f"sweep finish landed {status}")
            self._note_lapsed(held, "finish")
        return got

    def _note_lapsed(self, held: JobRecord, what: str) -> None:
        if held.lease_until_ms is not None and held.lease_until_ms <= self.now:
            self._note(f"sweep {what} under a lapsed lease nobody claimed")

    def _ledger_list(self, name: str | None, limit: int) -> object:
        got = self._both(
            "sweep_list",
            functools.partial(self.model.sweep_list, name, limit),
            functools.partial(self.driver.sweep_list, name, limit),
        )
        if isinstance(got, list):
            mine = [e for e in self.model.sweeps.values() if name is None or e.name == name]
            if name is not None:
                self._note("sweep list by name")
            if got and len(mine) > limit:
                last = got[-1]
                cut = [e for e in mine if e.run_id not in {g.run_id for g in got}]
                if any(e.started_at_ms == last.started_at_ms for e in cut):
                    self._note("sweep list cut through entries started in one millisecond")
        return got

    def _ledger_refused(self, kind: str, pick: int) -> None:
        """A call the ABC refuses: nothing is written (the state check sees)."""
        f = self._refusal_fence()
        run_id = self.model.rows[f.job_id].run_id if f.job_id in self.model.rows else "run-x"
        start = SweepStart(f, run_id, "users", "none", "default", "backfill", "c1", None, self.now)
        advance = SweepAdvance(f, run_id, 1, 1, 0, None, self.now)
        finish = SweepFinish(f, run_id, "completed", None, self.now)
        checkpoint = SweepCheckpoint(StepPut(f, "batch:1", "1", self.now), advance)
        calls: dict[
            str,
            SweepStart | SweepAdvance | SweepCheckpoint | SweepFinish | tuple[str | None, int],
        ] = {
            "unknown kind": replace(start, kind="purge"),  # type: ignore[arg-type]
            "checksum too long": replace(start, checksum=CHECKSUMS[2] + "c"),
            "empty run id": replace(start, run_id=""),
            "scope with a NUL": replace(start, scope="a\x00b"),
            "expected below 0": replace(start, expected=-1),
            "fence count 0": replace(start, fence=replace(f, claims=0)),
            "batch 0": replace(advance, batch=0),
            "span 0": replace(advance, span=0),
            "span past its batch": replace(advance, batch=2, span=3),
            "rows below 0": replace(advance, rows=-1),
            "cursor too long": replace(advance, cursor_json=LONG_CURSOR[:-1] + 'x"'),
            "cursor not JSON": replace(advance, cursor_json="NaN"),
            "cursor with a NUL": replace(advance, cursor_json='"a\\u0000b"'),
            "checkpoint of two fences": replace(
                checkpoint, advance=replace(advance, fence=replace(f, claims=f.claims + 1))
            ),
            "checkpoint of an empty step name": replace(
                checkpoint, step=replace(checkpoint.step, name="")
            ),
            "checkpoint of a step output not JSON": replace(
                checkpoint, step=replace(checkpoint.step, output_json="{")
            ),
            "completed with an error": replace(finish, error="X_BACKFILL_STALLED"),
            "failed without an error": replace(finish, status="failed"),
            "unknown status": replace(finish, status="running"),  # type: ignore[arg-type]
            "list limit 0": (None, 0),
            "list limit past the cap": (None, MAX_SWEEP_LIST + 1),
            "list of an empty name": ("", 1),
        }
        call = calls[kind]
        got: object
        if isinstance(call, SweepStart):
            got = self._both(
                "sweep_start(refused)",
                functools.partial(self.model.sweep_start, call),
                functools.partial(self.driver.sweep_start, call),
            )
        elif isinstance(call, SweepAdvance):
            got = self._both(
                "sweep_advance(refused)",
                functools.partial(self.model.sweep_advance, call),
                functools.partial(self.driver.sweep_advance, call),
            )
        elif isinstance(call, SweepCheckpoint):
            if not self.capabilities.steps:
                return
            got = self._both(
                "sweep_checkpoint(refused)",
                functools.partial(self.model.sweep_checkpoint, call),
                functools.partial(self.driver.sweep_checkpoint, call),
            )
        elif isinstance(call, SweepFinish):
            got = self._both(
                "sweep_finish(refused)",
                functools.partial(self.model.sweep_finish, call),
                functools.partial(self.driver.sweep_finish, call),
            )
        else:
            got = self._both(
                "sweep_list(refused)",
                functools.partial(self.model.sweep_list, *call),
                functools.partial(self.driver.sweep_list, *call),
            )
        assert isinstance(got, JobsError), f"the machine built a call nobody refuses: {kind}"

    # -- helpers --------------------------------------------------------------------------------

    def _opened_entry(self, answer: object) -> bool:
        return isinstance(answer, SweepStartAnswer) and answer.record is not None

    def _next_batch(self, run_id: str) -> int:
        e = self.model.sweeps.get(run_id)
        return 1 if e is None else e.batches + 1

    def _run_holder(self, run_id: str) -> Fence | None:
        """The fence of the running row of run `run_id`: what the run's body holds."""
        for r in self.model.rows.values():
            if r.run_id == run_id and r.state == JobState.RUNNING and r.claimed_by is not None:
                return Fence(r.id, r.claims, r.claimed_by)
        return None

    def _job_holder(self, job_id: str) -> Fence | None:
        r = self.model.rows.get(job_id)
        if r is None or r.state != JobState.RUNNING or r.claimed_by is None:
            return None
        return Fence(r.id, r.claims, r.claimed_by)

    def _fresh_sweep_run(self, prefix: str) -> str:
        """A run id no row holds, starting with `prefix` (a byte-limit prefix: at the limit)."""
        self._serial += 1
        return f"{prefix}{self._serial:04d}"

    def _sweep_job(self, prefix: str, run_id: str | None = None) -> NewJob:
        """A fresh row in a queue of its own (only these rules claim it), three attempts: the
        run a sweep is written under (`run_id`, another row's for a twin, else its own)."""
        job_id = self._fresh_id(prefix)
        if run_id is None:
            run_id = f"run-{job_id}"
        if utf8_length(run_id) > MAX_NAME_BYTES:
            # An id at the byte limit: its run id is as long (reversed, so still unique).
            run_id = job_id[::-1]
        return self._plain_job(job_id, f"sweep-{self._serial}", run_id=run_id)

    def _sweep_row(self, prefix: str) -> ClaimedJob | None:
        """A `_sweep_job` row of a run of its own, claimed now by the first worker."""
        job = self._sweep_job(prefix)
        return self._own_row(job, "a sweep's row")

    def _claimed_together(self, jobs: list[NewJob]) -> dict[str, ClaimedJob]:
        """`jobs` (`_sweep_job` rows) moved to one queue of their own, enqueued in one call and
        claimed in one pass by the first worker; the claimed by id."""
        if not jobs:
            return {}
        queue = jobs[-1].queue
        jobs = [replace(j, queue=queue) for j in jobs]
        self._both(
            "job_enqueue_many(a sweep's rows)",
            functools.partial(self.model.job_enqueue_many, jobs),
            functools.partial(self.driver.job_enqueue_many, jobs),
        )
        got = self._claim(ClaimParams((queue,), WORKERS[0], len(jobs), 1000, self.now))
        return {j.id: j for j in got.jobs} if isinstance(got, ClaimResult) else {}

    def _family_checks(self) -> list[Check]:
        checks = super()._family_checks()
        if self.capabilities.sweeps and self._walks("sweeps"):
            checks.append(
                (
                    "sweep_list",
                    functools.partial(self.model.sweep_list, None, MAX_SWEEP_LIST),
                    functools.partial(self.driver.sweep_list, None, MAX_SWEEP_LIST),
                )
            )
            # The steps of every run a checkpoint named, landed or not (a checkpoint off its
            # fence must leave them as they were).
            for run in sorted(self.step_runs):
                checks.append(
                    (
                        f"step_list({run!r})",
                        functools.partial(self.model.step_list, run),
                        functools.partial(self.driver.step_list, run),
                    )
                )
        return checks
