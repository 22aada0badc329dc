"""Small pieces of the contract every driver must spell the same way."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Final

from jobs_core.errors import PageInvalidError
from jobs_core.jsonform import unstorable
from jobs_core.records import (
    ClaimParams,
    EventRecord,
    EventWait,
    JobFilter,
    ListKey,
    NackKind,
    PostingLine,
)
from jobs_core.states import JobState, Outcome

#: The `last_error` a claim writes on a row it buries (lease lapsed on the final attempt).
LEASE_LAPSED_ERROR: Final = (
    '{"code":"X_JOB_LEASE_LOST","message":"lease lapsed on the final attempt"}'
)


def lapsed_by(params: ClaimParams) -> int:
    """The latest lease end `params`' claim reclaims or buries: `now_ms`, or `reclaim_until_ms`
    when that is earlier."""
    bound = params.reclaim_until_ms
    return params.now_ms if bound is None else min(params.now_ms, bound)


def namespace_of(name: str, tenant_id: str | None, key: str) -> tuple[str, str, str]:
    """The idempotency namespace `(name, tenant or '', key)`, over live rows (SPEC §5)."""
    return (name, tenant_id or "", key)


# -- counters -----------------------------------------------------------------------------------

#: The two widths of a counter bucket: minutes while recent, hours once folded.
MINUTE_MS: Final = 60_000
HOUR_MS: Final = 3_600_000
#: Minute buckets older than the start of the previous hour are folded into hour buckets.
COUNTER_MINUTES_KEEP_MS: Final = HOUR_MS
#: Hour buckets are dropped this long after they began.
COUNTER_HOURS_KEEP_MS: Final = 30 * 24 * HOUR_MS


def minute_of(now_ms: int) -> int:
    """The start of the minute bucket a settle at `now_ms` counts in."""
    return now_ms - now_ms % MINUTE_MS


def hour_of(ms: int) -> int:
    """The start of the hour bucket `ms` falls in."""
    return ms - ms % HOUR_MS


def fold_before(now_ms: int) -> int:
    """Minute buckets starting before this are folded by `counter_fold(now_ms)`."""
    return max(0, hour_of(now_ms) - COUNTER_MINUTES_KEEP_MS)


def drop_before(now_ms: int) -> int:
    """Hour buckets starting before this are dropped by `counter_fold(now_ms)`."""
    return max(0, now_ms - COUNTER_HOURS_KEEP_MS)


def nack_outcome(kind: NackKind, dead_letter: bool) -> Outcome:
    """The outcome (and so the counter) a landed nack of `kind` moves."""
    match kind:
        case NackKind.RETRY:
            return Outcome.RETRIED
        case NackKind.FAIL:
            return Outcome.DEAD_LETTERED if dead_letter else Outcome.DROPPED
        case NackKind.PARK:
            return Outcome.SUSPENDED
        case NackKind.SHED:
            return Outcome.SHED
        case NackKind.INTERRUPT:
            return Outcome.INTERRUPTED
        case NackKind.REFUSE:
            return Outcome.REFUSED


def bury_outcome(state: JobState) -> Outcome:
    """The outcome a claim's bury of a lapsed final attempt moves (`dead` or `failed`)."""
    return Outcome.DEAD_LETTERED if state is JobState.DEAD else Outcome.DROPPED


# -- listing cursors ----------------------------------------------------------------------------

_CURSOR_TAG: Final = "c1."
#: No cursor this library hands out is longer (an id of 200 bytes, each escaped in 6, encoded):
#: a longer one is refused before it is decoded.
MAX_CURSOR_CHARS: Final = 4_096


def _fingerprint(f: JobFilter) -> str:
    spec: list[object] = [sorted(s.value for s in f.states), f.queue, f.name, f.tenant_id]
    if f.parent_id is not None or f.batch_id is not None:
        spec += [f.parent_id, f.batch_id]  # only then, so a cursor made before flows still decodes
    if f.acts_for is not None:
        spec += ["acts_for", f.acts_for]  # acts-for: only then, as the flows' links
    return hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:12]


def encode_cursor(key: ListKey, f: JobFilter) -> str:
    """The opaque cursor of a listing position, bound to the filter it was made for."""
    raw = json.dumps([key.created_at_ms, key.id, _fingerprint(f)], ensure_ascii=False)
    return _CURSOR_TAG + base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, f: JobFilter) -> ListKey:
    """The position `cursor` names; `X_JOB_PAGE_INVALID` for a malformed cursor or one made for
    another filter (a foreign cursor would silently skip or repeat rows)."""
    if (
        not isinstance(cursor, str)
        or not cursor.startswith(_CURSOR_TAG)
        or len(cursor) > MAX_CURSOR_CHARS
    ):
        raise PageInvalidError("not a cursor this library handed out", detail="cursor")
    body = cursor[len(_CURSOR_TAG) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        created_at, job_id, fingerprint = json.loads(raw.decode())
    # A forged cursor may nest its JSON past the decoder's recursion limit.
    except (ValueError, TypeError, UnicodeDecodeError, binascii.Error, RecursionError):
        raise PageInvalidError("the cursor is malformed", detail="cursor") from None
    if (
        isinstance(created_at, bool)
        or not isinstance(created_at, int)
        or not isinstance(job_id, str)
        or not job_id
        or unstorable(job_id) is not None
        or not 0 <= created_at < 2**42
    ):
        raise PageInvalidError("the cursor is malformed", detail="cursor")
    if fingerprint != _fingerprint(f):
        raise PageInvalidError("the cursor was made for another filter", detail="cursor")
    return ListKey(created_at, job_id)


# -- steps and events ---------------------------------------------------------------------------

#: The step a run records before the first step that declared a compensation runs (a saga). A
#: `dead` or `failed` row whose run holds it is unwound by its `ujobs.unwind` job, so a plain
#: requeue refuses it (`RequeueAnswer.UNWOUND`): only a fresh run may take it again.
SAGA_STEP: Final = "~saga"
#: The final states whose saga runs are unwound (a cancelled or completed run is not undone).
UNWOUND_STATES: Final = frozenset({JobState.DEAD, JobState.FAILED})

#: How long an event is found by waits, unless its sender says otherwise.
EVENT_TTL_MS: Final = 7 * 24 * HOUR_MS

#: How long a lease key's clock outlives its last use once the key holds nothing: `lease_purge`
#: drops it no sooner (`lease_clock_droppable`). Each lease key keeps a clock, the latest time
#: any call on it used (a call's time is the later of its caller's `now_ms` and that clock), so
#: callers whose clocks disagree share one timeline on the key and a window never holds more
#: than `limit` stamps whatever order they land in. Once the clock is dropped the key starts
#: again from its next caller's time: only a caller more than this far behind the purge's clock
#: could then land a stamp inside a window the dropped clock still covered.
LEASE_CLOCK_KEEP_MS: Final = HOUR_MS


def lease_clock_droppable(clock_ms: int, now_ms: int) -> bool:
    """Whether a purge at `now_ms` may drop a lease key's clock at `clock_ms` (its key holding
    nothing): the clock is at least `LEASE_CLOCK_KEEP_MS` behind."""
    return clock_ms <= now_ms - LEASE_CLOCK_KEEP_MS


def json_equal(a: object, b: object) -> bool:
    """JSON equality as every store can decide it: numbers by value (`1` equals `1.0`), a
    boolean never equals a number, arrays in order, objects key by key."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def event_reaches(event: EventRecord, wait: EventWait) -> bool:
    """True when `event` counts for `wait` by its tenant and its time (its name and data are
    `event_matches`' part): published for the wait's tenant (None for None) or for every
    tenant, within `[since_ms, until_ms)` — at `since_ms` counts, at `until_ms` does not."""
    return (
        (event.all_tenants or event.tenant_id == wait.tenant_id)
        and wait.since_ms <= event.published_at_ms
        and (wait.until_ms is None or event.published_at_ms < wait.until_ms)
    )


def event_matches(match: Mapping[str, object], data: object) -> bool:
    """True when `data` holds every top-level key of `match` with a `json_equal` value (an
    empty match takes any data; a non-empty one only an object)."""
    if not match:
        return True
    return isinstance(data, dict) and all(
        k in data and json_equal(v, data[k]) for k, v in match.items()
    )


# -- postings --


def posting_lines_text(lines: Sequence[PostingLine]) -> str:
    """A posting's lines as a store keeps them: compact JSON `[[account, currency, amount], …]`
    in the order given (the ABC's: by account, currency). Accounts and currencies are plain
    ASCII codes, so equal lines always spell the same text: a repeat is told from a conflict by
    comparing it."""
    return json.dumps([[x.account, x.currency, x.amount] for x in lines], separators=(",", ":"))


def posting_lines_of(text: str) -> tuple[PostingLine, ...]:
    """The lines `posting_lines_text` spelled (amounts back as exact ints)."""
    return tuple(PostingLine(a, c, int(n)) for a, c, n in json.loads(text))
