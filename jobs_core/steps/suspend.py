"""Control flow that leaves a body on purpose: a suspension (park the run) and the end of an
unwinding replay. Neither is a failure; the runner catches both."""

from __future__ import annotations

from jobs_core.records import EventWait


class StepSuspension(BaseException):
    """The body asked to park: resume it at `run_at_ms`, or earlier when `wait`'s event comes;
    or, with a `join` (and `run_at_ms` None), once every job of `join` finished.

    A `BaseException`, so a body's `except Exception` cannot swallow it by mistake.
    """

    def __init__(
        self,
        run_at_ms: int | None,
        wait: EventWait | None = None,
        *,
        join: tuple[str, ...] | None = None,
    ) -> None:
        if run_at_ms is None and join is None:
            raise ValueError("a suspension without a time waits for jobs: give join=")
        what = f"until {run_at_ms}" if join is None else f"for {len(join)} jobs"
        super().__init__(f"suspended {what}")
        self.run_at_ms = run_at_ms
        self.wait = wait
        self.join = join


class UnwindReached(BaseException):
    """An unwinding replay met a step the failed run never recorded: every step it could undo
    has been met, so the replay stops here."""

    def __init__(self, name: str) -> None:
        super().__init__(f"the failed run never reached step {name!r}")
        self.name = name
