"""The claim loop: one claim per pass over every queue for all free slots, woken by a wake, a
freed slot or a drain, backing off while idle; each claimed job is admitted to its run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from jobs_core.backoff import IdleBackoff, wait_kick
from jobs_core.clock import Clock
from jobs_core.driver import JobDriver, WakeSubscription
from jobs_core.errors import DriverUnavailableError, JobsError
from jobs_core.facade import bound_client
from jobs_core.leases.admit import ADMITTED, Admission, deferred
from jobs_core.records import ClaimedJob, ClaimParams
from jobs_core.retention import Purger
from jobs_core.tenant import acting_for
from jobs_core.worker.held import Held
from jobs_core.worker.outage import Outage, StoreWatch
from jobs_core.worker.outcome import Outcomes
from jobs_core.worker.registry import Registry
from jobs_core.worker.run import Runner
from jobs_core.worker.stats import WorkerStats

log = logging.getLogger("jobs")


class ClaimLoop:
    """Keeps up to `max_in_flight` jobs in `held` while `accepting`, not counting those whose
    body has ended (their settle is on its way) up to `max_in_flight` more; `run()` is the
    worker's claim task, `kick` ends its wait (a wake, a freed slot, a drain), `wake` is the
    channel's subscription (None: the poll alone)."""

    def __init__(
        self,
        driver: JobDriver,
        clock: Clock,
        held: dict[str, Held],
        stats: WorkerStats,
        registry: Registry,
        runner: Runner,
        outcomes: Outcomes,
        backoff: IdleBackoff,
        purger: Purger | None,
        draining: Callable[[], bool],
        watch: StoreWatch,
        *,
        queues: tuple[str, ...],
        worker_id: str,
        concurrency: int,
        max_in_flight: int,
        lease_ms: int,
        wake_ceiling_ms: int,
        drop_exhausted: frozenset[str],
    ) -> None:
        self._driver = driver
        self._clock = clock
        self._held = held
        self._stats = stats
        self._registry = registry
        self._runner = runner
        self._outcomes = outcomes
        self._backoff = backoff
        self._purger = purger
        self._draining = draining
        self._watch = watch
        self._queues = queues
        self._worker_id = worker_id
        self._max_in_flight = max_in_flight
        self._lease_ms = lease_ms
        self._wake_ceiling_ms = wake_ceiling_ms
        self._drop_exhausted = drop_exhausted
        # With a backlog, a freed slot claims at once; a worker that holds a buffer of
        # claimed jobs beyond its running slots refills it in batches of half the buffer,
        # so a busy worker spends one claim on many jobs, not one claim per job.
        self._refill_at = max(1, (max_in_flight - concurrency) // 2)
        self.kick = asyncio.Event()
        self._backlog = False
        #: Held jobs whose body has ended: the next claim need not wait for their settles to
        #: land (a round trip), so claims and settles overlap.
        self._settling = 0
        runner.on_body_end = self._body_ended
        runner.on_run_end = self._run_ended
        #: True from the start until a drain begins: claims are made and freed slots refilled.
        self.accepting = False
        #: Jobs this loop may still claim (None: no bound), and what it calls once the runs of
        #: all it claimed ended (`Worker.limit_claims`); `_unended`: those runs not ended yet.
        self.budget: int | None = None
        self.on_budget_spent: Callable[[], None] | None = None
        self._unended = 0
        self.wake: WakeSubscription | None = None

    def limit(self, jobs: int, then: Callable[[], None]) -> None:
        """Claim at most `jobs` more; call `then` once every run ended, those under way now too
        (`Worker.limit_claims`)."""
        self.budget = jobs
        self.on_budget_spent = then
        # Each held job's run ends once (`_run_ended`): on a running worker those already held
        # are waited for as well, or `then` would come while they still run.
        self._unended = len(self._held)

    def on_wake(self, queue: str) -> None:
        self._backoff.reset()
        self.kick.set()

    def stop(self) -> None:
        """No claim from now on; a wait in progress ends at once."""
        self.accepting = False
        self.kick.set()

    def free(self) -> int:
        """How many jobs the next claim may take: held jobs still to run or running count
        against `max_in_flight`; settling ones do not, while all held stay within twice it."""
        held = len(self._held)
        room = min(self._max_in_flight - (held - self._settling), 2 * self._max_in_flight - held)
        return room if self.budget is None else min(room, self.budget)

    def _body_ended(self, held: Held) -> None:
        held.body_ended = True
        self._settling += 1
        self._refill()

    def _refill(self) -> None:
        if self._backlog and self.accepting and self.free() >= self._refill_at:
            self._backlog = False
            self.kick.set()

    def _ceiling(self) -> int:
        live = self.wake is not None and self.wake.is_live()
        return self._wake_ceiling_ms if live else self._backoff.ceiling_ms

    async def run(self) -> None:
        # Every run's task copies this task's context: no tenant and this worker's client for
        # its body, set once here rather than around each body (a run acting for an org sets
        # its own, `Runner._execute`), whatever the context `Worker.start` was called in.
        # Its runs' tasks are made on this loop, and their contexts hold it: looked up once.
        self._runner.loop = asyncio.get_running_loop()
        with acting_for(None), bound_client(self._runner.client()):
            await self._claim_until_stopped()

    async def _claim_until_stopped(self) -> None:
        outage = Outage("jobs.claim.failed")
        while self.accepting:
            free = self.free()
            if free <= 0:
                self._backlog = True
                self.kick.clear()
                # Full. Room comes only from a run's body or run ending (`_refill`, which kicks
                # once `_refill_at` jobs are free): when that is one, no timer can find room
                # sooner, and a wake or a stop kicks too.
                await self.wait(None if self._refill_at == 1 else self._ceiling())
                continue
            self.kick.clear()
            now = self._clock.now_ms()
            beat = self._registry.beat(now) if now >= self._registry.next_at else None
            try:
                result = await self._driver.job_claim(
                    ClaimParams(
                        queues=self._queues,
                        worker_id=self._worker_id,
                        limit=free,
                        lease_ms=self._lease_ms,
                        now_ms=now,
                        drop_exhausted=self._drop_exhausted,
                        beat=beat,
                        # Back from an outage: the leases that lapsed in it wait for their holders.
                        reclaim_until_ms=self._watch.reclaim_until(now),
                    )
                )
            except Exception as exc:  # a failed pass backs off, capped; the loop never dies
                if isinstance(exc, DriverUnavailableError):
                    self._watch.unavailable(now)
                elif not isinstance(exc, JobsError):
                    log.exception("jobs.claim.crashed")
                self._backoff.reset()
                await self.wait(outage.failed(exc))
                continue
            outage.recovered()
            self._watch.answered(now)
            if beat is not None:
                self._registry.sent(now)
            for b in result.buried:
                self._outcomes.buried(b)
            held = [self._hold(j, now) for j in result.jobs]
            if self.budget is not None:
                # Counted as they are held, before the admission's wait: a `limit` called in
                # it counts them among those held already, once.
                self.budget -= len(result.jobs)
                self._unended += len(result.jobs)
            await self._admission(held, now)
            for h in held:
                self._start(h)
            if result.jobs and self._purger is not None:
                self._purger.grant()  # a busy worker lets a waiting purge round start at once
            if self._draining():
                break
            if result.jobs:
                self._backoff.reset()
                if len(result.jobs) == free:
                    continue
                await self.wait(self._backoff.next_ms(self._ceiling()))
            else:
                wait = self._backoff.next_ms(self._ceiling())
                await self.wait(wait)
                if (
                    self._purger is not None
                    and not self.kick.is_set()
                    and self._purger.take_idle_slot(
                        self._clock.now_ms(), wait, self._registry.next_at
                    )
                ):
                    # This poll's slot went to a retention round: the idle budget holds.
                    await self.wait(self._backoff.next_ms(self._ceiling()))

    async def wait(self, ms: int | None) -> None:
        """Until `kick` is set or `ms` of the clock passed (None: only the kick)."""
        await wait_kick(self.kick, self._clock, ms)

    def _hold(self, job: ClaimedJob, now: int) -> Held:
        """Track a claimed job at once, with a local slot when one is free (in claim order): a
        job holding one starts as soon as it is admitted."""
        held = Held(job, last_landed_ms=now, leases_landed_ms=now)
        self._held[job.id] = held
        self._stats.claimed += 1
        self._stats.in_flight = len(self._held)
        self._runner.take_slot_now(held)
        return held

    async def _admission(self, held: list[Held], now: int) -> None:
        """Admit the jobs holding a local slot in one `Gate.admit` (their leases are taken as
        their bodies start); the others are admitted as they get one (`Runner`). If that fails
        in a way it should not, those jobs are given back (no attempt spent) rather than left
        to their lease."""
        starting = [h for h in held if h.in_slot]
        gate = self._runner.gate
        verdicts: dict[str, Admission] = {}
        if gate.active and starting:
            jobs = [h.job for h in starting]
            try:
                verdicts = await gate.admit(jobs, now)
            except Exception:
                log.exception("jobs.lease.admit_crashed (%d jobs given back)", len(jobs))
                verdicts = deferred(jobs, now, "the admission failed")
        for h in starting:
            h.admit(verdicts.get(h.job.id, ADMITTED))

    def _start(self, held: Held) -> None:
        loop = self._runner.loop or asyncio.get_running_loop()
        task = loop.create_task(self._runner.run_held(held))
        held.task = task

        def cancel_body() -> None:
            if held.in_body:
                task.cancel()

        held.signal.on_fire(cancel_body)

    def _run_ended(self, held: Held) -> None:
        """One admitted job's run ended; the slot it frees may refill a held buffer."""
        if held.body_ended:
            self._settling -= 1
        if self.budget is not None:
            self._unended -= 1
            if self.budget <= 0 and self._unended == 0 and self.on_budget_spent is not None:
                # The last run of the budget ended: nothing is running for the callback's
                # drain to cut short (a body longer than the drain's deadline would otherwise be
                # handed back at every recycle, and run by nobody to its end).
                spent, self.on_budget_spent = self.on_budget_spent, None
                spent()
        self._refill()
