"""Sagas: when a run fails for good, the completed steps that declared a compensation are undone,
in reverse order of completion, each recorded once (a compensation runs at least once: a crash
after it returned and before its record landed runs it again).

The undoing is a job of its own, `ujobs.unwind`, enqueued (deduped per run) before the failed
run's final settle — and by the worker whose claim buries a run that died on its final attempt —
in the failed run's queue, under the failed run's RUN ID. So it has its own retries and crash
recovery, and it records each compensation (`~undo:<step>`) among the run's own steps: a crash in
the middle of the unwinding resumes it, and never repeats a compensation that landed.

It works by replaying the failed body in unwind mode: every recorded step answers its stored
output (registering its compensation), and the first step the failed run never recorded stops
the replay (`UnwindReached`); then what was met is undone. Code outside steps runs again during
that replay, as it does on every retry. Only runs that end `dead` or `failed` are undone (not a
cancelled one), by a worker that runs the failed job's name.

The replay and every compensation act as the failed body did: for its tenant (what
`current_tenant()` answers, the tenant of a job they enqueue) and, for a `def` body, on a thread
of their own (never one another run holds), the loop free meanwhile. So the unwind's row acts for
that org too (`NewJob.acts_for`, `unwind_org`): an operator listing an org's jobs finds it.

A saga run that failed for good is never run again as it is: from its final settle on, a plain
requeue of its row is refused (`X_JOB_REQUEUE_UNWOUND`, whether this job ran yet or not), since
its replay would take for done the steps whose effects are (being) undone. A fresh requeue gives
the row a new run id; this job, holding the old one, still undoes the old run, and the old run's
steps stay with it (the store deletes them when this job's row goes).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Mapping
from typing import Any, Final

from jobs_core.clock import Clock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import CompensationError, RateLimitedError
from jobs_core.ids import new_id
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.jsonform import dumps, loads
from jobs_core.records import ClaimedJob, JobRecord, NewJob
from jobs_core.redact import SCRUB_EXTRA, RedactionPolicy, scrub, secrets_of
from jobs_core.retry import Retry
from jobs_core.states import LIVE_STATES, JobState
from jobs_core.steps.api import UNDO, StepApi
from jobs_core.steps.suspend import StepSuspension, UnwindReached
from jobs_core.tenant import acting_for
from jobs_core.threads import BodyThreads, in_thread

log = logging.getLogger("jobs")

#: The name of the built-in job that undoes a failed run's steps.
UNWIND_JOB: Final = "ujobs.unwind"
#: Its attempts: compensations talk to the outside world, which may be down for a while.
UNWIND_RETRY: Final = Retry(attempts=25, base_ms=1_000, cap_ms=300_000, jitter="full")
#: How long an unwinding job waits before a worker that runs the failed job's name takes it.
UNKNOWN_NAME_RETRY_MS: Final = 60_000
#: How long an unwinding job waits while the failed run's final settle has not landed.
NOT_SETTLED_RETRY_MS: Final = 1_000


def unwind_record(failed: JobRecord | Any, now_ms: int, acts_for: str | None = None) -> NewJob:
    """The `ujobs.unwind` job for a failed run (deduped per run while it is live: a fresh run
    of the same row, requeued while the first is still being undone, gets its own), acting for
    `acts_for` (`unwind_org`)."""
    return NewJob(
        id=new_id(),
        run_id=failed.run_id,
        name=UNWIND_JOB,
        queue=failed.queue,
        tenant_id=failed.tenant_id,
        idempotency_key=f"unwind:{failed.id}:{failed.run_id}",
        input_json=dumps({"job_id": failed.id}),
        priority=failed.priority,
        run_at_ms=now_ms,
        max_attempts=UNWIND_RETRY.attempts,
        created_at_ms=now_ms,
        acts_for=acts_for,
    )


def unwind_org(failed: JobRecord | ClaimedJob, handle: JobHandle | None) -> str | None:
    """The org the unwind of `failed` acts for: the one its replay and compensations act for
    (the failed job's declaration's answer for its input, as stored on its row at enqueue).

    None when the answer is not known (no declaration here, the tenant function raises) or is
    one the failed row shows as `[redacted]` (one of its input's secrets): the unwind's own
    input hides nothing, so its row would show what the failed row hides."""
    if handle is None:
        return None
    if isinstance(failed, JobRecord):
        org = failed.acts_for
    else:  # a claim does not carry the row's org: asked again, as the enqueue asked it
        try:
            org = handle.tenant_for(loads(failed.input_json))
        except Exception:
            return None
    policy = RedactionPolicy.of([(handle.name, handle.sensitive)])
    return org if policy.org(handle.name, org, failed.input_json) == org else None


async def undo(api: StepApi, threads: BodyThreads | None = None) -> list[str]:
    """Run the compensations `api` met that have not run yet, the last met first (the replay
    meets steps in the order the body ran them), recording each (`~undo:<step>`) once it
    returned; answers the steps undone now. Each is called in the caller's context (its
    tenant), on one of `threads` when given (a `def` body's), else on this loop."""
    records = await api.records()
    done: list[str] = []
    for c in reversed(api.compensable):
        if f"{UNDO}{c.name}" in records:
            continue
        result = c.undo(c.output) if threads is None else await in_thread(threads, c.undo, c.output)
        if inspect.isawaitable(result):
            await result
        await api.record(f"{UNDO}{c.name}", {"undone": True})
        done.append(c.name)
    return done


def unwind_job(handles: Mapping[str, JobHandle], driver: JobDriver, clock: Clock) -> JobHandle:
    """The `ujobs.unwind` handle of a worker running `handles`."""
    # A thread per call (none kept idle): a `def` body's replay and compensations never wait
    # for a thread another run holds, and unwinds are rare.
    threads = BodyThreads(keep_idle=0, name_prefix="ujobs-unwind")

    async def unwind(input: Any, ctx: JobContext) -> dict[str, Any]:
        job_id = str(input["job_id"])
        failed = (await driver.job_get_many([job_id])).get(job_id)
        # This job shares the failed run's id. A row that holds another one now was requeued
        # as a fresh run: the run to undo ended for good all the same, whatever the row does.
        moved_on = failed is not None and failed.run_id != ctx.run_id
        if failed is not None and failed.state in LIVE_STATES and not moved_on:
            # Enqueued just before the failed run's final settle, which may still be on its
            # way (a batch in flight, a store blip): not yet, and no attempt spent.
            raise RateLimitedError(
                f"{failed.name} {failed.id} has not settled yet",
                retry_after_ms=NOT_SETTLED_RETRY_MS,
            )
        if failed is None or (
            failed.state not in (JobState.DEAD, JobState.FAILED) and not moved_on
        ):
            return {"undone": [], "skipped": "gone" if failed is None else failed.state.value}
        handle = handles.get(failed.name)
        if handle is None:
            # A worker that runs the failed job's name does this (a rolling deploy), no attempt
            # spent here.
            raise RateLimitedError(
                f"this worker does not run {failed.name!r}", retry_after_ms=UNKNOWN_NAME_RETRY_MS
            )
        api = ctx.step.unwinding()
        replay = JobContext(
            job_id=failed.id,
            run_id=ctx.run_id,
            name=failed.name,
            queue=failed.queue,
            attempt=failed.attempt,
            max_attempts=failed.max_attempts,
            tenant=handle.tenant_for(loads(failed.input_json)),
            enqueued_tenant=failed.tenant_id,
            enqueued_by=failed.enqueued_by,
            signal=ctx.signal,
            _report=lambda value: None,
            _make_step=lambda: api,
            _loop=asyncio.get_running_loop(),
        )
        body_input = loads(failed.input_json)
        secrets = secrets_of(body_input, handle.sensitive)
        body_threads = None if handle.is_async else threads
        with acting_for(replay.tenant):
            try:
                if body_threads is None:
                    await handle.fn(body_input, replay)
                else:
                    await in_thread(body_threads, handle.fn, body_input, replay)
            except (UnwindReached, StepSuspension):
                pass  # every step the failed run recorded has been met
            except Exception as exc:  # the failure again, most likely: what was met is undone
                log.info(
                    "jobs.unwind.replay_raised %s %s: %r",
                    failed.name,
                    failed.id,
                    exc,
                    extra={SCRUB_EXTRA: secrets},
                )
            try:
                undone = await undo(api, body_threads)
            except Exception as exc:
                # This job's own input names no secrets: its error and logs are scrubbed with
                # the failed job's, then it is retried as any failure.
                raise CompensationError(
                    scrub(f"{type(exc).__name__}: {exc}", secrets), detail=failed.id
                ) from None
        log.info("jobs.unwind.done %s %s: undid %s", failed.name, failed.id, undone or "nothing")
        return {"undone": undone}

    return job(
        unwind,
        name=UNWIND_JOB,
        tenant="none",
        # Never enqueued through this handle (`unwind_record` keys it per run); a declaration
        # needs a key all the same.
        idempotency_key=lambda i: f"unwind:{i['job_id']}",
        retry=UNWIND_RETRY,
        registry=JobRegistry(),
    )
