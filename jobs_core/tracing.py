"""Traces: a producer span around each enqueue and a consumer span around each run, joined by the
W3C `traceparent` the enqueue stamps on the row — with OpenTelemetry when `opentelemetry-api` is
installed (the `otel` extra) and a tracer provider is configured; a no-op otherwise.

Decided here: a batch enqueue is ONE producer span (`publish <queue>`, with the batch size),
and every row of the batch carries its context; a run's consumer span (`process <queue>`) is a
child of the enqueuer's span, so a trace shows the request that enqueued, the wait, and every
attempt. A producer with no valid span context (no SDK, or a sampler that records nothing with
an all-zero span id) stamps nothing: the row's `traceparent` stays None and the run starts a
trace of its own. Names and queues are span attributes; inputs never are.
"""

from __future__ import annotations

import contextlib
import functools
import time
import traceback
from collections.abc import Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

from jobs_core.errors import JobsError
from jobs_core.records import ClaimedJob
from jobs_core.redact import scrub, secrets_in
from jobs_core.states import Outcome

try:  # the `otel` extra
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    HAVE_OTEL = True
except ImportError:  # an install without the extra: every span is a no-op
    HAVE_OTEL = False

#: The instrumentation scope's name, and `messaging.system` on every span.
SYSTEM: Final = "ultimat3-jobs"
_FAILED: Final = frozenset({Outcome.RETRIED, Outcome.DEAD_LETTERED, Outcome.DROPPED})


#: While no provider is set, how often `_tracer` asks OpenTelemetry again (seconds): a
#: provider set while a worker runs is traced to from at most this much later.
RECHECK_S: Final = 1.0


@functools.cache
def _version() -> str:
    try:
        return version("ultimat3-jobs")
    except PackageNotFoundError:
        return "unknown"


# (the provider getter asked, when, the tracer it gave or None): asking costs a read of
# `os.environ` a call (OpenTelemetry looks for `OTEL_PYTHON_TRACER_PROVIDER` until a provider
# is set), a few µs on every run of every job.
_seen: tuple[Any, float, Any | None] | None = None


def _tracer() -> Any | None:
    """The tracer, or None when there is nothing to trace to (no API, or no provider set).

    A provider once set is final (OpenTelemetry sets one once), so its tracer is kept; while
    none is set the answer is kept `RECHECK_S`. A replaced `trace.get_tracer_provider` (a
    test's) is asked at once."""
    global _seen
    if not HAVE_OTEL:
        return None
    get = trace.get_tracer_provider
    now = time.monotonic()
    seen = _seen
    if seen is not None and seen[0] is get and (seen[2] is not None or now - seen[1] < RECHECK_S):
        return seen[2]
    tracer = None
    if not isinstance(get(), trace.ProxyTracerProvider):  # else no SDK: skip the work too
        tracer = trace.get_tracer(SYSTEM, _version())
    _seen = (get, now, tracer)
    return tracer


def active() -> bool:
    """Whether a run's consumer span would be recorded now (`consumer` yields a span)."""
    return _tracer() is not None


def traceparent_of(span: Any) -> str | None:
    """The W3C `traceparent` of `span`, or None for an invalid (all-zero) context."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


@contextlib.contextmanager
def producer(name: str, queue: str, count: int = 1) -> Iterator[str | None]:
    """A producer span around an enqueue of `count` jobs of `name` into `queue`; yields the
    `traceparent` to stamp on the rows (None when not tracing). An enqueue that raises is
    recorded on it as a run's failure is (`failed`: the secrets it carries scrubbed), never by
    OpenTelemetry's own hook, which prints the message as it is."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
        "ujobs.job.name": name,
        "messaging.batch.message_count": count,
    }
    with tracer.start_as_current_span(
        f"publish {queue}",
        kind=SpanKind.PRODUCER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield traceparent_of(span)
        except Exception as exc:
            failed(span, exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            raise


@contextlib.contextmanager
def consumer(job: ClaimedJob) -> Iterator[Any | None]:
    """A consumer span around one run of `job`, a child of its enqueuer's span when the row
    carries one; yields the span (None when not tracing) for `ended` and `failed`."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    parent = None
    if job.traceparent is not None:
        parent = TraceContextTextMapPropagator().extract({"traceparent": job.traceparent})
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": job.id,
        "ujobs.job.name": job.name,
        "ujobs.job.attempt": job.attempt,
        "ujobs.job.max_attempts": job.max_attempts,
    }
    with tracer.start_as_current_span(
        f"process {job.queue}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def failed(span: Any | None, exc: BaseException, secrets: Sequence[str] = ()) -> None:
    """Record the exception that failed the run on its span, the values of the input's
    sensitive fields (`secrets`) and those the error carries scrubbed out of its message and
    stack trace."""
    if span is None:
        return
    secrets = secrets_in(exc, secrets)
    message = exc.message if isinstance(exc, JobsError) else str(exc)
    span.add_event(
        "exception",
        {
            "exception.type": type(exc).__qualname__,
            "exception.message": scrub(message, secrets),
            "exception.stacktrace": scrub(
                "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), secrets
            ),
        },
    )


def ended(span: Any | None, outcome: Outcome) -> None:
    """Mark the run's span with how its settle ended; a failed attempt is an error."""
    if span is None:
        return
    span.set_attribute("ujobs.outcome", outcome.value)
    if outcome in _FAILED:
        span.set_status(Status(StatusCode.ERROR, outcome.value))
