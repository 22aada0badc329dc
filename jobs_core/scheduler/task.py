"""`task()`: a schedule that enqueues a job — a name, a cron, a zone, the job and its input.

A task never holds a body: each occurrence enqueues its job under the idempotency key
`task:<occurrence_ms>:<job key>` (the job key is the job's own key of the input, else the task
name). Registration follows the job rules: a second, different handle under a taken name is
`X_JOB_DUPLICATE`, at declaration.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Literal

from jobs_core.driver import MAX_KEY_BYTES
from jobs_core.errors import (
    JobDuplicateError,
    JobsError,
    TaskDeclarationInvalidError,
)
from jobs_core.job import JobHandle, _check_name
from jobs_core.jsonform import dumps, loads, utf8_length
from jobs_core.scheduler.cron import CronSchedule, zone

if TYPE_CHECKING:
    from jobs_core.records import EnqueueResult

CatchUp = Literal["skip", "run-once"]
CATCH_UPS: Final[tuple[CatchUp, ...]] = ("skip", "run-once")
#: The scheduler's attribution on the rows it enqueues.
ENQUEUED_BY: Final = "scheduler"


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One fire of a task, as its input function sees it.

    `at_ms` is the occurrence the job stands for (its idempotency key names it). `first_ms`..
    `last_ms` is every occurrence the fire deals with: the same instant in the normal case;
    after downtime, the missed span — `skip` fires `at_ms = last_ms` (the earlier ones are
    skipped), `run-once` fires `at_ms = first_ms` for the whole span.
    """

    task: str
    at_ms: int
    first_ms: int
    last_ms: int
    tz: str

    def at(self) -> dt.datetime:
        """`at_ms` as an aware datetime in the task's zone."""
        return _local(self.at_ms, self.tz)

    def first(self) -> dt.datetime:
        return _local(self.first_ms, self.tz)

    def last(self) -> dt.datetime:
        return _local(self.last_ms, self.tz)


InputSpec = Callable[[Occurrence], Any] | Any


@dataclass(eq=False)
class TaskHandle:
    """A declared task. The scheduler fires it; `enqueue()` runs its job once, now, by hand."""

    name: str
    schedule: CronSchedule
    job: JobHandle
    input: InputSpec
    catch_up: CatchUp

    def __repr__(self) -> str:
        return f"<task {self.name!r} {self.schedule.expr!r} {self.schedule.tz.key}>"

    @property
    def cron(self) -> str:
        return self.schedule.expr

    @property
    def tz(self) -> str:
        return self.schedule.tz.key

    def input_for(self, occurrence: Occurrence) -> Any:
        """The job's input for `occurrence`: the declared value, or the input function's
        answer (a function that raises is `X_TASK_DECLARATION_INVALID` naming the task)."""
        if not callable(self.input):
            return self.input
        try:
            return self.input(occurrence)
        except JobsError:
            raise
        except Exception as exc:
            raise TaskDeclarationInvalidError(
                f"the input function raised {type(exc).__name__}: {exc}", detail=self.name
            ) from exc

    def job_key(self, input: Any) -> str:
        """The job's key of `input` (its JSON form), else the task name."""
        if self.job.key is None:
            return self.name
        return self.job.key_for(loads(dumps(input)))

    def fire_key(self, occurrence_ms: int, input: Any) -> str:
        """The idempotency key of the job fired for `occurrence_ms`."""
        return f"task:{occurrence_ms}:{self.job_key(input)}"

    async def enqueue(self, **options: Any) -> EnqueueResult:
        """Enqueue the job with the task's input now, under the job's plain key (not an
        occurrence's), on the configured client. An input function is asked for the
        occurrence of this instant."""
        from jobs_core.facade import default_client

        client = default_client()
        now = client.clock.now_ms()
        value = self.input_for(Occurrence(self.name, now, now, now, self.tz))
        options.setdefault("key", self.job_key(value))
        return await client.enqueue(self.job, value, **options)


class TaskRegistry:
    """Names → task handles. One name holds one handle."""

    def __init__(self) -> None:
        self._by_name: dict[str, TaskHandle] = {}
        self._lock = threading.Lock()

    def add(self, handle: TaskHandle) -> None:
        with self._lock:
            held = self._by_name.get(handle.name)
            if held is not None and held is not handle:
                raise JobDuplicateError("a different task holds this name", detail=handle.name)
            self._by_name[handle.name] = handle

    def get(self, name: str) -> TaskHandle | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return sorted(self._by_name)


#: Where `task()` registers unless told otherwise.
default_task_registry = TaskRegistry()


def task(
    name: str,
    *,
    cron: str,
    tz: str,
    job: JobHandle,
    input: InputSpec = None,
    catch_up: CatchUp = "skip",
    registry: TaskRegistry | None = None,
) -> TaskHandle:
    """Declare a task: at each occurrence of `cron` in zone `tz`, enqueue `job` with `input`.

    `tz` is required (an IANA name); an `H` field of `cron` takes a value hashed from `name`
    (the same on every scheduler). `input` is a JSON value, or a function of the
    `Occurrence` answering one. `catch_up` says what a scheduler that was down does with the
    occurrences it missed: `"skip"` fires only the latest; `"run-once"` fires one run for the
    whole span (`Occurrence.first_ms`..`last_ms`). Refused at once, nothing registered: a bad
    name, cron (`X_TASK_CRON_INVALID`), zone (`X_TASK_TZ_INVALID`), catch-up, job, or an
    input value the job could not be enqueued with (`X_TASK_DECLARATION_INVALID` and the
    job's own refusals).
    """
    _check_name(name, "name")
    schedule = CronSchedule(cron, tz, hash_id=name)
    if catch_up not in CATCH_UPS:
        raise TaskDeclarationInvalidError(
            f"catch_up must be one of {', '.join(CATCH_UPS)}", detail="catch_up"
        )
    if not isinstance(job, JobHandle):
        raise TaskDeclarationInvalidError("job must be a declared job (job())", detail="job")
    handle = TaskHandle(name=name, schedule=schedule, job=job, input=input, catch_up=catch_up)
    if not callable(input):
        check_fireable(handle, input)
    (registry if registry is not None else default_task_registry).add(handle)
    return handle


def check_fireable(handle: TaskHandle, input: Any) -> None:
    """Refuse an input the job could not be enqueued with (JSON, tenant, key and its bound),
    as the enqueue would."""
    form = loads(dumps(input))
    handle.job.tenant_for(form)
    key = handle.fire_key(2**42, input)
    if utf8_length(key) > MAX_KEY_BYTES:
        raise TaskDeclarationInvalidError(
            f"the job key makes a fire key past {MAX_KEY_BYTES} UTF-8 bytes", detail=handle.name
        )


def tasks_of(
    source: ModuleType | Sequence[TaskHandle] | Mapping[str, TaskHandle],
) -> list[TaskHandle]:
    """The tasks a scheduler fires: a list as given, or every task a module exports (one
    handle exported twice counts once; two handles under one name are `X_JOB_DUPLICATE`)."""
    found: list[object]
    if isinstance(source, ModuleType):
        found = [v for v in vars(source).values() if isinstance(v, TaskHandle)]
    elif isinstance(source, Mapping):
        found = list(source.values())
    else:
        given: object = source
        # A number or a name is no list: refused below, as a list holding it is.
        listed = isinstance(given, Iterable) and not isinstance(given, str | bytes)
        found = list(source) if listed else [given]
    handles = [h for h in found if isinstance(h, TaskHandle)]
    if len(handles) != len(found):
        # A number, a name, or a list holding one was a TypeError or an AttributeError.
        raise TaskDeclarationInvalidError(
            "must be a module, or a list or mapping of declared tasks (task())", detail="tasks"
        )
    by_name: dict[str, TaskHandle] = {}
    for h in handles:
        held = by_name.setdefault(h.name, h)
        if held is not h:
            raise JobDuplicateError("two tasks share this name", detail=h.name)
    return list(by_name.values())


def _local(at_ms: int, tz: str) -> dt.datetime:
    return dt.datetime.fromtimestamp(at_ms / 1000, zone(tz))


__all__ = [
    "CATCH_UPS",
    "CatchUp",
    "Occurrence",
    "TaskHandle",
    "TaskRegistry",
    "default_task_registry",
    "task",
    "tasks_of",
]
