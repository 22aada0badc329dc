"""Durable execution inside a job body: steps recorded once (`ctx.step.run`), sleeps and event
waits that park the run without spending an attempt, and sagas that undo completed steps when a
run fails for good (`unwind`). Events are sent from any process with `send_event`."""

from jobs_core.steps.api import StepApi, SyncStepApi
from jobs_core.steps.suspend import StepSuspension, UnwindReached

__all__ = ["StepApi", "StepSuspension", "SyncStepApi", "UnwindReached"]
