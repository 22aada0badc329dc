"""`job()`: declaring a unit of background work, and the registry that names it.

A job's name is its registration name: an explicit `name=` (a durable queue key), else the name
the decorated function is exported under. A second, different handle on a name is refused
(`X_JOB_DUPLICATE`) at declaration, the earliest point that can decide it.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from jobs_core.context import JobContext
from jobs_core.driver import PRIORITY_MAX, PRIORITY_MIN, name_refusal
from jobs_core.errors import (
    DeclarationInvalidError,
    ExecutorInvalidError,
    JobDuplicateError,
    JobsError,
    KeyRequiredError,
    TenantRequiredError,
)
from jobs_core.leases.limits import (
    Concurrency,
    ConcurrencySpec,
    RateLimit,
    resolve_concurrency,
    resolve_rate_limits,
)
from jobs_core.options import count, seconds_to_ms
from jobs_core.processes import process_refusal
from jobs_core.redact import carry, secrets_of
from jobs_core.retry import Retry

if TYPE_CHECKING:
    from jobs_core.facade import SettledEvent
    from jobs_core.records import EnqueueResult

JobBody = Callable[[Any, JobContext], Awaitable[Any]] | Callable[[Any, JobContext], Any]
KeySpec = Callable[[Any], str] | None
TenantSpec = Literal["none"] | Callable[[Any], str | None]
SettledHook = Callable[["SettledEvent"], Awaitable[None] | None]
#: Where a `def` body runs: a thread of the worker's, or a process of its pool (an async body
#: always runs on the worker's event loop).
BodyExecutor = Literal["thread", "process"]


@dataclass(eq=False)
class JobHandle:
    """A declared job. Enqueue it with `await handle.enqueue(input)` or `handle.enqueue_sync`."""

    name: str
    fn: JobBody
    queue: str
    key: KeySpec
    tenant: TenantSpec
    retry: Retry
    priority: int
    timeout_ms: int | None
    step_timeout_ms: int | None
    event_poll_ms: int | None
    sensitive: frozenset[str]
    on_settled: SettledHook | None
    explicit_name: bool
    #: Fleet-wide slots (`jobs_core.leases.Concurrency`), None: unlimited.
    concurrency: Concurrency | None = None
    #: This job's own rate limits (starts per interval), beside any the worker declares.
    rate_limits: tuple[RateLimit, ...] = ()
    #: Called before every record of this job is made (an enqueue, a stage, a fire); raises to
    #: refuse it (`consumer()`: a consumer's run never enqueues its own job).
    enqueue_guard: Callable[[], None] | None = None
    #: Where a `def` body runs (`job(executor=...)`).
    executor: BodyExecutor = "thread"
    is_async: bool = field(init=False)

    def __post_init__(self) -> None:
        self.is_async = inspect.iscoroutinefunction(self.fn)

    def __repr__(self) -> str:
        return f"<job {self.name!r} queue={self.queue!r}>"

    def key_for(self, input: Any, given: str | None = None) -> str:
        """The idempotency key: the one given at the call, else the declaration's function.

        `input` is the JSON form (what the worker hands the body). A function that raises, or
        answers no non-empty string, is `X_JOB_KEY_REQUIRED` naming the job and the function (a
        `JobsError` it raises passes through as is).
        """
        if given is not None:
            key: object = given
        elif self.key is not None:
            key = self._ask(self.key, input, KeyRequiredError, "idempotency_key")
        else:
            key = None
        if not isinstance(key, str) or not key:
            raise KeyRequiredError(detail=self.name)
        return key

    def tenant_for(self, input: Any) -> str | None:
        """The org a run of `input` acts for; None for `'none'`. Fails closed on no answer.

        `input` is the JSON form. A function that raises, or answers no non-empty string, is
        `X_JOB_TENANT_REQUIRED` naming the job and the function.
        """
        if self.tenant == "none":
            return None
        org = self._ask(self.tenant, input, TenantRequiredError, "tenant")
        if not isinstance(org, str) or not org:
            raise TenantRequiredError(detail=self.name)
        return org

    def _ask(
        self, fn: Callable[[Any], object], input: Any, error: type[JobsError], what: str
    ) -> object:
        """`fn(input)`, its answer unchecked. If it raises, `error` naming this job and what
        the `what` function raised (a `JobsError` it raises passes through as is), carrying
        the input's secrets: whoever records it scrubs them (`jobs_core.redact.carry`)."""
        try:
            return fn(input)
        except JobsError as exc:
            carry(exc, secrets_of(input, self.sensitive))
            raise
        except Exception as exc:
            failure = error(f"the {what} function raised {_failure(exc)}", detail=self.name)
            raise carry(failure, secrets_of(input, self.sensitive)) from exc

    async def enqueue(self, input: Any, **options: Any) -> EnqueueResult:
        """Enqueue on the configured client (`jobs_core.configure`)."""
        from jobs_core.facade import default_client

        return await default_client().enqueue(self, input, **options)

    def enqueue_sync(self, input: Any, **options: Any) -> EnqueueResult:
        """Enqueue from plain sync code (a Flask view, a script); no event loop needed."""
        from jobs_core.facade import default_client

        return default_client().enqueue_sync(self, input, **options)

    async def result(self, job_id: str, timeout: float | None = None) -> Any:  # noqa: ASYNC109 - the wait's documented deadline
        """`Jobs.result` on the configured client: the result of job `job_id` once it
        completed (`X_RESULT_FAILED`, `X_RESULT_TIMEOUT`, `X_JOB_NOT_FOUND` otherwise)."""
        from jobs_core.facade import default_client

        return await default_client().result(job_id, timeout)

    def result_sync(self, job_id: str, timeout: float | None = None) -> Any:
        """`result` from plain sync code."""
        from jobs_core.facade import default_client

        return default_client().result_sync(job_id, timeout)


class JobRegistry:
    """Names → handles. One name holds one handle."""

    def __init__(self) -> None:
        self._by_name: dict[str, JobHandle] = {}
        self._lock = threading.Lock()

    def add(self, handle: JobHandle) -> None:
        with self._lock:
            held = self._by_name.get(handle.name)
            if held is not None and held is not handle:
                raise JobDuplicateError(detail=handle.name)
            self._by_name[handle.name] = handle

    def get(self, name: str) -> JobHandle | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return sorted(self._by_name)


#: Where `job()` registers unless told otherwise.
default_registry = JobRegistry()


@overload
def job(
    fn: JobBody,
    *,
    tenant: TenantSpec,
    name: str | None = ...,
    queue: str = ...,
    idempotency_key: KeySpec = ...,
    retry: Retry | None = ...,
    priority: int = ...,
    timeout: float | None = ...,
    step_timeout: float | None = ...,
    event_poll: float | None = ...,
    sensitive: Iterable[str] = ...,
    on_settled: SettledHook | None = ...,
    concurrency: ConcurrencySpec = ...,
    rate_limit: RateLimit | Sequence[RateLimit] | None = ...,
    registry: JobRegistry | None = ...,
    executor: BodyExecutor = ...,
) -> JobHandle: ...


@overload
def job(
    fn: None = None,
    *,
    tenant: TenantSpec,
    name: str | None = ...,
    queue: str = ...,
    idempotency_key: KeySpec = ...,
    retry: Retry | None = ...,
    priority: int = ...,
    timeout: float | None = ...,
    step_timeout: float | None = ...,
    event_poll: float | None = ...,
    sensitive: Iterable[str] = ...,
    on_settled: SettledHook | None = ...,
    concurrency: ConcurrencySpec = ...,
    rate_limit: RateLimit | Sequence[RateLimit] | None = ...,
    registry: JobRegistry | None = ...,
    executor: BodyExecutor = ...,
) -> Callable[[JobBody], JobHandle]: ...


def job(
    fn: JobBody | None = None,
    *,
    # Required (the overloads say so to a type checker); None here so a `@job()` without it
    # is refused by its code, naming the option, rather than by Python's TypeError.
    tenant: TenantSpec | None = None,
    name: str | None = None,
    queue: str = "default",
    idempotency_key: KeySpec = None,
    retry: Retry | None = None,
    priority: int = 0,
    timeout: float | None = None,
    step_timeout: float | None = None,
    event_poll: float | None = None,
    sensitive: Iterable[str] = (),
    on_settled: SettledHook | None = None,
    concurrency: ConcurrencySpec = None,
    rate_limit: RateLimit | Sequence[RateLimit] | None = None,
    registry: JobRegistry | None = None,
    executor: BodyExecutor = "thread",
) -> JobHandle | Callable[[JobBody], JobHandle]:
    """Declare a job; as `@job(tenant=..., ...)` or `job(fn, tenant=..., ...)`.

    `tenant` is required: a function of the input answering the org id, or `'none'`.
    `idempotency_key` is a function of the input; without one, every enqueue must pass `key=`.
    Durations (`timeout`, `step_timeout`, `event_poll`) are seconds, refused unless positive
    and finite. `priority` is 0–100, lower runs first. Every refusal names its option.

    `concurrency`: at most N bodies fleet-wide (`3`), or per key of the input
    (`{"key": fn, "limit": 1, "when_busy": "wait" | "fail"}`); 0 is a hard stop. `rate_limit`:
    one `RateLimit` or several (one per `by`) on this job's starts. Both need a driver with the
    lease family (`X_JOB_CONCURRENCY_UNENFORCEABLE` at worker start otherwise).

    `executor`: where a `def` body runs. `"thread"` (the default): a thread of the worker's, with
    the full `JobContext`; it cannot be stopped from outside. `"process"`: a spawned process of
    the worker's pool (`Worker(process_pool_size=...)`), for CPU-bound work — the worker's event
    loop (heartbeats, settles, other bodies) never waits on it, and a deadline, cancel or drain
    kills the process for real. The body must be a top-level function (a process imports it by
    module and name) and is handed the input (JSON, as stored) and a `ProcessContext` (ids,
    attempt, tenant; no `ctx.step`, `ctx.signal`, `ctx.progress`); its result is encoded in the
    process. Refused at declaration (`X_JOB_EXECUTOR_INVALID`): an async body, a nested
    function or lambda, a method or callable object, a `ctx` annotated `JobContext`, and
    `step_timeout` or `event_poll`.
    """

    def declare(body: JobBody) -> JobHandle:
        if not callable(body):
            raise DeclarationInvalidError("the body must be callable", detail="fn")
        job_name = name if name is not None else getattr(body, "__name__", None)
        _check_name(job_name, "name")
        assert isinstance(job_name, str)
        _check_name(queue, "queue")
        if tenant is None:
            raise TenantRequiredError(
                "tenant= is required: a function of the input answering the org the body acts"
                " for, or 'none' for a job that acts for no org",
                detail=job_name,
            )
        if tenant != "none" and not callable(tenant):
            raise TenantRequiredError(
                "tenant must be 'none' or a function of the input", detail=job_name
            )
        _check_executor(body, executor, steps=step_timeout is not None or event_poll is not None)
        if idempotency_key is not None and not callable(idempotency_key):
            raise DeclarationInvalidError(
                "idempotency_key must be a function of the input", detail="idempotency_key"
            )
        if retry is not None and not isinstance(retry, Retry):
            raise DeclarationInvalidError("must be a Retry", detail="retry")
        if on_settled is not None and not callable(on_settled):
            raise DeclarationInvalidError(
                "must be a function of the settled event", detail="on_settled"
            )
        handle = JobHandle(
            name=job_name,
            fn=body,
            queue=queue,
            key=idempotency_key,
            tenant=tenant,
            retry=retry if retry is not None else Retry(),
            priority=count(priority, "priority", minimum=PRIORITY_MIN, maximum=PRIORITY_MAX),
            timeout_ms=None if timeout is None else seconds_to_ms(timeout, "timeout"),
            step_timeout_ms=(
                None if step_timeout is None else seconds_to_ms(step_timeout, "step_timeout")
            ),
            event_poll_ms=None if event_poll is None else seconds_to_ms(event_poll, "event_poll"),
            sensitive=_field_names(sensitive),
            on_settled=on_settled,
            explicit_name=name is not None,
            concurrency=resolve_concurrency(concurrency),
            rate_limits=resolve_rate_limits(rate_limit, "rate_limit"),
            executor=executor,
        )
        (registry if registry is not None else default_registry).add(handle)
        return handle

    return declare(fn) if fn is not None else declare


def _failure(exc: Exception) -> str:
    """`Type: message` of a declaration function's failure, one short line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(text) > 200:
        text = text[:200] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _field_names(sensitive: object) -> frozenset[str]:
    """`sensitive` as a set of field names; a lone string is refused, never read as the set of
    its letters (`"card"` would redact the fields c, a, r and d, and leave the card shown)."""
    names = (
        None
        if isinstance(sensitive, str | bytes) or not isinstance(sensitive, Iterable)
        else list(sensitive)
    )
    if names is None or not all(isinstance(f, str) for f in names):
        raise DeclarationInvalidError(
            "must be a list of field names (strings), such as ['card']", detail="sensitive"
        )
    return frozenset(names)


def _check_name(value: object, option: str) -> None:
    """Refuse, at declaration, a name or queue the driver would refuse at every enqueue."""
    why = name_refusal(value)
    if why is not None:
        raise DeclarationInvalidError(why, detail=option)


def _check_executor(body: JobBody, executor: object, *, steps: bool) -> None:
    """Refuse an unknown executor, and a body a process could not run as declared."""
    if executor == "thread":
        return
    if executor != "process":
        raise ExecutorInvalidError("must be 'thread' or 'process'", detail="executor")
    why = process_refusal(body, steps=steps)
    if why is not None:
        raise ExecutorInvalidError(why, detail="executor")


def jobs_of(source: ModuleType | Sequence[JobHandle] | Mapping[str, JobHandle]) -> list[JobHandle]:
    """The handles a worker runs: a list as given, or every handle a module exports.

    A module export name must be the handle's name unless the handle has an explicit `name=`;
    one handle exported under two names is `X_JOB_DUPLICATE`.
    """
    if isinstance(source, ModuleType):
        exported = {k: v for k, v in vars(source).items() if isinstance(v, JobHandle)}
    elif isinstance(source, Mapping):
        exported = dict(source)
        _refuse_other(list(exported.values()))
    else:
        given: object = source
        # A number or a name is no list; a list holding another value is refused with it.
        listed = isinstance(given, Iterable) and not isinstance(given, str | bytes)
        handles = _refuse_other(list(source) if listed else [given])
        _refuse_duplicates(handles)
        return handles
    seen: dict[int, str] = {}
    for attr, handle in exported.items():
        if id(handle) in seen:
            raise JobDuplicateError(
                f"one job exported under two names ({seen[id(handle)]}, {attr})",
                detail=handle.name,
            )
        seen[id(handle)] = attr
        if attr != handle.name and not handle.explicit_name:
            raise JobDuplicateError(
                f"exported as {attr!r} but declared as {handle.name!r}", detail=handle.name
            )
    handles = list(exported.values())
    _refuse_duplicates(handles)
    return handles


def _refuse_other(found: list[Any]) -> list[JobHandle]:
    """`found` when every item is a declaration; else refused (a number, a name, or a list
    holding one was a TypeError or an AttributeError out of the worker's constructor)."""
    if not all(isinstance(h, JobHandle) for h in found):
        raise DeclarationInvalidError(
            "must be a module, or a list or mapping of declared jobs (job())", detail="jobs"
        )
    return found


def _refuse_duplicates(handles: Sequence[JobHandle]) -> None:
    by_name: dict[str, JobHandle] = {}
    for h in handles:
        held = by_name.setdefault(h.name, h)
        if held is not h:
            raise JobDuplicateError(detail=h.name)


_Handle = TypeVar("_Handle", bound=JobHandle)


def factory_handle(
    cls: type[_Handle], error: type[JobsError], make: Callable[[], JobHandle], **fields: Any
) -> _Handle:
    """A factory's handle: what `make()` (a `job()` call on a registry of its own) answers, as
    a `cls` — a `JobHandle` subclass carrying `fields` besides. A refusal of `job()` is raised
    as the factory's own `error`, naming the same option; a taken name stays `X_JOB_DUPLICATE`."""
    try:
        base = make()
    except JobDuplicateError:
        raise
    except JobsError as exc:
        refused = error(f"{exc.code}: {exc.message}")
        refused.detail = exc.detail
        raise refused from exc
    kept = {f.name: getattr(base, f.name) for f in dataclasses.fields(JobHandle) if f.init}
    return cls(**kept, **fields)


def check_handle(handle: object, what: str) -> None:
    """Refuse what is no declared job (`X_JOB_DECLARATION_INVALID`, naming `what`): a bare
    AttributeError from inside the enqueue would say nothing of the call."""
    if not isinstance(handle, JobHandle):
        raise DeclarationInvalidError(
            f"must be a job declared with @job, not {type(handle).__name__}", detail=what
        )
