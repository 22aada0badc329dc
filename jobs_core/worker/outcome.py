"""How a run's end is written: the settle for each ending (error, retry, shed, cancel, lost),
its tally, the `on_settled` hooks, and the settles that cannot be sent as they are, or not yet."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Awaitable, Callable, Mapping

from jobs_core import tracing
from jobs_core.clock import Clock
from jobs_core.driver import MAX_TIME_MS, JobDriver, check_nack
from jobs_core.errors import (
    DrainingError,
    JobsError,
    JobTimeoutError,
    RateLimitedError,
    SlotLostError,
)
from jobs_core.facade import Jobs, SettledEvent, bound_client
from jobs_core.job import JobHandle
from jobs_core.jsonform import JsonValue
from jobs_core.leases.admit import Refusal
from jobs_core.records import (
    Ack,
    BuriedJob,
    ClaimedJob,
    Fence,
    JobRecord,
    LeaseTake,
    Nack,
    NackKind,
)
from jobs_core.redact import SCRUB_EXTRA, secrets_of
from jobs_core.semantics import LEASE_LAPSED_ERROR
from jobs_core.settle import Settler, StoreSeen
from jobs_core.states import ENDING_OUTCOMES, JobState, Outcome
from jobs_core.steps.api import SAGA, wait_ring
from jobs_core.steps.suspend import StepSuspension
from jobs_core.steps.unwind import UNWIND_JOB, unwind_org, unwind_record
from jobs_core.tenant import acting_for
from jobs_core.worker.failure import brief, error_text
from jobs_core.worker.held import Held, job_fields, log_fields
from jobs_core.worker.outage import RECLAIM_GRACE_MS
from jobs_core.worker.stats import WorkerStats

log = logging.getLogger("jobs")

#: How long a run that parked into a wait cycle, not of its ring's least id, leaves that one to
#: end it (`Outcomes._unpark_if_cycle`): far above the few round trips that takes.
RING_DEFER_S = 1.0
#: Tries of an `on_settled` hook before it is given up (never rethrown).
ON_SETTLED_TRIES = 3
#: How long the mark of a reported burial is kept (`Outcomes._first_report`): longer than any
#: lease, so the second report of a burial (a lost claim's, looked for until its lease end)
#: always finds it.
BURIAL_MARK_MS = 24 * 3600 * 1000
#: A settle the store cannot take is retried until one lease past its lease's end plus this (the
#: fence keeps a late one safe: it lands only while no other claim was made). An outage shorter
#: than the lease that began while the lease was live is over one lease past its end, and a
#: worker back from it leaves that lapsed lease alone for `RECLAIM_GRACE_MS` after.
SETTLE_MARGIN_MS = RECLAIM_GRACE_MS

WorkerHook = Callable[[SettledEvent], Awaitable[None] | None]
#: Told of every settle that landed: the job, its outcome, how long its body ran (None when
#: no body ran). Metrics count with it; it must be quick and never block.
Observer = Callable[[ClaimedJob, Outcome, "int | None"], None]
#: Told of every burial this worker reports (once per burial): the row and its outcome
#: (dead-lettered, or dropped). No body ran; metrics count it as a settle's ending.
BurialObserver = Callable[[BuriedJob, Outcome], None]


class Outcomes:
    """Settles the jobs in `held` through one batching `Settler` (`settler`), counts each landed
    settle in `stats`, and runs the job's and the worker's `on_settled` hooks."""

    def __init__(
        self,
        driver: JobDriver,
        clock: Clock,
        handles: Mapping[str, JobHandle],
        held: dict[str, Held],
        stats: WorkerStats,
        rng: random.Random,
        client: Callable[[], Jobs],
        on_settled: WorkerHook | None,
        *,
        worker_id: str,
        lease_ms: int,
        watch: StoreSeen | None = None,
    ) -> None:
        self._driver = driver
        self._clock = clock
        self._handles = handles
        self._held = held
        self._stats = stats
        self._rng = rng
        self._client = client
        self._on_settled = on_settled
        self._worker_id = worker_id
        self._lease_ms = lease_ms
        self.settler = Settler(
            driver,
            clock,
            give_up_at=self._settle_give_up_at,
            replace_invalid=self._replace_invalid,
            seen=watch,
        )
        self._hooks: set[asyncio.Task[None]] = set()
        self.observers: list[Observer] = []
        self.burial_observers: list[BurialObserver] = []

    async def suspend(self, held: Held, asked: StepSuspension) -> None:
        """Park a run that asked to (a sleep, an event wait, a gather of child jobs): no attempt
        spent, no slot held, resumed at `asked.run_at_ms`, when its event arrives, or when the
        store releases its join (the last of `asked.join` finished); never an ending (no
        `on_settled`)."""
        job = held.job
        held.signal.end(job.id)
        held.settled = True
        landed = await self.settler.nack(
            Nack(
                job.fence,
                NackKind.PARK,
                self._clock.now_ms(),
                asked.run_at_ms,
                progress_json=held.pending_progress(self._worker_id),
                wait=asked.wait,
                join=asked.join,
            )
        )
        self.tally(Outcome.SUSPENDED, landed, held)
        if landed and asked.join:
            await self._unpark_if_cycle(held, asked.join)
        log.debug(
            "jobs.run.suspended %s %s until %s%s",
            job.name,
            job.id,
            asked.run_at_ms,
            f" or event {asked.wait.event!r}"
            if asked.wait
            else f" {len(asked.join)} jobs finished"
            if asked.join
            else "",
            extra=job_fields(self._worker_id, job),
        )

    async def _unpark_if_cycle(self, held: Held, join: tuple[str, ...]) -> None:
        """After a park on `join` landed, end it (cancel the row) if a job of `join` now waits,
        through parked joins, for this row: a run that parked at the same instant as one it
        waits for, each having read the other not parked yet (`wait_ring` says why one of them
        always sees it). A cancel, not a failure: the row is no longer held, and a cancel is
        the one write that ends a parked row; `jobs.flow.wait_cycle` names the cycle.

        Several runs of a ring may see it at once; the one of least id ends its row at once,
        any other only if it is still parked in a ring `RING_DEFER_S` later (the first cancel
        released it), so one run is ended, not each — unless the least one did not see it."""
        job = held.job
        try:
            ring = await wait_ring(self._driver, job.id, join)
            if ring and job.id > min(ring):
                await asyncio.sleep(RING_DEFER_S)
                ring = await wait_ring(self._driver, job.id, join)
            if not ring:
                return
            row = (await self._driver.job_get_many([job.id])).get(job.id)
            if row is None or row.state is not JobState.PARKED or row.claims != job.claims:
                return  # released meanwhile (the ring is ended already), or parked anew since
            log.warning(
                "jobs.flow.wait_cycle %s %s: X_JOB_WAIT_CYCLE: it waits, through %s, for "
                "itself (parked at the same instant as a run it waits for); its row is cancelled",
                job.name,
                job.id,
                " -> ".join(reversed(ring)),
                extra=job_fields(self._worker_id, job),
            )
            if self._driver.capabilities().operator:
                await self._driver.job_cancel_many([job.id], self._clock.now_ms())
        except Exception as exc:  # the park stands; the cycle is the operator's to cancel
            log.error("jobs.flow.wait_cycle_check_failed %s %s: %r", job.name, job.id, exc)

    async def _unwind_later(self, failed: ClaimedJob | JobRecord, handle: JobHandle | None) -> None:
        """Enqueue the job that undoes a failed run's compensable steps (deduped per run), acting
        for the org the failed run acted for; a failure to enqueue is logged: the row's fate
        does not wait on it."""
        try:
            acts_for = unwind_org(failed, handle)
            await self._driver.job_enqueue(unwind_record(failed, self._clock.now_ms(), acts_for))
        except Exception as exc:
            log.error("jobs.unwind.enqueue_failed %s %s: %r", failed.name, failed.id, exc)

    async def settle_cancelled(
        self, held: Held, handle: JobHandle, reason: JobsError, input: JsonValue
    ) -> None:
        """Settle a run its signal stopped: a drain hands it back, a deadline fails the
        attempt; a lost fence writes nothing (the row is no longer ours) and is told apart
        as a user cancel or a lost lease by one read of the row."""
        job = held.job
        if isinstance(reason, DrainingError):
            held.settled = True
            landed = await self.settler.nack(
                Nack(
                    job.fence,
                    NackKind.INTERRUPT,
                    self._clock.now_ms(),
                    progress_json=held.pending_progress(self._worker_id),
                )
            )
            self.tally(Outcome.INTERRUPTED, landed, held)
        elif isinstance(reason, JobTimeoutError | SlotLostError):
            # Cut short by its deadline or by its lost fleet slot: the attempt fails (retried).
            await self.settle_error(held, handle, reason, input)
        else:
            held.settled = True
            if await self._was_cancelled(held):
                self._stats.cancelled += 1
                log.info(
                    "jobs.run.cancelled %s %s: cancelled while it ran",
                    job.name,
                    job.id,
                    extra=job_fields(self._worker_id, job),
                )
            else:
                self._stats.lost += 1
                log.warning(
                    "jobs.lease.lost %s %s: %s",
                    job.name,
                    job.id,
                    reason,
                    extra=job_fields(self._worker_id, job),
                )

    async def refused(self, held: Held, handle: JobHandle, refusal: Refusal) -> None:
        """Settle a job its admission did not let start; its body never runs. A wait gives it
        back (`SHED`, no attempt spent) due at `refusal.run_at_ms`; a refusal fails it for good
        (`REFUSE`, outcome `refused`, the hooks told); an underivable key fails the attempt."""
        job = held.job
        if refusal.kind == "error" and refusal.error is not None:
            await self.settle_error(held, handle, refusal.error)
            return
        held.signal.end(job.id)
        held.settled = True
        now = self._clock.now_ms()
        if refusal.kind != "refuse":  # a wait (a follower never reaches here: it got its slot)
            landed = await self.settler.nack(
                Nack(job.fence, NackKind.SHED, now, max(now, refusal.run_at_ms))
            )
            self.tally(Outcome.SHED, landed, held)
            log.debug(
                "jobs.worker.shed %s %s until %d: %s",
                job.name,
                job.id,
                refusal.run_at_ms,
                refusal.why,
                extra=job_fields(self._worker_id, job),
            )
            return
        landed = await self.settler.nack(Nack(job.fence, NackKind.REFUSE, now, error=refusal.why))
        self.tally(Outcome.REFUSED, landed, held)
        log.info(
            "jobs.run.refused %s %s: %s",
            job.name,
            job.id,
            refusal.why,
            extra=job_fields(self._worker_id, job),
        )
        if landed:
            event = SettledEvent(
                job.id, job.name, job.queue, Outcome.REFUSED, job.attempt, None, None, refusal.why
            )
            await self.fire_settled(handle, event, None)

    async def _was_cancelled(self, held: Held) -> bool:
        """True when the row reads `cancelled`: one read per lost run, never per heartbeat.

        Skipped (False) when the lease went unrenewed for a whole window: then the store was
        unreachable, a read would most likely fail too, and a reclaim is the likelier cause.
        """
        if self._clock.now_ms() - held.last_landed_ms >= self._lease_ms:
            return False
        try:
            rows = await self._driver.job_get_many([held.job.id])
        except Exception as exc:  # telling the two apart is for the log; never fatal
            log.warning(
                "jobs.lease.read_failed %s: %r",
                held.job.id,
                exc,
                extra=job_fields(self._worker_id, held.job),
            )
            return False
        found = rows.get(held.job.id)
        return found is not None and found.state is JobState.CANCELLED

    async def settle_error(
        self,
        held: Held,
        handle: JobHandle | None,
        exc: BaseException,
        input: JsonValue = None,
    ) -> None:
        """Fail the attempt with `exc`: retried, shed (rate limited), or failed for good
        (terminal, unknown handle or final attempt). A failed attempt logs at WARNING and a
        dead letter or drop at ERROR, with the traceback. Whatever failed, the run's secrets
        are scrubbed from what is stored, logged and traced (`Held.secrets`); `input` is what
        the hooks are told."""
        job = held.job
        held.signal.end(job.id)
        now = self._clock.now_ms()
        error = error_text(exc, held.secrets)
        progress = held.pending_progress(self._worker_id)
        dead_letter = handle.retry.dead_letter if handle is not None else True
        fields = held.log_extra(self._worker_id)
        tracing.failed(held.span, exc, held.secrets)
        if isinstance(exc, RateLimitedError):
            # A wait past the last time a store holds defers to that time: a run_at past it
            # would be refused at the settle, and the job would burn its attempts on that.
            until = min(now + exc.retry_after_ms, MAX_TIME_MS)
            nack = Nack(job.fence, NackKind.SHED, now, until, progress_json=progress)
            outcome = Outcome.SHED
            log.debug("jobs.run.shed %s %s: %s", job.name, job.id, brief(exc), extra=fields)
        elif getattr(exc, "terminal", False) is True or handle is None or job.final_attempt:
            if await self._saga_recorded(held):
                # Before the final settle: a crash after it must still find the undoing queued.
                await self._unwind_later(job, handle)
            nack = Nack(
                job.fence,
                NackKind.FAIL,
                now,
                error=error,
                dead_letter=dead_letter,
                progress_json=progress,
            )
            outcome = Outcome.DEAD_LETTERED if dead_letter else Outcome.DROPPED
            log.error(
                "jobs.run.%s %s %s attempt %d of %d: %s",
                outcome.value.replace("-", "_"),
                job.name,
                job.id,
                job.attempt,
                job.max_attempts,
                brief(exc),
                exc_info=exc,
                extra=fields,
            )
        else:
            delay = handle.retry.delay_ms(job.attempt, self._rng)
            nack = Nack(
                job.fence, NackKind.RETRY, now, now + delay, error=error, progress_json=progress
            )
            outcome = Outcome.RETRIED
            log.warning(
                "jobs.run.failed %s %s attempt %d of %d, retry in %d ms: %s",
                job.name,
                job.id,
                job.attempt,
                job.max_attempts,
                delay,
                brief(exc),
                exc_info=exc,
                extra=fields,
            )
        held.settled = True
        landed = await self.settler.nack(nack)
        self.tally(outcome, landed, held)
        if landed and outcome in ENDING_OUTCOMES:
            event = SettledEvent(
                job.id, job.name, job.queue, outcome, job.attempt, input, None, error
            )
            await self.fire_settled(handle, event, None)

    async def _saga_recorded(self, held: Held) -> bool:
        """Whether the run recorded a step that declared a compensation — read from the store
        (once per run) when this attempt failed before replaying it."""
        if not self._driver.capabilities().steps or held.job.name == UNWIND_JOB:
            # An undoing that fails for good is not undone in turn: it shares the failed run's
            # steps (and its saga mark), which are not its own to undo.
            return False
        if held.steps is not None and held.steps.compensable:
            return True
        try:
            if held.steps is not None:
                return SAGA in await held.steps.records()
            # Failed before its body began (its tenant function): an earlier attempt may have
            # recorded steps all the same.
            return any(s.name == SAGA for s in await self._driver.step_list(held.job.run_id))
        except Exception as exc:  # the final settle goes on; the burial path cannot help here
            log.error("jobs.unwind.unknown %s %s: %r", held.job.name, held.job.id, exc)
            return False

    def tally(self, outcome: Outcome, landed: bool, held: Held) -> None:
        """Count the answer to the settle of `held`'s run (not a later claim of its job)."""
        job = held.job
        if landed:
            self._stats.count(outcome)
            if held.span is not None:
                tracing.ended(held.span, outcome)
            for observe in self.observers:
                try:
                    observe(job, outcome, held.body_ms)
                except Exception:  # an observer never breaks a settle
                    log.exception(
                        "jobs.observer.failed %s", job.id, extra=held.log_extra(self._worker_id)
                    )
        else:
            self._stats.unowned += 1
            log.warning(
                "jobs.settle.unowned %s %s (%s)",
                job.name,
                job.id,
                outcome.value,
                extra=job_fields(self._worker_id, job),
            )

    def hears_settled(self, handle: JobHandle | None) -> bool:
        """Whether a settle of `handle`'s job has a hook to hear it (`fire_settled`)."""
        if self._on_settled is not None:
            return True
        return handle is not None and handle.on_settled is not None

    async def fire_settled(
        self, handle: JobHandle | None, event: SettledEvent, tenant: str | None
    ) -> None:
        hooks = [h for h in (handle.on_settled if handle else None, self._on_settled) if h]
        for hook in hooks:
            for attempt in range(1, ON_SETTLED_TRIES + 1):
                try:
                    with acting_for(tenant), bound_client(self._client()):
                        outcome = hook(event)
                        if outcome is not None:
                            await outcome
                    break
                except Exception as exc:  # a hook never breaks the worker, by contract
                    fields = log_fields(
                        self._worker_id,
                        event.job_id,
                        event.name,
                        event.queue,
                        event.attempt or None,
                    )
                    # The hook was handed the input: what it raises may quote it.
                    fields[SCRUB_EXTRA] = secrets_of(
                        event.input, handle.sensitive if handle is not None else frozenset()
                    )
                    log.warning(
                        "jobs.on_settled.failed %s try %d: %r",
                        event.job_id,
                        attempt,
                        exc,
                        extra=fields,
                    )

    def buried(self, b: BuriedJob) -> None:
        """A lapsed final attempt a claim buried: counted, logged, and its hooks run apart —
        once per burial, whichever worker it is reported to (`_first_report`)."""
        hook = asyncio.create_task(self._after_burial(b))
        self._hooks.add(hook)
        hook.add_done_callback(self._hooks.discard)

    async def _after_burial(self, b: BuriedJob) -> None:
        """A run that died on its final attempt: count and log it, queue the undoing of its
        steps (when one of them declared a compensation; a worker that runs its name does the
        undoing), then run its hooks. Nothing of it when another report of the same burial
        came first."""
        caps = self._driver.capabilities()
        row: JobRecord | None = None
        if caps.leases or caps.steps:
            try:
                row = (await self._driver.job_get_many([b.id])).get(b.id)
            except Exception as exc:  # best effort: the burial is still reported
                log.error("jobs.claim.buried_unread %s %s: %r", b.name, b.id, exc)
        if not await self._first_report(b, row):
            log.info("jobs.claim.buried_reported %s %s (by another report)", b.name, b.id)
            return
        self._stats.buried += 1
        outcome = Outcome.DEAD_LETTERED if b.state is JobState.DEAD else Outcome.DROPPED
        # A dead letter (or drop) like any other: ERROR, though no traceback exists for it.
        log.error(
            "jobs.claim.buried %s %s (lease lapsed on the final attempt)",
            b.name,
            b.id,
            extra=log_fields(self._worker_id, b.id, b.name, b.queue, None),
        )
        for observe in self.burial_observers:
            try:
                observe(b, outcome)
            except Exception:  # an observer never breaks a burial's report
                log.exception("jobs.observer.failed %s", b.id)
        event = SettledEvent(b.id, b.name, b.queue, outcome, 0, None, None, LEASE_LAPSED_ERROR)
        handle = self._handles.get(b.name)
        if caps.steps and b.name != UNWIND_JOB:
            try:
                if row is not None and any(
                    s.name == SAGA for s in await self._driver.step_list(row.run_id)
                ):
                    await self._unwind_later(row, handle)
            except Exception as exc:  # best effort: the hooks still run
                log.error("jobs.unwind.burial_failed %s %s: %r", b.name, b.id, exc)
        await self.fire_settled(handle, event, None)

    async def _first_report(self, b: BuriedJob, row: JobRecord | None) -> bool:
        """Whether this is the first report of `b`'s burial: a lease per burial (its id and
        finish time), held for `BURIAL_MARK_MS`, with the leases family; without it, or the
        row or the store not at hand, True. A burial is reported twice when a lost claim's
        look (`jobs_core.lost_claims`) finds a row another worker's claim of the same
        millisecond buried and reported."""
        if not self._driver.capabilities().leases or row is None or row.finished_at_ms is None:
            return True
        mark = hashlib.sha256(f"{b.id}\x00{row.finished_at_ms}".encode()).hexdigest()[:40]
        take = LeaseTake(f"ujobs.buried:{mark}", self._worker_id, 1, BURIAL_MARK_MS)
        try:
            (got,) = await self._driver.lease_take([take], self._clock.now_ms())
        except Exception as exc:  # a report over a silence: the hooks are best effort anyway
            log.error("jobs.claim.buried_unmarked %s %s: %r", b.name, b.id, exc)
            return True
        return got is not None

    # -- settles that cannot be sent as they are, or not yet ----------------------------------

    def _settle_give_up_at(self, fence: Fence) -> int | None:
        """When a settle of this claim stops being worth retrying: one lease past its lease's
        end, plus `SETTLE_MARGIN_MS`."""
        h = self._held.get(fence.job_id)
        if h is None or h.job.claims != fence.claims:
            return None
        return h.last_landed_ms + 2 * self._lease_ms + SETTLE_MARGIN_MS

    def _replace_invalid(self, item: Ack | Nack, exc: JobsError) -> Nack | None:
        """A settle the driver would refuse fails its own job with that error instead."""
        now = self._clock.now_ms()
        h = self._held.get(item.fence.job_id)
        error = error_text(exc, h.secrets if h is not None else ())
        handle = self._handles.get(h.job.name) if h is not None else None
        dead_letter = handle.retry.dead_letter if handle is not None else True
        fail = Nack(item.fence, NackKind.FAIL, now, error=error, dead_letter=dead_letter)
        if h is None or handle is None or h.job.final_attempt:
            return fail
        delay = handle.retry.delay_ms(h.job.attempt, self._rng)
        retry = Nack(item.fence, NackKind.RETRY, now, now + delay, error=error)
        try:
            check_nack(retry)
        except JobsError:
            # Refused as the first was (a run_at past the store's last time): sending neither
            # would leave the claim to its lease, so the job fails with the refusal.
            return fail
        return retry
