"""One claimed job as its worker holds it (`Held`): its run's signal and task, its unsent
progress, and the fields every log record about it carries."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from jobs_core.context import CancelSignal
from jobs_core.jsonform import JsonValue, dumps
from jobs_core.leases.admit import Admission, Refusal
from jobs_core.records import ClaimedJob, Lease
from jobs_core.redact import SCRUB_EXTRA, input_secrets
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
    #: The run's task has ended on a queued ack: the ack's answer ends the run (`Runner._acked`).
    acking: bool = False
    #: How long the body ran (the worker's clock), once it returned or was cancelled.
    body_ms: int | None = None
    #: The run's consumer span (`jobs_core.tracing`), None when not tracing.
    span: Any = None
    #: The run's steps (`ctx.step`), once its body started: what a final failure undoes.
    steps: StepApi | None = None
    #: The fleet slots and rate stamps the run holds (`jobs_core.leases.admit`), until handed back.
    leases: tuple[Lease, ...] = ()
    #: When the store last vouched for `leases` (their take or renewal; the worker's clock).
    leases_landed_ms: int = 0
    #: The admission decided (`admit`): the claim round's when the job held a local slot then,
    #: else when it got one.
    admitted: bool = False
    #: Why the job may not start now (a busy slot, a rate window, a refused key), or None.
    refusal: Refusal | None = None
    #: The job's sensitive input fields (its declaration's), told when its run begins.
    sensitive: frozenset[str] = frozenset()
    _secrets: list[str] | None = None

    @property
    def secrets(self) -> list[str]:
        """The values of the input's sensitive fields, scrubbed from every record of this run
        (its stored error, log lines, span), whatever failed; read from the stored input once."""
        if self._secrets is None:
            self._secrets = input_secrets(self.job.input_json, self.sensitive)
        return self._secrets

    def log_extra(self, worker_id: str) -> dict[str, object]:
        """`job_fields`, and the run's secrets for the `jobs` logger's `ScrubFilter`: the extra
        of every log line that may quote an error or a value of the run."""
        fields = job_fields(worker_id, self.job)
        if self.secrets:
            fields[SCRUB_EXTRA] = self.secrets
        return fields

    def admit(self, admission: Admission) -> None:
        self.admitted = True
        self.leases, self.refusal = admission.leases, admission.refusal
        if admission.leases:
            self.leases_landed_ms = admission.landed_ms

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
                extra=self.log_extra(worker_id),
            )
            return None


def let_go(held: dict[str, Held], run: Held) -> None:
    """Stop tracking `run`, and only it: its job's next attempt, claimed again before this run
    ended (a retry due at once, claimed while this attempt's settle was answered), stays held,
    heartbeaten and handed back by a drain."""
    if held.get(run.job.id) is run:
        del held[run.job.id]


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
