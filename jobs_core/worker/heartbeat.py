"""The heartbeat: every held lease renewed in one call, a run whose lease is lost stopped, due
progress flushed, and the registry beat sent when no claim carried it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from jobs_core.backoff import wait_kick
from jobs_core.clock import Clock
from jobs_core.driver import JobDriver
from jobs_core.errors import DriverUnavailableError, JobsError, LeaseLostError, SlotLostError
from jobs_core.leases.admit import Gate
from jobs_core.records import Heartbeat, Progress
from jobs_core.worker.held import Held
from jobs_core.worker.registry import Registry

if TYPE_CHECKING:  # outage.py reads HEARTBEAT_RETRY_MS from here
    from jobs_core.worker.outage import StoreWatch

log = logging.getLogger("jobs")

#: How soon a heartbeat that could not reach the store is tried again.
HEARTBEAT_RETRY_MS = 1_000


class HeartbeatLoop:
    """Renews what `held` holds every `heartbeat_ms`; `run()` is the worker's heartbeat task."""

    def __init__(
        self,
        driver: JobDriver,
        clock: Clock,
        held: dict[str, Held],
        registry: Registry,
        gate: Gate,
        watch: StoreWatch,
        *,
        worker_id: str,
        lease_ms: int,
        heartbeat_ms: int,
        progress_every_ms: int,
    ) -> None:
        self._driver = driver
        self._clock = clock
        self._held = held
        self._registry = registry
        self._gate = gate
        self._watch = watch
        self._worker_id = worker_id
        self._lease_ms = lease_ms
        self._heartbeat_ms = heartbeat_ms
        self._progress_every_ms = progress_every_ms
        #: Set when the store is seen back: a renewal waiting to retry goes at once.
        self._back = asyncio.Event()

    def store_back(self) -> None:
        """The store answers again: a failed renewal is retried now, not a retry period later."""
        self._back.set()

    async def run(self) -> None:
        # After a failed renewal the next comes within a second, not a period later, so a store
        # that returns before the lease runs out renews it in time.
        while True:
            try:
                landed = await self._renew_after(self._heartbeat_ms)
            except Exception:  # a timer body catches before it finalises
                log.exception("jobs.heartbeat.crashed")
                landed = True
            while not landed:
                try:
                    await wait_kick(
                        self._back, self._clock, min(HEARTBEAT_RETRY_MS, self._heartbeat_ms)
                    )
                    self._back.clear()
                    landed = await self.renew()
                except Exception:
                    log.exception("jobs.heartbeat.crashed")
                    landed = True

    async def _renew_after(self, ms: int) -> bool:
        await self._clock.sleep_ms(ms)
        self._back.clear()
        return await self.renew()

    async def _renew_slots(self, now: int) -> None:
        """Renew every running job's fleet slots in one call; a slot lost cancels its run."""
        leased = [h for h in self._held.values() if h.leases and not h.signal.cancelled]
        if not leased:
            return
        answers = await self._gate.renew([lease for h in leased for lease in h.leases], now)
        after = self._clock.now_ms()
        at = 0
        for h in leased:
            mine = None if answers is None else answers[at : at + len(h.leases)]
            at += len(h.leases)
            if mine is not None and all(mine):
                h.leases_landed_ms = now
            elif mine is not None:  # refused: `Gate.renew` marked the slots it lost
                h.signal.fire(SlotLostError(detail=h.job.id))
            elif after - h.leases_landed_ms >= self._lease_ms:
                # Unrenewed for a whole lease: they may have lapsed; none is handed on.
                self._gate.lost(h.leases)
                h.signal.fire(SlotLostError(detail=h.job.id))

    async def renew(self) -> bool:
        """Renew every held lease; False when the store could not be reached for it."""
        landed = True
        now = self._clock.now_ms()
        held = [h for h in self._held.values() if not h.signal.cancelled]
        if held:
            answers: list[bool] | None
            try:
                answers = await self._driver.job_heartbeat(
                    [Heartbeat(h.job.fence, self._lease_ms, now) for h in held]
                )
            except JobsError as exc:
                log.warning("jobs.heartbeat.failed: %s", exc)
                if isinstance(exc, DriverUnavailableError):
                    self._watch.unavailable(now)
                answers = None
                landed = False
            after = self._clock.now_ms()
            if answers is not None:
                self._watch.answered(now)
            for i, h in enumerate(held):
                if answers is not None and answers[i]:
                    h.last_landed_ms = now
                elif answers is not None or after - h.last_landed_ms >= self._lease_ms:
                    # Refused by the fence, or unrenewed for a whole lease: only then lost.
                    h.signal.fire(LeaseLostError(detail=h.job.id))
            await self._renew_slots(now)
        due = [
            h
            for h in self._held.values()
            if h.progress_dirty and now - h.progress_sent_ms >= self._progress_every_ms
        ]
        if due:
            items: list[tuple[Held, str]] = []
            for h in due:
                text = h.pending_progress(self._worker_id)
                if text is not None:
                    h.progress_sent_ms = now
                    items.append((h, text))
            with contextlib.suppress(JobsError):
                await self._driver.job_progress(
                    [Progress(h.job.fence, text, now) for h, text in items]
                )
        if now >= self._registry.next_at + self._heartbeat_ms:
            # No claim carried the beat (every slot busy): announce on its own.
            with contextlib.suppress(JobsError):
                await self._driver.worker_beat(self._registry.beat(now))
                self._registry.sent(now)
        return landed
