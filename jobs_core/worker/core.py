"""The `Worker` itself: its options, the phases it wires together, and its lifecycle (start,
run, signals, stop, demand)."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType

from jobs_core.backoff import IdleBackoff
from jobs_core.clock import Clock, SystemClock
from jobs_core.driver import JobDriver, WakeSubscription, name_refusal
from jobs_core.errors import (
    ConcurrencyUnenforceableError,
    DrainingError,
    DriverUnavailableError,
    ExecutorInvalidError,
    OptionInvalidError,
)
from jobs_core.facade import Jobs, LoopJobs
from jobs_core.ids import host_name, new_id
from jobs_core.job import JobHandle, jobs_of
from jobs_core.leases.admit import Gate
from jobs_core.leases.limits import RateLimit, resolve_rate_limits
from jobs_core.lifecycle import wait_for_store
from jobs_core.options import check_clock, count, finite_number, seconds_to_ms
from jobs_core.processes import reach_refusal
from jobs_core.retention import DEFAULT_RETENTION, Purger, Retention, retention_on
from jobs_core.steps.unwind import UNWIND_JOB, unwind_job
from jobs_core.worker.claim import ClaimLoop
from jobs_core.worker.drain import Drain
from jobs_core.worker.heartbeat import HeartbeatLoop
from jobs_core.worker.held import Held
from jobs_core.worker.outage import Outage, StoreWatch
from jobs_core.worker.outcome import BurialObserver, Observer, Outcomes, WorkerHook
from jobs_core.worker.registry import Registry
from jobs_core.worker.run import Runner
from jobs_core.worker.stats import WorkerStats

log = logging.getLogger("jobs")


class Worker:
    """Runs the given jobs from `queues` until `stop()`; see the README for every option.

    Durations are seconds. `concurrency` bodies run at once (50 by default: an async body
    waiting on I/O costs little, and a `def` body runs on a thread, see
    `Runner._run_in_thread`); up to `max_in_flight` jobs are held (claimed, leased) including
    those waiting for a slot. A job whose body has ended holds neither while its settle is on
    its way (up to `max_in_flight` such jobs more): the next body and the next claim need not
    wait for that round trip. Zero concurrency is refused: a worker that may run nothing is a
    mistake, not "unlimited".

    `process_pool_size`: how many processes run `executor="process"` bodies at once (default:
    the CPU count, at most `concurrency`); they are spawned as such bodies need them, and a body
    waits, in its slot, for a free one. No process starts for a worker that runs no such job.
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
        rate_limits: RateLimit | Sequence[RateLimit] | None = None,
        process_pool_size: int | None = None,
    ) -> None:
        self.driver = driver
        handles = jobs_of(jobs)
        #: The jobs this worker runs, as declared (its metrics read the backfills among them).
        self.handles: tuple[JobHandle, ...] = tuple(handles)
        by_name = {h.name: h for h in handles}
        self.queues: tuple[str, ...] = _queues(queues, handles)
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
            raise OptionInvalidError("must be shorter than lease", detail="heartbeat_every")
        backoff = IdleBackoff(
            seconds_to_ms(poll_floor, "poll_floor"), seconds_to_ms(poll_ceiling, "poll_ceiling")
        )
        self.wake_ceiling_ms = seconds_to_ms(wake_ceiling, "wake_ceiling")
        self.drain_timeout_ms = seconds_to_ms(drain_timeout, "drain_timeout")
        self.drain_margin_ms = round(
            finite_number(drain_margin, "drain_margin", minimum=0.0, maximum=3600.0) * 1000
        )
        self.registry_ttl_ms = seconds_to_ms(registry_ttl, "registry_ttl")
        self.progress_every_ms = seconds_to_ms(progress_every, "progress_every")
        self.process_pool_size = count(
            process_pool_size
            if process_pool_size is not None
            else min(os.cpu_count() or 1, self.concurrency),
            "process_pool_size",
            minimum=1,
            maximum=1_024,
        )
        in_process = [h for h in handles if h.executor == "process"]
        for h in in_process:
            # Checked where the modules are loaded: a child imports the body by these names.
            why = reach_refusal(h.fn)
            if why is not None:
                raise ExecutorInvalidError(why, detail=h.name)
        if on_settled is not None and not callable(on_settled):
            raise OptionInvalidError("must be a function of the settled event", detail="on_settled")
        if worker_id is not None and (why := name_refusal(worker_id)) is not None:
            # Refused here, not by every claim and beat of the loop.
            raise OptionInvalidError(f"the worker id {why}", detail="worker_id")
        self.worker_id = worker_id or f"{host_name()}:{os.getpid()}:{new_id()[-12:]}"
        check_clock(clock)
        if rng is not None and not isinstance(rng, random.Random):
            # Read first by a jittered retry's delay, as an AttributeError.
            raise OptionInvalidError("must be a random.Random, or None", detail="rng")
        self.clock = clock or SystemClock()
        # The built-in undoing of failed sagas: run by every worker, in the failed job's queue.
        by_name.setdefault(UNWIND_JOB, unwind_job(by_name, driver, self.clock))
        rng = rng or random.Random()
        #: Starts per window over every job this worker runs (beside each job's own).
        self.rate_limits = resolve_rate_limits(rate_limits, "rate_limits")
        gate = Gate(
            driver,
            self.clock,
            by_name,
            self.rate_limits,
            lease_ms=self.lease_ms,
            heartbeat_ms=self.heartbeat_ms,
        )
        if gate.active and not driver.capabilities().leases:
            limited = sorted(h.name for h in handles if h.concurrency or h.rate_limits)
            raise ConcurrencyUnenforceableError(
                f"{driver.describe()} has no lease family to hold the declared limits",
                detail=", ".join(limited) or "rate_limits",
            )
        #: How long finished rows are kept (None: this worker never purges).
        if retention is not None and not isinstance(retention, Retention):
            raise OptionInvalidError("must be a Retention, or None", detail="retention")
        self.retention = retention_on(driver, retention)
        #: Applies `retention` (None, or a retention keeping everything: no purge at all) and
        #: folds the settle counters.
        self._purger = Purger(driver, self.retention, self.clock, rng)

        self.stats = WorkerStats()
        #: What this worker saw of its store's outages: its claims' reclaim bound.
        self._watch = StoreWatch(self.clock, self.stats)
        # The phases share these: the jobs held (claimed, leased) by id, and the worker's
        # background tasks (the claim loop first), filled in place by `start`.
        held: dict[str, Held] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._client: Jobs | None = None
        self._registry = Registry(
            self.worker_id,
            self.queues,
            self.concurrency,
            self.registry_ttl_ms,
            handles,
            enabled=driver.capabilities().workers,
        )
        self._outcomes = Outcomes(
            driver,
            self.clock,
            by_name,
            held,
            self.stats,
            rng,
            self._body_client,
            on_settled,
            worker_id=self.worker_id,
            lease_ms=self.lease_ms,
            watch=self._watch,
        )
        self._runner = Runner(
            driver,
            self.clock,
            by_name,
            held,
            self.stats,
            self._outcomes,
            self._body_client,
            worker_id=self.worker_id,
            concurrency=self.concurrency,
            gate=gate,
            process_pool_size=self.process_pool_size,
            process_preload=tuple(sorted({h.fn.__module__ for h in in_process})),
        )
        self._claims = ClaimLoop(
            driver,
            self.clock,
            held,
            self.stats,
            self._registry,
            self._runner,
            self._outcomes,
            backoff,
            self._purger,
            lambda: self.draining,
            self._watch,
            queues=self.queues,
            worker_id=self.worker_id,
            concurrency=self.concurrency,
            max_in_flight=self.max_in_flight,
            lease_ms=self.lease_ms,
            wake_ceiling_ms=self.wake_ceiling_ms,
            drop_exhausted=frozenset(h.name for h in handles if not h.retry.dead_letter),
        )
        self._heartbeat = HeartbeatLoop(
            driver,
            self.clock,
            held,
            self._registry,
            gate,
            self._watch,
            worker_id=self.worker_id,
            lease_ms=self.lease_ms,
            heartbeat_ms=self.heartbeat_ms,
            progress_every_ms=self.progress_every_ms,
        )
        # Whichever call finds the store back first ends every other loop's backoff, so a held
        # job's settle or heartbeat lands within another worker's reclaim grace.
        self._watch.on_back(self._outcomes.settler.store_back)
        self._watch.on_back(self._heartbeat.store_back)
        self._watch.on_back(self._claims.kick.set)
        self._drain = Drain(
            driver,
            self.clock,
            held,
            self.stats,
            self._claims,
            self._runner,
            self._outcomes,
            self._loops,
            worker_id=self.worker_id,
            drain_margin_ms=self.drain_margin_ms,
        )
        self._started = False
        self._stop_task: asyncio.Task[None] | None = None
        self._drain_begun = asyncio.Event()
        # The CLI's live table watches it.
        self._stopped = self._drain.stopped

    @property
    def _wake(self) -> WakeSubscription | None:
        """The wake channel's subscription, once `start` made one (tests watch it go live)."""
        return self._claims.wake

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def draining(self) -> bool:
        return self._stop_task is not None

    async def start(self, heard: Callable[[], None] | None = None) -> None:
        """Announce the worker and start its loops; refused while draining (`X_DRAINING`).

        A store that is unavailable (down, still starting) is waited for with the outage
        backoff, never a reason to fail; a drain begun meanwhile ends the wait at once and
        nothing starts. A store that refuses otherwise (a schema not installed) raises.
        `heard()` runs once the store first answered or was found unavailable, never before
        a refusal (`lifecycle.wait_for_store`: `ujobs worker` prints its banner there).
        """
        if self.draining:
            raise DrainingError(detail=self.worker_id)
        if self._started:
            return
        self._started = True
        self._claims.accepting = True

        async def announce() -> None:
            now = self.clock.now_ms()
            try:
                await self.driver.open()
                if self._registry.enabled:
                    await self.driver.worker_beat(self._registry.beat(now))
            except DriverUnavailableError:
                # An outage at start counts for the reclaim grace like one met later.
                self._watch.unavailable(now)
                raise

        outage = Outage("jobs.worker.store_unavailable")
        if not await wait_for_store(announce, outage, self._drain_begun, self.clock, heard):
            return
        self._registry.sent(self.clock.now_ms())
        if self.driver.capabilities().wake:
            try:
                self._claims.wake = await self.driver.wake_subscribe(
                    self.queues, self._claims.on_wake
                )
            except DriverUnavailableError as exc:  # the poll is the guarantee; the wake can wait
                log.warning("jobs.wake.subscribe_failed: %s", exc)
        if self._drain_begun.is_set():  # begun during the subscribe: no loop may outlive it
            return
        # In place: the drain reads this very list.
        self._loops.append(asyncio.create_task(self._claims.run(), name="ujobs-claim"))
        self._loops.append(asyncio.create_task(self._heartbeat.run(), name="ujobs-heartbeat"))
        self._loops.append(asyncio.create_task(self._purger.run(), name="ujobs-maintenance"))
        log.info("jobs.worker.started %s queues=%s", self.worker_id, ",".join(self.queues))

    async def drain_begun(self) -> None:
        """Return once a drain has begun (what runs beside the worker follows it)."""
        await self._drain_begun.wait()

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
                self._drain.keep(asyncio.ensure_future(self.stop(self.drain_timeout_ms / 1000)))
            else:
                self.force_stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)

    def force_stop(self) -> None:
        """Cut a running drain short: bodies are aborted now (`X_DRAINING`), claims handed back."""
        if self._drain.forced.is_set():
            return
        log.warning(
            "jobs.worker.forced %s: aborting %d running bodies now, their claims handed back",
            self.worker_id,
            self.stats.running,
        )
        self._drain.forced.set()
        self._claims.kick.set()

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
            self._stop_task = asyncio.create_task(self._drain.teardown(deadline))
            self._drain_begun.set()
        await asyncio.shield(self._stop_task)
        if self._client is not None:
            # What the bodies' client opened (a `result` wait's finish subscription) ends with
            # the worker; the driver is the caller's.
            await self._client.close()

    def limit_claims(self, jobs: int, then: Callable[[], None]) -> None:
        """Claim at most `jobs` more jobs, and call `then` (on the loop, once) when the runs of
        all of them ended, and of those held now: a recycle's drain then finds nothing running.
        On a running worker, a claim already sent counts against `jobs` (it may take more: it
        asked before); the jobs of one that answered are held already."""
        if jobs < 1:
            raise ValueError("limit_claims needs at least one job")
        self._claims.limit(jobs, then)

    def observe(self, observer: Observer) -> None:
        """Call `observer(job, outcome, body_ms)` after every settle of this worker that landed
        (metrics, tests); an observer that raises is logged, never rethrown."""
        self._outcomes.observers.append(observer)

    def observe_burials(self, observer: BurialObserver) -> None:
        """Call `observer(buried, outcome)` for every burial this worker reports (a lapsed
        final attempt its claim buried; once per burial); as `observe`, never rethrown."""
        self._outcomes.burial_observers.append(observer)

    @property
    def healthy(self) -> bool:
        """True while the worker runs (started, not stopped), every loop of it is alive, and
        its store answered a claim or a heartbeat within one lease."""
        if not self._started or self._stopped.is_set() or not self._loops:
            return False
        if any(t.done() for t in self._loops):
            return False
        return self.clock.now_ms() - self.stats.store_ok_ms <= self.lease_ms

    async def demand(self) -> dict[str, int]:
        """Ready-now jobs per queue for an autoscaler; 0 everywhere once draining."""
        if not self._claims.accepting:
            return dict.fromkeys(self.queues, 0)
        return await self.driver.queue_demand(self.queues, self.clock.now_ms())

    def _body_client(self) -> Jobs:
        """The client a body's `handle.enqueue()` uses: this worker's driver and clock, its
        sync calls run on this worker's loop (so `enqueue_sync` works from a `def` body)."""
        if self._client is None:
            self._client = LoopJobs(self.driver, loop=asyncio.get_running_loop(), clock=self.clock)
        return self._client


def _queues(queues: Sequence[str] | None, handles: Sequence[JobHandle]) -> tuple[str, ...]:
    """The distinct queues a worker claims from (its jobs' when None), each one a store can
    hold: refused here (`X_JOB_OPTION_INVALID`, `queues`), not by every claim of its loop."""
    if queues is None:
        queues = [h.queue for h in handles]
    elif isinstance(queues, str | bytes) or not isinstance(queues, Sequence):
        raise OptionInvalidError("must be a list of queue names, not one name", detail="queues")
    for q in queues:
        why = name_refusal(q)
        if why is not None:
            raise OptionInvalidError(f"a queue {why}", detail="queues")
    distinct = tuple(dict.fromkeys(queues))
    if not distinct:
        raise OptionInvalidError("a worker needs at least one queue", detail="queues")
    return distinct
