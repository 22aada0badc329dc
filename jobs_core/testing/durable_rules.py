"""The step and event families' rules: steps recorded under fresh and stale fences, events
published (some for a parked run's wait, some stamped in the past), found and purged; the steps
of every run that ever recorded one, and each event name's first live event, compared after
each step. Only what the driver declares in `capabilities()` runs.

The edges are aimed at, not left to luck: two runs parked on one event, a known event id
published again for a waiting run, events met at park time a millisecond before, at and after
their expiry and exactly at a wait's `since`, the clock moved onto an event's expiry before a
find, a purge or a park, and event ids whose order is not their publishing order.
"""

from __future__ import annotations

import functools

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from jobs_core.records import (
    Ack,
    EventRecord,
    EventWait,
    Nack,
    NackKind,
    PurgeParams,
    StepPut,
)
from jobs_core.testing.compare import Check
from jobs_core.testing.machine import (
    EVENT_DATA,
    EVENT_NAMES,
    MATCHES,
    RESULTS,
    STEP_NAMES,
    WORKERS,
    FenceSpec,
    ParityMachine,
    aimed_fences,
    fence_specs,
    recent,
)

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
        aimed = self._aimed_fence(pick, who)
        puts = [
            StepPut(f, step, output, self.now) for f in aimed + [self._fence(f) for f in fences]
        ]
        got = self._both(
            "step_put", lambda: self.model.step_put(puts), lambda: self.driver.step_put(puts)
        )
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
                puts = [StepPut(job.fence, n, f'"{n}@{self.now}"', self.now) for n in names]
                self._both(
                    "step_put",
                    functools.partial(self.model.step_put, puts),
                    functools.partial(self.driver.step_put, puts),
                )
            self._note("step recorded")
            if then == "ack":
                self._ack([Ack(job.fence, self.now)])
            else:
                kind = NackKind.FAIL if then == "fail" else NackKind.RETRY
                self._nack([Nack(job.fence, kind, self.now, self.now, "boom")])
        if purge:
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
    )
    def publish(self, name: str, data: str, ttl: int, which: str, ago: int) -> None:
        """Publish an event (a new id or a known one, maybe the data a parked run waits for),
        stamped now or `ago` ms back (a sender whose clock lags: not after a wait's `since`)."""
        waiting = self._waiting()
        if which == "answer" and waiting:
            # An event a parked run waits for: its own match is data it matches.
            name, data = waiting[0].event, waiting[0].match_json
        self._publish(name, data, ttl, which, ago)

    @precondition(lambda self: self.capabilities.events)
    @rule(
        name=st.sampled_from(EVENT_NAMES),
        match=st.sampled_from(MATCHES),
        since=st.sampled_from((-3000, 0, -60_000, "published", "published + 1")),
        pick=recent,
    )
    def find_event(self, name: str, match: str, since: int | str, pick: int) -> None:
        """Find the first live event a wait matches, since some time ago, or since exactly a
        stored event's publishing (or a millisecond after it)."""
        stored = sorted(self.model.events.values(), key=lambda e: (e.published_at_ms, e.id))
        if isinstance(since, str) and stored:
            e = stored[-1 - pick % len(stored)]
            name, at = e.name, e.published_at_ms + (since == "published + 1")
            self._note("find since exactly an event's publishing")
        else:
            at = self.now + since if isinstance(since, int) else self.now
        w = EventWait(name, match, max(0, at))
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
            self._publish_at(e.id, e.name, "{}", self.now, self.now + 60_000)
            w = EventWait(e.name, "{}", self.now)
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
        ),
        timeout=st.sampled_from((3000, None)),
        early=st.sampled_from((None, *EARLY_EVENTS)),
        then=st.sampled_from(("answer", "cancel first", "later", "republish first")),
    )
    def park_waiting(
        self,
        worker: str,
        wait: tuple[str, str, int],
        timeout: int | None,
        early: str | None,
        then: str,
    ) -> None:
        """Claim a row and park it waiting for an event (until a timeout, or for good); with
        `early`, a matching event is published just before (`_before_park`): a live one must
        not let the park sleep past it, an expired one must. Unless `then` is "later", the
        wait is answered at once (`answer_wait`)."""
        for job in self._claim_some(worker, 1):
            w = EventWait(wait[0], wait[1], max(0, self.now + wait[2]))
            if early is not None:
                self._before_park(w, early)
            run_at = None if timeout is None else self.now + timeout
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
        then=st.sampled_from(("answer", "cancel first", "answer", "stale only", "republish first")),
    )
    def answer_wait(self, pick: int, decoy: str | None, late: bool, then: str) -> None:
        """Publish for a parked run: first a copy of its event stamped before the wait began
        (never its event), and maybe a decoy of the same name (it may or may not match); then
        its event — unless `then` cancels the run first (a wait goes with its park), stops
        at the stale copy, or first publishes its event under a stored id (which stores and
        wakes nothing). `late` publishes after the wait's timeout would have passed."""
        waiting = self._waiting_rows()
        job_id, w = waiting[pick % len(waiting)]
        if late:
            self.now += 3001
        self._answer(job_id, w, decoy, then)

    @precondition(lambda self: self.capabilities.events)
    @rule(
        name=st.sampled_from(EVENT_NAMES),
        matches=st.tuples(st.sampled_from(TWIN_MATCHES), st.sampled_from(TWIN_MATCHES)),
        data=st.sampled_from((BOTH_MATCHED, BOTH_MATCHED, *EVENT_DATA)),
        timeout=st.sampled_from((3000, None)),
    )
    def two_waiters(
        self, name: str, matches: tuple[str, str], data: str, timeout: int | None
    ) -> None:
        """Claim two rows and park both waiting for one event name, since now (matches one
        event's data may meet together), then publish one such event now: every parked run it
        matches wakes, not only the first."""
        run_at = None if timeout is None else self.now + timeout
        for job, match in zip(self._claim_some(WORKERS[1], 2), matches, strict=False):
            w = EventWait(name, match, self.now)
            self._nack([Nack(job.fence, NackKind.PARK, self.now, run_at, wait=w)])
            self._read_parked(job.id)
        if len(self._waiting()) > 1:
            self._note("event published for two waiting runs")
        self._publish(name, data, 60_000, "new")

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
        w = EventWait(e.name, "{}", e.published_at_ms)
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
                e_id = f"{prefix}{self._serial:04d}"
                self._publish_at(e_id, e.name, "{}", self.now - 2, self.now - 2 + ttl)
            self._event_purge(limit)
        else:
            for job in self._claim_some(WORKERS[0], 1):
                self._nack([Nack(job.fence, NackKind.PARK, self.now, None, wait=w)])
                self._read_parked(job.id)

    def _answer(self, job_id: str, w: EventWait, decoy: str | None, then: str) -> None:
        """A copy of `w`'s event stamped just before the wait began (never its event), maybe a
        decoy, then its event — unless `then` cancels the run first or stops at the copy; with
        "republish first", its event goes out under a stored id before (nothing happens)."""
        self._publish(w.event, w.match_json, 60_000, "new", self.now - w.since_ms + 1)
        if decoy is not None:
            self._publish(w.event, decoy, 60_000, "new")
        if then == "stale only":
            return
        if then == "republish first" and self.model.events:
            self._note("republish of a stored id a parked run's wait matches")
            self._publish(w.event, w.match_json, 60_000, "again")
        if then == "cancel first":
            self._both(
                "job_cancel",
                lambda: self.model.job_cancel(job_id, self.now),
                lambda: self.driver.job_cancel(job_id, self.now),
            )
        self._publish(w.event, w.match_json, 60_000, "new")

    # -- helpers --------------------------------------------------------------------------------

    def _before_park(self, wait: EventWait, how: str = "live") -> None:
        """Publish an event `wait` matches before the park: "live" now; "at expiry" published at
        the wait's very `since` and expiring now (the park must not meet it); "just live" the
        same but expiring a millisecond later (it must)."""
        self._note(f"event published before its wait ({how})")
        if how == "live":
            self._publish(wait.event, wait.match_json, 60_000, "new")
            return
        expires = self.now + (how == "just live")
        self._publish_at(self._event_id(), wait.event, wait.match_json, wait.since_ms, expires)

    def _waiting_rows(self) -> list[tuple[str, EventWait]]:
        """The rows parked now under the claim that parked them, with their waits."""
        return [
            (job_id, w)
            for job_id in sorted(self.model.waits)
            if (w := self.model.wait_of(job_id)) is not None
        ]

    def _waiting(self) -> list[EventWait]:
        return [w for _, w in self._waiting_rows()]

    def _event_id(self) -> str:
        """A fresh event id; taken in turn from `EVENT_ID_PREFIXES`, so id order is not
        publishing order."""
        self._serial += 1
        return f"{EVENT_ID_PREFIXES[self._serial % len(EVENT_ID_PREFIXES)]}{self._serial:04d}"

    def _publish(self, name: str, data: str, ttl: int, which: str, ago: int = 0) -> None:
        if which == "again" and self.model.events:
            event_id = sorted(self.model.events)[self._serial % len(self.model.events)]
        else:
            event_id = self._event_id()
        at = max(0, self.now - ago)
        self._publish_at(event_id, name, data, at, at + ttl)

    def _publish_at(self, event_id: str, name: str, data: str, at: int, expires: int) -> int:
        """Publish an event; answers how many runs it woke (0 when refused)."""
        e = EventRecord(event_id, name, data, at, expires)
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
            # The first live event of each name: a purge or an expiry that went wrong shows.
            for name in EVENT_NAMES:
                w = EventWait(name, "{}", 0)
                checks.append(
                    (
                        f"event_find({name!r})",
                        functools.partial(self.model.event_find, w, self.now),
                        functools.partial(self.driver.event_find, w, self.now),
                    )
                )
        return checks
