"""The worker: claims jobs, runs their bodies, settles them, and drains on a deploy.

One claim loop (one claim per pass over every queue, for all free slots), one heartbeat loop
(every held lease renewed in one call), and one task per held job. Settles go through the
batching `Settler`. Every time is read from the injected clock, so a fake clock drives it all.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
import random
import signal
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from jobs_core.backoff import IdleBackoff
from jobs_core.clock import Clock, SystemClock
from jobs_core.context import CancelSignal, JobContext
from jobs_core.driver import JobDriver, WakeSubscription
from jobs_core.errors import (
    DrainingError,
    InputInvalidError,
    JobCancelledError,
    JobNotRegisteredError,
    JobsError,
    JobTimeoutError,
    LeaseLostError,
    RateLimitedError,
)
from jobs_core.facade import SettledEvent
from jobs_core.ids import new_id
from jobs_core.job import JobHandle, jobs_of
from jobs_core.jsonform import JsonValue, dumps, loads
from jobs_core.options import count, finite_number, seconds_to_ms
from jobs_core.records import (
    Ack,
    BuriedJob,
    ClaimedJob,
    ClaimParams,
    Heartbeat,
    Nack,
    NackKind,
    Progress,
    WorkerBeat,
)
from jobs_core.retention import DEFAULT_RETENTION, Purger, Retention
from jobs_core.settle import Settler
from jobs_core.states import ENDING_OUTCOMES, JobState, Outcome
from jobs_core.tenant import acting_for

log = logging.getLogger("jobs")

#: Tries of an `on_settled` hook before it is given up (never rethrown).
ON_SETTLED_TRIES = 3
#: How long a cancelled async body gets to unwind before the worker moves on without it.
CANCEL_GRACE_MS = 1_000

WorkerHook = Callable[[SettledEvent], Awaitable[None] | None]


@dataclass(slots=True)
class WorkerStats:
    """Counters since start; `in_flight` and `running` are current."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    dropped: int = 0
    shed: int = 0
    interrupted: int = 0
    #: Runs aborted because the row was cancelled or reclaimed (their writes are refused).
    lost: int = 0
    #: Lapsed final attempts the claims buried.
    buried: int = 0
    #: Settles that did not land (the fence refused them).
    unowned: int = 0
    in_flight: int = 0
    running: int = 0

    def count(self, outcome: Outcome) -> None:
        match outcome:
            case Outcome.COMPLETED:
                self.completed += 1
            case Outcome.RETRIED:
                self.retried += 1
            case Outcome.DEAD_LETTERED:
                self.dead_lettered += 1
            case Outcome.DROPPED:
                self.dropped += 1
            case Outcome.SHED:
                self.shed += 1
            case Outcome.INTERRUPTED:
                self.interrupted += 1
            case _:
                pass


@dataclass(eq=False)
class _Held:
    job: ClaimedJob
    signal: CancelSignal = field(default_factory=CancelSignal)
    task: asyncio.Task[None] | None = None
    started: bool = False
    last_landed_ms: int = 0
    progress: JsonValue = None
    progress_dirty: bool = False
    progress_sent_ms: int = 0
    in_body: bool = False


class Worker:
    """Runs the given jobs from `queues` until `stop()`; see the README for every option.

    Durations are seconds. `concurrency` bodies run at once (50 by default: an async body
    waiting on I/O costs little, and a `def` body takes a thread from a pool of that size);
    up to `max_in_flight` jobs are held (claimed, leased) including those waiting for a slot.
    Zero concurrency is refused: a worker that may run nothing is a mistake, not "unlimited".
    """

    def __init__(
        self,
        driver: JobDriver,
        jobs: ModuleType | Sequence[JobHandle] | Mapping[str, JobHandle],
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 50,
        max_in_flight: int | None = None,
        lease: float = 30.0,
        heartbeat_every: float | None = None,
        poll_floor: float = 0.05,
        poll_ceiling: float = 2.0,
        wake_ceiling: float = 5.0,
        drain_timeout: float = 30.0,
        drain_margin: float = 1.0,
        registry_ttl: float = 60.0,
        progress_every: float = 1.0,
        worker_id: str | None = None,
        on_settled: WorkerHook | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        retention: Retention | None = DEFAULT_RETENTION,
    ) -> None:
        self.driver = driver
        handles = jobs_of(jobs)
        self._handles = {h.name: h for h in handles}
        self.queues: tuple[str, ...] = tuple(
            dict.fromkeys(queues if queues is not None else [h.queue for h in handles])
        )
        if not self.queues:
            raise JobsError("a worker needs at least one queue", detail="queues")
        self.concurrency = count(concurrency, "concurrency", minimum=1, maximum=10_000)
        self.max_in_flight = count(
            max_in_flight if max_in_flight is not None else concurrency,
            "max_in_flight",
            minimum=self.concurrency,
            maximum=100_000,
        )
        self.lease_ms = seconds_to_ms(lease, "lease", minimum_ms=1)
        self.heartbeat_ms = (
            seconds_to_ms(heartbeat_every, "heartbeat_every")
            if heartbeat_every is not None
            else max(1, self.lease_ms // 3)
        )
        if self.heartbeat_ms >= self.lease_ms:
            raise JobsError("must be shorter than lease", detail="heartbeat_every")
        self._backoff = IdleBackoff(
            seconds_to_ms(poll_floor, "poll_floor"), seconds_to_ms(poll_ceiling, "poll_ceiling")
        )
        self.wake_ceiling_ms = seconds_to_ms(wake_ceiling, "wake_ceiling")
        self.drain_timeout_ms = seconds_to_ms(drain_timeout, "drain_timeout")
        self.drain_margin_ms = round(
            finite_number(drain_margin, "drain_margin", minimum=0.0, maximum=3600.0) * 1000
        )
        self.registry_ttl_ms = seconds_to_ms(registry_ttl, "registry_ttl")
        self.progress_every_ms = seconds_to_ms(progress_every, "progress_every")
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{new_id()[-12:]}"
        self.clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._on_settled = on_settled
        self._drop_exhausted = frozenset(h.name for h in handles if not h.retry.dead_letter)
        self._beat_every_ms = max(1, self.registry_ttl_ms // 3)
        # With a backlog, a freed slot claims at once; a worker that holds a buffer of
        # claimed jobs beyond its running slots refills it in batches of half the buffer,
        # so a busy worker spends one claim on many jobs, not one claim per job.
        self._refill_at = max(1, (self.max_in_flight - self.concurrency) // 2)

        self.stats = WorkerStats()
        self._held: dict[str, _Held] = {}
        self._slots = asyncio.Semaphore(self.concurrency)
        self._kick = asyncio.Event()
        self._backlog = False
        self._accepting = False
        self._started = False
        self._settler = Settler(driver, self.clock)
        self._executor: ThreadPoolExecutor | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._stop_task: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self._next_beat_at = 0
        self._wake: WakeSubscription | None = None
        self._hooks: set[asyncio.Task[None]] = set()
        #: Applies `retention` (None, or a retention keeping everything: no purge at all).
        self._purger = (
            Purger(driver, retention, self.clock, self._rng)
            if retention is not None and not retention.keeps_everything
            else None
        )

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def draining(self) -> bool:
        return self._stop_task is not None

    async def start(self) -> None:
        """Announce the worker and start its loops; refused while draining (`X_DRAINING`)."""
        if self.draining:
            raise DrainingError(detail=self.worker_id)
        if self._started:
            return
        self._started = True
        self._accepting = True
        await self.driver.open()
        await self.driver.worker_beat(self._beat(self.clock.now_ms()))
        self._next_beat_at = self.clock.now_ms() + self._beat_every_ms
        if self.driver.capabilities().wake:
            self._wake = await self.driver.wake_subscribe(self.queues, self._on_wake)
        self._loops = [
            asyncio.create_task(self._claim_loop(), name="ujobs-claim"),
            asyncio.create_task(self._heartbeat_loop(), name="ujobs-heartbeat"),
        ]
        if self._purger is not None:
            self._loops.append(asyncio.create_task(self._purger.run(), name="ujobs-purge"))
        log.info("jobs.worker.started %s queues=%s", self.worker_id, ",".join(self.queues))

    async def run(self) -> None:
        """Start, then return once the worker has stopped (after a drain)."""
        await self.start()
        await self._stopped.wait()

    def install_signal_handlers(self) -> None:
        """Drain on SIGTERM and SIGINT, bounded by `drain_timeout` (a deploy)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(
                sig, lambda: asyncio.ensure_future(self.stop(self.drain_timeout_ms / 1000))
            )

    async def stop(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 - a drain budget, not a call timeout
        """Drain and tear down; a second call joins the first.

        Phase one stops claiming and hands back held jobs that never started. Running bodies
        may finish until `timeout` seconds minus `drain_margin`; then each is aborted with
        `X_DRAINING` and its claim goes back uncounted (`interrupted`). `timeout=None` waits
        for every body.
        """
        if self._stop_task is None:
            deadline = (
                None
                if timeout is None
                else self.clock.now_ms() + seconds_to_ms(timeout, "timeout", minimum_ms=0)
            )
            self._stop_task = asyncio.create_task(self._teardown(deadline))
        await asyncio.shield(self._stop_task)

    async def _teardown(self, deadline_ms: int | None) -> None:
        self._accepting = False
        self._kick.set()
        claim_loop = self._loops[0] if self._loops else None
        if claim_loop is not None:
            # The drain waits out the claim round it races, so no claim lands after it.
            await claim_loop
        waiting = [h for h in self._held.values() if not h.started]
        for h in waiting:
            if h.task is not None:
                h.task.cancel()
        await asyncio.gather(*(h.task for h in waiting if h.task), return_exceptions=True)
        if waiting:
            now = self.clock.now_ms()
            answers = await self._settler.nack_many(
                [Nack(h.job.fence, NackKind.INTERRUPT, now) for h in waiting]
            )
            for h, ok in zip(waiting, answers, strict=True):
                self._held.pop(h.job.id, None)
                self._tally(Outcome.INTERRUPTED, ok, h.job)
        running = [h.task for h in self._held.values() if h.task is not None]
        if running:
            if deadline_ms is None:
                await asyncio.gather(*running, return_exceptions=True)
            else:
                cutoff = deadline_ms - self.drain_margin_ms
                await self._wait_tasks(running, cutoff - self.clock.now_ms())
                for h in list(self._held.values()):
                    h.signal.fire(DrainingError(detail=h.job.id))
                # A body that ignores its cancellation must not hold the deploy hostage.
                await self._wait_tasks(running, CANCEL_GRACE_MS)
        for task in self._loops[1:]:
            task.cancel()
        await asyncio.gather(*self._loops[1:], return_exceptions=True)
        await self._settler.join()
        try:
            await self.driver.worker_forget(self.worker_id)
        except Exception as exc:  # the registry row expires on its own; stopping must finish
            log.warning("jobs.worker.forget_failed %s: %r", self.worker_id, exc)
        if self._wake is not None:
            try:
                await self._wake.close()
            except Exception as exc:
                log.warning("jobs.wake.close_failed: %r", exc)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        log.info("jobs.worker.stopped %s", self.worker_id)
        self._stopped.set()

    async def _wait_tasks(self, tasks: list[asyncio.Task[None]], ms: int) -> None:
        if ms <= 0:
            return
        timer = asyncio.ensure_future(self.clock.sleep_ms(ms))
        pending = [t for t in tasks if not t.done()]
        try:
            while pending and not timer.done():
                await asyncio.wait([*pending, timer], return_when=asyncio.FIRST_COMPLETED)
                pending = [t for t in pending if not t.done()]
        finally:
            timer.cancel()

    async def demand(self) -> dict[str, int]:
        """Ready-now jobs per queue for an autoscaler; 0 everywhere once draining."""
        if not self._accepting:
            return dict.fromkeys(self.queues, 0)
        return await self.driver.queue_demand(self.queues, self.clock.now_ms())

    # -- the claim loop -------------------------------------------------------------------------

    def _on_wake(self, queue: str) -> None:
        self._backoff.reset()
        self._kick.set()

    def _beat(self, now: int) -> WorkerBeat:
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": list(self.queues),
            "concurrency": self.concurrency,
        }
        return WorkerBeat(self.worker_id, json.dumps(info), self.registry_ttl_ms, now)

    def _ceiling(self) -> int:
        live = self._wake is not None and self._wake.is_live()
        return self.wake_ceiling_ms if live else self._backoff.ceiling_ms

    async def _claim_loop(self) -> None:
        while self._accepting:
            free = self.max_in_flight - len(self._held)
            if free <= 0:
                self._backlog = True
                self._kick.clear()
                await self._wait(self._ceiling())
                continue
            self._kick.clear()
            now = self.clock.now_ms()
            beat = self._beat(now) if now >= self._next_beat_at else None
            try:
                result = await self.driver.job_claim(
                    ClaimParams(
                        queues=self.queues,
                        worker_id=self.worker_id,
                        limit=free,
                        lease_ms=self.lease_ms,
                        now_ms=now,
                        drop_exhausted=self._drop_exhausted,
                        beat=beat,
                    )
                )
            except Exception as exc:  # a failed pass re-arms at the floor; the loop never dies
                if isinstance(exc, JobsError):
                    log.warning("jobs.claim.failed: %s", exc)
                else:
                    log.exception("jobs.claim.crashed")
                self._backoff.reset()
                await self._wait(self._backoff.next_ms())
                continue
            if beat is not None:
                self._next_beat_at = now + self._beat_every_ms
            for b in result.buried:
                self._on_buried(b)
            for j in result.jobs:
                self._admit(j, now)
            if result.jobs and self._purger is not None:
                self._purger.grant()  # a busy worker lets a waiting purge round start at once
            if self.draining:
                break
            if result.jobs:
                self._backoff.reset()
                if len(result.jobs) == free:
                    continue
                await self._wait(self._backoff.next_ms(self._ceiling()))
            else:
                wait = self._backoff.next_ms(self._ceiling())
                await self._wait(wait)
                if (
                    self._purger is not None
                    and not self._kick.is_set()
                    and self._purger.take_idle_slot(self.clock.now_ms(), wait, self._next_beat_at)
                ):
                    # This poll's slot went to a retention round: the idle budget holds.
                    await self._wait(self._backoff.next_ms(self._ceiling()))

    async def _wait(self, ms: int | None) -> None:
        if self._kick.is_set():
            return
        kick = asyncio.ensure_future(self._kick.wait())
        waits: list[asyncio.Future[Any]] = [kick]
        if ms is not None:
            waits.append(asyncio.ensure_future(self.clock.sleep_ms(ms)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    def _admit(self, job: ClaimedJob, now: int) -> None:
        held = _Held(job, last_landed_ms=now)
        self._held[job.id] = held
        self.stats.claimed += 1
        task = asyncio.create_task(self._run_held(held))
        held.task = task

        def cancel_body() -> None:
            if held.in_body:
                task.cancel()

        held.signal.on_fire(cancel_body)

    def _on_buried(self, b: BuriedJob) -> None:
        self.stats.buried += 1
        outcome = Outcome.DEAD_LETTERED if b.state is JobState.DEAD else Outcome.DROPPED
        log.warning("jobs.claim.buried %s %s (lease lapsed on the final attempt)", b.name, b.id)
        event = SettledEvent(b.id, b.name, b.queue, outcome, 0, None, None, "X_JOB_LEASE_LOST")
        hook = asyncio.create_task(self._fire_settled(self._handles.get(b.name), event, None))
        self._hooks.add(hook)
        hook.add_done_callback(self._hooks.discard)

    # -- one held job -----------------------------------------------------------------------------

    async def _run_held(self, held: _Held) -> None:
        try:
            async with self._slots:
                held.started = True
                self.stats.running += 1
                try:
                    await self._execute(held)
                except Exception:  # the row stays leased; it lapses and is claimed again
                    log.exception("jobs.run.crashed %s %s", held.job.name, held.job.id)
                finally:
                    self.stats.running -= 1
        finally:
            if held.started:
                self._held.pop(held.job.id, None)
            if (
                self._backlog
                and self._accepting
                and self.max_in_flight - len(self._held) >= self._refill_at
            ):
                self._backlog = False
                self._kick.set()

    async def _execute(self, held: _Held) -> None:
        job = held.job
        handle = self._handles.get(job.name)
        if handle is None:
            await self._settle_error(held, None, JobNotRegisteredError(detail=job.name))
            return
        try:
            input = loads(job.input_json)
            tenant = handle.tenant_for(input)
        except JobsError as exc:
            await self._settle_error(held, handle, exc)
            return
        ctx = JobContext(
            job_id=job.id,
            run_id=job.run_id,
            name=job.name,
            queue=job.queue,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            tenant=tenant,
            enqueued_tenant=job.tenant_id,
            enqueued_by=job.enqueued_by,
            signal=held.signal,
            _report=lambda value: self._report_progress(held, value),
        )
        deadline: asyncio.Task[None] | None = None
        if handle.timeout_ms is not None:
            deadline = asyncio.create_task(self._deadline(held, handle.timeout_ms))
        value: Any = None
        error: BaseException | None = None
        held.in_body = True
        try:
            # The body runs inside this task, so a fired signal cancels it without a second
            # task per job; the tenant context set here is this task's own.
            with acting_for(tenant):
                if handle.is_async:
                    value = await handle.fn(input, ctx)
                else:
                    value = await self._run_in_thread(handle, input, ctx)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not held.signal.cancelled or task is None:
                raise
            task.uncancel()
        except Exception as exc:
            error = exc
        finally:
            held.in_body = False
            if deadline is not None:
                deadline.cancel()
        reason = held.signal.reason
        if reason is not None:
            await self._settle_cancelled(held, handle, reason, input)
            return
        if error is not None:
            await self._settle_error(held, handle, error, input)
            return
        try:
            result_json = None if value is None else dumps(value)
        except InputInvalidError as bad:
            await self._settle_error(held, handle, bad, input)
            return
        held.signal.fire(JobCancelledError("the run has ended", detail=job.id))
        landed = await self._settler.ack(
            Ack(job.fence, self.clock.now_ms(), result_json, self._pending_progress(held))
        )
        self._tally(Outcome.COMPLETED, landed, job)
        if landed:
            event = SettledEvent(
                job.id,
                job.name,
                job.queue,
                Outcome.COMPLETED,
                job.attempt,
                input,
                loads(result_json) if result_json is not None else None,
                None,
            )
            await self._fire_settled(handle, event, tenant)

    async def _run_in_thread(self, handle: JobHandle, input: JsonValue, ctx: JobContext) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="ujobs-body")
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, context.run, handle.fn, input, ctx)

    async def _deadline(self, held: _Held, ms: int) -> None:
        await self.clock.sleep_ms(ms)
        held.signal.fire(JobTimeoutError(f"deadline of {ms} ms passed", detail=held.job.id))

    async def _settle_cancelled(
        self, held: _Held, handle: JobHandle, reason: JobsError, input: JsonValue
    ) -> None:
        job = held.job
        if isinstance(reason, DrainingError):
            landed = await self._settler.nack(
                Nack(
                    job.fence,
                    NackKind.INTERRUPT,
                    self.clock.now_ms(),
                    progress_json=self._pending_progress(held),
                )
            )
            self._tally(Outcome.INTERRUPTED, landed, job)
        elif isinstance(reason, JobTimeoutError):
            await self._settle_error(held, handle, reason, input)
        else:
            # Cancelled or reclaimed: the row is no longer ours, any write would be refused.
            self.stats.lost += 1
            log.warning("jobs.lease.lost %s %s: %s", job.name, job.id, reason)

    async def _settle_error(
        self,
        held: _Held,
        handle: JobHandle | None,
        exc: BaseException,
        input: JsonValue = None,
    ) -> None:
        job = held.job
        held.signal.fire(JobCancelledError("the run has ended", detail=job.id))
        now = self.clock.now_ms()
        error = _error_text(exc)
        progress = self._pending_progress(held)
        dead_letter = handle.retry.dead_letter if handle is not None else True
        if isinstance(exc, RateLimitedError):
            nack = Nack(
                job.fence, NackKind.SHED, now, now + exc.retry_after_ms, progress_json=progress
            )
            outcome = Outcome.SHED
        elif getattr(exc, "terminal", False) is True or handle is None or job.final_attempt:
            nack = Nack(
                job.fence,
                NackKind.FAIL,
                now,
                error=error,
                dead_letter=dead_letter,
                progress_json=progress,
            )
            outcome = Outcome.DEAD_LETTERED if dead_letter else Outcome.DROPPED
        else:
            delay = handle.retry.delay_ms(job.attempt, self._rng)
            nack = Nack(
                job.fence, NackKind.RETRY, now, now + delay, error=error, progress_json=progress
            )
            outcome = Outcome.RETRIED
        if outcome is not Outcome.SHED:
            log.info("jobs.run.failed %s %s attempt %d: %s", job.name, job.id, job.attempt, error)
        landed = await self._settler.nack(nack)
        self._tally(outcome, landed, job)
        if landed and outcome in ENDING_OUTCOMES:
            event = SettledEvent(
                job.id, job.name, job.queue, outcome, job.attempt, input, None, error
            )
            await self._fire_settled(handle, event, None)

    def _tally(self, outcome: Outcome, landed: bool, job: ClaimedJob) -> None:
        if landed:
            self.stats.count(outcome)
        else:
            self.stats.unowned += 1
            log.warning("jobs.settle.unowned %s %s (%s)", job.name, job.id, outcome.value)

    async def _fire_settled(
        self, handle: JobHandle | None, event: SettledEvent, tenant: str | None
    ) -> None:
        hooks = [h for h in (handle.on_settled if handle else None, self._on_settled) if h]
        for hook in hooks:
            for attempt in range(1, ON_SETTLED_TRIES + 1):
                try:
                    with acting_for(tenant):
                        outcome = hook(event)
                        if outcome is not None:
                            await outcome
                    break
                except Exception as exc:  # a hook never breaks the worker, by contract
                    log.warning("jobs.on_settled.failed %s try %d: %r", event.job_id, attempt, exc)

    # -- progress and heartbeats ------------------------------------------------------------------

    def _report_progress(self, held: _Held, value: Any) -> None:
        if held.signal.cancelled:
            return
        held.progress = value
        held.progress_dirty = True

    def _pending_progress(self, held: _Held) -> str | None:
        if not held.progress_dirty:
            return None
        held.progress_dirty = False
        try:
            return dumps(held.progress)
        except InputInvalidError as exc:
            log.warning("jobs.progress.invalid %s: %s", held.job.id, exc)
            return None

    async def _heartbeat_loop(self) -> None:
        while True:
            await self.clock.sleep_ms(self.heartbeat_ms)
            try:
                await self._renew()
            except Exception:  # a timer body catches before it finalises
                log.exception("jobs.heartbeat.crashed")

    async def _renew(self) -> None:
        now = self.clock.now_ms()
        held = [h for h in self._held.values() if not h.signal.cancelled]
        if held:
            answers: list[bool] | None
            try:
                answers = await self.driver.job_heartbeat(
                    [Heartbeat(h.job.fence, self.lease_ms, now) for h in held]
                )
            except JobsError as exc:
                log.warning("jobs.heartbeat.failed: %s", exc)
                answers = None
            after = self.clock.now_ms()
            for i, h in enumerate(held):
                if answers is not None and answers[i]:
                    h.last_landed_ms = now
                elif answers is not None or after - h.last_landed_ms >= self.lease_ms:
                    h.signal.fire(LeaseLostError(detail=h.job.id))
        due = [
            h
            for h in self._held.values()
            if h.progress_dirty and now - h.progress_sent_ms >= self.progress_every_ms
        ]
        if due:
            items: list[tuple[_Held, str]] = []
            for h in due:
                text = self._pending_progress(h)
                if text is not None:
                    h.progress_sent_ms = now
                    items.append((h, text))
            with contextlib.suppress(JobsError):
                await self.driver.job_progress(
                    [Progress(h.job.fence, text, now) for h, text in items]
                )
        if now >= self._next_beat_at + self.heartbeat_ms:
            # No claim carried the beat (every slot busy): announce on its own.
            with contextlib.suppress(JobsError):
                await self.driver.worker_beat(self._beat(now))
                self._next_beat_at = now + self._beat_every_ms


async def _swallow(fut: asyncio.Future[Any]) -> None:
    with contextlib.suppress(BaseException):
        await fut


def _error_text(exc: BaseException) -> str:
    doc: dict[str, str] = {"type": type(exc).__name__, "message": str(exc)[:2000]}
    if isinstance(exc, JobsError):
        doc["code"] = exc.code
        doc["message"] = exc.message[:2000]
    return json.dumps(doc, ensure_ascii=False)
