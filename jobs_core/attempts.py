"""Every attempt's story: the bounded history of how each claim of a job ended.

Each claim of a row ends exactly once, and the write that ends it appends one `AttemptRecord`
to the row's history in the same store write (no extra round-trip): an ack, a nack of any
kind, a cancel of the running row, or the claim that reclaims or buries the row after its
lease lapsed (`ABANDONED`). A refused settle (its fence no longer holds) writes nothing. The
row keeps the last `ATTEMPT_HISTORY` entries, oldest first; `JobRecord.attempts` reads them.

What a driver stores per entry is decided here, once, so every driver stores the same thing:
`attempt_error` turns a settle's `error` text (the worker's `last_error` JSON, or any text a
caller passed) into a bounded code, message and traceback excerpt that every store can hold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from jobs_core.jsonform import storable
from jobs_core.records import JobRecord, NackKind
from jobs_core.semantics import LEASE_LAPSED_ERROR, nack_outcome
from jobs_core.states import Outcome

#: The most attempts a row's history keeps: the last ones, oldest first.
ATTEMPT_HISTORY: Final = 10
#: The most characters of an error's message an attempt keeps.
ATTEMPT_MESSAGE_CHARS: Final = 500
#: The most UTF-8 bytes of traceback an attempt keeps: the end of it, where it raised.
ATTEMPT_TRACEBACK_BYTES: Final = 2_048
#: The most characters of an error code (or exception type) an attempt keeps.
ATTEMPT_CODE_CHARS: Final = 100


class AttemptOutcome(StrEnum):
    """How one claim of a job ended."""

    COMPLETED = "completed"
    #: Failed, another attempt follows (a RETRY nack).
    RETRIED = "retried"
    #: Failed for good, dead-lettered (a FAIL nack with `dead_letter`).
    DEAD = "dead"
    #: Failed for good, dropped (a FAIL nack without `dead_letter`).
    FAILED = "failed"
    #: Suspended (a PARK nack): a sleep, an event or a join; no attempt spent.
    PARKED = "parked"
    SHED = "shed"
    #: Given back by a drain; no attempt spent.
    INTERRUPTED = "interrupted"
    #: Refused by keyed concurrency; no attempt spent.
    REFUSED = "refused"
    #: The row was cancelled while this claim ran.
    CANCELLED = "cancelled"
    #: The lease lapsed: a claim reclaimed the row or buried it (lease lost).
    ABANDONED = "abandoned"


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One ended claim of a job."""

    #: The row's `attempt` while this claim ran (a non-counting end gives it back after).
    attempt: int
    #: The claim's number (`JobRecord.claims` then): with `worker_id`, the claim's fence.
    claims: int
    worker_id: str
    claimed_at_ms: int
    #: When the ending write ran (for `ABANDONED`: the reclaiming or burying claim's time).
    settled_at_ms: int
    outcome: AttemptOutcome
    #: The error's `X_*` code, or its exception type when it has no code.
    error_code: str | None = None
    error_message: str | None = None
    #: The end of the traceback, at most `ATTEMPT_TRACEBACK_BYTES`.
    traceback: str | None = None


#: An attempt's error as a driver stores it: (code, message, traceback excerpt).
AttemptError = tuple[str | None, str | None, str | None]
NO_ERROR: Final[AttemptError] = (None, None, None)


#: The history's word for each outcome a landed nack moves (`semantics.nack_outcome`).
_BY_NACK_OUTCOME: Final[dict[Outcome, AttemptOutcome]] = {
    Outcome.RETRIED: AttemptOutcome.RETRIED,
    Outcome.DEAD_LETTERED: AttemptOutcome.DEAD,
    Outcome.DROPPED: AttemptOutcome.FAILED,
    Outcome.SUSPENDED: AttemptOutcome.PARKED,
    Outcome.SHED: AttemptOutcome.SHED,
    Outcome.INTERRUPTED: AttemptOutcome.INTERRUPTED,
    Outcome.REFUSED: AttemptOutcome.REFUSED,
}


def nack_attempt_outcome(kind: NackKind, dead_letter: bool) -> AttemptOutcome:
    """The outcome a nack of `kind` writes into the history: the counters' outcome of the same
    nack (`nack_outcome`), in the history's words."""
    return _BY_NACK_OUTCOME[nack_outcome(kind, dead_letter)]


def _tail_bytes(text: str, limit: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    marker = "... (cut)\n"
    tail = raw[len(raw) - limit + len(marker) :].decode("utf-8", "ignore")
    cut = tail.find("\n")
    return marker + (tail[cut + 1 :] if 0 <= cut < len(tail) - 1 else tail)


def _field(doc: dict[str, object], key: str) -> str | None:
    v = doc.get(key)
    return v if isinstance(v, str) and v else None


def attempt_error(error: str | None) -> AttemptError:
    """The (code, message, traceback) an attempt keeps of a settle's `error`: the fields of a
    `last_error` JSON object, or the whole text as the message when it is not one. Every part
    is bounded and storable (a JSON escape may spell a NUL or a lone surrogate)."""
    if error is None or error == "":
        return NO_ERROR
    doc: object = None
    if error.lstrip().startswith("{"):
        try:
            doc = json.loads(error)
        except (ValueError, RecursionError):
            doc = None
    if isinstance(doc, dict):
        code = _field(doc, "code") or _field(doc, "type")
        message = _field(doc, "message")
        tb = _field(doc, "traceback")
    else:
        code, message, tb = None, error, None
    return (
        None if code is None else storable(code[:ATTEMPT_CODE_CHARS]),
        None if message is None else storable(message[:ATTEMPT_MESSAGE_CHARS]),
        None if tb is None else _tail_bytes(storable(tb), ATTEMPT_TRACEBACK_BYTES),
    )


#: What an `ABANDONED` entry says: the lease lapsed (the bury's `last_error`, as an attempt).
ABANDONED_ERROR: Final[AttemptError] = (
    "X_JOB_LEASE_LOST",
    "lease lapsed; the row was reclaimed or buried by another claim",
    None,
)
assert json.loads(LEASE_LAPSED_ERROR)["code"] == ABANDONED_ERROR[0]


def entry_json(
    attempt: int,
    claims: int,
    worker_id: str,
    claimed_at_ms: int,
    settled_at_ms: int,
    outcome: AttemptOutcome,
    error: AttemptError,
) -> dict[str, object]:
    """One history entry as a driver stores it (JSON object, absent fields omitted)."""
    doc: dict[str, object] = {
        "attempt": attempt,
        "claims": claims,
        "worker": worker_id,
        "claimed_at": claimed_at_ms,
        "settled_at": settled_at_ms,
        "outcome": outcome.value,
    }
    for key, value in zip(("code", "message", "traceback"), error, strict=True):
        if value is not None:
            doc[key] = value
    return doc


def tail_json(outcome: AttemptOutcome, error: AttemptError) -> str:
    """An entry's members after `settled_at` (its outcome and error) as compact JSON members,
    without braces: what a store that builds the entry as text appends. Compact JSON never
    holds a NUL or a raw newline (Redis joins entries with newlines)."""
    doc = entry_json(0, 0, "", 0, 0, outcome, error)
    for key in ("attempt", "claims", "worker", "claimed_at", "settled_at"):
        del doc[key]
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))[1:-1]


def parse_history(text: str | None) -> tuple[AttemptRecord, ...]:
    """A stored history (a JSON array of entries, or None for none yet) as records."""
    if not text:
        return ()
    out: list[AttemptRecord] = []
    for e in json.loads(text):
        out.append(from_entry(e))
    return tuple(out)


def from_entry(e: dict[str, object]) -> AttemptRecord:
    """One stored entry (`entry_json`'s shape) as its record."""

    def num(key: str) -> int:
        v = e[key]
        assert isinstance(v, int | float), (key, v)
        return int(v)

    def text(key: str) -> str | None:
        v = e.get(key)
        return v if isinstance(v, str) else None

    return AttemptRecord(
        attempt=num("attempt"),
        claims=num("claims"),
        worker_id=str(e["worker"]),
        claimed_at_ms=num("claimed_at"),
        settled_at_ms=num("settled_at"),
        outcome=AttemptOutcome(str(e["outcome"])),
        error_code=text("code"),
        error_message=text("message"),
        traceback=text("traceback"),
    )


def appended(history: tuple[AttemptRecord, ...], entry: AttemptRecord) -> tuple[AttemptRecord, ...]:
    """`history` with `entry` last, trimmed to the last `ATTEMPT_HISTORY`."""
    return (*history, entry)[-ATTEMPT_HISTORY:]


def ended(
    row: JobRecord, settled_at_ms: int, outcome: AttemptOutcome, error: AttemptError = NO_ERROR
) -> tuple[AttemptRecord, ...]:
    """`row`'s history once its running claim ended now as `outcome` (the row as it stood
    while the claim held it)."""
    assert row.claimed_by is not None, row
    entry = AttemptRecord(
        attempt=row.attempt,
        claims=row.claims,
        worker_id=row.claimed_by,
        claimed_at_ms=settled_at_ms if row.claimed_at_ms is None else row.claimed_at_ms,
        settled_at_ms=settled_at_ms,
        outcome=outcome,
        error_code=error[0],
        error_message=error[1],
        traceback=error[2],
    )
    return appended(row.attempts, entry)
