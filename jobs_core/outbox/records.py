"""The outbox's records: a staged row, the relay's claim on rows, and a release of them."""

from __future__ import annotations

from dataclasses import dataclass

from jobs_core.records import NewJob


@dataclass(frozen=True, slots=True)
class Staged:
    """What `stage` answers: the ids the job will run under once the relay publishes it.

    The id is the job's own (the relay publishes under it, so a republish dedupes), unless a
    live job holds the same idempotency key when the row is published: then the publish
    dedupes onto that job, as `enqueue` would.
    """

    id: str
    run_id: str


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One staged job not yet published, with the relay's claim on it."""

    #: The job exactly as the relay will enqueue it (its id and run id allocated at stage).
    job: NewJob
    #: Publishes of this row that failed so far.
    attempts: int
    #: Not claimable before this time (the stage time, later a release's retry time).
    available_at_ms: int
    #: The claim token holding the row (None: free); a lapsed lease still names its token.
    claimed_by: str | None
    lease_until_ms: int | None
    #: Why the last publish failed; None until one did.
    last_error: str | None


@dataclass(frozen=True, slots=True)
class OutboxClaim:
    """`outbox_claim`'s arguments: take up to `limit` free rows under a fresh `token`."""

    #: Unique per claim call: every later mutation of the claimed rows is fenced on it.
    token: str
    limit: int
    lease_ms: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class OutboxRelease:
    """`outbox_release`'s arguments: give rows back, claimable again from `retry_at_ms`.

    With an `error` the release records a failed publish (`attempts + 1`, `last_error`);
    without one (a relay stopping, an outage cut the batch short) it only frees the rows.
    """

    token: str
    ids: tuple[str, ...]
    retry_at_ms: int
    error: str | None = None
