"""The drain: stop claiming, hand back what never started, let running bodies finish until the
deadline (then abort them), and tear down with every store call bounded by the drain's budget."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from jobs_core.clock import Clock
from jobs_core.driver import JobDriver
from jobs_core.errors import DrainingError
from jobs_core.records import Nack, NackKind
from jobs_core.states import Outcome
from jobs_core.worker.claim import ClaimLoop
from jobs_core.worker.held import Held
from jobs_core.worker.outcome import Outcomes
from jobs_core.worker.run import Runner
from jobs_core.worker.stats import WorkerStats

log = logging.getLogger("jobs")

#: How long a cancelled async body gets to unwind before the worker moves on without it.
CANCEL_GRACE_MS = 1_000
#: What a drain may spend past its deadline on the store calls of its teardown (settles,
#: `worker_forget`, closing the wake), store up or down; each call gets at least the floor.
STOP_SLACK_MS = 1_000
STOP_CALL_FLOOR_MS = 250


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
        signal, a store call left to unwind)."""
        self._abandoned.add(fut)
        fut.add_done_callback(self._abandoned.discard)

    async def teardown(self, deadline_ms: int | None) -> None:
        self._claims.stop()
        # Every store call below is bounded, store up or down: the drain ends by `end_ms`
        # (plus a floor per call), never on the store's say.
        end_ms = None if deadline_ms is None else deadline_ms + STOP_SLACK_MS
        # Settles are retried up to the deadline itself; the slack is for the calls after them.
        settler = self._outcomes.settler
        settler.set_deadline(deadline_ms)
        claim_loop = self._loops[0] if self._loops else None
        # The drain waits out the claim round it races, so no claim lands after it.
        if claim_loop is not None and not await self._bounded(
            claim_loop, self._left_ms(deadline_ms)
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
        await self._bounded(handback, self._left_ms(end_ms))
        for task in self._loops[1:]:
            task.cancel()
        # A heartbeat cancelled mid-call may take its driver's time to unwind: not the drain's.
        await self._bounded(
            asyncio.gather(*self._loops[1:], return_exceptions=True), self._left_ms(end_ms)
        )
        if not await self._bounded(settler.join(), self._left_ms(end_ms)):
            log.warning(
                "jobs.worker.settles_abandoned %s: the store did not answer", self._worker_id
            )
            settler.abandon()
        # Slots handed back now free their room at once; any left behind lapse at their TTL.
        await self._bounded(self._runner.gate.join(), self._left_ms(end_ms))
        if self._driver.capabilities().workers:
            try:
                await self._call(
                    self._driver.worker_forget(self._worker_id), end_ms, "worker_forget"
                )
            except Exception as exc:  # the registry row expires on its own; stopping must finish
                log.warning("jobs.worker.forget_failed %s: %r", self._worker_id, exc)
        if self._claims.wake is not None:
            try:
                await self._call(self._claims.wake.close(), end_ms, "wake close")
            except Exception as exc:
                log.warning("jobs.wake.close_failed: %r", exc)
        if self._runner.executor is not None:
            self._runner.executor.shutdown(wait=False, cancel_futures=True)
        log.info("jobs.worker.stopped %s", self._worker_id)
        self.stopped.set()

    async def _hand_back(self, waiting: list[Held]) -> None:
        if not waiting:
            return
        now = self._clock.now_ms()
        answers = await self._outcomes.settler.nack_many(
            [Nack(h.job.fence, NackKind.INTERRUPT, now) for h in waiting]
        )
        for h, ok in zip(waiting, answers, strict=True):
            self._held.pop(h.job.id, None)
            self._stats.in_flight = len(self._held)
            self._outcomes.tally(Outcome.INTERRUPTED, ok, h.job)

    def _left_ms(self, end_ms: int | None) -> int | None:
        """What is left of a drain budget ending at `end_ms` (None: unbounded), at least a floor."""
        if end_ms is None:
            return None
        return max(STOP_CALL_FLOOR_MS, end_ms - self._clock.now_ms())

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
        self.keep(fut)
        return False

    async def _call(self, aw: Awaitable[Any], end_ms: int | None, what: str) -> None:
        """A teardown store call bounded by the drain's budget; past it, logged and abandoned."""
        fut = asyncio.ensure_future(aw)
        if not await self._bounded(fut, self._left_ms(end_ms) if end_ms is not None else None):
            log.warning(
                "jobs.worker.stop_call_abandoned %s: %s outlived the drain", self._worker_id, what
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
