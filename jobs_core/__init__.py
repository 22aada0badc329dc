"""ultimat3-jobs: the contract every backend implements, the worker, and the tools around them."""

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
from jobs_core.facade import EventSent, Jobs, SettledEvent, configure, send_event, send_event_sync
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.leases import Concurrency, RateLimit, with_lock
from jobs_core.records import EnqueueResult, JobRecord, JoinPolicy, Pause
from jobs_core.retry import Retry
from jobs_core.scheduler import Occurrence, Scheduler, TaskHandle, task
from jobs_core.states import JobState, Outcome
from jobs_core.tenant import acting_for, current_tenant
from jobs_core.urls import driver_from_url
from jobs_core.worker import Worker, WorkerStats

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
