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
the end of the block — or a retry of `close()` after it failed — enqueues it exactly once.

An exception inside the block enqueues NO callback. The members enqueued before it stay
enqueued and run (a store cannot take back what workers may already run); call `close()`
yourself to still get the callback for them.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from jobs_core.driver import MAX_JOIN_IDS, check_new_job, name_refusal
from jobs_core.errors import BatchTooLargeError, DeclarationInvalidError, RecordInvalidError
from jobs_core.ids import derived_id, new_id
from jobs_core.job import check_handle
from jobs_core.jsonform import JsonValue
from jobs_core.records import EnqueueResult, JoinEnqueue, JoinPolicy, JoinState, NewJob

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jobs_core.facade import Jobs
    from jobs_core.job import JobHandle

#: The stored callback input's marker: the worker fills in the counts of such an input.
BATCH_MARK: Final = "~batch"


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
        `key=`…); their ids are the batch's own. A `key=` with one job for both callbacks is
        refused (`X_JOB_DECLARATION_INVALID`): they would share one key, and `on_success` would
        be deduped against `on_complete`."""
        for taken in ("id", "batch_id", "after", "after_policy"):
            if taken in options:
                raise DeclarationInvalidError("a batch sets this itself", detail=taken)
        from jobs_core.facade import check_caller_options  # the facade imports this module

        # The callbacks' records are built past `Jobs.enqueue`: its checks of the caller here.
        check_caller_options(options)
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
        for record in self._callbacks(0):
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

    def _open(self, adding: int) -> None:
        if self._closed:
            raise DeclarationInvalidError("the batch is closed: its callback is enqueued")
        if len(self._members) + adding > MAX_JOIN_IDS:
            raise BatchTooLargeError(detail=f"a batch holds at most {MAX_JOIN_IDS} jobs")

    async def enqueue(self, handle: JobHandle, input: Any, **options: Any) -> EnqueueResult:
        """`client.enqueue` of one member (it carries the batch's id)."""
        self._open(1)
        done = await self._client.enqueue(handle, input, batch_id=self.id, **options)
        self._members.setdefault(done.id)
        return done

    async def enqueue_many(
        self, handle: JobHandle, inputs: Sequence[Any], **options: Any
    ) -> list[EnqueueResult]:
        """`client.enqueue_many` of members (each carries the batch's id)."""
        self._open(len(inputs))
        done = await self._client.enqueue_many(handle, inputs, batch_id=self.id, **options)
        for d in done:
            self._members.setdefault(d.id)
        return done

    def _plan(self) -> list[tuple[JobHandle, str, JoinPolicy]]:
        """Each callback: its handle, its role (its id's seed) and when it runs."""
        plan = [(self._on_complete, "on_complete", JoinPolicy.ALWAYS)]
        if self._on_success is not None:
            plan.append((self._on_success, "on_success", JoinPolicy.SUCCESS))
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


def batch_view(input: JsonValue, join: JoinState | None) -> JsonValue:
    """What a batch callback's body is handed for its stored `input` (see the module's doc);
    any other input as it is."""
    if not (isinstance(input, dict) and input.get(BATCH_MARK) is True):
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
