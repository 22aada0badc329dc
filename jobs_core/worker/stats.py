"""The worker's counters (`WorkerStats`): what it claimed, how each run ended, what it holds now."""

from __future__ import annotations

from dataclasses import dataclass

from jobs_core.states import Outcome


@dataclass(slots=True)
class WorkerStats:
    """Counters since start; `in_flight` and `running` are current."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    dropped: int = 0
    shed: int = 0
    #: Runs refused by a busy concurrency key (`when_busy="fail"`): failed, body never run.
    refused: int = 0
    interrupted: int = 0
    #: Runs aborted because the row was reclaimed or its lease lapsed (their writes are refused).
    lost: int = 0
    #: Runs aborted because a user cancelled the row while it ran.
    cancelled: int = 0
    #: Jobs given back because this worker does not run their name (alert on it in a deploy).
    unknown_name: int = 0
    #: `def` bodies whose run ended (deadline, cancel) while their thread still ran.
    threads_overrun: int = 0
    #: Of those, the threads still running now (each holds a thread, never a slot).
    threads_overrunning: int = 0
    #: Lapsed final attempts the claims buried.
    buried: int = 0
    #: Settles that did not land (the fence refused them).
    unowned: int = 0
    #: Jobs held now (claimed and leased, running or waiting for a slot).
    in_flight: int = 0
    #: Bodies running now.
    running: int = 0
    #: When the store last answered a claim or a heartbeat (the worker's clock; 0: never).
    store_ok_ms: int = 0
    # -- process executor --
    #: `executor="process"` bodies whose run ended (deadline, cancel, drain) while they ran:
    #: their process was killed.
    processes_killed: int = 0
    #: `executor="process"` bodies whose process died under them (`X_JOB_PROCESS_DIED`).
    processes_died: int = 0

    def count(self, outcome: Outcome) -> None:
        match outcome:
            case Outcome.COMPLETED:
                self.completed += 1
            case Outcome.RETRIED:
                self.retried += 1
            case Outcome.DEAD_LETTERED:
                self.dead_lettered += 1
            case Outcome.DROPPED:
                self.dropped += 1
            case Outcome.SHED:
                self.shed += 1
            case Outcome.INTERRUPTED:
                self.interrupted += 1
            case Outcome.REFUSED:
                self.refused += 1
            case _:
                pass
