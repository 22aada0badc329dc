"""ultimat3-jobs: the contract every backend implements, the worker, and the tools around them.

Its names load on first use (PEP 562), so `import jobs_core.<module>` (the `ujobs` CLI's start,
a driver's import) does not pay for the worker, the facade and the scheduler it does not use.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from jobs_core.batch import JobBatch
    from jobs_core.clock import Clock, FakeClock, SystemClock
    from jobs_core.context import CancelSignal, JobContext
    from jobs_core.driver import Capabilities, JobDriver
    from jobs_core.errors import (
        DependencyFailedError,
        DependencyUnknownError,
        JobsError,
        RateLimitedError,
        ResultFailedError,
        ResultTimeoutError,
        TerminalError,
    )
    from jobs_core.facade import (
        EventSent,
        Jobs,
        SettledEvent,
        configure,
        send_event,
        send_event_sync,
    )
    from jobs_core.job import JobHandle, JobRegistry, job
    from jobs_core.leases import Concurrency, RateLimit, with_lock
    from jobs_core.records import EnqueueResult, JobRecord, JoinPolicy, Pause
    from jobs_core.retry import Retry
    from jobs_core.scheduler import Occurrence, Scheduler, TaskHandle
    from jobs_core.scheduler.task import task
    from jobs_core.states import JobState, Outcome
    from jobs_core.tenant import acting_for, current_tenant
    from jobs_core.urls import driver_from_url
    from jobs_core.worker import Worker, WorkerStats

_LAZY: Final = {
    "CancelSignal": "jobs_core.context",
    "Capabilities": "jobs_core.driver",
    "Clock": "jobs_core.clock",
    "Concurrency": "jobs_core.leases",
    "DependencyFailedError": "jobs_core.errors",
    "DependencyUnknownError": "jobs_core.errors",
    "EnqueueResult": "jobs_core.records",
    "EventSent": "jobs_core.facade",
    "FakeClock": "jobs_core.clock",
    "JobBatch": "jobs_core.batch",
    "JobContext": "jobs_core.context",
    "JobDriver": "jobs_core.driver",
    "JobHandle": "jobs_core.job",
    "JobRecord": "jobs_core.records",
    "JobRegistry": "jobs_core.job",
    "JobState": "jobs_core.states",
    "Jobs": "jobs_core.facade",
    "JobsError": "jobs_core.errors",
    "JoinPolicy": "jobs_core.records",
    "Occurrence": "jobs_core.scheduler",
    "Outcome": "jobs_core.states",
    "Pause": "jobs_core.records",
    "RateLimit": "jobs_core.leases",
    "RateLimitedError": "jobs_core.errors",
    "ResultFailedError": "jobs_core.errors",
    "ResultTimeoutError": "jobs_core.errors",
    "Retry": "jobs_core.retry",
    "Scheduler": "jobs_core.scheduler",
    "SettledEvent": "jobs_core.facade",
    "SystemClock": "jobs_core.clock",
    "TaskHandle": "jobs_core.scheduler",
    "TerminalError": "jobs_core.errors",
    "Worker": "jobs_core.worker",
    "WorkerStats": "jobs_core.worker",
    "acting_for": "jobs_core.tenant",
    "configure": "jobs_core.facade",
    "current_tenant": "jobs_core.tenant",
    "driver_from_url": "jobs_core.urls",
    "job": "jobs_core.job",
    "send_event": "jobs_core.facade",
    "send_event_sync": "jobs_core.facade",
    "task": "jobs_core.scheduler",
    "with_lock": "jobs_core.leases",
}


if not TYPE_CHECKING:
    # Hidden from type checkers: a module `__getattr__` makes every name it lacks read as Any,
    # so `from jobs_core import Jobz` (a typo) would pass mypy unseen; they see the imports above.

    def __getattr__(name: str) -> Any:
        """A public name, imported from its module on first use; else a submodule
        (`jobs_core.worker` reads as it did when this package imported them all)."""
        module = _LAZY.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
            globals()[name] = value
            return value
        return submodule(__name__, name)


def submodule(package: str, name: str) -> types.ModuleType:
    """`package.name` imported, for a package's `__getattr__`; `AttributeError` where there is
    no such module (an error inside one that exists is raised as it is)."""
    if not name.isidentifier():  # "a.b" would import a grandchild, or fail on its parent
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{package}.{name}":
            raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """This package's module: the import system binds each submodule it imports on it, and the
    submodule `jobs_core.job` must not stand where the decorator `job` is expected."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "CancelSignal",
    "Capabilities",
    "Clock",
    "Concurrency",
    "DependencyFailedError",
    "DependencyUnknownError",
    "EnqueueResult",
    "EventSent",
    "FakeClock",
    "JobBatch",
    "JobContext",
    "JobDriver",
    "JobHandle",
    "JobRecord",
    "JobRegistry",
    "JobState",
    "Jobs",
    "JobsError",
    "JoinPolicy",
    "Occurrence",
    "Outcome",
    "Pause",
    "RateLimit",
    "RateLimitedError",
    "ResultFailedError",
    "ResultTimeoutError",
    "Retry",
    "Scheduler",
    "SettledEvent",
    "SystemClock",
    "TaskHandle",
    "TerminalError",
    "Worker",
    "WorkerStats",
    "acting_for",
    "configure",
    "current_tenant",
    "driver_from_url",
    "job",
    "send_event",
    "send_event_sync",
    "task",
    "with_lock",
]
