"""Batched settles: every ack and nack waiting at a moment goes out in one driver call.

While one call is in flight, the next settles gather behind it, so batching costs no added
latency. Each item is still fenced by its own claim; the answer per item says if it landed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from jobs_core.clock import Clock
from jobs_core.driver import JobDriver
from jobs_core.errors import JobsError
from jobs_core.records import Ack, Nack

log = logging.getLogger("jobs")

#: The most settles one call carries.
SETTLE_BATCH = 1_000
#: Tries per batch when the store is unreachable; a settle that never lands leaves the lease to
#: lapse and the job to be claimed again (at least once), never settled twice (the fence).
SETTLE_TRIES = 3

T = TypeVar("T", Ack, Nack)


class _Lane(Generic[T]):
    def __init__(self, send: Callable[[Sequence[T]], Awaitable[list[bool]]], clock: Clock) -> None:
        self._send: Callable[[Sequence[T]], Awaitable[list[bool]]] = send
        self._clock = clock
        self._pending: list[tuple[T, asyncio.Future[bool]]] = []
        self._task: asyncio.Task[None] | None = None

    def submit(self, item: T) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((item, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._flush())
        return fut

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = (
                self._pending[:SETTLE_BATCH],
                self._pending[SETTLE_BATCH:],
            )
            answers = await self._send_with_retries([item for item, _ in batch])
            for (_, fut), ok in zip(batch, answers, strict=True):
                if not fut.done():
                    fut.set_result(ok)

    async def _send_with_retries(self, items: list[T]) -> list[bool]:
        for attempt in range(1, SETTLE_TRIES + 1):
            try:
                return await self._send(items)
            except JobsError as exc:
                log.warning(
                    "jobs.settle.failed: %s (try %d of %d, %d items)",
                    exc,
                    attempt,
                    SETTLE_TRIES,
                    len(items),
                )
                if attempt < SETTLE_TRIES:
                    await self._clock.sleep_ms(100 * 2**attempt)
        return [False] * len(items)

    async def join(self) -> None:
        while self._task is not None and not self._task.done():
            await self._task


class Settler:
    """Queues acks and nacks and sends each kind in batches; `await` answers landed or not."""

    def __init__(self, driver: JobDriver, clock: Clock) -> None:
        self._acks: _Lane[Ack] = _Lane(driver.job_ack, clock)
        self._nacks: _Lane[Nack] = _Lane(driver.job_nack, clock)

    async def ack(self, item: Ack) -> bool:
        return await self._acks.submit(item)

    async def nack(self, item: Nack) -> bool:
        return await self._nacks.submit(item)

    async def nack_many(self, items: Sequence[Nack]) -> list[bool]:
        futs = [self._nacks.submit(i) for i in items]
        return list(await asyncio.gather(*futs))

    async def join(self) -> None:
        """Wait until every queued settle has been sent."""
        await self._acks.join()
        await self._nacks.join()
