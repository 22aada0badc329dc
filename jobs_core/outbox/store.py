"""`OutboxStore`: where staged jobs wait, in the app's own database, until the relay publishes them.

Staging is the store's own method on the caller's connection (each store takes the kind of
transaction it lives in: a SQLAlchemy or psycopg connection for Postgres, a `MemoryTx` for the
memory store), so it is not part of this ABC; everything the relay does after the commit is.
The public methods check every argument, then call the `_` method a store implements (each
docstring is its contract; `jobs_core.testing.outbox` pins it against a reference model).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Final

from jobs_core.driver import (
    MAX_LEASE_MS,
    WakeSubscription,
    _check_int,
    _check_str,
    _check_time,
    check_new_job,
)
from jobs_core.errors import BatchTooLargeError, RecordInvalidError
from jobs_core.jsonform import holds_nul, holds_surrogate
from jobs_core.outbox.records import OutboxClaim, OutboxRelease, OutboxRow
from jobs_core.records import NewJob

#: The most rows one claim takes, one stage writes, and one publish or release names.
MAX_OUTBOX_BATCH: Final = 1_000
#: The most rows one `outbox_pending` call answers.
MAX_OUTBOX_PENDING: Final = 1_000
#: A stored `last_error` is cut to this many characters.
MAX_OUTBOX_ERROR_CHARS: Final = 2_000


class OutboxStore(abc.ABC):
    """Staged jobs between the app's commit and the relay's publish. Every method is async.

    Rows are ordered by `(job.created_at_ms, job.id)` (code-point order), the stage order.
    Plugging into `ujobs relay --outbox URL`: an entry point in the `ujobs.outboxes` group,
    named after the URL scheme, pointing at `from_url(url: str) -> OutboxStore`.
    """

    async def open(self) -> None:  # noqa: B027 - optional hook, stores connect lazily
        """Connect; idempotent."""

    async def close(self) -> None:  # noqa: B027 - optional hook, a memory store holds nothing
        """Release connections; idempotent."""

    async def __aenter__(self) -> OutboxStore:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def describe(self) -> str:
        """A one-line description for people, with any password masked."""
        return type(self).__name__

    async def outbox_wake(self, on_wake: Callable[[], None]) -> WakeSubscription | None:
        """Call `on_wake` when a stage commits (from any process); None when unsupported.
        The relay's poll stays the guarantee; this only shortens its wait."""
        return None

    async def outbox_claim(self, claim: OutboxClaim) -> list[OutboxRow]:
        """Claim up to `claim.limit` free rows, in stage order, leased to `claim.token`."""
        _check_str(claim.token, "token")
        _check_int(claim.limit, "limit", 1, MAX_OUTBOX_BATCH)
        _check_int(claim.lease_ms, "lease_ms", 1, MAX_LEASE_MS)
        _check_time(claim.now_ms, "now_ms")
        return await self._outbox_claim(claim)

    async def outbox_pending(self, limit: int) -> list[OutboxRow]:
        """The first `limit` unpublished rows in stage order, claimed or not (read only)."""
        _check_int(limit, "limit", 1, MAX_OUTBOX_PENDING)
        return await self._outbox_pending(limit)

    async def outbox_publish(self, token: str, ids: Sequence[str]) -> list[str]:
        """Mark published (remove) the named rows `token` still holds; answers those, in order."""
        _check_str(token, "token")
        _check_ids(ids)
        if not ids:
            return []
        return await self._outbox_publish(token, ids)

    async def outbox_release(self, release: OutboxRelease) -> list[str]:
        """Free the named rows `release.token` still holds; answers those, in order."""
        _check_str(release.token, "token")
        _check_ids(release.ids)
        _check_time(release.retry_at_ms, "retry_at_ms")
        if release.error is not None and (
            holds_nul(release.error) or holds_surrogate(release.error)
        ):
            raise RecordInvalidError("must hold no NUL character or lone surrogate", detail="error")
        if not release.ids:
            return []
        if release.error is not None and len(release.error) > MAX_OUTBOX_ERROR_CHARS:
            release = OutboxRelease(
                release.token,
                release.ids,
                release.retry_at_ms,
                release.error[:MAX_OUTBOX_ERROR_CHARS],
            )
        return await self._outbox_release(release)

    # -- what each store implements ---------------------------------------------------------

    @abc.abstractmethod
    async def _outbox_claim(self, claim: OutboxClaim) -> list[OutboxRow]:
        """Atomic: the first `limit` rows in stage order with `available_at_ms <= now_ms` that
        are free (`claimed_by` None) or whose lease lapsed (`lease_until_ms <= now_ms`); each
        gets `claimed_by = token`, `lease_until_ms = now_ms + lease_ms`. Answered in that order,
        as they are after the claim. Two concurrent claims never take the same row."""

    @abc.abstractmethod
    async def _outbox_pending(self, limit: int) -> list[OutboxRow]:
        """The first `limit` rows in stage order, as stored."""

    @abc.abstractmethod
    async def _outbox_publish(self, token: str, ids: Sequence[str]) -> list[str]:
        """Remove each named row whose `claimed_by == token` (lapsed or not), in one atomic
        write; answers the removed ids in the order named (an id named twice, once)."""

    @abc.abstractmethod
    async def _outbox_release(self, release: OutboxRelease) -> list[str]:
        """Each named row whose `claimed_by == token`: `claimed_by` and `lease_until_ms` None,
        `available_at_ms = retry_at_ms`; with an `error`, `attempts + 1` and `last_error =
        error`. One atomic write; answers the released ids in the order named (once each)."""


def check_staged(jobs: Sequence[NewJob]) -> None:
    """The refusals of a stage, before anything is written: the batch cap and each record."""
    if len(jobs) > MAX_OUTBOX_BATCH:
        raise BatchTooLargeError(detail=f"{len(jobs)} > {MAX_OUTBOX_BATCH}")
    for j in jobs:
        check_new_job(j)
        if j.parent_id is not None or j.batch_id is not None:
            raise RecordInvalidError(
                "the outbox stages plain jobs: a staged record carries no parent or batch",
                detail="parent_id" if j.parent_id is not None else "batch_id",
            )


def _check_ids(ids: Sequence[str]) -> None:
    if isinstance(ids, str):
        raise RecordInvalidError("must be a sequence of ids, not one string", detail="ids")
    if len(ids) > MAX_OUTBOX_BATCH:
        raise BatchTooLargeError(detail=f"{len(ids)} ids > {MAX_OUTBOX_BATCH}")
    for i in ids:
        _check_str(i, "ids")
