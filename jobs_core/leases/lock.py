"""`with_lock`: a fleet-wide lock on the lease family — one `lock:<key>` holding, its fencing
token the store's, renewed while held; a lock lost while held cancels the block it guards."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final

from jobs_core.clock import Clock, SystemClock
from jobs_core.driver import JobDriver
from jobs_core.errors import (
    DeclarationInvalidError,
    DriverUnavailableError,
    JobsError,
    LockLostError,
    LockTimeoutError,
    OptionInvalidError,
)
from jobs_core.ids import new_id
from jobs_core.options import finite_number, seconds_to_ms
from jobs_core.records import LeaseRef, LeaseRenew, LeaseTake
from jobs_core.resend import again_if_lost

log = logging.getLogger("jobs")

#: A busy lock is asked for again after this, doubling up to the cap.
LOCK_POLL_FLOOR_MS: Final = 50
LOCK_POLL_CEILING_MS: Final = 1_000


@dataclass(eq=False)
class Lock:
    """A held lock. Hand `token` to what the lock guards: a later holder's token is greater, so
    a store that remembers the greatest token it saw can refuse a holder that was superseded."""

    key: str
    token: int
    holder: str
    #: Set once the lock is known lost (a renewal refused, or none landed for a whole TTL).
    lost: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def store_key(self) -> str:
        """The lease key the lock is held under."""
        return _store_key(self.key)

    def check(self) -> None:
        """Raise `X_LOCK_LOST` when the lock is no longer held (before a guarded write)."""
        if self.lost.is_set():
            raise LockLostError(detail=self.key)


@contextlib.asynccontextmanager
async def with_lock(
    key: str,
    *,
    ttl: float = 30.0,
    wait: float | None = 30.0,
    driver: JobDriver | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[Lock]:
    """Hold the fleet-wide lock `key` for the block; renewed every third of `ttl` seconds.

    Waits up to `wait` seconds for a busy lock (None: for as long as it takes), then
    `X_LOCK_TIMEOUT`. A store that is unavailable while it asks is asked again under the same
    holder, so a take that landed unanswered is the holding it gets; for up to `wait` and at
    most `ttl`, then `X_DRIVER_UNAVAILABLE`. A lock lost while held (the store refused a
    renewal, or none landed for a whole `ttl`) cancels the block, which then raises
    `X_LOCK_LOST`. Outside a job body, the driver is the `configure`d client's unless `driver`
    is given; in a body, the worker's. A `driver` given without `clock` runs on the system
    clock: no client is needed.
    """
    if not isinstance(key, str) or not key:
        # str() of another value names some other lock: None would take "lock:None", 5 the
        # lock of "5" (and an int past 4,300 digits or a deep list fails untyped making it).
        raise OptionInvalidError("must be a non-empty string naming the lock", detail="key")
    if driver is None or clock is None:
        from jobs_core.facade import current_client

        client = current_client()
        if driver is None:
            if client is None:
                raise DeclarationInvalidError(
                    "no jobs client: pass driver= or call jobs_core.configure(driver_or_url)",
                    detail="configure",
                )
            driver = client.driver
        # Only a driver given outside any client: the block runs on the system's clock.
        clock = clock or (client.clock if client is not None else SystemClock())
    driver.require("leases", what="with_lock")
    ttl_ms = seconds_to_ms(ttl, "ttl")
    wait_ms = None if wait is None else round(finite_number(wait, "wait", minimum=0.0) * 1000)
    lock = await _take(driver, clock, key, ttl_ms, wait_ms)
    guard = _Guard(asyncio.current_task())
    keeper = asyncio.create_task(_keep(driver, clock, lock, ttl_ms, guard))
    try:
        yield lock
    except asyncio.CancelledError:
        if guard.cancelled and guard.take_back():
            raise LockLostError("the lock was lost while held", detail=key) from None
        raise
    finally:
        # No await before this line: the keeper cancels the block only while it runs.
        guard.inside = False
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
        if not lock.lost.is_set():
            try:
                await driver.lease_release([LeaseRef(lock.store_key, lock.token)], clock.now_ms())
            except JobsError as exc:  # it lapses at its TTL
                log.warning("jobs.lock.release_failed %s: %s", key, exc)
    if lock.lost.is_set():
        # The block swallowed the cancel it was sent: the lock is lost all the same.
        guard.take_back()
        raise LockLostError("the lock was lost while held", detail=key)


@dataclass(eq=False)
class _Guard:
    """The task running a locked block, while it runs it, and whether the keeper cancelled it."""

    task: asyncio.Task[object] | None
    inside: bool = True
    cancelled: bool = False

    def cancel(self) -> None:
        if self.inside and self.task is not None and not self.cancelled:
            self.cancelled = True
            self.task.cancel()

    def take_back(self) -> bool:
        """Withdraw the keeper's cancel from the task's count, once; True when this was the
        only cancel the task was asked for (a cancel from elsewhere still propagates)."""
        if not self.cancelled or self.task is None:
            return False
        self.cancelled = False
        return self.task.uncancel() == 0


def _store_key(key: str) -> str:
    return f"lock:{key}"


async def _take(
    driver: JobDriver, clock: Clock, key: str, ttl_ms: int, wait_ms: int | None
) -> Lock:
    holder = new_id()
    start = clock.now_ms()
    delay = LOCK_POLL_FLOOR_MS
    take = [LeaseTake(_store_key(key), holder, 1, ttl_ms)]
    while True:
        now = clock.now_ms()
        try:
            (got,) = await again_if_lost(lambda: driver.lease_take(take, clock.now_ms()))
        except DriverUnavailableError:
            # Every take is under this one holder: whichever landed unanswered, the next one
            # replaces it. Past the TTL such a holding has lapsed anyway.
            patience = ttl_ms if wait_ms is None else min(ttl_ms, wait_ms)
            if clock.now_ms() - start >= patience:
                raise
            got = None
        if got is not None:
            return Lock(key, got.token, holder)
        if wait_ms is not None and now - start >= wait_ms:
            raise LockTimeoutError(detail=key)
        pause = delay if wait_ms is None else max(1, min(delay, start + wait_ms - now))
        await clock.sleep_ms(pause)
        delay = min(delay * 2, LOCK_POLL_CEILING_MS)


async def _keep(driver: JobDriver, clock: Clock, lock: Lock, ttl_ms: int, guard: _Guard) -> None:
    """Renew every third of the TTL; on a loss, mark it and cancel the guarded block."""
    landed = clock.now_ms()
    while True:
        await clock.sleep_ms(max(1, ttl_ms // 3))
        now = clock.now_ms()
        try:
            (ok,) = await driver.lease_renew([LeaseRenew(lock.store_key, lock.token, ttl_ms)], now)
        except JobsError as exc:
            log.warning("jobs.lock.renew_failed %s: %s", lock.key, exc)
            ok = clock.now_ms() - landed < ttl_ms
        else:
            landed = now if ok else landed
        if not ok:
            log.warning("jobs.lock.lost %s: the guarded block is cancelled", lock.key)
            lock.lost.set()
            guard.cancel()
            return
