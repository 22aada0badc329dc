"""The step and event families' rules: steps recorded under fresh and stale fences, events
published (some for a parked run's wait, some stamped in the past, for its tenant, another one
or every one, some at its until's edge), found and purged; saga runs requeued in their run or as
fresh ones; the steps of every run that ever recorded one, and each event name's first live
event for each tenant, compared after each step. Only what the driver declares in
`capabilities()` runs.

The edges are aimed at, not left to luck: two runs parked on one event, a known event id
published again for a waiting run, events met at park time a millisecond before, at and after
their expiry and exactly at a wait's `since`, the clock stepped through an event's expiry before
a find, a purge or a park, and event ids whose order is not their publishing order.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from jobs_core.records import (
    Ack,
    ClaimParams,
    ClaimResult,
    EventRecord,
    EventWait,
    Nack,
    NackKind,
    NewJob,
    PurgeParams,
    RequeueParams,
    StepPut,
)
from jobs_core.semantics import SAGA_STEP
from jobs_core.testing.compare import Check
from jobs_core.testing.machine import (
    ALL_TENANTS,
    EVENT_DATA,
    EVENT_NAMES,
    EVENT_TENANTS,
    MATCHES,
    NAMES,
    RESULTS,
    STEP_NAMES,
    UNKNOWN_ID,
    WORKERS,
    FenceSpec,
    ParityMachine,
    aimed_fences,
    fence_specs,
    recent,
)

#: The queue of `requeue_saga`'s rows: no other rule claims from it.
SAGA_QUEUE = "sagas"
#: Event id prefixes, taken in turn: ids sort in another order than they were published.
EVENT_ID_PREFIXES = ("ev-", "E", "é", "a")
#: How an event met at park time was published (see `_before_park`).
EARLY_EVENTS = ("live", "at expiry", "just live")
#: Matches one event's data can meet together, and that data.
TWIN_MATCHES = ("{}", '{"order":1}', '{"x":true}')
BOTH_MATCHED = '{"order":1.0,"x":true}'


class DurableRules(ParityMachine):
    """The step and event families, over the job family's rows."""

    FAMILY = "durable"

    @precondition(lambda self: self.capabilities.steps)
    @rule(
        pick=recent,
        who=aimed_fences,
        fences=st.lists(fence_specs, max_size=2),
        step=st.sampled_from(STEP_NAMES),
        output=st.sampled_from(RESULTS[1:]),
    )
    def step_put(
        self, pick: int, who: str, fences: list[FenceSpec], step: str, output: str
    ) -> None:
        """Record a step under a running row's fence or a near miss of it, then under fences
        a claim handed out (held, stale or forged)."""
        aimed = [*self._aimed_fence(pick, who), *(self._fence(f) for f in fences)]
        puts = [StepPut(f, step, output, self.now) for f in aimed]
        got = self._put_steps(puts)
        if isinstance(got, list) and any(got):
            self._note("step recorded")

    @precondition(lambda self: self.capabilities.steps)
    @rule(
        worker=st.sampled_from(WORKERS),
        steps=st.lists(st.sampled_from(STEP_NAMES), min_size=1, max_size=3),
        then=st.sampled_from(("ack", "fail", "retry")),
        purge=st.sampled_from((True, True, False)),
    )
    def run_steps(self, worker: str, steps: list[str], then: str, purge: bool) -> None:
        """A run that records steps, and a millisecond later its first one again with another
        output (a replay: the first record stays), then ends — done, dead, or back for another
        attempt that finds them; with `purge`, every finished row is purged at once after it
        (a purged row takes its steps along)."""
        for job in self._claim_some(worker, 1):
            for replay in (False, True):
                names = steps[:1] if replay else steps
                self.now += replay
                self._put_steps(
                    [StepPut(job.fence, n, f'"{n}@{self.now}"', self.now) for n in names]
                )
            self._note("step recorded")
            if then == "ack":
                self._ack([Ack(job.fence, self.now)])
            else:
                kind = NackKind.FAIL if then == "fail" else NackKind.RETRY
                self._nack([Nack(job.fence, kind, self.now, self.now, "boom")])
        if purge and self.capabilities.retention:
            params = PurgeParams(self.now, 1000, 0, 0, 0, 0)
            self._both(
                "job_purge",
                lambda: self.model.job_purge(params),
                lambda: self.driver.job_purge(params),
            )

    @precondition(lambda self: self.capabilities.events)
    @rule(
        name=st.sampled_from(EVENT_NAMES),
        data=st.sampled_from(EVENT_DATA),
        ttl=st.sampled_from((60_000, 1000, 1, 7 * 24 * 3_600_000)),
        which=st.sampled_from(("new", "again", "answer", "new")),
        ago=st.sampled_from((0, 5000, 0)),
        scope=st.sampled_from(("own", *EVENT_TENANTS, ALL_TENANTS)),
    )
    def publish(
        self, name: str, data: str, ttl: int, which: str, ago: int, scope: str | None
    ) -> None:
        """Publish an event (a new id or a known one, maybe the data a parked run waits for),
        stamped now or `ago` ms back (a sender whose clock lags: not after a wait's `since`),
        for a tenant, for none or for every one ("own": the answered wait's tenant)."""
        waiting = self._waiting()
        tenant = None if scope == "own" else scope
        if which == "answer" and waiting:
            # An event a parked run waits for: its own match is data it matches.
            name, data = waiting[0].event, waiting[0].match_json
            if scope == "own":
                tenant = waiting[0].tenant_id
        self._publish(name, data, ttl, which, ago, tenant)

    @precondition(lambda self: self.capabilities.events)
    @rule(
        name=st.sampled_from(EVENT_NAMES),
        match=st.sampled_from(MATCHES),
        since=st.sampled_from((-3000, 0, -60_000, "published", "published + 1")),
        tenant=st.sampled_from(EVENT_TENANTS),
        until=st.sampled_from((None, None, 0, 1, -1000, -2999)),
        pick=recent,
    )
    def find_event(
        self,
        name: str,
        match: str,
        since: int | str,
        tenant: str | None,
        until: int | None,
        pick: int,
    ) -> None:
        """Look for an event for a tenant, since a moment ago or since exactly a stored event's
        publishing (or a millisecond after: then not that one), until now (or a moment ago)."""
        stored = sorted(self.model.events.values(), key=lambda e: (e.published_at_ms, e.id))
        if isinstance(since, str) and stored:
            e = stored[-1 - pick % len(stored)]
            name, at = e.name, e.published_at_ms + (since == "published + 1")
            tenant = tenant if e.all_tenants else e.tenant_id
            self._note("find since exactly an event's publishing")
        else:
            at = self.now + since if isinstance(since, int) else self.now
        until_ms = None if until is None else max(0, self.now + until)
        w = EventWait(name, match, max(0, at), tenant, until_ms)
        self._both(
            "event_find",
            lambda: self.model.event_find(w, self.now),
            lambda: self.driver.event_find(w, self.now),
        )

    @precondition(lambda self: self.capabilities.events)
    @rule(limit=st.sampled_from((1, 2, 10)))
    def purge_events(self, limit: int) -> None:
        self._event_purge(limit)

    def _event_purge(self, limit: int) -> None:
        """Purge expired events. When the limit cuts them, publish each expired one's id again
        and find it: a purged id is free again (stored anew), one left is not (an expired
        event is otherwise never seen, so this is where a purge's order shows)."""
        expired = [e for e in self.model.events.values() if e.expires_at_ms <= self.now]
        self._both(
            "event_purge",
            lambda: self.model.event_purge(self.now, limit),
            lambda: self.driver.event_purge(self.now, limit),
        )
        if len(expired) <= limit:
            return
        self._note("event purge cut by its limit")
        first = sorted(expired, key=lambda e: (e.expires_at_ms, e.id))[:limit]
        if first != sorted(expired, key=lambda e: e.id)[:limit]:
            self._note("event purge cut where id order is not expiry order")
        for e in expired:
            again = replace(
                e, data_json="{}", published_at_ms=self.now, expires_at_ms=self.now + 60_000
            )
            self._publish_event(again)
            w = EventWait(e.name, "{}", self.now, e.tenant_id)
            self._both(
                "event_find(a purged id published again)",
                functools.partial(self.model.event_find, w, self.now),
                functools.partial(self.driver.event_find, w, self.now),
            )

    @precondition(lambda self: self.capabilities.events)
    @rule(
        worker=st.sampled_from(WORKERS),
        wait=st.tuples(
            st.sampled_from(EVENT_NAMES),
            st.sampled_from(MATCHES),
            st.sampled_from((-5000, 0)),
            st.sampled_from(EVENT_TENANTS),
        ),
        timeout=st.sampled_from((3000, None)),
        until=st.sampled_from(("timeout", "timeout", 0, 1)),
        early=st.sampled_from((None, *EARLY_EVENTS)),
        then=st.sampled_from(("answer", "edge", "cancel first", "later", "republish first")),
    )
    def park_waiting(
        self,
        worker: str,
        wait: tuple[str, str, int, str | None],
        timeout: int | None,
        until: str | int,
        early: str | None,
        then: str,
    ) -> None:
        """Claim a row and park it waiting for an event for its tenant (until a timeout, or for
        good); the wait ends at the timeout, or exactly now or a millisecond on (its edge). With
        `early`, a matching event is published just before (`_before_park`): a live one must
        not let the park sleep past it (unless the wait ended by then), an expired one must.
        Unless `then` is "later", the wait is answered at once (`answer_wait`)."""
        for job in self._claim_some(worker, 1):
            run_at = None if timeout is None else self.now + timeout
            until_ms = run_at if until == "timeout" else self.now + int(until)
            w = EventWait(wait[0], wait[1], max(0, self.now + wait[2]), wait[3], until_ms)
            if early is not None:
                self._before_park(w, early)
            self._note("park waiting for an event")
            self._nack([Nack(job.fence, NackKind.PARK, self.now, run_at, wait=w)])
            self._read_parked(job.id)
            if then != "later" and job.id in dict(self._waiting_rows()):
                self._answer(job.id, w, None, then)

    @precondition(lambda self: self.capabilities.events and bool(self._waiting()))
    @rule(
        pick=st.integers(0, 3),
        decoy=st.sampled_from((None, *EVENT_DATA)),
        late=st.booleans(),
        then=st.sampled_from(
            ("answer", "edge", "cancel first", "answer", "stale only", "republish first")
        ),
        scope=st.sampled_from(("own", "all", "other", "own")),
    )
    def answer_wait(self, pick: int, decoy: str | None, late: bool, then: str, scope: str) -> None:
        """Publish for a parked run: first a copy of its event stamped before the wait began
        (never its event), and maybe a decoy of the same name (it may or may not match); then
        its event, for the run's tenant, another one or every one — unless `then` cancels the
        run first (a wait goes with its park), stops at the stale copy, stamps its event at
        the wait's until and then a millisecond before, or first publishes it under a stored id
        (which stores and wakes nothing). `late` publishes after the wait's timeout passed: its
        event no longer counts."""
        waiting = self._waiting_rows()
        job_id, w = waiting[pick % len(waiting)]
        if late:
            self.now += 3001
        self._answer(job_id, w, decoy, then, scope)

    def _answer(
        self, job_id: str, w: EventWait, decoy: str | None, then: str, scope: str = "own"
    ) -> None:
        """Copies of `w`'s event that are never its event — stamped just before the wait
        began, for the other tenant, at the wait's until — maybe a decoy, then its event, for
        the run's tenant or for every one (`scope` "other": the copy only) — unless `then`
        cancels the run first, stops at the copies, or stamps it a ms before the until (the
        last instant that counts). The copies for another tenant and at the until live 1 ms:
        they test this wait, and leave later parks alone."""
        own = w.tenant_id
        other = next(t for t in EVENT_TENANTS if t != own)
        self._publish(w.event, w.match_json, 60_000, "new", self.now - w.since_ms + 1, own)
        self._publish(w.event, w.match_json, 1, "new", 0, other)
        if w.until_ms is not None:
            self._note("event stamped at a wait's until")
            self._publish(w.event, w.match_json, 1, "new", self.now - w.until_ms, own)
        if decoy is not None:
            self._publish(w.event, decoy, 60_000, "new", 0, own)
        if then == "stale only":
            return
        if then == "edge" and w.until_ms is not None:
            self._note("event stamped a ms before a wait's until")
            self._publish(w.event, w.match_json, 60_000, "new", self.now - w.until_ms + 1, own)
            return
        if then == "cancel first" and self.capabilities.operator:
            self._both(
                "job_cancel",
                lambda: self.model.job_cancel(job_id, self.now),
                lambda: self.driver.job_cancel(job_id, self.now),
            )
        if then == "republish first" and self.model.events:
            self._note("republish of a stored id a parked run's wait matches")
            self._publish(w.event, w.match_json, 60_000, "again", 0, own)
        if scope != "other":
            tenant = ALL_TENANTS if scope == "all" else own
            self._publish(w.event, w.match_json, 60_000, "new", 0, tenant)

    @precondition(lambda self: self.capabilities.events)
    @rule(
        name=st.sampled_from(EVENT_NAMES),
        matches=st.tuples(st.sampled_from(TWIN_MATCHES), st.sampled_from(TWIN_MATCHES)),
        data=st.sampled_from((BOTH_MATCHED, BOTH_MATCHED, *EVENT_DATA)),
        timeout=st.sampled_from((3000, None)),
        tenant=st.sampled_from(EVENT_TENANTS),
    )
    def two_waiters(
        self,
        name: str,
        matches: tuple[str, str],
        data: str,
        timeout: int | None,
        tenant: str | None,
    ) -> None:
        """Claim two rows and park both waiting for one event name for one tenant, since now
        (matches one event's data may meet together), then publish one such event now: every
        parked run it matches wakes, not only the first."""
        run_at = None if timeout is None else self.now + timeout
        for job, match in zip(self._claim_some(WORKERS[1], 2), matches, strict=False):
            w = EventWait(name, match, self.now, tenant, run_at)
            self._nack([Nack(job.fence, NackKind.PARK, self.now, run_at, wait=w)])
            self._read_parked(job.id)
        if len(self._waiting()) > 1:
            self._note("event published for two waiting runs")
        self._publish(name, data, 60_000, "new", 0, tenant)

    @precondition(
        lambda self: (
            self.capabilities.events
            and any(e.expires_at_ms >= self.now for e in self.model.events.values())
        )
    )
    @rule(
        pick=recent,
        delta=st.sampled_from((0, 0, 1)),
        then=st.sampled_from(("find", "purge", "park")),
        limit=st.sampled_from((1, 1, 2, 10)),
    )
    def at_event_expiry(self, pick: int, delta: int, then: str, limit: int) -> None:
        """Step through a stored event's expiry — a millisecond before it, then at it (or, by
        `delta`, just after) — and at each, find it (a wait since exactly its publishing),
        purge expired events (two more among them, whose ids sort against their expiries), or
        park a run waiting for it: live until that very millisecond, gone from it on."""
        ahead = sorted(
            (e for e in self.model.events.values() if e.expires_at_ms >= self.now),
            key=lambda e: (e.expires_at_ms, e.id),
        )
        e = ahead[pick % len(ahead)]
        for at in (e.expires_at_ms - 1, e.expires_at_ms + delta):
            if at >= self.now:
                self.now = at
                if at == e.expires_at_ms:
                    self._note(f"event {then} at an event's exact expiry")
                self._at_event(e, then, limit)

    def _at_event(self, e: EventRecord, then: str, limit: int) -> None:
        # A wait an event for every tenant meets: any tenant's.
        w = EventWait(e.name, "{}", e.published_at_ms, e.tenant_id)
        if then == "find":
            self._both(
                "event_find",
                lambda: self.model.event_find(w, self.now),
                lambda: self.driver.event_find(w, self.now),
            )
        elif then == "purge":
            # Two more expired events, the sooner expired one's id sorting last.
            self._serial += 1
            for prefix, ttl in (("a", 2), ("z", 1)):
                at = self.now - 2
                expired = replace(e, id=f"{prefix}{self._serial:04d}", data_json="{}")
                self._publish_event(replace(expired, published_at_ms=at, expires_at_ms=at + ttl))
            self._event_purge(limit)
        else:
            for job in self._claim_some(WORKERS[0], 1):
                self._nack([Nack(job.fence, NackKind.PARK, self.now, None, wait=w)])
                self._read_parked(job.id)

    @precondition(lambda self: self.capabilities.steps)
    @rule(
        worker=st.sampled_from(WORKERS),
        saga=st.sampled_from((True, False, True)),
        end=st.sampled_from(("dead", "ack", "failed", "cancel", "dead")),
        how=st.sampled_from(("fresh", "plain", "bulk fresh", "bulk plain")),
        again=st.booleans(),
    )
    def requeue_saga(self, worker: str, saga: bool, end: str, how: str, again: bool) -> None:
        """A run records a step (a saga the saga mark first), ends — dead, failed, done or
        cancelled — and is requeued in its run or as a fresh one, alone or in a bulk call that
        names it twice beside an unknown id; with `again` it is claimed and records a step in
        the run it got. A plain requeue of a saga that failed for good is refused, and the
        operator then requeues it fresh (so no refused row lingers for the other rules); a
        fresh requeue leaves its steps to its unwinding, any other deletes the steps it left.

        Its rows live in a queue of their own (`SAGA_QUEUE`), which no other rule claims: the
        rule neither takes the rows the others work on nor leaves them its own to claim."""
        job_id = self._fresh_id("saga-")
        saga_row = NewJob(
            id=job_id,
            run_id=f"run-{job_id}",
            name=NAMES[0],
            queue=SAGA_QUEUE,
            tenant_id=None,
            idempotency_key=job_id,
            input_json="{}",
            priority=0,
            run_at_ms=self.now,
            max_attempts=1,
            created_at_ms=self.now,
        )
        self._both(
            "job_enqueue",
            lambda: self.model.job_enqueue(saga_row),
            lambda: self.driver.job_enqueue(saga_row),
        )
        got = self._claim(ClaimParams((SAGA_QUEUE,), worker, 1, 1000, self.now))
        if not isinstance(got, ClaimResult):
            return
        for job in got.jobs:
            puts = [StepPut(job.fence, "charge", f'"{job.id}@{self.now}"', self.now)]
            if saga:
                puts.insert(0, StepPut(job.fence, SAGA_STEP, '{"first":"charge"}', self.now))
            self._put_steps(puts)
            self._note("step recorded")
            if end == "ack":
                self._ack([Ack(job.fence, self.now)])
            elif end == "cancel":
                self._both(
                    "job_cancel",
                    functools.partial(self.model.job_cancel, job.id, self.now),
                    functools.partial(self.driver.job_cancel, job.id, self.now),
                )
            else:
                fail = Nack(job.fence, NackKind.FAIL, self.now, error="boom")
                self._nack([replace(fail, dead_letter=end == "dead")])
            r = self.model.rows[job.id]
            if self.model._unwound(r):
                self._note("requeue of an unwound saga")
            fresh = how.endswith("fresh")
            if not how.startswith("bulk"):
                self._requeue(job.id, fresh)
            else:
                ids = (job.id, UNKNOWN_ID, job.id)
                runs = tuple(self._fresh_run_id() for _ in ids) if fresh else None
                params = RequeueParams(ids, self.now, runs)
                self._both(
                    "job_requeue_many",
                    functools.partial(self.model.job_requeue_many, params),
                    functools.partial(self.driver.job_requeue_many, params),
                )
            if self.model._unwound(self.model.rows[job.id]):
                self._requeue(job.id, fresh=True)
            if again:
                claimed = self._claim(ClaimParams((job.queue,), worker, 4, 1000, self.now))
                if isinstance(claimed, ClaimResult):
                    self._put_steps(
                        [StepPut(j.fence, "ship", '"again"', self.now) for j in claimed.jobs]
                    )

    # -- helpers --------------------------------------------------------------------------------

    def _before_park(self, wait: EventWait, how: str = "live") -> None:
        """Publish an event `wait` matches before the park: "live" now; "at expiry" published at
        the wait's very `since` and expiring now (the park must not meet it); "just live" the
        same but expiring a millisecond later (it must)."""
        self._note(f"event published before its wait ({how})")
        if how == "live":
            self._publish(wait.event, wait.match_json, 60_000, "new", 0, wait.tenant_id)
            return
        expires = self.now + (how == "just live")
        at = wait.since_ms
        e = EventRecord(self._event_id(), wait.event, wait.match_json, at, expires, wait.tenant_id)
        self._publish_event(e)

    def _waiting_rows(self) -> list[tuple[str, EventWait]]:
        """The rows parked now under the claim that parked them, with their waits."""
        return [
            (job_id, w)
            for job_id in sorted(self.model.waits)
            if (w := self.model.wait_of(job_id)) is not None
        ]

    def _waiting(self) -> list[EventWait]:
        return [w for _, w in self._waiting_rows()]

    def _publish(
        self,
        name: str,
        data: str,
        ttl: int,
        which: str,
        ago: int = 0,
        tenant: str | None = None,
    ) -> None:
        """Publish an event stamped `ago` ms back for `tenant` (`ALL_TENANTS`: every one)."""
        if which == "again" and self.model.events:
            event_id = sorted(self.model.events)[self._serial % len(self.model.events)]
        else:
            event_id = self._event_id()
        at = max(0, self.now - ago)
        everyone = tenant == ALL_TENANTS
        e = EventRecord(event_id, name, data, at, at + ttl, None if everyone else tenant, everyone)
        self._publish_event(e)

    def _event_id(self) -> str:
        """A fresh event id; taken in turn from `EVENT_ID_PREFIXES`, so id order is not
        publishing order."""
        self._serial += 1
        return f"{EVENT_ID_PREFIXES[self._serial % len(EVENT_ID_PREFIXES)]}{self._serial:04d}"

    def _publish_event(self, e: EventRecord) -> int:
        """Publish `e` on both; answers how many runs it woke (0 when refused)."""
        woken = self._both(
            "event_publish",
            lambda: self.model.event_publish(e),
            lambda: self.driver.event_publish(e),
        )
        if not isinstance(woken, int):
            return 0
        if woken:
            self._note("event woke a parked run")
        if woken > 1:
            self._note("one event woke several runs")
        return woken

    def _family_checks(self) -> list[Check]:
        checks = super()._family_checks()
        if not self._walks("durable"):
            return checks
        if self.capabilities.steps:
            # Every run that ever recorded a step (a removed or purged row's run must come back
            # empty), and one that never did.
            self.step_runs.update(run for run, _ in self.model.steps)
            for run in sorted(self.step_runs | {"run-unknown"}):
                checks.append(
                    (
                        f"step_list({run!r})",
                        functools.partial(self.model.step_list, run),
                        functools.partial(self.driver.step_list, run),
                    )
                )
        if self.capabilities.events:
            # The rows compared by `job_get_many` show their waits: count the walks that compare
            # one still waiting, and one whose wait ended (claimed, woken, cancelled, removed).
            waits = [self.model.wait_of(i) for i in sorted(self.model.waits)]
            if any(w is not None for w in waits):
                self._note("row compared while it waits")
            if any(w is None for w in waits):
                self._note("row compared after its wait ended")
            # The first live event of each name for each tenant: a purge or an expiry that went
            # wrong shows, and so does an event stored without its tenant.
            for name in EVENT_NAMES:
                for tenant in EVENT_TENANTS:
                    w = EventWait(name, "{}", 0, tenant)
                    checks.append(
                        (
                            f"event_find({name!r}, tenant {tenant!r})",
                            functools.partial(self.model.event_find, w, self.now),
                            functools.partial(self.driver.event_find, w, self.now),
                        )
                    )
        return checks
