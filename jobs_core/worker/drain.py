"""The drain: stop claiming, hand back what never started, let running bodies finish until the
deadline (then abort them), and tear down with its store calls bounded together by the drain's
budget (`jobs_core.lifecycle`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from jobs_core.clock import Clock
from jobs_core.driver import JobDriver
from jobs_core.errors import DrainingError
from jobs_core.lifecycle import STOP_CALL_FLOOR_MS, StopBudget, bounded, leave
from jobs_core.loops import cancel_and_wait
from jobs_core.records import Nack, NackKind
from jobs_core.states import Outcome
from jobs_core.worker.claim import ClaimLoop
from jobs_core.worker.held import Held, let_go
from jobs_core.worker.outcome import Outcomes
from jobs_core.worker.run import Runner
from jobs_core.worker.stats import WorkerStats

log = logging.getLogger("jobs")

#: How long a cancelled async body gets to unwind before the worker moves on without it.
CANCEL_GRACE_MS = 1_000


class Drain:
    """One worker's teardown (`teardown`), cut short by `forced`; `stopped` is set once it is
    done. `loops` is the worker's own list of background tasks, the claim loop first."""

    def __init__(
        self,
        driver: JobDriver,
        clock: Clock,
        held: dict[str, Held],
        stats: WorkerStats,
        claims: ClaimLoop,
        runner: Runner,
        outcomes: Outcomes,
        loops: list[asyncio.Task[None]],
        *,
        worker_id: str,
        drain_margin_ms: int,
    ) -> None:
        self._driver = driver
        self._clock = clock
        self._held = held
        self._stats = stats
        self._claims = claims
        self._runner = runner
        self._outcomes = outcomes
        # Read as the drain goes, never copied: a start still finishing may add to it.
        self._loops = loops
        self._worker_id = worker_id
        self._drain_margin_ms = drain_margin_ms
        #: Set by a forced stop: running bodies are aborted now, not at the deadline.
        self.forced = asyncio.Event()
        self.stopped = asyncio.Event()
        self._abandoned: set[asyncio.Future[Any]] = set()

    def keep(self, fut: asyncio.Future[Any]) -> None:
        """Hold a reference to `fut` until it is done (nobody awaits it: a drain begun by a
        signal)."""
        self._abandoned.add(fut)
        fut.add_done_callback(self._abandoned.discard)

    async def teardown(self, deadline_ms: int | None) -> None:
        self._claims.stop()
        # Up to the deadline for the work; then every store call left shares the slack.
        budget = StopBudget(deadline_ms, self._clock.now_ms)
        # Settles are retried up to the deadline itself; the slack is for the calls after them.
        settler = self._outcomes.settler
        settler.set_deadline(deadline_ms)
        claim_loop = self._loops[0] if self._loops else None
        # The drain waits out the claim round it races, so no claim lands after it.
        if claim_loop is not None and not await bounded(
            claim_loop, budget.left_ms(STOP_CALL_FLOOR_MS)
        ):
            log.warning("jobs.worker.claim_abandoned %s: outlived the drain", self._worker_id)
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
                cutoff = deadline_ms - self._drain_margin_ms
                await self._wait_tasks(running, cutoff - self._clock.now_ms())
            if any(not t.done() for t in running):
                for h in list(self._held.values()):
                    if h.started:
                        h.signal.fire(DrainingError(detail=h.job.id))
                # A body that ignores its cancellation must not hold the deploy hostage.
                await self._wait_tasks(running, CANCEL_GRACE_MS, forceable=False)
        await self._last_calls(handback, budget)
        if self._runner.executor is not None:
            self._runner.executor.shutdown(wait=False, cancel_futures=True)
        if self._runner.processes is not None:
            # Every body has ended or been aborted (its process killed): the idle ones exit.
            await self._runner.processes.close()
        log.info("jobs.worker.stopped %s", self._worker_id)
        self.stopped.set()

    async def _last_calls(self, handback: asyncio.Future[None], budget: StopBudget) -> None:
        """Every store call the teardown has left, at once, bounded TOGETHER by the slack: a
        store that does not answer costs the drain its slack once, not once per call."""
        settler = self._outcomes.settler
        wake, self._claims.wake = self._claims.wake, None
        calls: dict[str, Awaitable[Any]] = {
            "hand-back": handback,
            # The heartbeat and maintenance loops: cancelled again while they run on, since a
            # store call beneath may drop the cancel and such a loop ends only when cancelled
            # (`cancel_and_wait`); one cancelled mid-call may take its driver's time to unwind.
            "heartbeat": asyncio.gather(*(cancel_and_wait(t) for t in self._loops[1:])),
            "settles": settler.join(),
            # Slots handed back now free their room at once; any left behind lapse at their TTL.
            "lease releases": self._runner.gate.join(),
        }
        if self._driver.capabilities().workers:
            calls["worker_forget"] = self._quietly(
                self._driver.worker_forget(self._worker_id), "jobs.worker.forget_failed"
            )
        if wake is not None:
            calls["wake close"] = self._quietly(wake.close(), "jobs.wake.close_failed")
        futs = {what: asyncio.ensure_future(aw) for what, aw in calls.items()}
        ms = budget.slack_ms(STOP_CALL_FLOOR_MS)
        await asyncio.wait(futs.values(), timeout=None if ms is None else ms / 1000)
        late = [what for what, fut in futs.items() if not fut.done()]
        if not futs["settles"].done():
            settler.abandon()
        for fut in futs.values():
            leave(fut)
        if late:
            log.warning(
                "jobs.worker.stop_calls_abandoned %s: %s outlived the drain (the store did not"
                " answer; what they hold lapses on its own)",
                self._worker_id,
                ", ".join(late),
            )

    async def _quietly(self, aw: Awaitable[Any], event: str) -> None:
        """A teardown call whose failure is logged, never raised: what it would have removed
        (a registry row, a wake session) expires or dies with its connection on its own."""
        try:
            await aw
        except Exception as exc:
            log.warning("%s %s: %r", event, self._worker_id, exc)

    async def _hand_back(self, waiting: list[Held]) -> None:
        if not waiting:
            return
        now = self._clock.now_ms()
        answers = await self._outcomes.settler.nack_many(
            [Nack(h.job.fence, NackKind.INTERRUPT, now) for h in waiting]
        )
        for h, ok in zip(waiting, answers, strict=True):
            let_go(self._held, h)
            self._stats.in_flight = len(self._held)
            self._outcomes.tally(Outcome.INTERRUPTED, ok, h)

    async def _wait_tasks(
        self, tasks: list[asyncio.Task[None]], ms: int | None, *, forceable: bool = True
    ) -> None:
        """Until `tasks` are done, `ms` of the clock passed (None: no bound) or a forced stop."""
        if ms is not None and ms <= 0:
            return
        pending = [t for t in tasks if not t.done()]
        if not pending or (forceable and self.forced.is_set()):
            return
        stops: list[asyncio.Future[Any]] = []
        if ms is not None:
            stops.append(asyncio.ensure_future(self._clock.sleep_ms(ms)))
        if forceable:
            stops.append(asyncio.ensure_future(self.forced.wait()))
        try:
            while pending and not any(s.done() for s in stops):
                await asyncio.wait([*pending, *stops], return_when=asyncio.FIRST_COMPLETED)
                pending = [t for t in pending if not t.done()]
        finally:
            for s in stops:
                s.cancel()
