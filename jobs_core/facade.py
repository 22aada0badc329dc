"""The one enqueue implementation, usable from async code and from plain sync code.

`Jobs(driver)` builds each row (ids, key, tenant, JSON form, time) in `build_record`, the only
place a `NewJob` is made for a handle; the sync methods run the same coroutine on a private
event-loop thread, so a Flask view or a script never manages a loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime as dt
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from jobs_core import tracing
from jobs_core.clock import Clock, SystemClock
from jobs_core.driver import MAX_ENQUEUE_BATCH, MAX_TIME_MS, PRIORITY_MAX, PRIORITY_MIN, JobDriver
from jobs_core.errors import (
    BatchTooLargeError,
    DeclarationInvalidError,
    DependencyUnknownError,
    DriverUnavailableError,
    OptionInvalidError,
    SyncCallInLoopError,
    TenantMismatchError,
)
from jobs_core.ids import FreshIds, new_id
from jobs_core.job import JobHandle, check_handle
from jobs_core.jsonform import JsonValue, dumps, dumps_many, loads
from jobs_core.loops import cancel_other_tasks
from jobs_core.options import check_clock, count, finite_number
from jobs_core.records import (
    EnqueueResult,
    EventRecord,
    JoinEnqueue,
    JoinPolicy,
    NewJob,
    NewJobs,
)
from jobs_core.results import RESULT_POLL_CEILING_S, RESULT_POLL_FLOOR_S, FinishWaits, run_on
from jobs_core.semantics import EVENT_TTL_MS
from jobs_core.states import Outcome
from jobs_core.tenant import current_tenant

if TYPE_CHECKING:
    from jobs_core.batch import JobBatch

log = logging.getLogger("jobs.enqueue")

T = TypeVar("T")
_UNSET: Any = object()
#: Values that are their own JSON form (parsing their text would give them back).
_SELF_FORMED: Final = frozenset({str, int, float, bool, type(None)})
_STR: Final = frozenset({str})
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MS: Final = dt.timedelta(milliseconds=1)

#: Seconds an enqueue keeps retrying a store that is unreachable (`Jobs(enqueue_retry_s=)`).
ENQUEUE_RETRY_S: Final = 10.0
#: First and longest pause between two tries of an enqueue.
ENQUEUE_RETRY_FLOOR_S: Final = 0.05
ENQUEUE_RETRY_CEILING_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class EventSent:
    """What `send_event` did: the event's id, and how many waiting runs it woke at once —
    None when that is unknown: a try failed `X_DRIVER_UNAVAILABLE` (it may have landed and
    woken runs; its count went with its answer) and the resend, finding the id stored, woke
    none. The store keeps the event, not the count, so no resend can read it back."""

    id: str
    woken: int | None


@dataclass(frozen=True, slots=True)
class SettledEvent:
    """What `on_settled` hears: one job's ending, after its settle landed."""

    job_id: str
    name: str
    queue: str
    outcome: Outcome
    attempt: int
    #: The run's input; None for a row buried by a claim (its body never ran here).
    input: JsonValue
    result: JsonValue
    error: str | None


class Jobs:
    """Enqueue jobs on one driver, from async code (`enqueue`) or sync code (`enqueue_sync`)."""

    def __init__(
        self,
        driver: JobDriver,
        *,
        clock: Clock | None = None,
        enqueue_retry_s: float = ENQUEUE_RETRY_S,
        result_poll_s: float = RESULT_POLL_FLOOR_S,
        result_poll_max_s: float = RESULT_POLL_CEILING_S,
    ) -> None:
        """`enqueue_retry_s`: how long an enqueue keeps retrying an unreachable store (0: never).
        `result_poll_s` / `result_poll_max_s`: the first and the longest pause of `result`'s
        poll, the guarantee behind the store's finish announcement (seconds)."""
        if not isinstance(driver, JobDriver):
            # A URL here (`configure` takes one), or any other value, failed only at the first
            # enqueue, as an AttributeError.
            raise DeclarationInvalidError(
                "must be a JobDriver: for a URL, use configure(url) or driver_from_url(url)",
                detail="driver",
            )
        check_clock(clock)
        self.driver = driver
        self.clock = clock or SystemClock()
        self.enqueue_retry_s = finite_number(
            enqueue_retry_s, "enqueue_retry_s", minimum=0.0, maximum=3600.0
        )
        self._portal: _Portal | None = None
        self._portal_lock = threading.Lock()
        #: The finish announcements every `result` waiter of this client shares.
        self._finishes = FinishWaits(driver)
        self._finishes.floor_s = finite_number(
            result_poll_s, "result_poll_s", minimum=0.001, maximum=3600.0
        )
        self._finishes.ceiling_s = finite_number(
            result_poll_max_s, "result_poll_max_s", minimum=self._finishes.floor_s, maximum=3600.0
        )

    def build_record(self, handle: JobHandle, input: Any, **options: Any) -> NewJob:
        """The row for one enqueue on this client's clock (`build_record` below)."""
        return build_record(handle, input, clock=self.clock, **options)

    async def enqueue(self, handle: JobHandle, input: Any, **options: Any) -> EnqueueResult:
        """Insert one job, or answer `deduped` with the row holding its id or its live key.

        A call that fails with `X_DRIVER_UNAVAILABLE` (its answer may have been lost after the
        write) is sent again with the SAME record for up to `enqueue_retry_s`, so it cannot
        insert twice; a retry that finds its own earlier write answers `deduped` with the
        record's id. Pass `id=` to make your own retries of a failed call exactly-once too.
        """
        after = policy = None
        if options:  # none given, none to refuse (each check reads a given option)
            after = options.pop("after", None)
            policy = options.pop("after_policy", JoinPolicy.SUCCESS)
            check_caller_options(options)
        if not tracing.active():
            # No span to open: the producer's context manager would only yield None.
            record = self.build_record(handle, input, traceparent=None, **options)
            return await self._send(record, after, policy)
        check_handle(handle, "handle")  # read below before `build_record` checks it
        queue = options.get("queue")
        with tracing.producer(handle.name, queue or handle.queue) as traceparent:
            record = self.build_record(handle, input, traceparent=traceparent, **options)
            return await self._send(record, after, policy)

    def _send(
        self, record: NewJob, after: Sequence[str] | None, policy: Any
    ) -> Awaitable[EnqueueResult]:
        """`record` enqueued (retried), or made to wait for `after` (`enqueue_after`): the
        coroutine itself, not one more awaiting it (a frame every resume would pass through)."""
        if after is None:
            driver = self.driver
            return self._retrying(lambda: driver.job_enqueue(record))
        return self.enqueue_after(record, after, policy)

    async def enqueue_after(
        self, record: NewJob, after: Sequence[str], policy: JoinPolicy | str = JoinPolicy.SUCCESS
    ) -> EnqueueResult:
        """Insert `record` to wait, parked, until every job of `after` finished (`join_enqueue`;
        an id named twice counts once; none: a plain enqueue). `policy` "success" (the default):
        it runs only if every one completed, else the worker fails it, body unrun,
        `X_JOB_DEPENDENCY_FAILED`; "always": it runs however they ended.

        An id naming no job is `X_JOB_DEPENDENCY_UNKNOWN` (`DependencyUnknownError`, its
        `detail` the ids), and nothing is written. Retried like `enqueue`, same record."""
        # Each id a string before `dict.fromkeys` hashes it (a list in the list: TypeError); a
        # number is no list (TypeError iterating it), a mapping's keys are not what was meant,
        # and an iterator is no list either: the check read it through, and the join, finding
        # nothing left, enqueued the job waiting for none of them.
        given: object = after
        if (
            isinstance(given, str | bytes | Mapping)
            or not isinstance(given, Collection)
            or not all(isinstance(i, str) for i in after)
        ):
            raise OptionInvalidError("must be a list of job ids", detail="after")
        try:
            if not isinstance(policy, str):  # the enum's own refusal spells the value
                raise ValueError(policy)
            join_policy = JoinPolicy(policy)
        except ValueError:
            raise OptionInvalidError(
                "must be 'success' or 'always'", detail="after_policy"
            ) from None
        deps = tuple(dict.fromkeys(after))
        if not deps:
            return await self._retrying(lambda: self.driver.job_enqueue(record))
        item = JoinEnqueue(record, deps, join_policy)
        answer = (await self._retrying(lambda: self.driver.join_enqueue([item])))[0]
        if answer.enqueued is None:
            raise DependencyUnknownError(
                f"no job has the id {', '.join(answer.missing)}",
                detail=",".join(answer.missing)[:500],
            )
        return answer.enqueued

    async def result(self, job_id: str, timeout: float | None = None) -> JsonValue:  # noqa: ASYNC109 - the wait's documented deadline
        """The result of job `job_id` once it completed: its stored JSON, parsed (None when it
        returned none). Waits while it is live — woken by the store's announcement of its
        finish, with a bounded poll behind it (never a busy one).

        `X_RESULT_FAILED` (`ResultFailedError`: `job_id`, `state`, `error`) when it ended dead,
        failed or cancelled; `X_RESULT_TIMEOUT` once `timeout` seconds passed (None: no end);
        `X_JOB_NOT_FOUND` when no job has the id. Needs the `flows` family."""
        self.driver.require("flows", what="result")
        return await self._finishes.wait(job_id, timeout)

    def result_sync(self, job_id: str, timeout: float | None = None) -> JsonValue:
        """`result` from sync code."""
        return self._run_sync(self.result(job_id, timeout))

    def batch(
        self,
        *,
        on_complete: JobHandle,
        on_success: JobHandle | None = None,
        input: Any = None,
        id: str | None = None,
        **options: Any,
    ) -> JobBatch:
        """A batch (`async with client.batch(...) as b: await b.enqueue(...)`); see `JobBatch`."""
        from jobs_core.batch import JobBatch

        return JobBatch(
            self, on_complete=on_complete, on_success=on_success, input=input, id=id, **options
        )

    async def close(self) -> None:
        """Close what this client opened itself (the finish subscription of `result`); the
        driver stays open — it is the caller's."""
        call = self._finishes.close_call()
        if call is not None:
            loop, coro = call
            await run_on(loop, coro)()

    async def enqueue_many(
        self,
        handle: JobHandle,
        inputs: Sequence[Any],
        *,
        ids: Sequence[str] | None = None,
        **options: Any,
    ) -> list[EnqueueResult]:
        """Insert many jobs of one handle; one answer per input, in order.

        Every record is checked (and so every refusal made) before the first write; the ids
        made for it (no `ids=`) are made as the store reads them (`FreshIds`), the same on every
        try. Retried under the same ids like `enqueue`; `ids=` (one per input) makes your own
        retries exactly-once.
        """
        check_handle(handle, "handle")
        if isinstance(inputs, str | bytes) or not isinstance(inputs, Sequence):
            # A string is a sequence of letters: one job each, never what was meant.
            raise DeclarationInvalidError("a list of inputs", detail="inputs")
        if len(inputs) > MAX_ENQUEUE_BATCH:
            raise BatchTooLargeError(detail=f"{len(inputs)} > {MAX_ENQUEUE_BATCH}")
        for shared in ("id", "run_id"):
            if shared in options:
                raise DeclarationInvalidError(
                    "one value for every record of a batch: pass ids=[...], one per input",
                    detail=shared,
                )
        check_caller_options(options)
        if ids is not None and (
            isinstance(ids, str | bytes) or not isinstance(ids, Sequence) or len(ids) != len(inputs)
        ):
            raise DeclarationInvalidError("must hold one id per input", detail="ids")
        if ids is not None and not _distinct(ids):
            # The second record of one id would be answered `deduped`, its input dropped.
            raise DeclarationInvalidError("must hold distinct ids", detail="ids")
        queue = options.get("queue") or handle.queue
        with tracing.producer(handle.name, queue, len(inputs)) as traceparent:
            records = build_records(
                handle, inputs, clock=self.clock, ids=ids, traceparent=traceparent, **options
            )
            return await self._retrying(lambda: self.driver.job_enqueue_many(records))

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, again after `X_DRIVER_UNAVAILABLE` with capped backoff, for a bounded time.

        Only safe because every try sends the same records: an existing id dedupes.
        """
        deadline = time.monotonic() + self.enqueue_retry_s
        delay = ENQUEUE_RETRY_FLOOR_S
        while True:
            try:
                return await call()
            except DriverUnavailableError as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                if delay == ENQUEUE_RETRY_FLOOR_S:
                    log.warning("jobs.enqueue.retry: %s; sending the same records again", exc)
                # Wall-clock sleeps: the store's recovery is real time, whatever `clock` says.
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, ENQUEUE_RETRY_CEILING_S)

    def enqueue_sync(self, handle: JobHandle, input: Any, **options: Any) -> EnqueueResult:
        """`enqueue` from sync code; refuses to block a running event loop."""
        return self._run_sync(self.enqueue(handle, input, **options))

    def enqueue_many_sync(
        self, handle: JobHandle, inputs: Sequence[Any], **options: Any
    ) -> list[EnqueueResult]:
        """`enqueue_many` from sync code."""
        return self._run_sync(self.enqueue_many(handle, inputs, **options))

    async def send_event(
        self,
        name: str,
        data: Any = None,
        *,
        id: str | None = None,
        ttl: float | dt.timedelta | None = None,
        tenant_id: str | None = _UNSET,
        all_tenants: bool = False,
    ) -> EventSent:
        """Publish event `name` with `data` (its JSON form; `{}` when None): every parked run
        waiting for it — its name, its tenant, and every key of its match equal in `data` —
        wakes now.

        Tenants fail closed: the event is published for the tenant the caller acts for
        (`current_tenant()`: inside a body, its run's; None outside any), or for `tenant_id=`
        when given (None: for no tenant), and meets only the waits of runs acting for that
        very tenant. Code acting for an org may name only that org: another (or None) is
        `X_JOB_TENANT_MISMATCH`, nothing published — say so with `acting_for(other)` around
        the call. `all_tenants=True` publishes it for every tenant's waits (it then names no
        tenant: `tenant_id=` with it is refused).

        `woken` is how many runs this publish woke; None after an answer lost on the way
        (`EventSent`): the runs were woken, the count is unknown.

        The event is kept for `ttl` (seconds or a timedelta; 7 days by default), so a wait
        that begins later and asks for earlier events (`since=`) still finds it. Retried like
        an enqueue under the same id: a repeat stores nothing and wakes nothing. Pass your own
        `id` to make your retries of a failed call exactly-once too.
        """
        if not isinstance(all_tenants, bool):
            raise OptionInvalidError("must be True or False", detail="all_tenants")
        if all_tenants:
            if tenant_id is not _UNSET and tenant_id is not None:
                raise DeclarationInvalidError(
                    "an event for every tenant names none: give tenant_id= or all_tenants=True",
                    detail="tenant_id",
                )
            tenant: str | None = None
        else:
            acting = current_tenant()
            tenant = acting if tenant_id is _UNSET else tenant_id
            if acting is not None and tenant != acting:
                # Code acting for an org (a tenant job's body, an `acting_for` block) never
                # signals another org's runs on a value its input may carry (SPEC §16).
                raise TenantMismatchError(
                    f"code acting for {acting!r} cannot send an event for another tenant: "
                    "wrap the call in acting_for(<that tenant>), or broadcast with "
                    "all_tenants=True",
                    detail="tenant_id",
                )
        now = self.clock.now_ms()
        if ttl is None:
            ttl_ms = EVENT_TTL_MS
        else:
            seconds = ttl.total_seconds() if isinstance(ttl, dt.timedelta) else ttl
            ttl_ms = round(
                finite_number(seconds, "ttl", minimum=0.001, maximum=3650 * 86_400) * 1000
            )
        record = EventRecord(
            id=id if id is not None else new_id(),
            name=name,
            data_json=dumps({} if data is None else data),
            published_at_ms=now,
            expires_at_ms=now + ttl_ms,
            tenant_id=tenant,
            all_tenants=all_tenants,
        )
        tries_failed = False

        async def publish() -> int:
            nonlocal tries_failed
            try:
                return await self.driver.event_publish(record)
            except DriverUnavailableError:
                tries_failed = True
                raise

        woken = await self._retrying(publish)
        # A resend that woke some proves the failed try stored nothing; one that woke none
        # may be answering a try that landed and woke runs: its count is lost, not zero.
        return EventSent(record.id, None if tries_failed and woken == 0 else woken)

    def send_event_sync(self, name: str, data: Any = None, **options: Any) -> EventSent:
        """`send_event` from sync code."""
        return self._run_sync(self.send_event(name, data, **options))

    def _run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro`'s result, waited for by this thread; never blocks a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise SyncCallInLoopError(
                "called from a running event loop, which it would block: await the async method"
                " instead (`await handle.enqueue(...)`, not `enqueue_sync`)"
            )
        return self._run_elsewhere(coro)

    def _run_elsewhere(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro` run to its end on the portal loop (started on first use)."""
        with self._portal_lock:
            if self._portal is None:
                self._portal = _Portal()
        return self._portal.run(coro)

    def close_sync(self) -> None:
        """Close the finish subscription and the driver on the portal loop and stop it (for
        sync users)."""
        if self._portal is not None:
            self._portal.run(self.close())
            self._portal.run(self.driver.close())
            self._portal.stop()
            self._portal = None


def build_record(
    handle: JobHandle,
    input: Any,
    *,
    clock: Clock,
    id: str | None = None,
    run_id: str | None = None,
    **options: Any,
) -> NewJob:
    """The row for one enqueue; every refusal (key, tenant, JSON, range) raised here.

    The declaration's tenant and key functions see the input's JSON form, the value the
    worker gives them at run, so a function that cannot answer for it is refused now
    (`X_JOB_TENANT_REQUIRED` / `X_JOB_KEY_REQUIRED`), before anything is written. The run
    time is at most one of `run_at_ms` / `run_at` (an aware `datetime`) / `delay_ms` /
    `delay` (a `timedelta`, not negative); none means now. The options are `build_records`'.
    """
    return _batch(handle, clock, options).record(input, id, run_id)


def build_records(
    handle: JobHandle,
    inputs: Sequence[Any],
    *,
    clock: Clock,
    ids: Sequence[str] | None = None,
    **options: Any,
) -> NewJobs:
    """The rows of one batch, one per input (`build_record` for each, with the id of `ids` at
    its position), as columns: what is the batch's in truth — the options, the tenant, the
    time — is resolved and refused once, so a refusal still comes before any write; each
    input's refusal is the one `build_record` makes, the first input's first."""
    return _batch(handle, clock, options).records(inputs, ids)


def _distinct(ids: Sequence[object]) -> bool:
    """True when no id of `ids` is there twice (an unhashable one is left to the record's
    own refusal)."""
    try:
        return len(set(ids)) == len(ids)
    except TypeError:
        return True


def check_caller_options(options: dict[str, Any]) -> None:
    """Refuse what a caller's enqueue may not say: `traceparent=` (the enqueue's tracing stamps
    it; passing it as well was a bare TypeError), and, from code acting for an org, a
    `tenant_id=` naming another tenant or none (`X_JOB_TENANT_MISMATCH`, as `send_event`)."""
    if "traceparent" in options:
        raise OptionInvalidError(
            "is stamped by the enqueue's tracing (OpenTelemetry), never passed",
            detail="traceparent",
        )
    acting = current_tenant()
    if acting is not None and "tenant_id" in options and options["tenant_id"] != acting:
        # The row's tenant is the idempotency namespace and the per-tenant rate bucket: another
        # org's key would dedupe onto (and answer the id of) that org's job.
        raise TenantMismatchError(
            f"code acting for {acting!r} cannot enqueue for another tenant: wrap the call in "
            "acting_for(<that tenant>)",
            detail="tenant_id",
        )


def _batch(handle: JobHandle, clock: Clock, options: dict[str, Any]) -> _Batch:
    """`_Batch` of `options`; a name no enqueue takes is `X_JOB_OPTION_INVALID` (a typo such as
    `delay_s=` would otherwise be a bare TypeError, or worse, ignored by a wrapper)."""
    check_handle(handle, "handle")
    if not options.keys() <= _BATCH_OPTIONS:
        unknown = sorted(options.keys() - _BATCH_OPTIONS)
        raise OptionInvalidError(
            f"no enqueue option is named {', '.join(map(repr, unknown))}; the options are "
            f"{', '.join(sorted(_BATCH_OPTIONS))}",
            detail=unknown[0][:200],
        )
    return _Batch(handle, clock, **options)


class _Batch:
    """The options of an enqueue, resolved once; `record` makes each input's row."""

    __slots__ = (
        "batch_id",
        "created",
        "enqueued_by",
        "handle",
        "key",
        "needs_form",
        "parent_id",
        "priority",
        "queue",
        "run_at_ms",
        "tenant_id",
        "traceparent",
    )

    def __init__(
        self,
        handle: JobHandle,
        clock: Clock,
        *,
        key: str | None = None,
        tenant_id: str | None = _UNSET,
        run_at_ms: int | None = None,
        delay_ms: int | None = None,
        run_at: dt.datetime | None = None,
        delay: dt.timedelta | None = None,
        priority: int | None = None,
        queue: str | None = None,
        enqueued_by: str | None = None,
        traceparent: str | None = None,
        parent_id: str | None = None,
        batch_id: str | None = None,
    ) -> None:
        if handle.enqueue_guard is not None:
            handle.enqueue_guard()
        now = clock.now_ms()
        if run_at is not None or delay is not None:
            run_at_ms, delay_ms = _time_options(run_at_ms, delay_ms, run_at, delay)
        if delay_ms is not None:
            if run_at_ms is not None:
                raise DeclarationInvalidError(
                    "give run_at_ms or delay_ms, not both", detail="run_at"
                )
            self.run_at_ms = now + count(delay_ms, "delay_ms", minimum=0, maximum=MAX_TIME_MS - now)
        elif run_at_ms is not None:
            self.run_at_ms = count(run_at_ms, "run_at_ms", minimum=0, maximum=MAX_TIME_MS)
        else:
            self.run_at_ms = now
        self.handle = handle
        self.created = now
        self.key = key
        self.needs_form = handle.tenant != "none" or (key is None and handle.key is not None)
        self.priority = (
            handle.priority
            if priority is None
            else count(priority, "priority", minimum=PRIORITY_MIN, maximum=PRIORITY_MAX)
        )
        # None is "the declared queue"; an empty one is refused with the record, never replaced.
        self.queue = handle.queue if queue is None else queue
        self.tenant_id = current_tenant() if tenant_id is _UNSET else tenant_id
        self.enqueued_by = enqueued_by
        self.traceparent = traceparent
        self.parent_id = parent_id
        self.batch_id = batch_id

    def record(self, input: Any, id: str | None, run_id: str | None) -> NewJob:
        """The row for `input`; a refusal of this input (JSON, tenant, key) is raised here."""
        handle = self.handle
        input_json = dumps(input)
        form = _json_form(input, input_json) if self.needs_form else None
        # Refuse an input whose org cannot be derived, before any write; the org is kept on the
        # row for the operator's eyes (acts-for), never read back as authority.
        acts_for = handle.tenant_for(form)
        return self._row(
            id if id is not None else new_id(),
            run_id if run_id is not None else new_id(),
            handle.key_for(form, self.key),
            input_json,
            acts_for,
        )

    def _row(self, id: str, run_id: str, key: str, input_json: str, acts_for: str | None) -> NewJob:
        """The batch's row with a record's own five fields."""
        return NewJob(
            id=id,
            run_id=run_id,
            name=self.handle.name,
            queue=self.queue,
            tenant_id=self.tenant_id,
            idempotency_key=key,
            input_json=input_json,
            priority=self.priority,
            run_at_ms=self.run_at_ms,
            max_attempts=self.handle.retry.attempts,
            created_at_ms=self.created,
            enqueued_by=self.enqueued_by,
            traceparent=self.traceparent,
            parent_id=self.parent_id,
            batch_id=self.batch_id,
            acts_for=acts_for,
        )

    def records(self, inputs: Sequence[Any], ids: Sequence[str] | None) -> NewJobs:
        """`record` of each input (the id of `ids` at its position) as one `NewJobs`."""
        handle = self.handle
        needs_form, given_key = self.needs_form, self.key
        key_for, tenant_for = handle.key_for, handle.tenant_for
        acts_none = handle.tenant == "none"
        keys: list[str] = []
        acts: list[str | None] = []
        # Every text at once when none needs `dumps`' own look, else each in the loop: one loop
        # in input order, each input's checks in `record`'s order, so the refusal raised is the
        # one a call per input would have raised first.
        made = dumps_many(inputs)
        texts = [] if made is None else made
        for at, input in enumerate(inputs):
            if made is None:
                texts.append(dumps(input))
            text = texts[at]
            form = _json_form(input, text) if needs_form else None
            if not acts_none:
                acts.append(tenant_for(form))
            keys.append(key_for(form, given_key))
        n = len(texts)
        # Made as the driver reads them (`FreshIds`), not all before the first write.
        job_ids: Sequence[str] = FreshIds(n) if ids is None else list(ids)
        run_ids = FreshIds(n)
        # An empty batch's shared record is never read: placeholders stand for its five.
        first = (job_ids[0], run_ids[0], keys[0], texts[0]) if n else ("", "", "", "null")
        shared = self._row(*first, acts[0] if acts else None)
        acts_col = None if acts_none else acts
        return NewJobs(
            shared, job_ids, run_ids, keys, texts, acts_col, _dumped=True, _fresh=ids is None
        )


#: What an enqueue may be given beside its input (`build_records`).
_BATCH_OPTIONS: Final = frozenset(inspect.signature(_Batch.__init__).parameters) - {
    "self",
    "handle",
    "clock",
}


def _json_form(value: Any, text: str) -> Any:
    """The value the worker will parse from `text`: `value` itself when it is already plain."""
    kind = type(value)
    if kind in _SELF_FORMED:
        return value
    # A flat dict of strings and plain scalars is its own JSON form; checking that costs a
    # fraction of a parse, and it is what most inputs are.
    if (
        kind is dict
        and _SELF_FORMED.issuperset(map(type, value.values()))
        and _STR.issuperset(map(type, value))
    ):
        return value
    return loads(text)


def _time_options(
    run_at_ms: int | None,
    delay_ms: int | None,
    run_at: dt.datetime | None,
    delay: dt.timedelta | None,
) -> tuple[int | None, int | None]:
    """`run_at` / `delay` as `(run_at_ms, delay_ms)`; one run-time option at most."""
    given = [
        n
        for n, v in (
            ("run_at_ms", run_at_ms),
            ("delay_ms", delay_ms),
            ("run_at", run_at),
            ("delay", delay),
        )
        if v is not None
    ]
    if len(given) > 1:
        raise DeclarationInvalidError(f"give one of {', '.join(given)}, not both", detail="run_at")
    if run_at is not None:
        if not isinstance(run_at, dt.datetime):
            raise OptionInvalidError("must be a datetime", detail="run_at")
        if run_at.utcoffset() is None:
            raise OptionInvalidError(
                "must be timezone-aware (a naive datetime names no instant)", detail="run_at"
            )
        ms = (run_at - _EPOCH) // _MS
        if not 0 <= ms <= MAX_TIME_MS:
            raise OptionInvalidError("must be between 1970 and 2109", detail="run_at")
        return ms, None
    if not isinstance(delay, dt.timedelta):
        raise OptionInvalidError("must be a timedelta", detail="delay")
    if delay < dt.timedelta(0):
        raise OptionInvalidError("must not be negative", detail="delay")
    ms = delay // _MS
    if ms > MAX_TIME_MS:
        raise OptionInvalidError("is too long", detail="delay")
    return None, ms


class _Portal:
    """A private event loop on a daemon thread, so the driver keeps one loop for sync callers."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="ujobs-portal", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result()

    def stop(self) -> None:
        """Shut the loop down as `asyncio.run` would: what still runs there is cancelled first
        (a driver's per-loop connections close then), then the loop stops and is closed."""
        with contextlib.suppress(Exception):
            self.run(cancel_other_tasks())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()


_default: Jobs | None = None


def configure(driver: JobDriver | str, *, clock: Clock | None = None) -> Jobs:
    """Set the client that `handle.enqueue()` uses; a string is a driver URL."""
    global _default
    if isinstance(driver, str):
        from jobs_core.urls import driver_from_url

        driver = driver_from_url(driver)
    _default = Jobs(driver, clock=clock)
    return _default


class LoopJobs(Jobs):
    """A client whose sync methods run on `loop`, the loop the driver already serves.

    A worker hands one to its bodies: a `def` body's `enqueue_sync` runs on the worker's loop
    (the thread waits for the answer), so the driver is never used from a second event loop.
    """

    def __init__(
        self,
        driver: JobDriver,
        *,
        loop: asyncio.AbstractEventLoop,
        clock: Clock | None = None,
        **options: Any,
    ) -> None:
        super().__init__(driver, clock=clock, **options)
        self._loop = loop

    def _run_elsewhere(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro` run to its end on the loop the driver serves, not on a portal."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()


#: The client of the code running now (a worker sets it around each body and hook).
_RUNNING: contextvars.ContextVar[Jobs | None] = contextvars.ContextVar("ujobs_client", default=None)


class bound_client:  # lower case: it was a function, and is called as one
    """Inside the block (and the threads it copies its context to), `default_client()` is
    `client`, ahead of any `configure`d one. (A class: every run of every job enters one.)"""

    __slots__ = ("_client", "_token")

    def __init__(self, client: Jobs) -> None:
        self._client = client

    def __enter__(self) -> None:
        self._token = _RUNNING.set(self._client)

    def __exit__(self, *exc: object) -> None:
        _RUNNING.reset(self._token)


def current_client() -> Jobs | None:
    """The client bound to the running code (a body's worker), else the configured one, else
    None."""
    running = _RUNNING.get()
    return running if running is not None else _default


def default_client() -> Jobs:
    """The client bound to the running code (a body's worker), else the configured one.

    `X_JOB_DECLARATION_INVALID` when neither exists.
    """
    client = current_client()
    if client is None:
        raise DeclarationInvalidError(
            "no jobs client: call jobs_core.configure(driver_or_url) first", detail="configure"
        )
    return client


async def send_event(name: str, data: Any = None, **options: Any) -> EventSent:
    """`Jobs.send_event` on the configured client (`jobs_core.configure`)."""
    return await default_client().send_event(name, data, **options)


def send_event_sync(name: str, data: Any = None, **options: Any) -> EventSent:
    """`Jobs.send_event_sync` on the configured client, from plain sync code."""
    return default_client().send_event_sync(name, data, **options)
