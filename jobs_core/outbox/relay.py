"""The relay: moves committed outbox rows to the job driver, each row's job created once.

A pass claims up to `batch` rows under a fresh token (a lease, in stage order), publishes them
with ONE `job_enqueue_many` under their staged ids, then marks them with ONE `outbox_publish`.
Any failure of that batch drops it to a row-by-row loop in stage order: a row the driver cannot
take because it is unavailable stops the loop, and it and the rows after it go back as they
were (no error, order kept); any other failure sends that row back with its error and a capped
exponential backoff, and the loop goes on. The pass repeats while full batches come back.

Publishing twice is harmless by construction: a staged id that names a job, live or finished,
inserts nothing (`deduped`). So a relay killed between publish and mark, a mark that failed, or
a lease that lapsed mid-pass costs a deduped enqueue, never a second job; that is why a failed
mark or release is left to the lease rather than retried.

Idle, the relay polls like the worker's claim loop (`IdleBackoff` from a floor to `poll`, 5 s
while the store's wake channel is live) and a wake starts a pass at once, unless the last pass
met a store down: that waits out the outage's backoff. Stores that are unavailable when it
starts are waited for like the worker's. `stop()` drains in two phases like
the worker: no new claim, the pass in flight finishes its claimed rows; past the timeout it is
cancelled and its rows wait for their lease, its unwinding and the wake's close sharing the
drain's slack (`jobs_core.lifecycle`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from jobs_core.backoff import IdleBackoff, wait_kick
from jobs_core.clock import Clock, SystemClock
from jobs_core.driver import JobDriver, WakeSubscription, name_refusal
from jobs_core.errors import DrainingError, DriverUnavailableError, JobsError, OptionInvalidError
from jobs_core.ids import host_name, new_id
from jobs_core.jsonform import storable
from jobs_core.lifecycle import StopBudget, leave, wait_for_store
from jobs_core.options import count, finite_number, seconds_to_ms
from jobs_core.outbox.records import OutboxClaim, OutboxRelease, OutboxRow
from jobs_core.outbox.store import MAX_OUTBOX_BATCH, MAX_OUTBOX_ERROR_CHARS, OutboxStore
from jobs_core.records import EnqueueResult
from jobs_core.urls import mask_text
from jobs_core.worker.outage import Outage

log = logging.getLogger("jobs")

#: Rows one claim takes by default: one `job_enqueue_many` and one `outbox_publish` each.
RELAY_BATCH: Final = 500
#: The first wait after a pass that found rows, doubling on each empty pass up to `poll`.
POLL_FLOOR_MS: Final = 50
#: The idle poll while the store's wake channel is proven live (the wake is the fast path).
WAKE_POLL_S: Final = 5.0
#: A row whose publish failed is claimable again after this, doubling per failure, to the cap.
RETRY_FLOOR_MS: Final = 1_000
RETRY_CAP_MS: Final = 300_000


@dataclass(slots=True)
class PassResult:
    """What one pass did: rows claimed, rows marked published, and why it stopped early if it
    did (a store unavailable: the relay pauses before the next pass)."""

    claimed: int = 0
    published: int = 0
    outage: JobsError | None = None


class Relay:
    """Publishes `outbox`'s committed rows to `driver`; `run()` (or `start()`) until `stop()`,
    or one pass by hand with `tick()`.

    Durations are seconds. `batch` rows per claim (1 to 1,000), each claim leased for `lease`
    (a pass that outlives it may see another relay republish its rows: deduped), `poll` the
    idle poll without a live wake.
    """

    def __init__(
        self,
        outbox: OutboxStore,
        driver: JobDriver,
        *,
        clock: Clock | None = None,
        relay_id: str | None = None,
        batch: int = RELAY_BATCH,
        lease: float = 30.0,
        poll: float = 2.0,
        wake_poll: float = WAKE_POLL_S,
    ) -> None:
        self.outbox = outbox
        self.driver = driver
        self.clock = clock or SystemClock()
        if relay_id and (why := name_refusal(relay_id)) is not None:
            # It is the claim's holder: every claim of the loop would refuse it, forever.
            raise OptionInvalidError(f"the relay id {why}", detail="relay_id")
        self.relay_id = relay_id or f"{host_name()}:{os.getpid()}:{new_id()[-12:]}"
        self.batch = count(batch, "batch", minimum=1, maximum=MAX_OUTBOX_BATCH)
        self.lease_ms = seconds_to_ms(lease, "lease")
        self.poll_ms = seconds_to_ms(poll, "poll")
        self.wake_poll_ms = seconds_to_ms(wake_poll, "wake_poll")
        #: Rows this relay marked published since it was made.
        self.published = 0
        #: The store's wake channel once the run loop subscribed (None: the poll alone).
        self.wake: WakeSubscription | None = None
        self._backoff = IdleBackoff(min(POLL_FLOOR_MS, self.poll_ms), self.poll_ms)
        self._kick = asyncio.Event()
        #: The last pass met a store that was down: its wait is the outage's backoff.
        self._store_down = False
        #: Set by the first `stop()`: a start still waiting for its stores gives up.
        self._halt = asyncio.Event()
        self._forced = asyncio.Event()
        self._stopped = asyncio.Event()
        self._pass: asyncio.Future[PassResult] | None = None
        self._loop: asyncio.Task[None] | None = None
        self._stop: asyncio.Future[bool] | None = None

    def describe(self) -> str:
        """`outbox → driver` for a banner, every password masked."""
        return mask_text(f"{self.outbox.describe()} → {self.driver.describe()}")

    @property
    def stopping(self) -> bool:
        """True from the first `stop()` on: no claim is made after it."""
        return self._stop is not None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start publishing in the background; refused once stopped (`X_DRAINING`)."""
        self._refuse_stopped()
        if self._loop is not None:
            return
        self._loop = asyncio.create_task(self._run(), name="ujobs-relay")
        log.info(
            "jobs.relay.started %s %s batch=%d lease=%gs",
            self.relay_id,
            self.describe(),
            self.batch,
            self.lease_ms / 1000,
        )

    async def run(self) -> None:
        """Start, then return once `stop()` has finished (raises what killed the loop, if a bug
        of ours ever did: a relay that publishes nothing must not look alive)."""
        await self.start()
        assert self._loop is not None
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait([stopped, self._loop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        died = self._loop.done() and not self._loop.cancelled()
        crash = self._loop.exception() if died else None
        if crash is not None:
            raise crash
        await self._stopped.wait()

    async def tick(self) -> int:
        """One pass begun after this call: claims and publishes every row claimable now, batch
        after batch while they come back full; answers how many rows it marked published.

        A pass in flight is waited for first, then joined or followed by a fresh one, so a row
        committed before the call has been tried when this returns (unless another relay holds
        it). A claim that fails raises; a publish that fails is handled row by row (above).
        """
        self._refuse_stopped()
        running = self._pass
        if running is not None and not running.done():
            await asyncio.wait([running])
        return (await self._join_pass()).published

    async def stop(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - a drain budget
        """Drain: no claim from now on; the pass in flight publishes what it claimed, for up to
        `timeout` seconds (None: no bound). Past it the pass is cancelled and its rows wait for
        their lease (their republish is deduped). True when it drained, False when it cut the
        pass. A second call joins the first; a stopped relay does not start again. With a
        timeout it returns within about `timeout` + 1 s, its stores up or down."""
        if self._stop is None:
            budget = StopBudget.after(
                None
                if timeout is None
                else finite_number(timeout, "timeout", minimum=0.0, maximum=7 * 24 * 3600)
            )
            self._halt.set()
            self._stop = asyncio.ensure_future(self._teardown(budget))
        return await asyncio.shield(self._stop)

    def force_stop(self) -> None:
        """Cut a drain short: the pass in flight is cancelled now (a second SIGTERM)."""
        self._forced.set()

    def _refuse_stopped(self) -> None:
        if self._stop is not None:
            raise DrainingError("a stopped relay does not start again", detail=self.relay_id)

    async def _teardown(self, budget: StopBudget) -> bool:
        self._kick.set()
        work = [t for t in (self._loop, self._pass) if t is not None and not t.done()]
        drained = True
        unwinding: list[asyncio.Future[object]] = []
        if work:
            finished = asyncio.ensure_future(asyncio.wait(work))
            forced = asyncio.ensure_future(self._forced.wait())
            left_ms = budget.left_ms()
            try:
                await asyncio.wait(
                    [finished, forced],
                    timeout=None if left_ms is None else left_ms / 1000,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                forced.cancel()
                finished.cancel()
            left = [t for t in work if not t.done()]
            if left:
                drained = False
                for t in left:
                    t.cancel()
                # A store call cancelled mid-flight may take its driver's time to give up.
                unwinding.append(asyncio.ensure_future(asyncio.wait(left)))
                log.warning(
                    "jobs.relay.pass_abandoned %s: its claimed rows wait for their lease"
                    " (their republish is deduped)",
                    self.relay_id,
                )
        # The unwinding and the wake's close share the slack past the deadline.
        unwinding.append(asyncio.ensure_future(self._close_wake()))
        slack_ms = budget.slack_ms()
        await asyncio.wait(unwinding, timeout=None if slack_ms is None else slack_ms / 1000)
        for fut in unwinding:
            leave(fut)
        log.info("jobs.relay.stopped %s published=%d", self.relay_id, self.published)
        self._stopped.set()
        return drained

    async def _close_wake(self) -> None:
        wake, self.wake = self.wake, None
        if wake is None:
            return
        try:
            await wake.close()
        except Exception as exc:  # the channel dies with the connection; stopping must finish
            log.warning("jobs.relay.wake_close_failed: %r", exc)

    # -- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        outage = Outage("jobs.relay.store_unavailable")
        if not await self._connect(outage):
            return
        while not self.stopping:
            self._kick.clear()
            try:
                done = await self._join_pass()
            except Exception as exc:  # a failed claim backs off, capped; the loop never dies
                if not isinstance(exc, JobsError):
                    log.exception("jobs.relay.pass_crashed %s", self.relay_id)
                self._backoff.reset()
                self._store_down = True
                await self._wait(outage.failed(exc))
                continue
            if done.outage is not None:
                # The rows went back in order; the next pass waits out a short pause.
                self._backoff.reset()
                self._store_down = True
                await self._wait(outage.failed(done.outage))
                continue
            self._store_down = False
            outage.recovered()
            if done.claimed:
                self._backoff.reset()
            await self._wait(self._backoff.next_ms(self._ceiling()))

    async def _connect(self, outage: Outage) -> bool:
        """Open both stores (one unavailable is waited for; one that refuses otherwise ends
        the relay, raised by `run()`), then subscribe to the outbox's wake; False when a stop
        came first."""

        async def reach() -> None:
            await self.outbox.open()
            await self.driver.open()

        if not await wait_for_store(reach, outage, self._halt, self.clock) or self.stopping:
            return False
        try:
            self.wake = await self.outbox.outbox_wake(self._on_wake)
        except Exception as exc:  # the poll is the guarantee; the wake only shortens it
            log.warning("jobs.relay.wake_failed %s: %s", self.relay_id, _why(exc))
        return True

    def _on_wake(self) -> None:
        if self._store_down:
            # A commit of the app does not bring the store back: a pass per commit would
            # claim and hand back the same rows at the app's pace, not the outage's backoff.
            return
        self._backoff.reset()
        self._kick.set()

    def _ceiling(self) -> int:
        live = self.wake is not None and self.wake.is_live()
        return self.wake_poll_ms if live else self.poll_ms

    async def _wait(self, ms: int) -> None:
        await wait_kick(self._kick, self.clock, ms)

    # -- one pass -------------------------------------------------------------------------

    async def _join_pass(self) -> PassResult:
        if self._pass is None or self._pass.done():
            self._pass = asyncio.ensure_future(self._one_pass())
            # Read here too, so a pass whose every waiter was cancelled never warns unread.
            self._pass.add_done_callback(_consume)
        return await asyncio.shield(self._pass)

    async def _one_pass(self) -> PassResult:
        result = PassResult()
        while not self.stopping:
            token = new_id()
            claim = OutboxClaim(token, self.batch, self.lease_ms, self.clock.now_ms())
            try:
                rows = await self.outbox.outbox_claim(claim)
            except JobsError as exc:
                if not result.claimed:
                    raise
                result.outage = exc  # what this pass published stays counted
                break
            if not rows:
                break
            result.claimed += len(rows)
            before = result.published
            await self._publish(token, rows, result)
            self.published += result.published - before
            if result.outage is not None or len(rows) < self.batch:
                break
        return result

    async def _publish(self, token: str, rows: Sequence[OutboxRow], result: PassResult) -> None:
        ids = [r.job.id for r in rows]
        try:
            answers = await self.driver.job_enqueue_many([r.job for r in rows])
            marked = await self.outbox.outbox_publish(token, ids)
        except Exception as exc:
            log.warning(
                "jobs.relay.batch_failed %s: %s; its %d rows go one by one",
                self.relay_id,
                _why(exc),
                len(rows),
            )
            await self._one_by_one(token, rows, result)
            return
        result.published += len(marked)
        _log_published(answers, rows)
        if len(marked) < len(rows):
            log.info(
                "jobs.relay.lease_lapsed %s: %d of %d rows were no longer held (another relay"
                " republishes them: deduped)",
                self.relay_id,
                len(rows) - len(marked),
                len(rows),
            )

    async def _one_by_one(self, token: str, rows: Sequence[OutboxRow], result: PassResult) -> None:
        """Each row in stage order: enqueue, then mark; see the module docstring."""
        i = 0
        try:
            while i < len(rows):
                row = rows[i]
                now = self.clock.now_ms()
                try:
                    answer = await self.driver.job_enqueue(row.job)
                except DriverUnavailableError as exc:
                    log.warning(
                        "jobs.relay.driver_unavailable %s: %s; %d rows go back in order",
                        self.relay_id,
                        exc,
                        len(rows) - i,
                    )
                    await self._release(token, rows[i:], now, None)
                    result.outage = exc
                    return
                except Exception as exc:
                    await self._poison(token, row, now, exc)
                    i += 1
                    continue
                try:
                    marked = await self.outbox.outbox_publish(token, [row.job.id])
                except Exception as exc:
                    log.warning(
                        "jobs.relay.mark_failed %s job=%s: %s (its lease lapses; the republish"
                        " is deduped)",
                        self.relay_id,
                        row.job.id,
                        _why(exc),
                    )
                    if isinstance(exc, DriverUnavailableError):
                        await self._release(token, rows[i + 1 :], now, None)
                        result.outage = exc
                        return
                    i += 1
                    continue
                result.published += len(marked)
                _log_published([answer], [row])
                i += 1
        except Exception:
            # Only a bug of ours gets here (every store call above is guarded): the rows not
            # yet done go back rather than wait out their lease.
            log.exception("jobs.relay.loop_crashed %s", self.relay_id)
            await self._release(token, rows[i:], self.clock.now_ms(), None)

    async def _poison(self, token: str, row: OutboxRow, now: int, exc: Exception) -> None:
        """Send back a row the driver refused, with its error, after a backoff."""
        wait = min(RETRY_CAP_MS, RETRY_FLOOR_MS * 2 ** min(row.attempts, 30))
        log.warning(
            "jobs.relay.publish_failed %s job=%s attempts=%d: %s (again in %d ms)",
            self.relay_id,
            row.job.id,
            row.attempts + 1,
            _why(exc),
            wait,
            exc_info=not isinstance(exc, JobsError),
        )
        await self._release(token, [row], now + wait, _why(exc))

    async def _release(
        self, token: str, rows: Sequence[OutboxRow], retry_at_ms: int, error: str | None
    ) -> None:
        if not rows:
            return
        try:
            await self.outbox.outbox_release(
                OutboxRelease(token, tuple(r.job.id for r in rows), retry_at_ms, error)
            )
        except Exception as exc:
            log.warning(
                "jobs.relay.release_failed %s: %s (%d rows wait for their lease)",
                self.relay_id,
                _why(exc),
                len(rows),
            )


def _why(exc: BaseException) -> str:
    """An error as stored in `last_error`: its code and message, passwords masked, storable."""
    text = str(exc) if isinstance(exc, JobsError) else f"{type(exc).__name__}: {exc}"
    return storable(mask_text(text))[:MAX_OUTBOX_ERROR_CHARS]


def _log_published(answers: Sequence[EnqueueResult], rows: Sequence[OutboxRow]) -> None:
    if not log.isEnabledFor(logging.DEBUG):
        return
    for answer, row in zip(answers, rows, strict=False):
        if answer.id != row.job.id:
            log.debug("jobs.relay.deduped %s onto live job %s (same key)", row.job.id, answer.id)


def _consume(fut: asyncio.Future[PassResult]) -> None:
    if not fut.cancelled():
        fut.exception()


__all__ = [
    "POLL_FLOOR_MS",
    "RELAY_BATCH",
    "RETRY_CAP_MS",
    "RETRY_FLOOR_MS",
    "WAKE_POLL_S",
    "PassResult",
    "Relay",
]
