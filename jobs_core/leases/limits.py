"""Fleet-wide limits as declared: `Concurrency` (a number, or a limit per key of the input) and
`RateLimit` (starts per interval, by queue, tenant or globally), resolved once at declaration,
and the lease keys they hold in the store."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from jobs_core.driver import MAX_KEY_BYTES, MAX_LEASE_LIMIT
from jobs_core.errors import ConcurrencyKeyError, DeclarationInvalidError, JobsError
from jobs_core.jsonform import unstorable, utf8_length
from jobs_core.options import count, seconds_to_ms

WhenBusy = Literal["wait", "fail"]
RateScope = Literal["global", "queue", "tenant"]
#: Longest rate interval: a stamp is a lease, and a lease lives at most a week.
MAX_RATE_PER_S: Final = 7 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Concurrency:
    """At most `limit` bodies at once across the fleet — per value of `key(input)` when a key
    function is given. `when_busy` (keyed only): `wait` leaves the job ready, no attempt spent,
    until a slot frees; `fail` settles it `failed` (outcome `refused`) when another run holds
    the key. A limit of 0 is a hard stop: no body of the job runs."""

    limit: int
    key: Callable[[Any], str] | None = None
    when_busy: WhenBusy = "wait"

    def lease_key(self, name: str, input: Any) -> str:
        """The store key of the slot a run of `input` takes; `X_JOB_CONCURRENCY_KEY_INVALID` when
        the key function raises or answers no usable string."""
        if self.key is None:
            return f"job:{name}"
        try:
            value: object = self.key(input)
        except JobsError:
            raise
        except Exception as exc:
            raise ConcurrencyKeyError(
                f"the concurrency key function raised {type(exc).__name__}: {exc}", detail=name
            ) from exc
        if (
            not isinstance(value, str)
            or not value
            or unstorable(value) is not None
            or utf8_length(value) > MAX_KEY_BYTES
        ):
            raise ConcurrencyKeyError(
                f"the concurrency key must be a non-empty string of at most {MAX_KEY_BYTES}"
                f" UTF-8 bytes with no NUL or lone surrogate, got {type(value).__name__}",
                detail=name,
            )
        # The name's length first: a name holding ':' can never make two keys meet.
        return f"job-key:{len(name)}:{name}:{value}"


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most `limit` starts per `per` seconds, counted fleet-wide per `by`: every start
    (`global`), per queue, or per tenant (the enqueuer's `tenant_id` on the row). A limited job
    is deferred, no attempt spent, to when the window lets it start."""

    limit: int
    per: float
    by: RateScope = "global"

    def __post_init__(self) -> None:
        count(self.limit, "rate_limit.limit", minimum=1, maximum=MAX_LEASE_LIMIT)
        seconds_to_ms(self.per, "rate_limit.per")
        if self.per > MAX_RATE_PER_S:
            raise DeclarationInvalidError("at most a week", detail="rate_limit.per")
        if self.by not in ("global", "queue", "tenant"):
            raise DeclarationInvalidError(
                "must be 'global', 'queue' or 'tenant'", detail="rate_limit.by"
            )

    @property
    def per_ms(self) -> int:
        return seconds_to_ms(self.per, "rate_limit.per")

    def lease_key(self, owner: str, queue: str, tenant_id: str | None) -> str:
        """The store key of the stamps this limit counts; `owner` tells a job's own limit
        (`job:<len>:<name>`) from a worker's (`worker`)."""
        scope = {"global": "", "queue": queue, "tenant": tenant_id or ""}[self.by]
        return f"rate:{owner}:{self.by}:{scope}"


ConcurrencySpec = int | Concurrency | Mapping[str, Any] | None


def resolve_concurrency(spec: ConcurrencySpec) -> Concurrency | None:
    """`job(concurrency=...)` resolved once: a number, a `Concurrency`, or the mapping
    `{"key": fn, "limit": n, "when_busy": "wait" | "fail"}`; refused with the option named."""
    if spec is None:
        return None
    if isinstance(spec, Concurrency):
        c = spec
    elif isinstance(spec, Mapping):
        unknown = set(spec) - {"key", "limit", "when_busy"}
        if unknown:
            raise DeclarationInvalidError(f"unknown keys {sorted(unknown)}", detail="concurrency")
        if "limit" not in spec or "key" not in spec:
            raise DeclarationInvalidError(
                "a keyed limit needs 'key' and 'limit'", detail="concurrency"
            )
        c = Concurrency(spec["limit"], spec["key"], spec.get("when_busy", "wait"))
    else:
        c = Concurrency(spec)
    count(
        c.limit, "concurrency.limit" if c.key else "concurrency", minimum=0, maximum=MAX_LEASE_LIMIT
    )
    if c.key is not None and not callable(c.key):
        raise DeclarationInvalidError("must be a function of the input", detail="concurrency.key")
    if c.when_busy not in ("wait", "fail"):
        raise DeclarationInvalidError("must be 'wait' or 'fail'", detail="concurrency.when_busy")
    if c.when_busy == "fail" and c.key is None:
        raise DeclarationInvalidError(
            "'fail' needs a keyed limit (a key function)", detail="concurrency.when_busy"
        )
    return c


def resolve_rate_limits(
    spec: RateLimit | Sequence[RateLimit] | None, option: str
) -> tuple[RateLimit, ...]:
    """One or several `RateLimit`s, at most one per `by`; refused with `option` named."""
    if spec is None:
        return ()
    # A number was a bare TypeError; a string iterated as its letters ('' as no limit).
    given: object = spec
    if isinstance(given, str | bytes) or not isinstance(given, RateLimit | Iterable):
        raise DeclarationInvalidError("must be a RateLimit or a list of them", detail=option)
    limits = (spec,) if isinstance(spec, RateLimit) else tuple(spec)
    for r in limits:
        if not isinstance(r, RateLimit):
            raise DeclarationInvalidError("must be RateLimit values", detail=option)
    scopes = [r.by for r in limits]
    if len(set(scopes)) != len(scopes):
        raise DeclarationInvalidError("at most one rate limit per 'by'", detail=option)
    return limits
