"""Batches: jobs enqueued together, and ONE callback job once every one of them finished.

    async with client.batch(on_complete=report, on_success=publish, input={"run": 7}) as b:
        for row in rows:
            await b.enqueue(import_row, row)

Each member carries the batch's id (`NewJob.batch_id`; the operator lists by it). When the
block ends without an exception, the callback is enqueued with `join_enqueue` to wait for every
member: `on_complete` runs once they all finished, however each ended (policy ALWAYS);
`on_success` (optional) runs only if every member completed — it has the SUCCESS policy of
`after=`, so when a member did not complete the worker fails it without running its body
(`X_JOB_DEPENDENCY_FAILED`, dead-lettered or dropped as its `Retry` says).

What a callback's body is handed (its input), filled in by the worker from the join it was
released from:

    {"batch_id": "<id>", "total": N, "succeeded": S, "failed": F, "input": <the batch's input>}

`failed` counts the members that ended dead, failed or cancelled (or were removed); a batch of
no members runs its callbacks at once with zeros. The stored row holds
`{"~batch": true, "batch_id", "total", "input"}` (the counts are only known when it runs); the
callback handle's tenant and key functions see that stored form. Its id is derived from the
batch's id (`derived_id(batch_id, "on_complete")`), and so is its default idempotency key, so
the end of the block — or a retry of `close()` after it failed — enqueues it exactly once. The
worker hands the view to that row alone: any other job's input holding the marker reaches its
body as it was given.

An exception inside the block enqueues NO callback. The members enqueued before it stay
enqueued and run (a store cannot take back what workers may already run); call `close()`
yourself to still get the callback for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from jobs_core.driver import MAX_JOIN_IDS, check_new_job, name_refusal
from jobs_core.errors import BatchTooLargeError, DeclarationInvalidError, RecordInvalidError
from jobs_core.ids import derived_id, new_id
from jobs_core.job import check_handle
from jobs_core.jsonform import JsonValue
from jobs_core.records import EnqueueResult, JoinEnqueue, JoinPolicy, JoinState, NewJob
from jobs_core.tenant import current_tenant

if TYPE_CHECKING:
    from jobs_core.facade import Jobs
    from jobs_core.job import JobHandle

#: The stored callback input's marker: the worker fills in the counts of such an input.
BATCH_MARK: Final = "~batch"
#: The roles of a batch's callbacks: each one's id is derived from the batch's id and its role.
ROLES: Final = ("on_complete", "on_success")


class JobBatch:
    """One batch of `client`'s: members enqueued with `enqueue`, its callbacks by `close` (the
    end of its `async with` block). `id` is the batch's id (given, or a fresh one)."""

    def __init__(
        self,
        client: Jobs,
        *,
        on_complete: JobHandle,
        on_success: JobHandle | None = None,
        input: Any = None,
        id: str | None = None,
        **options: Any,
    ) -> None:
        """`options` are the callbacks' enqueue options (`queue=`, `priority=`, `tenant_id=`,
        `key=`…); their ids are the batch's own, and their tenant (without `tenant_id=`) the
        one the batch is made acting for, wherever `close()` runs. A `key=` with one job for
        both callbacks is refused (`X_JOB_DECLARATION_INVALID`): they would share one key, and
        `on_success` would be deduped against `on_complete`. `input` is refused here unless
        its stored form fits the JSON bounds beside the largest count (`MAX_JOIN_IDS`)."""
        for taken in ("id", "batch_id", "after", "after_policy"):
            if taken in options:
                raise DeclarationInvalidError("a batch sets this itself", detail=taken)
        from jobs_core.facade import check_caller_options  # the facade imports this module

        # The callbacks' records are built past `Jobs.enqueue`: its checks of the caller here.
        check_caller_options(options)
        # The callbacks are the batch's, enqueued for the tenant it was made for: `close()` may
        # run elsewhere (after the block, outside its `acting_for`), and took the tenant there.
        options.setdefault("tenant_id", current_tenant())
        check_handle(on_complete, "on_complete")
        if on_success is not None:
            check_handle(on_success, "on_success")
        if on_success is not None and on_success.name == on_complete.name and "key" in options:
            # One name and one key: `on_success` would dedupe against `on_complete`'s row.
            raise DeclarationInvalidError(
                "one key for both callbacks of one job: on_success would be deduped; drop key="
                " (each callback's key is then derived from the batch) or use two jobs",
                detail="key",
            )
        self.id = id if id is not None else new_id()
        why = name_refusal(self.id)
        if why is not None:
            # Before its callbacks' ids are derived from it (a lone surrogate, an int past
            # 4,300 digits: untyped errors there); the members would carry it as `batch_id`.
            raise RecordInvalidError(why, detail="batch_id")
        self._client = client
        self._on_complete = on_complete
        self._on_success = on_success
        self._input = input
        self._options = options
        self._members: dict[str, None] = {}
        self._closed = False
        # The callbacks' records made once now, so what they cannot carry (the input, the
        # options, the id) is refused before a member is written: `close()` alone refused it,
        # after the members, which then ran as a batch whose callback could never be enqueued.
        # Made with the largest count a batch holds: the stored count's digits count toward
        # the input's byte bound, so an input that fits beside 0 members may not beside 10.
        for record in self._callbacks(MAX_JOIN_IDS):
            check_new_job(record)

    @property
    def member_ids(self) -> list[str]:
        """The members enqueued so far (each id once, in order)."""
        return list(self._members)

    async def __aenter__(self) -> JobBatch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.close()

    def _open(self, adding: int, options: dict[str, Any]) -> None:
        if "batch_id" in options:
            # The batch sets it: passed on beside its own, it was a bare TypeError ("multiple
            # values for keyword argument").
            raise DeclarationInvalidError("a batch sets its members' batch_id", detail="batch_id")
        if self._closed:
            raise DeclarationInvalidError("the batch is closed: its callback is enqueued")
        if len(self._members) + adding > MAX_JOIN_IDS:
            raise BatchTooLargeError(detail=f"a batch holds at most {MAX_JOIN_IDS} jobs")

    async def enqueue(self, handle: JobHandle, input: Any, **options: Any) -> EnqueueResult:
        """`client.enqueue` of one member (it carries the batch's id)."""
        self._open(1, options)
        done = await self._client.enqueue(handle, input, batch_id=self.id, **options)
        self._members.setdefault(done.id)
        return done

    async def enqueue_many(
        self, handle: JobHandle, inputs: Sequence[Any], **options: Any
    ) -> list[EnqueueResult]:
        """`client.enqueue_many` of members (each carries the batch's id)."""
        if isinstance(inputs, str | bytes) or not isinstance(inputs, Sequence):
            # Before `len` (a generator has none: a bare TypeError), as `client.enqueue_many`.
            raise DeclarationInvalidError("a list of inputs", detail="inputs")
        self._open(len(inputs), options)
        done = await self._client.enqueue_many(handle, inputs, batch_id=self.id, **options)
        for d in done:
            self._members.setdefault(d.id)
        return done

    def _plan(self) -> list[tuple[JobHandle, str, JoinPolicy]]:
        """Each callback: its handle, its role (its id's seed) and when it runs."""
        plan = [(self._on_complete, ROLES[0], JoinPolicy.ALWAYS)]
        if self._on_success is not None:
            plan.append((self._on_success, ROLES[1], JoinPolicy.SUCCESS))
        return plan

    def _callbacks(self, total: int) -> list[NewJob]:
        """The callbacks' records for a batch of `total` members (every refusal raised here)."""
        stored = {BATCH_MARK: True, "batch_id": self.id, "total": total, "input": self._input}
        records = []
        for handle, role, _ in self._plan():
            options = dict(self._options)
            job_id = derived_id(self.id, role)
            options.setdefault("key", job_id)
            records.append(self._client.build_record(handle, stored, id=job_id, **options))
        return records

    async def close(self) -> list[EnqueueResult]:
        """Enqueue the callbacks (`on_complete`, then `on_success` when given), each waiting for
        every member; exactly once for this batch id, however often it is called (a second
        call answers them `deduped`)."""
        self._closed = True
        members = tuple(self._members)
        plan = self._plan()
        client = self._client
        records = self._callbacks(len(members))
        if not members:
            return await client._retrying(lambda: client.driver.job_enqueue_many(records))
        items = [
            JoinEnqueue(r, members, policy) for r, (_, _, policy) in zip(records, plan, strict=True)
        ]
        answers = await client._retrying(lambda: client.driver.join_enqueue(items))
        out: list[EnqueueResult] = []
        for a in answers:
            # Every member was answered by an enqueue of this client: only a removal or a
            # purge since can make one unknown.
            if a.enqueued is None:
                from jobs_core.errors import DependencyUnknownError

                raise DependencyUnknownError(
                    f"batch {self.id}: no job has the id {', '.join(a.missing)}",
                    detail=",".join(a.missing)[:500],
                )
            out.append(a.enqueued)
        return out


def batch_view(input: JsonValue, join: JoinState | None, job_id: str) -> JsonValue:
    """What a batch callback's body is handed for its stored `input` (see the module's doc);
    any other input as it is.

    A callback is known by its id, derived from the batch id its input names (never by the
    marker alone: any job's input may hold `"~batch": true`, written by whoever made it, and
    its body would have been handed counts made up from it in place of its input)."""
    if not (isinstance(input, dict) and input.get(BATCH_MARK) is True):
        return input
    batch_id = input.get("batch_id")
    if not isinstance(batch_id, str) or job_id not in (derived_id(batch_id, r) for r in ROLES):
        return input
    stored_total = input.get("total")
    total = join.total if join is not None else stored_total if isinstance(stored_total, int) else 0
    failed = join.failed if join is not None else 0
    return {
        "batch_id": input.get("batch_id"),
        "total": total,
        "succeeded": total - failed,
        "failed": failed,
        "input": input.get("input"),
    }
