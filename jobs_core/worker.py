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
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from jobs_core.backoff import IdleBackoff
from jobs_core.clock import Clock, SystemClock
from jobs_core.context import CancelSignal, JobContext
from jobs_core.driver import JobDriver, WakeSubscription
from jobs_core.errors import (
    DrainingError,
    DriverUnavailableError,
    InputInvalidError,
    JobCancelledError,
    JobsError,
    JobTimeoutError,
    LeaseLostError,
    RateLimitedError,
    ResultInvalidError,
    TenantRequiredError,
    WorkerError,
)
from jobs_core.facade import Jobs, LoopJobs, SettledEvent, bound_client
from jobs_core.ids import new_id
from jobs_core.job import JobHandle, jobs_of
from jobs_core.jsonform import JsonValue, dumps, loads
from jobs_core.options import count, finite_number, seconds_to_ms
from jobs_core.records import (
    Ack,
    BuriedJob,
    ClaimedJob,
    ClaimParams,
    Fence,
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
from jobs_core.threads import BodyThreads

log = logging.getLogger("jobs")

#: Tries of an `on_settled` hook before it is given up (never rethrown).
ON_SETTLED_TRIES = 3
#: How long a cancelled async body gets to unwind before the worker moves on without it.
CANCEL_GRACE_MS = 1_000
#: A job whose name this worker does not run is given back (no attempt spent) to run this much
#: later: a worker that knows the name (the rest of a rolling deploy) gets it then, and an old
#: worker spends one claim a minute on it, not a spin.
UNKNOWN_NAME_DELAY_MS = 60_000
#: At most one warning per unknown name in this window (the worker's clock).
UNKNOWN_NAME_WARN_EVERY_MS = 60_000
#: The most UTF-8 bytes of traceback a `last_error` keeps (the last frames: where it raised).
TRACEBACK_BYTES = 8_192
#: The most characters of an exception's message a `last_error` keeps.
MESSAGE_CHARS = 2_000
#: Backoff while the store is unavailable (start-up, claims): from the first to the last, doubling.
OUTAGE_BACKOFF_MIN_MS = 100
OUTAGE_BACKOFF_MAX_MS = 5_000
#: How soon a heartbeat that could not reach the store is tried again.
HEARTBEAT_RETRY_MS = 1_000
#: At the backoff's ceiling, a still-unavailable store is logged once every this many tries.
OUTAGE_LOG_EVERY = 12
#: A settle the store cannot take is retried until its lease's end plus this (the fence keeps a
#: late one safe: it lands only while no other claim was made).
SETTLE_MARGIN_MS = 1_000
#: What a drain may spend past its deadline on the store calls of its teardown (settles,
#: `worker_forget`, closing the wake), store up or down; each call gets at least the floor.
STOP_SLACK_MS = 1_000
STOP_CALL_FLOOR_MS = 250

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
    #: Runs aborted because the row was reclaimed or its lease lapsed (their writes are refused).
    lost: int = 0
    #: Runs aborted because a user cancelled the row while it ran.
    cancelled: int = 0
    #: Jobs given back because this worker does not run their name (alert on it in a deploy).
    unknown_name: int = 0
    #: `def` bodies whose run ended (deadline, cancel) while their thread still ran.
    threads_overrun: int = 0
    #: Of those, the threads still running now (each holds a thread, never a slot).
    threads_overrunning: int = 0
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
    #: A settle was made (or the row is known not to be ours): the run path's net stands down.
    settled: bool = False


class Worker:
    """Runs the given jobs from `queues` until `stop()`; see the README for every option.

    Durations are seconds. `concurrency` bodies run at once (50 by default: an async body
    waiting on I/O costs little, and a `def` body runs on a thread, see `_run_in_thread`);
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
        self._settler = Settler(
            driver,
            self.clock,
            give_up_at=self._settle_give_up_at,
            replace_invalid=self._replace_invalid,
        )
        self._force = asyncio.Event()
        self._abandoned: set[asyncio.Future[Any]] = set()
        self._executor: BodyThreads | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._stop_task: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self._next_beat_at = 0
        self._wake: WakeSubscription | None = None
        self._hooks: set[asyncio.Task[None]] = set()
        self._unknown_warned: dict[str, int] = {}
        self._client: Jobs | None = None
        #: How long finished rows are kept (None: this worker never purges).
        self.retention = retention
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
        outage = _Outage("jobs.worker.store_unavailable")
        while True:
            try:
                await self.driver.open()
                await self.driver.worker_beat(self._beat(self.clock.now_ms()))
                break
            except DriverUnavailableError as exc:
                # A store still starting (or restarting) is waited for, never a reason to exit.
                await self._wait(outage.failed(exc))
                if not self._accepting:
                    return
        outage.recovered()
        self._next_beat_at = self.clock.now_ms() + self._beat_every_ms
        if self.driver.capabilities().wake:
            try:
                self._wake = await self.driver.wake_subscribe(self.queues, self._on_wake)
            except DriverUnavailableError as exc:  # the poll is the guarantee; the wake can wait
                log.warning("jobs.wake.subscribe_failed: %s", exc)
        self._loops = [
            asyncio.create_task(self._claim_loop(), name="ujobs-claim"),
            asyncio.create_task(self._heartbeat_loop(), name="ujobs-heartbeat"),
        ]
        if self._purger is not None:
            self._loops.append(asyncio.create_task(self._purger.run(), name="ujobs-purge"))
        log.info("jobs.worker.started %s queues=%s", self.worker_id, ",".join(self.queues))

    async def run(self) -> None:
        """Start, then return once the worker has stopped (after a drain)."""
        if not self.draining:  # a drain begun while the start waited for the store ends it
            await self.start()
        await self._stopped.wait()

    def install_signal_handlers(self) -> None:
        """Drain on SIGTERM and SIGINT, bounded by `drain_timeout` (a deploy).

        A second signal during the drain (Ctrl-C twice) forces the exit: after the drain's first
        phase every running body is aborted at once and its claim handed back (`interrupted`).
        """
        loop = asyncio.get_running_loop()

        def on_signal(sig: signal.Signals) -> None:
            if not self.draining:
                log.warning(
                    "jobs.worker.draining %s on %s (again to force the exit)",
                    self.worker_id,
                    sig.name,
                )
                task = asyncio.ensure_future(self.stop(self.drain_timeout_ms / 1000))
                self._abandoned.add(task)
                task.add_done_callback(self._abandoned.discard)
            else:
                self.force_stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)

    def force_stop(self) -> None:
        """Cut a running drain short: bodies are aborted now (`X_DRAINING`), claims handed back."""
        if self._force.is_set():
            return
        log.warning(
            "jobs.worker.forced %s: aborting %d running bodies now, their claims handed back",
            self.worker_id,
            self.stats.running,
        )
        self._force.set()
        self._kick.set()

    async def stop(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 - a drain budget, not a call timeout
        """Drain and tear down; a second call joins the first.

        Phase one stops claiming and hands back held jobs that never started. Running bodies
        may finish until `timeout` seconds minus `drain_margin`; then each is aborted with
        `X_DRAINING` and its claim goes back uncounted (`interrupted`); `timeout=0` aborts them
        at once. `timeout=None` waits for every body. With a timeout the teardown returns by
        about `timeout` + 1 s, store up or down: its store calls are bounded by that budget.
        """
        if self._stop_task is None:
            deadline = (
                None
                if timeout is None
                else self.clock.now_ms()
                + round(
                    finite_number(timeout, "timeout", minimum=0.0, maximum=7 * 24 * 3600) * 1000
                )
            )
            self._stop_task = asyncio.create_task(self._teardown(deadline))
        await asyncio.shield(self._stop_task)

    async def _teardown(self, deadline_ms: int | None) -> None:
        self._accepting = False
        self._kick.set()
        # Every store call below is bounded, store up or down: the drain ends by `end_ms`
        # (plus a floor per call), never on the store's say.
        end_ms = None if deadline_ms is None else deadline_ms + STOP_SLACK_MS
        # Settles are retried up to the deadline itself; the slack is for the calls after them.
        self._settler.set_deadline(deadline_ms)
        claim_loop = self._loops[0] if self._loops else None
        # The drain waits out the claim round it races, so no claim lands after it.
        if claim_loop is not None and not await self._bounded(
            claim_loop, self._left_ms(deadline_ms)
        ):
            log.warning("jobs.worker.claim_abandoned %s: outlived the drain", self.worker_id)
        waiting = [h for h in self._held.values() if not h.started]
        for h in waiting:
            if h.task is not None:
                h.task.cancel()
        await asyncio.gather(*(h.task for h in waiting if h.task), return_exceptions=True)
        # Handed back alongside phase two, so an unavailable store cannot eat the bodies' time.
        handback = asyncio.ensure_future(self._hand_back(waiting))
        running = [h.task for h in self._held.values() if h.task is not None and not h.task.done()]
        if running:
            if deadline_ms is None:
                await self._wait_tasks(running, None)
            else:
                cutoff = deadline_ms - self.drain_margin_ms
                await self._wait_tasks(running, cutoff - self.clock.now_ms())
            if any(not t.done() for t in running):
                for h in list(self._held.values()):
                    if h.started:
                        h.signal.fire(DrainingError(detail=h.job.id))
                # A body that ignores its cancellation must not hold the deploy hostage.
                await self._wait_tasks(running, CANCEL_GRACE_MS, forceable=False)
        await self._bounded(handback, self._left_ms(end_ms))
        for task in self._loops[1:]:
            task.cancel()
        # A heartbeat cancelled mid-call may take its driver's time to unwind: not the drain's.
        await self._bounded(
            asyncio.gather(*self._loops[1:], return_exceptions=True), self._left_ms(end_ms)
        )
        if not await self._bounded(self._settler.join(), self._left_ms(end_ms)):
            log.warning(
                "jobs.worker.settles_abandoned %s: the store did not answer", self.worker_id
            )
            self._settler.abandon()
        try:
            await self._call(self.driver.worker_forget(self.worker_id), end_ms, "worker_forget")
        except Exception as exc:  # the registry row expires on its own; stopping must finish
            log.warning("jobs.worker.forget_failed %s: %r", self.worker_id, exc)
        if self._wake is not None:
            try:
                await self._call(self._wake.close(), end_ms, "wake close")
            except Exception as exc:
                log.warning("jobs.wake.close_failed: %r", exc)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        log.info("jobs.worker.stopped %s", self.worker_id)
        self._stopped.set()

    async def _hand_back(self, waiting: list[_Held]) -> None:
        if not waiting:
            return
        now = self.clock.now_ms()
        answers = await self._settler.nack_many(
            [Nack(h.job.fence, NackKind.INTERRUPT, now) for h in waiting]
        )
        for h, ok in zip(waiting, answers, strict=True):
            self._held.pop(h.job.id, None)
            self._tally(Outcome.INTERRUPTED, ok, h.job)

    def _left_ms(self, end_ms: int | None) -> int | None:
        """What is left of a drain budget ending at `end_ms` (None: unbounded), at least a floor."""
        if end_ms is None:
            return None
        return max(STOP_CALL_FLOOR_MS, end_ms - self.clock.now_ms())

    async def _bounded(self, aw: Awaitable[Any], ms: int | None) -> bool:
        """Wait for `aw` at most `ms` of wall time (None: no bound); True when it finished.

        Past the bound it is cancelled and left to unwind on its own: a store call cancelled
        mid-flight may take its driver's own time to give up, and the drain does not wait for it.
        """
        fut = asyncio.ensure_future(aw)
        done, _ = await asyncio.wait([fut], timeout=None if ms is None else ms / 1000)
        if fut in done:
            return True
        fut.cancel()
        self._abandoned.add(fut)
        fut.add_done_callback(self._abandoned.discard)
        return False

    async def _call(self, aw: Awaitable[Any], end_ms: int | None, what: str) -> None:
        """A teardown store call bounded by the drain's budget; past it, logged and abandoned."""
        fut = asyncio.ensure_future(aw)
        if not await self._bounded(fut, self._left_ms(end_ms) if end_ms is not None else None):
            log.warning(
                "jobs.worker.stop_call_abandoned %s: %s outlived the drain", self.worker_id, what
            )
            return
        fut.result()

    async def _wait_tasks(
        self, tasks: list[asyncio.Task[None]], ms: int | None, *, forceable: bool = True
    ) -> None:
        """Until `tasks` are done, `ms` of the clock passed (None: no bound) or a forced stop."""
        if ms is not None and ms <= 0:
            return
        pending = [t for t in tasks if not t.done()]
        if not pending or (forceable and self._force.is_set()):
            return
        stops: list[asyncio.Future[Any]] = []
        if ms is not None:
            stops.append(asyncio.ensure_future(self.clock.sleep_ms(ms)))
        if forceable:
            stops.append(asyncio.ensure_future(self._force.wait()))
        try:
            while pending and not any(s.done() for s in stops):
                await asyncio.wait([*pending, *stops], return_when=asyncio.FIRST_COMPLETED)
                pending = [t for t in pending if not t.done()]
        finally:
            for s in stops:
                s.cancel()

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
        outage = _Outage("jobs.claim.failed")
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
            except Exception as exc:  # a failed pass backs off, capped; the loop never dies
                if not isinstance(exc, JobsError):
                    log.exception("jobs.claim.crashed")
                self._backoff.reset()
                await self._wait(outage.failed(exc))
                continue
            outage.recovered()
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

    def _log_fields(
        self, job_id: str, name: str, queue: str, attempt: int | None
    ) -> dict[str, object]:
        """The `extra` every run-path log record carries (a JSON formatter prints them)."""
        return {
            "job_id": job_id,
            "job_name": name,
            "queue": queue,
            "attempt": attempt,
            "worker_id": self.worker_id,
        }

    def _fields(self, job: ClaimedJob) -> dict[str, object]:
        return self._log_fields(job.id, job.name, job.queue, job.attempt)

    def _on_buried(self, b: BuriedJob) -> None:
        self.stats.buried += 1
        outcome = Outcome.DEAD_LETTERED if b.state is JobState.DEAD else Outcome.DROPPED
        # A dead letter (or drop) like any other: ERROR, though no traceback exists for it.
        log.error(
            "jobs.claim.buried %s %s (lease lapsed on the final attempt)",
            b.name,
            b.id,
            extra=self._log_fields(b.id, b.name, b.queue, None),
        )
        event = SettledEvent(b.id, b.name, b.queue, outcome, 0, None, None, "X_JOB_LEASE_LOST")
        hook = asyncio.create_task(self._fire_settled(self._handles.get(b.name), event, None))
        self._hooks.add(hook)
        hook.add_done_callback(self._hooks.discard)

    # -- one held job -----------------------------------------------------------------------------

    async def _run_held(self, held: _Held) -> None:
        """Run one claimed job in a slot; whatever raises, the job is settled (or known lost).

        An exception that escapes `_execute` before a settle was made fails the attempt on the
        normal retry path, typed (`X_WORKER_ERROR` with the original type and message unless
        it was a `JobsError` already). Only a settle that itself raises leaves the row to its
        lease.
        """
        try:
            async with self._slots:
                held.started = True
                self.stats.running += 1
                try:
                    await self._execute(held)
                except Exception as exc:
                    await self._settle_crash(held, exc)
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

    async def _settle_crash(self, held: _Held, exc: Exception) -> None:
        job = held.job
        if held.settled:
            log.error(
                "jobs.run.crashed %s %s after its settle",
                job.name,
                job.id,
                exc_info=exc,
                extra=self._fields(job),
            )
            return
        error = _typed(exc, WorkerError(_brief(exc), detail=job.name))
        try:
            await self._settle_error(held, self._handles.get(job.name), error)
        except Exception:  # the last resort: the row stays leased, lapses and is claimed again
            log.exception(
                "jobs.run.crashed %s %s and its settle failed",
                job.name,
                job.id,
                extra=self._fields(job),
            )

    async def _execute(self, held: _Held) -> None:
        """Run the body and settle its job; each step around the body that raises settles the
        job with a typed error (the stored input, the tenant function, the result's form)."""
        job = held.job
        handle = self._handles.get(job.name)
        if handle is None:
            await self._give_back_unknown(held)
            return
        try:
            input = loads(job.input_json)
        except Exception as exc:
            undecodable = InputInvalidError(f"the stored input cannot be decoded: {_brief(exc)}")
            await self._settle_error(held, handle, _typed(exc, undecodable))
            return
        try:
            tenant = handle.tenant_for(input)
        except Exception as exc:
            # The function sees the stored JSON form (a dict for a dataclass input).
            no_org = TenantRequiredError(
                f"the tenant function raised {_brief(exc)}", detail=job.name
            )
            await self._settle_error(held, handle, _typed(exc, no_org), input)
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
        client = self._body_client()
        started = asyncio.Event()
        deadline: asyncio.Task[None] | None = None
        if handle.timeout_ms is not None:
            deadline = asyncio.create_task(self._deadline(held, handle.timeout_ms, started))
        value: Any = None
        error: BaseException | None = None
        held.in_body = True
        try:
            # The body runs inside this task, so a fired signal cancels it without a second
            # task per job; the tenant and client contexts set here are this task's own (and
            # a thread body's, whose context is a copy).
            with acting_for(tenant), bound_client(client):
                if handle.is_async:
                    started.set()
                    value = await handle.fn(input, ctx)
                else:
                    value = await self._run_in_thread(held, handle, input, ctx, started)
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
        except Exception as exc:
            # Terminal: the same result will not be storable on a re-run, which would repeat
            # the body's side effects.
            why = exc.message if isinstance(exc, JobsError) else _brief(exc)
            unstorable = ResultInvalidError(f"the result cannot be stored: {why}", detail=job.name)
            unstorable.__cause__ = exc
            await self._settle_error(held, handle, unstorable, input)
            return
        held.signal.fire(JobCancelledError("the run has ended", detail=job.id))
        held.settled = True
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

    def _body_client(self) -> Jobs:
        """The client a body's `handle.enqueue()` uses: this worker's driver and clock, its
        sync calls run on this worker's loop (so `enqueue_sync` works from a `def` body)."""
        if self._client is None:
            self._client = LoopJobs(self.driver, loop=asyncio.get_running_loop(), clock=self.clock)
        return self._client

    async def _give_back_unknown(self, held: _Held) -> None:
        """Give back a job this worker does not run: `SHED`, no attempt spent, due again in
        `UNKNOWN_NAME_DELAY_MS`; never failed for it (an older worker in a rolling deploy)."""
        job = held.job
        held.signal.fire(JobCancelledError("the run has ended", detail=job.id))
        held.settled = True
        now = self.clock.now_ms()
        self.stats.unknown_name += 1
        warned = self._unknown_warned.get(job.name)
        if warned is None or now - warned >= UNKNOWN_NAME_WARN_EVERY_MS:
            self._unknown_warned[job.name] = now
            log.warning(
                "jobs.run.unknown_name %s %s: this worker does not run %r; given back for %d s",
                job.name,
                job.id,
                job.name,
                UNKNOWN_NAME_DELAY_MS // 1000,
                extra=self._fields(job),
            )
        landed = await self._settler.nack(
            Nack(job.fence, NackKind.SHED, now, now + UNKNOWN_NAME_DELAY_MS)
        )
        if not landed:
            self._tally(Outcome.SHED, landed, job)

    async def _run_in_thread(
        self,
        held: _Held,
        handle: JobHandle,
        input: JsonValue,
        ctx: JobContext,
        started: asyncio.Event,
    ) -> Any:
        """Run a `def` body on a thread free when it is submitted (`BodyThreads`).

        `started` is set when the body starts on its thread. A run that ends while the thread
        still runs (deadline, cancel) leaves it to finish on its own: counted in
        `threads_overrun`, logged once, and it never takes a thread from the next body.
        """
        if self._executor is None:
            self._executor = BodyThreads(self.concurrency, "ujobs-body")
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()

        def run() -> Any:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(started.set)
            return context.run(handle.fn, input, ctx)

        thread_run = self._executor.submit(run)
        try:
            return await asyncio.wrap_future(thread_run)
        except asyncio.CancelledError:
            if not thread_run.done():
                self._thread_overran(held, thread_run, loop)
            raise

    def _thread_overran(
        self, held: _Held, thread_run: Future[Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        self.stats.threads_overrun += 1
        self.stats.threads_overrunning += 1
        reason = held.signal.reason
        log.warning(
            "jobs.run.thread_overrun %s %s: the run ended (%s) but its thread still runs; "
            "it keeps that thread until it returns",
            held.job.name,
            held.job.id,
            reason.code if reason is not None else "cancelled",
            extra=self._fields(held.job),
        )

        def returned() -> None:
            self.stats.threads_overrunning -= 1

        def on_done(_: Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(returned)

        thread_run.add_done_callback(on_done)

    async def _deadline(self, held: _Held, ms: int, started: asyncio.Event) -> None:
        """Fire the run's signal `ms` after its body STARTED (not from when it was claimed or
        waited for a thread)."""
        await started.wait()
        await self.clock.sleep_ms(ms)
        held.signal.fire(JobTimeoutError(f"deadline of {ms} ms passed", detail=held.job.id))

    async def _settle_cancelled(
        self, held: _Held, handle: JobHandle, reason: JobsError, input: JsonValue
    ) -> None:
        """Settle a run its signal stopped: a drain hands it back, a deadline fails the
        attempt; a lost fence writes nothing (the row is no longer ours) and is told apart
        as a user cancel or a lost lease by one read of the row."""
        job = held.job
        if isinstance(reason, DrainingError):
            held.settled = True
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
            held.settled = True
            if await self._was_cancelled(held):
                self.stats.cancelled += 1
                log.info(
                    "jobs.run.cancelled %s %s: cancelled while it ran",
                    job.name,
                    job.id,
                    extra=self._fields(job),
                )
            else:
                self.stats.lost += 1
                log.warning(
                    "jobs.lease.lost %s %s: %s", job.name, job.id, reason, extra=self._fields(job)
                )

    async def _was_cancelled(self, held: _Held) -> bool:
        """True when the row reads `cancelled`: one read per lost run, never per heartbeat.

        Skipped (False) when the lease went unrenewed for a whole window: then the store was
        unreachable, a read would most likely fail too, and a reclaim is the likelier cause.
        """
        if self.clock.now_ms() - held.last_landed_ms >= self.lease_ms:
            return False
        try:
            rows = await self.driver.job_get_many([held.job.id])
        except Exception as exc:  # telling the two apart is for the log; never fatal
            log.warning(
                "jobs.lease.read_failed %s: %r", held.job.id, exc, extra=self._fields(held.job)
            )
            return False
        found = rows.get(held.job.id)
        return found is not None and found.state is JobState.CANCELLED

    async def _settle_error(
        self,
        held: _Held,
        handle: JobHandle | None,
        exc: BaseException,
        input: JsonValue = None,
    ) -> None:
        """Fail the attempt with `exc`: retried, shed (rate limited), or failed for good
        (terminal, unknown handle or final attempt). A failed attempt logs at WARNING and a
        dead letter or drop at ERROR, with the traceback."""
        job = held.job
        held.signal.fire(JobCancelledError("the run has ended", detail=job.id))
        now = self.clock.now_ms()
        error = _error_text(exc)
        progress = self._pending_progress(held)
        dead_letter = handle.retry.dead_letter if handle is not None else True
        fields = self._fields(job)
        if isinstance(exc, RateLimitedError):
            nack = Nack(
                job.fence, NackKind.SHED, now, now + exc.retry_after_ms, progress_json=progress
            )
            outcome = Outcome.SHED
            log.debug("jobs.run.shed %s %s: %s", job.name, job.id, _brief(exc), extra=fields)
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
            log.error(
                "jobs.run.%s %s %s attempt %d of %d: %s",
                outcome.value.replace("-", "_"),
                job.name,
                job.id,
                job.attempt,
                job.max_attempts,
                _brief(exc),
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
                _brief(exc),
                exc_info=exc,
                extra=fields,
            )
        held.settled = True
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
            log.warning(
                "jobs.settle.unowned %s %s (%s)",
                job.name,
                job.id,
                outcome.value,
                extra=self._fields(job),
            )

    async def _fire_settled(
        self, handle: JobHandle | None, event: SettledEvent, tenant: str | None
    ) -> None:
        hooks = [h for h in (handle.on_settled if handle else None, self._on_settled) if h]
        for hook in hooks:
            for attempt in range(1, ON_SETTLED_TRIES + 1):
                try:
                    with acting_for(tenant), bound_client(self._body_client()):
                        outcome = hook(event)
                        if outcome is not None:
                            await outcome
                    break
                except Exception as exc:  # a hook never breaks the worker, by contract
                    log.warning(
                        "jobs.on_settled.failed %s try %d: %r",
                        event.job_id,
                        attempt,
                        exc,
                        extra=self._log_fields(
                            event.job_id, event.name, event.queue, event.attempt or None
                        ),
                    )

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
        except Exception as exc:  # a bad progress value is dropped; it never blocks a settle
            log.warning(
                "jobs.progress.invalid %s: %s",
                held.job.id,
                _brief(exc),
                extra=self._fields(held.job),
            )
            return None

    async def _heartbeat_loop(self) -> None:
        # After a failed renewal the next comes within a second, not a period later, so a store
        # that returns before the lease runs out renews it in time.
        while True:
            try:
                landed = await self._renew_after(self.heartbeat_ms)
            except Exception:  # a timer body catches before it finalises
                log.exception("jobs.heartbeat.crashed")
                landed = True
            while not landed:
                try:
                    landed = await self._renew_after(min(HEARTBEAT_RETRY_MS, self.heartbeat_ms))
                except Exception:
                    log.exception("jobs.heartbeat.crashed")
                    landed = True

    async def _renew_after(self, ms: int) -> bool:
        await self.clock.sleep_ms(ms)
        return await self._renew()

    async def _renew(self) -> bool:
        """Renew every held lease; False when the store could not be reached for it."""
        landed = True
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
                landed = False
            after = self.clock.now_ms()
            for i, h in enumerate(held):
                if answers is not None and answers[i]:
                    h.last_landed_ms = now
                elif answers is not None or after - h.last_landed_ms >= self.lease_ms:
                    # Refused by the fence, or unrenewed for a whole lease: only then lost.
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
        return landed

    # -- settles that cannot be sent as they are, or not yet ----------------------------------

    def _settle_give_up_at(self, fence: Fence) -> int | None:
        """When a settle of this claim stops being worth retrying: its lease's end plus a margin."""
        h = self._held.get(fence.job_id)
        if h is None or h.job.claims != fence.claims:
            return None
        return h.last_landed_ms + self.lease_ms + SETTLE_MARGIN_MS

    def _replace_invalid(self, item: Ack | Nack, exc: JobsError) -> Nack | None:
        """A settle the driver would refuse fails its own job with that error instead."""
        now = self.clock.now_ms()
        error = _error_text(exc)
        h = self._held.get(item.fence.job_id)
        handle = self._handles.get(h.job.name) if h is not None else None
        if h is None or handle is None or h.job.final_attempt:
            dead_letter = handle.retry.dead_letter if handle is not None else True
            return Nack(item.fence, NackKind.FAIL, now, error=error, dead_letter=dead_letter)
        delay = handle.retry.delay_ms(h.job.attempt, self._rng)
        return Nack(item.fence, NackKind.RETRY, now, now + delay, error=error)


class _Outage:
    """Capped exponential backoff for a store that is down, logged once per step, not per try."""

    def __init__(self, event: str) -> None:
        self._event = event
        self._next_ms = OUTAGE_BACKOFF_MIN_MS
        self._tries = 0

    def failed(self, exc: BaseException) -> int:
        """The wait before the next try; logs when the wait grows (and now and then at the cap)."""
        wait = self._next_ms
        self._tries += 1
        at_cap = wait >= OUTAGE_BACKOFF_MAX_MS
        if not at_cap or self._tries % OUTAGE_LOG_EVERY == 0:
            log.warning(
                "%s: %s (try %d, again in %.1f s)", self._event, exc, self._tries, wait / 1000
            )
        self._next_ms = min(wait * 2, OUTAGE_BACKOFF_MAX_MS)
        return wait

    def recovered(self) -> None:
        if self._tries:
            log.warning("%s: the store answers again after %d tries", self._event, self._tries)
        self._next_ms = OUTAGE_BACKOFF_MIN_MS
        self._tries = 0


def _clean(text: str) -> str:
    # A lone surrogate in a message would make the settle unstorable (UTF-8 only).
    return text.encode("utf-8", "replace").decode("utf-8")


def _brief(exc: BaseException) -> str:
    """`Type: message` for an exception (`X_CODE: message` for a `JobsError`), bounded."""
    return _clean(
        str(exc)[:MESSAGE_CHARS]
        if isinstance(exc, JobsError)
        else f"{type(exc).__name__}: {str(exc)[:MESSAGE_CHARS]}"
    )


def _typed(exc: Exception, typed: JobsError) -> JobsError:
    """`exc` itself when it is a `JobsError`, else `typed` caused by it (traceback kept)."""
    if isinstance(exc, JobsError):
        return exc
    typed.__cause__ = exc
    return typed


def _traceback_text(exc: BaseException) -> str | None:
    """The formatted traceback (with its cause chain), its last `TRACEBACK_BYTES` kept."""
    if exc.__traceback__ is None and exc.__cause__ is None and exc.__context__ is None:
        return None
    text = _clean("".join(traceback.format_exception(exc)))
    raw = text.encode("utf-8")
    if len(raw) <= TRACEBACK_BYTES:
        return text
    marker = "... (earlier frames cut)\n"
    tail = raw[len(raw) - TRACEBACK_BYTES + len(marker) :].decode("utf-8", "ignore")
    # Start at a whole line, so the first frame kept reads as a frame.
    cut = tail.find("\n")
    return marker + (tail[cut + 1 :] if cut >= 0 else tail)


def _error_text(exc: BaseException) -> str:
    """`last_error`: JSON with the type, the message, the code of a `JobsError`, and a bounded
    traceback when the error was raised (not for one the worker made, a deadline)."""
    doc: dict[str, str] = {"type": type(exc).__name__, "message": _clean(str(exc)[:MESSAGE_CHARS])}
    if isinstance(exc, JobsError):
        doc["code"] = exc.code
        doc["message"] = _clean(exc.message[:MESSAGE_CHARS])
    tb = _traceback_text(exc)
    if tb is not None:
        doc["traceback"] = tb
    return json.dumps(doc, ensure_ascii=False)
