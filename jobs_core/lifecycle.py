"""What every long-running role (the worker, the scheduler, the relay) shares around its store:
waiting at start for a store that is unavailable, and a drain that ends on time, store up or down.

A drain has a deadline (its timeout) for its work, then `STOP_SLACK_MS` more for the store calls
of its teardown: all of them together, never a budget per call, so a store that does not answer
costs the slack once and the drain ends within its timeout plus about a second (SPEC §7).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar

from jobs_core.backoff import wait_kick
from jobs_core.clock import Clock
from jobs_core.errors import CliExtraMissingError, DriverUnavailableError, OptionInvalidError
from jobs_core.loops import cancel_other_tasks

if TYPE_CHECKING:  # the worker package imports this module: no cycle at run time
    from jobs_core.worker.outage import Outage

log = logging.getLogger("jobs")

#: What a drain may spend past its deadline on its teardown's store calls, all of them together.
STOP_SLACK_MS: Final = 1_000
#: The least a drain's first and last store calls get (once each, not per call) when its
#: deadline or slack is already spent, e.g. `stop(0)`: a store that answers is still told.
STOP_CALL_FLOOR_MS: Final = 250

# Store calls cut off by a bound, held until they have unwound (nobody awaits them).
_unwinding: set[asyncio.Future[Any]] = set()


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class StopBudget:
    """One drain's time on `now_ms`: until `deadline_ms` for its work (None: no bound), then
    `STOP_SLACK_MS` more for its teardown's store calls together."""

    def __init__(self, deadline_ms: int | None, now_ms: Callable[[], int] = monotonic_ms) -> None:
        self.deadline_ms = deadline_ms
        self._now_ms = now_ms

    @classmethod
    def after(cls, timeout_s: float | None) -> StopBudget:
        """A deadline `timeout_s` seconds from now, on the monotonic clock (None: no bound)."""
        return cls(None if timeout_s is None else monotonic_ms() + round(timeout_s * 1000))

    def left_ms(self, floor_ms: int = 0) -> int | None:
        """Until the deadline, at least `floor_ms`; None without one."""
        if self.deadline_ms is None:
            return None
        return max(floor_ms, self.deadline_ms - self._now_ms())

    def slack_ms(self, floor_ms: int = 0) -> int | None:
        """Until the deadline plus `STOP_SLACK_MS`, at least `floor_ms`; None without one."""
        if self.deadline_ms is None:
            return None
        return max(floor_ms, self.deadline_ms + STOP_SLACK_MS - self._now_ms())


async def bounded(aw: Awaitable[Any], ms: int | None) -> bool:
    """Wait for `aw` at most `ms` of wall time (None: no bound); True when it finished (its
    outcome is the caller's to read). Past the bound it is cancelled and left to unwind on its
    own: a store call cancelled mid-flight may take its driver's time to give up."""
    fut = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait([fut], timeout=None if ms is None else ms / 1000)
    if fut in done:
        return True
    leave(fut)
    return False


def leave(fut: asyncio.Future[Any]) -> None:
    """Cancel `fut` unless it is done (a store call past its bound) and hold it until it has
    unwound, its outcome read: nobody awaits it, and the caller goes on without it."""
    if fut.done():
        return
    fut.cancel()
    _unwinding.add(fut)
    fut.add_done_callback(_unwound)


def _unwound(fut: asyncio.Future[Any]) -> None:
    _unwinding.discard(fut)
    if not fut.cancelled():
        fut.exception()


async def wait_for_store(
    attempt: Callable[[], Awaitable[None]],
    outage: Outage,
    stop: asyncio.Event,
    clock: Clock,
    heard: Callable[[], None] | None = None,
) -> bool:
    """Run `attempt` (a role's first store calls) until it goes through: True.

    A store that is unavailable (`X_DRIVER_UNAVAILABLE`: down, restarting) is waited for with
    `outage`'s backoff, logged by it once per step. Once `stop` is set the answer is False, at
    once: an attempt in flight is cancelled (a connect to a store that does not answer may take
    seconds to fail). Any other error is raised: a store that refuses the role (a schema not
    installed) is not an outage, and waiting would hide it.

    `heard()` runs once, after the first attempt that went through or found the store
    unavailable — never before a refusal: what a role's process prints on its way in (its
    banner) goes there, so a refused start prints only its error.
    """
    while not stop.is_set():
        call = asyncio.ensure_future(attempt())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([call, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if stop.is_set():
            if call.done():
                call.exception()  # answered as the stop came: read, and moot
            leave(call)
            return False
        try:
            call.result()
        except DriverUnavailableError as exc:
            if heard is not None:
                told, heard = heard, None
                told()
            await wait_kick(stop, clock, outage.failed(exc))
            continue
        if heard is not None:
            heard()
        outage.recovered()
        return True
    return False


class Closable(Protocol):
    """A driver or an outbox store: what a role's process closes on its way out."""

    def describe(self) -> str: ...

    async def close(self) -> None: ...


async def close_quietly(stores: Sequence[Closable], ms: int | None) -> None:
    """Close `stores` at once, within `ms` together (None: no bound), logging (never raising)
    a close that fails or outlives the bound: the process ends either way."""
    calls = [asyncio.ensure_future(store.close()) for store in stores]
    if not calls:
        return
    await asyncio.wait(calls, timeout=None if ms is None else ms / 1000)
    for store, call in zip(stores, calls, strict=True):
        if not call.done():
            leave(call)
            log.warning("jobs.store.close_abandoned: %s did not close in time", store.describe())
        elif not call.cancelled() and call.exception() is not None:
            log.warning("jobs.store.close_failed: %s: %r", store.describe(), call.exception())


T = TypeVar("T")
#: How long a role's process waits, after its drain, for the tasks the drain left running (the
#: calls it abandoned) to end once cancelled.
LEFT_TASKS_S: Final = 0.5


#: The event loop a role's process runs on: "auto" is uvloop where it is installed (CPython off
#: Windows, with the `pg` or `redis` extra), else the standard library's.
LoopChoice = Literal["auto", "asyncio", "uvloop"]
LOOP_CHOICES: Final[tuple[LoopChoice, ...]] = ("auto", "asyncio", "uvloop")


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the loop `choice` names; raises before any loop exists: `X_JOB_OPTION_INVALID`
    for a name it does not know, `X_CLI_EXTRA_MISSING` for "uvloop" where it cannot be imported
    ("auto" then falls back to the standard library's loop)."""
    if choice not in LOOP_CHOICES:
        raise OptionInvalidError(
            f"{choice!r} is not a loop: auto, asyncio or uvloop", detail="--loop"
        )
    if choice == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError as exc:
        if choice == "auto":
            return asyncio.new_event_loop
        raise CliExtraMissingError(
            "--loop uvloop: uvloop cannot be imported here (it comes with the pg and redis"
            " extras on CPython off Windows); --loop auto falls back to asyncio's loop",
            detail="--loop",
        ) from exc
    return uvloop.new_event_loop


def loop_name(choice: str) -> str:
    """The event loop `choice` runs a role on here, as the banners name it: "uvloop" or
    "asyncio"; raises as `loop_factory` does."""
    return "asyncio" if loop_factory(choice) is asyncio.new_event_loop else "uvloop"


def run_role(main: Coroutine[Any, Any, T], loop: str = "auto") -> T:
    """`asyncio.run(main)` for a role's process, on the event loop `loop` names (`loop_factory`),
    but the tasks left running after `main` (the store calls its drain abandoned) get a bounded
    wait once cancelled, not an unbounded one: a driver's cancel of a query may itself wait on
    a store that does not answer (psycopg waits 5 s for the cancel, then 5 s more), which would
    hold the exit past the drain."""
    try:
        new_loop = loop_factory(loop)
    except BaseException:
        main.close()  # never started: no "coroutine was never awaited" warning
        raise
    running = new_loop()
    asyncio.set_event_loop(running)
    try:
        return running.run_until_complete(main)
    finally:
        try:
            for task in running.run_until_complete(cancel_other_tasks(LEFT_TASKS_S)):
                # Abandoned on purpose: not a leak for asyncio to report at exit.
                task._log_destroy_pending = False  # type: ignore[attr-defined]
            running.run_until_complete(running.shutdown_asyncgens())
            running.run_until_complete(running.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            running.close()


__all__ = [
    "LEFT_TASKS_S",
    "LOOP_CHOICES",
    "STOP_CALL_FLOOR_MS",
    "STOP_SLACK_MS",
    "Closable",
    "LoopChoice",
    "StopBudget",
    "bounded",
    "close_quietly",
    "leave",
    "loop_factory",
    "loop_name",
    "monotonic_ms",
    "run_role",
    "wait_for_store",
]
