"""The store-independent half of `stage`: the job's record, built and refused as `enqueue` would.

A store's `stage(conn, handle, input, **options)` calls `staged_record` and writes what it
answers on the caller's connection, so every refusal (key, tenant, JSON, ranges) happens
before the write, inside the caller's transaction, exactly as for `Jobs.enqueue`.
"""

from __future__ import annotations

from typing import Any

from jobs_core import tracing
from jobs_core.clock import Clock
from jobs_core.errors import DeclarationInvalidError, OptionInvalidError
from jobs_core.facade import build_record, check_caller_options
from jobs_core.job import JobHandle
from jobs_core.outbox.records import Staged
from jobs_core.records import NewJob

#: `enqueue` options a stage does not take: the outbox allocates both ids.
_REFUSED: tuple[str, ...] = ("id", "run_id")
#: The flow links a staged row does not carry (the relay publishes with `enqueue_many`, and the
#: outbox's table has no column for them): refused rather than dropped at publish.
FLOW_OPTIONS: tuple[str, ...] = ("after", "after_policy", "parent_id", "batch_id")


def staged_record(handle: JobHandle, input: Any, *, clock: Clock, **options: Any) -> NewJob:
    """The record a stage writes (fresh id and run id, stamped with a producer span)."""
    for name in _REFUSED:
        if name in options:
            raise DeclarationInvalidError(
                "the outbox allocates a staged job's ids; read them from the answer",
                detail=name,
            )
    for name in FLOW_OPTIONS:
        if name in options:
            raise OptionInvalidError(
                "the outbox stages plain jobs: dependencies, parents and batches are not staged;"
                " enqueue such a job from the staged job's body",
                detail=name,
            )
    check_caller_options(options)
    with tracing.producer(handle.name, options.get("queue") or handle.queue) as traceparent:
        return build_record(handle, input, clock=clock, traceparent=traceparent, **options)


def staged(record: NewJob) -> Staged:
    """The answer of a stage that wrote `record`."""
    return Staged(id=record.id, run_id=record.run_id)
