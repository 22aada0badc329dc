"""One driver, several event loops (issue 7, item 10), the same on every backend: `def`
callers (`enqueue_sync`, the portal's loop) beside `async def` ones on the main loop, and
several `asyncio.run()` in a row. Every call answers right, and each row is written once.

A backend's test file supplies a `Backend`: the driver, how to read back what it stored, and
how many server sessions it still holds.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job


async def body(input: Any, ctx: Any) -> None:
    return None


def declare() -> JobHandle:
    """A job keyed `k<input>`."""
    handle: JobHandle = job(
        body, name="hit", tenant="none", idempotency_key=lambda i: f"k{i}", registry=JobRegistry()
    )
    return handle


@dataclass
class Backend:
    """The test's driver and the two ways to look at its server."""

    driver: JobDriver
    #: On the caller's loop: every stored idempotency key (one entry per row, sorted), then the
    #: stored rows cleaned up and the driver closed.
    finish: Callable[[], Coroutine[Any, Any, list[str]]]
    #: The server sessions the driver still holds (closing must leave none).
    sessions: Callable[[], int]


def sync_and_async_callers_alternate(b: Backend) -> None:
    """Overlapping sync and async enqueues on one driver each answer with their key's one row."""
    jobs = Jobs(b.driver, enqueue_retry_s=0)  # the driver alone must answer every call
    h = declare()

    async def call(n: int) -> tuple[int, str, bool]:
        if n % 2:
            # A `def` endpoint: the server runs it on a thread, it enqueues through the portal.
            r = await asyncio.to_thread(jobs.enqueue_sync, h, n % 15)
        else:
            r = await jobs.enqueue(h, n % 15)
        return n % 15, r.id, r.deduped

    async def app() -> tuple[list[tuple[int, str, bool]], list[str]]:
        # Requests overlap, more of them than the pool has connections.
        out = list(await asyncio.gather(*(call(n) for n in range(30))))
        many = await jobs.enqueue_many(h, [40, 41])
        many_sync = await asyncio.to_thread(jobs.enqueue_many_sync, h, [42, 41])
        out += [
            (k, r.id, r.deduped) for k, r in zip([40, 41, 42, 41], [*many, *many_sync], strict=True)
        ]
        return out, await b.finish()

    answers, stored = asyncio.run(app())
    jobs.close_sync()
    by_key: dict[int, set[str]] = {}
    for k, job_id, _ in answers:
        by_key.setdefault(k, set()).add(job_id)
    assert all(len(ids) == 1 for ids in by_key.values())  # every answer names the key's one row
    assert sum(not deduped for _, _, deduped in answers) == len(by_key) == 18
    assert stored == sorted(f"k{k}" for k in by_key)
    assert b.sessions() == 0


def consecutive_asyncio_runs_share_one_driver(b: Backend) -> None:
    """Loops that come and go one after another (and one on another thread) share the driver."""
    jobs = Jobs(b.driver, enqueue_retry_s=0)  # the driver alone must answer every call
    h = declare()
    answers = [asyncio.run(jobs.enqueue(h, n)) for n in range(4)]
    answers += asyncio.run(jobs.enqueue_many(h, [4, 0]))
    # A loop on another thread, while this one's is gone, then a sync call through the portal.
    other: list[Any] = []
    t = threading.Thread(target=lambda: other.append(asyncio.run(jobs.enqueue(h, 5))))
    t.start()
    t.join()
    answers += [*other, jobs.enqueue_sync(h, 6)]
    stored = asyncio.run(b.finish())
    jobs.close_sync()
    assert [r.deduped for r in answers] == [False] * 5 + [True, False, False]
    assert answers[5].id == answers[0].id
    assert stored == [f"k{n}" for n in range(7)]
    assert b.sessions() == 0
