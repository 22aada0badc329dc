"""Retention: how long finished rows are kept, and the `Purger` a worker runs to apply it.

A worker purges in bounded batches (`job_purge`, 1,000 rows a call, again while a batch comes
back full), from its own task so a purge never holds up a claim. Between rounds it waits a
minute or a little more (up to half again, jittered), so a fleet started together does not
purge in step. The claim loop lets a due round start: at once after a pass that brought work,
and, on an idle worker, in the slot of one poll, which it then skips — so an idle worker-minute
still costs at most its budget of round-trips (30, 12 with a live wake), the purge included.

The same rounds fold the settle counters (`counter_fold`: old minute buckets into hours,
expired hours dropped) and purge expired events (`event_purge`, counted), at most once every
`FOLD_EVERY_MS`, whatever the retention: a worker that keeps every row still keeps its counters
and events bounded. They also purge webhook attempts older than the retention's
`webhook_attempts` (`webhook_attempt_purge`, counted; None keeps them, and so does a worker
with no retention at all). Each needs its driver family (`Capabilities.counters`, `.events`,
`.webhooks`); a driver without one has nothing of it to fold or purge.

Retention needs the driver's `retention` family (`job_purge`). A worker handed a retention that
removes anything, on a driver without it, refuses to start (`X_DRIVER_CAPABILITY_MISSING`): rows
it was told to remove would pile up unseen. The default (`DEFAULT_RETENTION` itself, what a
worker applies when told nothing) is the one exception: on such a driver the worker keeps every
finished row and says so once in its log (`jobs.retention.unsupported`), so a driver written for
the core family runs a worker with no option set.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from jobs_core.clock import Clock
from jobs_core.driver import MAX_PURGE_LIMIT, MAX_TIME_MS, JobDriver
from jobs_core.errors import OptionInvalidError
from jobs_core.options import count, finite_number
from jobs_core.records import PurgeParams

log = logging.getLogger("jobs")

HOUR: Final = 3600
DAY: Final = 24 * HOUR
#: Rows one purge call removes at most, unless the worker is told otherwise.
PURGE_BATCH: Final = 1_000
#: The least time between two purge rounds of one worker; each wait adds up to half again.
PURGE_EVERY_MS: Final = 60_000
#: The least time between two counter folds of one worker (a minute bucket is folded once its
#: hour is over, so a fold every few minutes keeps up whatever the load).
FOLD_EVERY_MS: Final = 10 * 60_000

Duration = float | timedelta


#: A century, in seconds: far beyond any sane retention, and within the contract's times.
_MAX_KEEP_S: Final = min(100 * 365 * DAY, MAX_TIME_MS // 1000)


def _keep_ms(value: object, option: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    elif not isinstance(value, int | float) or isinstance(value, bool):
        raise OptionInvalidError("must be seconds, a timedelta or None", detail=option)
    return round(finite_number(value, option, minimum=0.0, maximum=_MAX_KEEP_S) * 1000)


@dataclass(frozen=True, slots=True)
class Retention:
    """How long rows in each final state are kept after they finished, and webhook attempts
    after they were made (`webhook_attempts`); `None` keeps forever.

    Values are seconds (an int or a float) or a `timedelta`. The defaults are River's:
    completed and cancelled rows for 24 hours, failed and dead rows for 7 days; webhook
    attempts 7 days, as long as a dead delivery's row, so its attempts are there while it is. A
    negative, not finite or absurd value (over a century) is refused with `X_JOB_OPTION_INVALID`
    naming the option, e.g. `retention.dead`.
    """

    completed: Duration | None = DAY
    cancelled: Duration | None = DAY
    failed: Duration | None = 7 * DAY
    dead: Duration | None = 7 * DAY
    webhook_attempts: Duration | None = 7 * DAY

    def __post_init__(self) -> None:
        for name in ("completed", "cancelled", "failed", "dead", "webhook_attempts"):
            _keep_ms(getattr(self, name), f"retention.{name}")

    @property
    def keeps_everything(self) -> bool:
        """True when no final state has a retention (no finished job is ever purged; webhook
        attempts go by their own, `webhook_attempts`)."""
        return all(v is None for v in (self.completed, self.cancelled, self.failed, self.dead))

    def attempts_before(self, now_ms: int) -> int | None:
        """The `webhook_attempt_purge` bound that applies `webhook_attempts` at `now_ms`: an
        attempt made more than that long ago goes; None when they are kept forever."""
        keep = _keep_ms(self.webhook_attempts, "retention.webhook_attempts")
        return None if keep is None else max(0, now_ms - keep)

    def params(self, now_ms: int, limit: int) -> PurgeParams:
        """The `job_purge` call that applies this retention at `now_ms`, `limit` rows at most."""
        return PurgeParams(
            now_ms=now_ms,
            limit=limit,
            completed_ms=_keep_ms(self.completed, "retention.completed"),
            cancelled_ms=_keep_ms(self.cancelled, "retention.cancelled"),
            failed_ms=_keep_ms(self.failed, "retention.failed"),
            dead_ms=_keep_ms(self.dead, "retention.dead"),
        )


#: What a worker applies unless told otherwise (this very object: on a driver without the
#: retention family, it alone is dropped with a warning rather than refused).
DEFAULT_RETENTION: Final = Retention()


def retention_on(driver: JobDriver, retention: Retention | None) -> Retention | None:
    """The retention a worker applies on `driver`: `retention` itself, unless the driver lacks
    the retention family while `retention` removes anything — then None for `DEFAULT_RETENTION`
    (logged as `jobs.retention.unsupported`), `X_DRIVER_CAPABILITY_MISSING` for any other."""
    if retention is None or retention.keeps_everything:
        return retention
    if retention is DEFAULT_RETENTION and not driver.capabilities().retention:
        log.warning(
            "jobs.retention.unsupported: %s does not declare the retention family; this worker"
            " keeps every finished job",
            driver.describe(),
        )
        return None
    driver.require("retention", what="the worker's retention (retention=None keeps every job)")
    return retention


class Purger:
    """Applies a `Retention` on one driver, and folds its counters: rounds of bounded batches;
    errors logged, not raised. A retention of None (or one keeping everything) purges nothing.

    `run()` is the worker's maintenance task; the claim loop lets each round start, with
    `grant()` after a pass that brought work or `take_idle_slot()` in an idle poll's place.
    """

    def __init__(
        self,
        driver: JobDriver,
        retention: Retention | None,
        clock: Clock,
        rng: random.Random | None = None,
        *,
        batch: int = PURGE_BATCH,
        every_ms: int = PURGE_EVERY_MS,
        fold_every_ms: int = FOLD_EVERY_MS,
    ) -> None:
        self.driver = driver
        self.retention = retention
        self.clock = clock
        self.batch = count(batch, "purge_batch", minimum=1, maximum=MAX_PURGE_LIMIT)
        self.every_ms = count(every_ms, "purge_every", minimum=1)
        self.fold_every_ms = count(fold_every_ms, "fold_every", minimum=1)
        self._rng = rng or random.Random()
        self._wanted = False
        self._go = asyncio.Event()
        self._fold_at = 0
        #: Rows removed since start.
        self.purged = 0
        #: Counter buckets folded or dropped since start.
        self.folded = 0
        #: Expired events purged since start.
        self.events_purged = 0
        #: Webhook attempts purged since start.
        self.attempts_purged = 0

    @property
    def purges(self) -> bool:
        """True when the retention removes anything at all."""
        return self.retention is not None and not self.retention.keeps_everything

    async def fold(self) -> int:
        """Fold the counters, then purge expired events and webhook attempts past the
        retention's `webhook_attempts` (each where the driver keeps them), in batches until one
        comes back short (or fails); answers the counter buckets folded or dropped. Events and
        attempts purged are counted in `events_purged` and `attempts_purged`."""
        caps = self.driver.capabilities()
        total = (
            await self._batches("counters.fold", self.driver.counter_fold) if caps.counters else 0
        )
        self.folded += total
        if caps.events:
            purged = await self._batches("events.purge", self.driver.event_purge)
            self.events_purged += purged
            if purged:
                log.info("jobs.events.purged %d expired events removed", purged)
        retention = self.retention
        if caps.webhooks and retention is not None and retention.webhook_attempts is not None:

            async def attempts(now_ms: int, limit: int) -> int:
                before = retention.attempts_before(now_ms)
                assert before is not None
                return await self.driver.webhook_attempt_purge(before, limit)

            purged = await self._batches("webhooks.purge", attempts)
            self.attempts_purged += purged
            if purged:
                log.info("jobs.webhooks.purged %d old webhook attempts removed", purged)
        return total

    async def _batches(self, what: str, call: Callable[[int, int], Awaitable[int]]) -> int:
        total = 0
        while True:
            try:
                n = await call(self.clock.now_ms(), self.batch)
            except Exception as exc:  # the next round tries again; upkeep never stops work
                log.warning("jobs.%s_failed: %r", what, exc)
                break
            total += n
            if n < self.batch:
                break
            await asyncio.sleep(0)
        return total

    async def purge(self) -> int:
        """One round: batches until one comes back short (or fails); answers the rows removed."""
        if self.retention is None or not self.purges:
            return 0
        total = 0
        while True:
            try:
                n = await self.driver.job_purge(
                    self.retention.params(self.clock.now_ms(), self.batch)
                )
            except Exception as exc:  # retention waits for the next round; it never stops work
                log.warning("jobs.purge.failed: %r", exc)
                break
            total += n
            self.purged += n
            if n < self.batch:
                break
            # A long backlog goes batch after batch; let the claim loop and the bodies run.
            await asyncio.sleep(0)
        if total:
            log.info("jobs.purge.done %d finished rows removed", total)
        return total

    def grant(self) -> bool:
        """Let a waiting round start now; True when one was waiting."""
        if not self._wanted:
            return False
        self._wanted = False
        self._go.set()
        return True

    def take_idle_slot(self, now_ms: int, slot_ms: int, beat_due_ms: int) -> bool:
        """On an idle worker, give a waiting round the poll slot `[now_ms, now_ms + slot_ms)`.

        True when the round starts and the claim loop must skip that poll. Refused while a
        registry beat falls due in the slot: the beat rides the claims, and a skipped claim
        would make the worker send it alone.
        """
        if not self._wanted or now_ms + slot_ms >= beat_due_ms:
            return False
        return self.grant()

    async def _slot(self) -> None:
        """Until the claim loop grants a slot, or two intervals passed without one (a worker
        whose every poll carries a beat still purges)."""
        go = asyncio.ensure_future(self._go.wait())
        # Waiting on the clock as well keeps this task a sleeper of a fake clock while idle.
        timer = asyncio.ensure_future(self.clock.sleep_ms(2 * self.every_ms))
        try:
            await asyncio.wait([go, timer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            go.cancel()
            timer.cancel()

    async def run(self) -> None:
        """Forever: wait a jittered interval, then the claim loop's next pass, then a round."""
        # The first wait is anywhere in one interval, so workers started together spread out.
        await self.clock.sleep_ms(self._rng.randint(1, self.every_ms))
        while True:
            fold = self.clock.now_ms() >= self._fold_at
            if fold or self.purges:
                self._wanted = True
                await self._slot()
                self._go.clear()
                self._wanted = False
                await self.purge()
                if fold:
                    await self.fold()
                    jitter = self._rng.randint(0, self.fold_every_ms // 10)
                    self._fold_at = self.clock.now_ms() + self.fold_every_ms + jitter
            await self.clock.sleep_ms(self.every_ms + self._rng.randint(0, self.every_ms // 2))
