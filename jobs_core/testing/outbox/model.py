"""`OutboxModel`: the `OutboxStore` contract (`jobs_core/outbox/store.py`) as plainly as can be.

Written from the ABC's docstrings, never from a store: a dict of rows, sorted on every read, so a
store's bug shows up as a difference from it. Synchronous: the outbox machine calls it beside the
store under test. The argument checks restate the ABC's (the machine compares error codes only);
a staged record is checked by the ABC's own `check_new_job`, as every store's stage is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from jobs_core.driver import MAX_LEASE_MS, MAX_NAME_BYTES, MAX_TIME_MS, check_new_job
from jobs_core.errors import BatchTooLargeError, RecordInvalidError
from jobs_core.outbox.records import OutboxClaim, OutboxRelease, OutboxRow
from jobs_core.outbox.store import MAX_OUTBOX_BATCH, MAX_OUTBOX_ERROR_CHARS, MAX_OUTBOX_PENDING
from jobs_core.records import NewJob


def _text(value: object, what: str) -> None:
    """A non-empty string of at most `MAX_NAME_BYTES` UTF-8 bytes, without NUL."""
    if (
        not isinstance(value, str)
        or value == ""
        or "\x00" in value
        or len(value.encode()) > MAX_NAME_BYTES
    ):
        raise RecordInvalidError(detail=what)


def _within(value: object, what: str, lo: int, hi: int) -> None:
    """An int (never a bool) in `[lo, hi]`."""
    if type(value) is not int or value < lo or value > hi:
        raise RecordInvalidError(detail=what)


def _named(ids: Sequence[str]) -> list[str]:
    """The ids of a publish or release, checked; each once, in the order first named."""
    if isinstance(ids, str):
        raise RecordInvalidError(detail="ids")
    if len(ids) > MAX_OUTBOX_BATCH:
        raise BatchTooLargeError(detail="ids")
    for i in ids:
        _text(i, "ids")
    once: list[str] = []
    for i in ids:
        if i not in once:
            once.append(i)
    return once


class OutboxModel:
    """Every staged, unpublished row by id; the stage order is computed, never stored."""

    def __init__(self) -> None:
        self.rows: dict[str, OutboxRow] = {}

    def ordered(self) -> list[OutboxRow]:
        """Every row in stage order: `(job.created_at_ms, job.id)`, ids by code point."""
        return sorted(self.rows.values(), key=lambda r: (r.job.created_at_ms, r.job.id))

    def held_by(self, token: str) -> list[OutboxRow]:
        """The rows `token` holds (lapsed or not), in stage order."""
        return [r for r in self.ordered() if r.claimed_by == token]

    # -- the stage: a store's own transaction, seen from outside -----------------------------

    def stage(self, records: Sequence[NewJob], commit: bool) -> None:
        """Refuse the batch before anything is written; a committed one adds a free row per
        record, claimable from its `created_at_ms`; a rolled-back one adds nothing."""
        if len(records) > MAX_OUTBOX_BATCH:
            raise BatchTooLargeError(detail="records")
        for record in records:
            check_new_job(record)
        if not commit:
            return
        for record in records:
            # The machine stages fresh ids only: the contract says nothing of a staged id twice.
            assert record.id not in self.rows, f"the walk staged {record.id!r} twice"
            self.rows[record.id] = OutboxRow(
                job=record,
                attempts=0,
                available_at_ms=record.created_at_ms,
                claimed_by=None,
                lease_until_ms=None,
                last_error=None,
            )

    # -- the relay's side ---------------------------------------------------------------------

    def claim(self, claim: OutboxClaim) -> list[OutboxRow]:
        """The first `limit` rows due by `now_ms` that nobody holds or whose lease lapsed, each
        leased to the token until `now_ms + lease_ms`; answered as they are after the claim."""
        _text(claim.token, "token")
        _within(claim.limit, "limit", 1, MAX_OUTBOX_BATCH)
        _within(claim.lease_ms, "lease_ms", 1, MAX_LEASE_MS)
        _within(claim.now_ms, "now_ms", 0, MAX_TIME_MS)
        now = claim.now_ms

        def free(row: OutboxRow) -> bool:
            if row.available_at_ms > now:
                return False
            return row.claimed_by is None or (
                row.lease_until_ms is not None and row.lease_until_ms <= now
            )

        taken = [r for r in self.ordered() if free(r)][: claim.limit]
        answer = []
        for row in taken:
            leased = replace(row, claimed_by=claim.token, lease_until_ms=now + claim.lease_ms)
            self.rows[row.job.id] = leased
            answer.append(leased)
        return answer

    def pending(self, limit: int) -> list[OutboxRow]:
        """The first `limit` rows in stage order, claimed or not."""
        _within(limit, "limit", 1, MAX_OUTBOX_PENDING)
        return self.ordered()[:limit]

    def publish(self, token: str, ids: Sequence[str]) -> list[str]:
        """Remove the named rows `token` holds (its lease lapsed or not); those ids, as named."""
        _text(token, "token")
        named = _named(ids)
        gone = [i for i in named if i in self.rows and self.rows[i].claimed_by == token]
        for i in gone:
            del self.rows[i]
        return gone

    def release(self, release: OutboxRelease) -> list[str]:
        """Free the named rows the token holds, claimable again from `retry_at_ms`; with an
        error (even an empty one) count a failed publish and keep the error's first 2,000
        characters. Answers the freed ids, as named."""
        _text(release.token, "token")
        named = _named(release.ids)
        _within(release.retry_at_ms, "retry_at_ms", 0, MAX_TIME_MS)
        error = release.error
        if error is not None and "\x00" in error:
            raise RecordInvalidError(detail="error")
        freed = [i for i in named if i in self.rows and self.rows[i].claimed_by == release.token]
        for i in freed:
            row = self.rows[i]
            failed = error is not None
            self.rows[i] = OutboxRow(
                job=row.job,
                attempts=row.attempts + (1 if failed else 0),
                available_at_ms=release.retry_at_ms,
                claimed_by=None,
                lease_until_ms=None,
                last_error=error[:MAX_OUTBOX_ERROR_CHARS] if error is not None else row.last_error,
            )
        return freed
