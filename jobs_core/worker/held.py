"""One claimed job as its worker holds it (`Held`): its run's signal and task, its unsent
progress, and the fields every log record about it carries."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from jobs_core.context import CancelSignal
from jobs_core.jsonform import JsonValue, dumps
from jobs_core.leases.admit import Refusal
from jobs_core.records import ClaimedJob, Lease
from jobs_core.steps import StepApi
from jobs_core.worker.failure import brief

log = logging.getLogger("jobs")


@dataclass(eq=False)
class Held:
    job: ClaimedJob
    signal: CancelSignal = field(default_factory=CancelSignal)
    task: asyncio.Task[None] | None = None
    started: bool = False
    last_landed_ms: int = 0
    progress: JsonValue = None
    progress_dirty: bool = False
    progress_sent_ms: int = 0
    in_body: bool = False
    #: The body returned or was cancelled: what is left is the settle (`ClaimLoop.free`).
    body_ended: bool = False
    #: The run holds one of the worker's `concurrency` slots (from its start to its body's end).
    in_slot: bool = False
    #: A settle was made (or the row is known not to be ours): the run path's net stands down.
    settled: bool = False
    #: How long the body ran (the worker's clock), once it returned or was cancelled.
    body_ms: int | None = None
    #: The run's consumer span (`jobs_core.tracing`), None when not tracing.
    span: Any = None
    #: The run's steps (`ctx.step`), once its body started: what a final failure undoes.
    steps: StepApi | None = None
    #: The fleet slots and rate stamps the run holds (`jobs_core.leases.admit`), until handed back.
    leases: tuple[Lease, ...] = ()
    #: When a renewal of `leases` last landed (the worker's clock).
    leases_landed_ms: int = 0
    #: Why the job may not start now (a busy slot, a rate window, a refused key), or None.
    refusal: Refusal | None = None

    def report_progress(self, value: Any) -> None:
        if self.signal.cancelled:
            return
        self.progress = value
        self.progress_dirty = True

    def pending_progress(self, worker_id: str) -> str | None:
        if not self.progress_dirty:
            return None
        self.progress_dirty = False
        try:
            return dumps(self.progress)
        except Exception as exc:  # a bad progress value is dropped; it never blocks a settle
            log.warning(
                "jobs.progress.invalid %s: %s",
                self.job.id,
                brief(exc),
                extra=job_fields(worker_id, self.job),
            )
            return None


def log_fields(
    worker_id: str, job_id: str, name: str, queue: str, attempt: int | None
) -> dict[str, object]:
    """The `extra` every run-path log record carries (a JSON formatter prints them)."""
    return {
        "job_id": job_id,
        "job_name": name,
        "queue": queue,
        "attempt": attempt,
        "worker_id": worker_id,
    }


def job_fields(worker_id: str, job: ClaimedJob) -> dict[str, object]:
    return log_fields(worker_id, job.id, job.name, job.queue, job.attempt)
