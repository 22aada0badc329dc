"""The scheduler role: one leader fires each task's occurrences; the others stand by.

Leading is a lease (`lease_take` of key `scheduler`, limit 1), renewed every third of its TTL;
a standby asks for it at the same pace and takes over once the leader's lapses. What makes a
double fire impossible is not the lease but the store: each fire is `task_fire`, fenced on the
watermark this scheduler read, so two schedulers that both believe they lead still fire an
occurrence once. The lease only keeps them from racing for nothing.

While it leads, a scheduler keeps each task's mark and next occurrence in memory and trusts its
lease for one renewal interval, so an idle round touches no store: its only calls are the
renewals (6 a minute at the default TTL). The pause rows are read only when a task is due (on a
driver without the pause family nothing is ever paused).

One dispatch round at a time (`tick()` joins the one in flight); "am I still leading" is asked
every round and before every task. A store that is unavailable, at start or under a round, is
waited for with the worker's outage backoff. `stop()` waits for the round in flight, then
releases the lease within the drain's slack; a round abandoned at the drain's timeout keeps it
(it lapses on its own).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Final

from jobs_core.backoff import wait_kick
from jobs_core.clock import Clock, SystemClock
from jobs_core.driver import MAX_TASK_BATCH, JobDriver, check_new_job, name_refusal
from jobs_core.errors import DrainingError, JobsError, OptionInvalidError
from jobs_core.facade import Jobs
from jobs_core.ids import new_id
from jobs_core.lifecycle import STOP_CALL_FLOOR_MS, StopBudget, bounded, wait_for_store
from jobs_core.options import check_clock, seconds_to_ms
from jobs_core.records import Lease, LeaseRef, LeaseRenew, LeaseTake, TaskFire, TaskMark
from jobs_core.resend import again_if_lost
from jobs_core.scheduler.task import ENQUEUED_BY, Occurrence, TaskHandle, tasks_of
from jobs_core.worker.outage import Outage

log = logging.getLogger("jobs")

#: The lease key of the leader; one per store (a key prefix or schema is one fleet).
LEADER_KEY: Final = "scheduler"
LEADER_TTL_S: Final = 30.0
#: A due task that is paused is looked at again this long after (its watermark stays).
PAUSED_RECHECK_MS: Final = 30_000
#: A task whose input the job refuses is tried again this long after (it logs each time).
REFUSED_RETRY_MS: Final = 60_000


@dataclass(frozen=True, slots=True)
class Fired:
    """What a round did for one due task: `job_id` when the occurrence fired (`deduped`
    when its key found a live row), `fenced` when another scheduler had moved the watermark."""

    task: str
    occurrence: Occurrence
    job_id: str | None
    deduped: bool = False
    fenced: bool = False


class Scheduler:
    """Fires `tasks` on `driver` while it leads. `start()`, then `stop()`; or `tick()` by hand."""

    def __init__(
        self,
        driver: JobDriver,
        tasks: ModuleType | Sequence[TaskHandle] | Mapping[str, TaskHandle],
        *,
        clock: Clock | None = None,
        scheduler_id: str | None = None,
        lease_ttl: float = LEADER_TTL_S,
    ) -> None:
        """`lease_ttl` (seconds): how long a silent leader keeps the lead; renewed every third
        of it (so a leader killed mid-round is replaced within `lease_ttl`). A driver without
        the lease and task families is refused here (`X_DRIVER_CAPABILITY_MISSING`), before
        anything runs."""
        driver.require("leases", "tasks", what="the scheduler")
        self.driver = driver
        self.tasks = tasks_of(tasks)
        self._by_name = {t.name: t for t in self.tasks}
        check_clock(clock)
        self.clock = clock or SystemClock()
        if scheduler_id and (why := name_refusal(scheduler_id)) is not None:
            # It is the lead's holder: every round's lease call would refuse it, forever.
            raise OptionInvalidError(f"the scheduler id {why}", detail="scheduler_id")
        self.scheduler_id = scheduler_id or f"scheduler-{new_id()}"
        self.ttl_ms = seconds_to_ms(lease_ttl, "lease_ttl")
        self.renew_every_ms = max(1, self.ttl_ms // 3)
        self._jobs = Jobs(driver, clock=self.clock, enqueue_retry_s=0)
        self._lease: Lease | None = None
        #: The lease is trusted without asking the store until then.
        self._trusted_until = 0
        #: A standby asks for the lead again at this time.
        self._ask_at = 0
        #: While leading: each task's mark and next occurrence; None: read them first.
        self._marks: dict[str, TaskMark] | None = None
        self._next: dict[str, int] = {}
        #: A task held back (paused, refused) until then.
        self._held: dict[str, int] = {}
        # Per task, the fire whose answer was lost: (occurrence, job id sent, now_ms sent).
        self._unanswered: dict[str, tuple[Occurrence, str, int]] = {}
        self._round: asyncio.Task[list[Fired]] | None = None
        self._loop: asyncio.Task[None] | None = None
        self._started = False
        self._stopping = False
        #: Set once `stop()` is called: a start still waiting for the store gives up.
        self._halt = asyncio.Event()
        self._poke = asyncio.Event()

    @property
    def leading(self) -> bool:
        """Whether this scheduler holds the lead, as far as it knows."""
        return self._lease is not None

    def next_fires(self) -> dict[str, int]:
        """While leading, each task's next occurrence (ms) as kept in memory."""
        return dict(self._next) if self._marks is not None else {}

    # -- the role ------------------------------------------------------------------------

    async def start(self, heard: Callable[[], None] | None = None) -> None:
        """Refuse a scheduler stopped before (`X_DRAINING`); open the driver and read the lead's
        holders once, then run rounds in the background until stop.

        A store that is unavailable (down, still starting) is waited for with the worker's
        outage backoff, logged once per step (`jobs.scheduler.store_unavailable`); a `stop()`
        meanwhile ends the wait at once and no round runs. A store that refuses otherwise (a
        schema not installed) raises. `heard()` runs once the store first answered or was
        found unavailable, never before a refusal (`ujobs scheduler` prints its banner there).
        """
        if self._stopping:
            raise DrainingError(detail=self.scheduler_id)
        if self._started:
            return
        self._started = True

        async def reach() -> None:
            await self.driver.open()
            # A first read of the lease family: proves the store holds this library's schema.
            await self.driver.lease_holders(LEADER_KEY, self.clock.now_ms())

        outage = Outage("jobs.scheduler.store_unavailable")
        if not await wait_for_store(reach, outage, self._halt, self.clock, heard) or self._stopping:
            return
        names = ", ".join(t.name for t in self.tasks) or "none"
        log.info("jobs.scheduler.started %s tasks=%s", self.scheduler_id, names)
        self._loop = asyncio.create_task(self._run(), name="ujobs-scheduler")

    async def stop(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - a drain budget
        """Stop: no new round; wait for the one in flight (up to `timeout` seconds), then give
        the lead back. True when it drained; False when the round was abandoned (the lead is
        then kept, to lapse on its own: the abandoned round may have written).

        With a timeout it returns within about `timeout` + 1 s, store up or down: the lead's
        release (and an abandoned round's unwinding) share the slack past it (`lifecycle`).
        """
        budget = StopBudget.after(timeout)
        self._stopping = True
        self._halt.set()
        self._poke.set()
        loop, self._loop = self._loop, None
        if loop is None:
            await self._release(budget)
            return True
        # The floor: even `stop(0)` lets an idle loop see the poke and the lead go back.
        done, _ = await asyncio.wait([loop], timeout=_seconds(budget.left_ms(STOP_CALL_FLOOR_MS)))
        if not done:
            work = [t for t in (loop, self._round) if t is not None]
            for task in work:
                task.cancel()
            # A round cancelled inside a store call may take its driver's time to unwind.
            await bounded(asyncio.gather(*work, return_exceptions=True), budget.slack_ms())
            log.warning("jobs.scheduler.drain-abandoned %s: the lead lapses", self.scheduler_id)
            self._lease = None
            return False
        await self._release(budget)
        return True

    async def tick(self) -> list[Fired]:
        """One dispatch round; a round already in flight is joined, never doubled."""
        if self._round is None or self._round.done():
            self._round = asyncio.ensure_future(self._dispatch())
        return await asyncio.shield(self._round)

    async def _run(self) -> None:
        # A failed round backs off like the worker's claim loop (0.1 s doubling to 5 s, logged
        # once per step), so the role is back within seconds of its store.
        outage = Outage("jobs.scheduler.round_failed")
        while not self._stopping:
            try:
                await self.tick()
            except Exception as exc:
                if not isinstance(exc, JobsError):
                    # A bug must not end the role silently; it is logged and the round retried.
                    log.exception("jobs.scheduler.round_crashed")
                wait = outage.failed(exc)
            else:
                outage.recovered()
                wait = self._next_wake() - self.clock.now_ms()
            if not self._stopping:
                await self._sleep(wait)

    async def _sleep(self, ms: int) -> None:
        if ms <= 0:
            await asyncio.sleep(0)
            return
        self._poke.clear()
        await wait_kick(self._poke, self.clock, ms)

    def _next_wake(self) -> int:
        if self._lease is None:
            return self._ask_at
        due = [max(at, self._held.get(name, 0)) for name, at in self._next.items()]
        return min([self._trusted_until, *due])

    # -- leading -------------------------------------------------------------------------

    async def _lead(self) -> bool:
        """Whether this scheduler leads now: from memory inside the renewal interval, else
        from one renewal (or, standing by, one take when its turn to ask has come)."""
        now = self.clock.now_ms()
        if self._lease is not None:
            if now < self._trusted_until:
                return True
            renewed = await self.driver.lease_renew(
                [LeaseRenew(LEADER_KEY, self._lease.token, self.ttl_ms)], now
            )
            if renewed[0]:
                self._trusted_until = now + self.renew_every_ms
                return True
            log.warning("jobs.scheduler.lead_lost %s", self.scheduler_id)
            self._step_down(now)
            return False
        if now < self._ask_at or self._stopping:
            return False
        self._ask_at = now + self.renew_every_ms + random.randint(0, self.renew_every_ms // 10)
        take = [LeaseTake(LEADER_KEY, self.scheduler_id, 1, self.ttl_ms)]
        took = await again_if_lost(lambda: self.driver.lease_take(take, self.clock.now_ms()))
        if took[0] is None:
            return False
        self._lease = took[0]
        self._trusted_until = now + self.renew_every_ms
        self._marks = None  # another leader may have fired since: read the marks again
        log.info("jobs.scheduler.leading %s token=%d", self.scheduler_id, took[0].token)
        return True

    def _step_down(self, now: int) -> None:
        self._lease = None
        self._marks = None
        self._next.clear()
        self._ask_at = now + self.renew_every_ms

    async def _release(self, budget: StopBudget) -> None:
        """Give the lead back within the drain's slack; a store that does not take it in time
        leaves it to lapse (a standby takes over within the TTL instead of at once)."""
        lease, self._lease = self._lease, None
        self._marks = None
        if lease is None:
            return
        call = asyncio.ensure_future(
            self.driver.lease_release([LeaseRef(lease.key, lease.token)], self.clock.now_ms())
        )
        if not await bounded(call, budget.slack_ms(STOP_CALL_FLOOR_MS)):
            log.warning("jobs.scheduler.release_failed: the store did not answer (the lead lapses)")
            return
        try:
            call.result()
            log.info("jobs.scheduler.released %s", self.scheduler_id)
        except JobsError as exc:
            log.warning("jobs.scheduler.release_failed: %s (the lead lapses)", exc)

    # -- a round -------------------------------------------------------------------------

    async def _dispatch(self) -> list[Fired]:
        if self._stopping and self._lease is None:
            return []
        if not await self._lead():
            return []
        now = self.clock.now_ms()
        if self._marks is None:
            await self._arm([t.name for t in self.tasks], now)
        due = sorted(
            (
                t
                for t in self.tasks
                if self._next[t.name] <= now and self._held.get(t.name, 0) <= now
            ),
            key=lambda t: (self._next[t.name], t.name),
        )
        if not due:
            return []
        pauses = await self.driver.pause_list() if self.driver.capabilities().pauses else []
        paused = {p.value for p in pauses if p.kind == "task"}
        fired: list[Fired] = []
        for t in due:
            if not await self._lead():
                break
            if t.name in paused:
                self._held[t.name] = self.clock.now_ms() + PAUSED_RECHECK_MS
                continue
            outcome = await self._fire(t)
            if outcome is not None:
                fired.append(outcome)
        return fired

    async def _arm(self, names: Sequence[str], now: int) -> None:
        marks: list[TaskMark] = []
        # A call names at most MAX_TASK_BATCH tasks: a fleet of consumers brings one each.
        for at in range(0, len(names), MAX_TASK_BATCH):
            marks += await self.driver.task_arm(names[at : at + MAX_TASK_BATCH], now)
        if self._marks is None:
            self._marks = {}
        for m in marks:
            self._remember(m)

    def _remember(self, mark: TaskMark) -> None:
        assert self._marks is not None
        self._marks[mark.name] = mark
        self._next[mark.name] = self._by_name[mark.name].schedule.next_after(mark.watermark_ms)

    async def _fire(self, t: TaskHandle) -> Fired | None:
        assert self._marks is not None
        now = self.clock.now_ms()
        mark = self._marks[t.name]
        first = self._next[t.name]
        last = first if t.schedule.next_after(first) > now else t.schedule.latest_until(now)
        at = first if t.catch_up == "run-once" else last
        occurrence = Occurrence(t.name, at, first, last, t.tz)
        try:
            value = t.input_for(occurrence)
            record = self._jobs.build_record(
                t.job,
                value,
                key=t.fire_key(at, value),
                tenant_id=None,
                enqueued_by=ENQUEUED_BY,
            )
            check_new_job(record)  # a key past its bound is this task's, not the round's
        except JobsError as exc:
            # The occurrence stays unfired (the watermark does not move) until the input is
            # fixed; a refusal is not something a retry in the next second would change.
            self._held[t.name] = now + REFUSED_RETRY_MS
            log.error("jobs.scheduler.fire_refused %s at=%d: %s", t.name, at, exc)
            return None
        try:
            answer = await self.driver.task_fire(
                TaskFire(t.name, mark.watermark_ms, at, last, record, now)
            )
        except Exception:
            # It may have landed: the next fence's stored mark tells (`_own_fire`).
            self._unanswered[t.name] = (occurrence, record.id, now)
            raise
        unanswered = self._unanswered.pop(t.name, None)
        if answer.mark is None:
            await self._arm([t.name], now)  # the mark went (an operator removed it)
            return Fired(t.name, occurrence, None, fenced=True)
        self._remember(answer.mark)
        if answer.enqueued is None:
            own = _own_fire(answer.mark, unanswered)
            if own is not None:
                log.info(
                    "jobs.scheduler.fired %s at=%d job=%s (landed; its answer was lost)",
                    t.name,
                    own.occurrence.at_ms,
                    own.job_id,
                )
                return own
            log.warning(
                "jobs.scheduler.fenced %s at=%d: watermark already %d",
                t.name,
                at,
                answer.mark.watermark_ms,
            )
            return Fired(t.name, occurrence, None, fenced=True)
        skipped = "" if first == last else f" span={first}..{last} catch_up={t.catch_up}"
        # A catch-up is news; a fire on time, every second for some tasks, is not.
        level = logging.INFO if skipped else logging.DEBUG
        log.log(
            level, "jobs.scheduler.fired %s at=%d job=%s%s", t.name, at, answer.enqueued.id, skipped
        )
        return Fired(t.name, occurrence, answer.enqueued.id, deduped=answer.enqueued.deduped)


def _own_fire(mark: TaskMark, unanswered: tuple[Occurrence, str, int] | None) -> Fired | None:
    """The fire whose answer was lost, when the stored mark shows it is the one that landed:
    its occurrence, and the job it sent (or the live job its key deduped into: then the mark
    holds that job's id, and the fire's own time tells it apart from another scheduler's)."""
    if unanswered is None:
        return None
    occurrence, job_id, sent_ms = unanswered
    if mark.fired_ms != occurrence.at_ms or mark.fired_job_id is None:
        return None
    if mark.fired_job_id != job_id and mark.fired_at_ms != sent_ms:
        return None
    return Fired(
        occurrence.task, occurrence, mark.fired_job_id, deduped=mark.fired_job_id != job_id
    )


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


__all__ = ["LEADER_KEY", "Fired", "Scheduler"]
