"""The start-up banner and the final counts of `ujobs worker` as JSON log lines, for
`--log-format json`: what the text tables on stdout say, as one `event` each on stderr, so a
log pipeline reads every line the process writes (docs/operations.md, "JSON logs"); and how the
text banner's lines keep within `BANNER_WIDTH` columns (`fitted`, `elided`, `listed`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from rich.cells import cell_len
from rich.text import Text

if TYPE_CHECKING:
    from jobs_core.driver import JobDriver
    from jobs_core.job import JobHandle
    from jobs_core.outbox import Relay
    from jobs_core.retention import Retention
    from jobs_core.scheduler import Scheduler
    from jobs_core.worker import Worker, WorkerStats

log = logging.getLogger("jobs.cli")


def json_logs() -> bool:
    """Whether the root logger writes JSON lines (`--log-format json`)."""
    return any(getattr(h.formatter, "kind", None) == "json" for h in logging.getLogger().handlers)


def announce(event: str, message: str, **fields: Any) -> None:
    """Log `event` at INFO whatever the level (`-v` or not): a banner is always shown."""
    record = log.makeRecord(
        log.name, logging.INFO, __file__, 0, message, (), None, extra={"event": event, **fields}
    )
    log.handle(record)  # handlers have no level of their own: the logger's is what we pass


def _retention(r: Retention | None) -> dict[str, float | None] | None:
    if r is None:
        return None
    out: dict[str, float | None] = {}
    for name in ("completed", "cancelled", "failed", "dead", "webhook_attempts"):
        value = getattr(r, name)
        out[name] = value.total_seconds() if isinstance(value, timedelta) else value
    return out


def body_kind(h: JobHandle) -> str:
    """Where `h`'s body runs, as both banners name it: `async`, `thread` or `process`."""
    return "async" if h.is_async else h.executor


def _job(h: JobHandle) -> dict[str, Any]:
    c = h.concurrency
    return {
        "name": h.name,
        "queue": h.queue,
        "attempts": h.retry.attempts,
        "timeout_s": h.timeout_ms / 1000 if h.timeout_ms else None,
        "body": body_kind(h),
        "concurrency": None if c is None else {"limit": c.limit, "per_key": c.key is not None},
        "rate_limits": [{"limit": r.limit, "per_s": r.per, "by": r.by} for r in h.rate_limits],
    }


def announce_plan(
    w: Worker,
    handles: Sequence[JobHandle],
    driver: JobDriver,
    sched: Scheduler | None = None,
    relay: Relay | None = None,
    *,
    loop: str,
) -> None:
    """`jobs.worker.plan`: what the text banner prints, as one line (`loop`: the event loop's
    name, `lifecycle.loop_name`)."""
    announce(
        "jobs.worker.plan",
        f"ujobs worker {w.worker_id} on {driver.describe()}",
        worker_id=w.worker_id,
        driver=driver.describe(),
        queues=list(w.queues),
        concurrency=w.concurrency,
        max_in_flight=w.max_in_flight,
        lease_s=w.lease_ms / 1000,
        loop=loop,
        retention=_retention(w.retention),
        jobs=[_job(h) for h in sorted(handles, key=lambda h: h.name)],
        rate_limits=[{"limit": r.limit, "per_s": r.per, "by": r.by} for r in w.rate_limits],
        tasks=None
        if sched is None
        else [{"name": t.name, "cron": t.cron, "tz": t.tz, "job": t.job.name} for t in sched.tasks],
        relay=None
        if relay is None
        else {
            "outbox": relay.outbox.describe(),
            "batch": relay.batch,
            "lease_s": relay.lease_ms / 1000,
        },
    )


def announce_stats(s: WorkerStats, worker_id: str) -> None:
    """`jobs.worker.counts`: the final counts the text mode prints as a table, every counter
    of `WorkerStats` under its own name."""
    announce(
        "jobs.worker.counts",
        f"worker stopped: {s.completed} completed, {s.dead_lettered} dead",
        worker_id=worker_id,
        **asdict(s),
    )


def announce_scheduler(s: Scheduler) -> None:
    """`jobs.scheduler.plan`: `ujobs scheduler`'s banner and task table, as one line."""
    announce(
        "jobs.scheduler.plan",
        f"ujobs scheduler {s.scheduler_id} on {s.driver.describe()}",
        scheduler_id=s.scheduler_id,
        driver=s.driver.describe(),
        lease_s=s.ttl_ms / 1000,
        tasks=[{"name": t.name, "cron": t.cron, "tz": t.tz, "job": t.job.name} for t in s.tasks],
    )


def announce_relay(r: Relay) -> None:
    """`jobs.relay.plan`: `ujobs relay`'s banner, as one line (passwords masked)."""
    announce(
        "jobs.relay.plan",
        f"ujobs relay {r.relay_id} from {r.outbox.describe()} to {r.driver.describe()}",
        relay_id=r.relay_id,
        outbox=r.outbox.describe(),
        driver=r.driver.describe(),
        batch=r.batch,
        lease_s=r.lease_ms / 1000,
    )


def rows_said(n: int) -> str:
    """`n` rows in words: "1 row", "2 rows"."""
    return f"{n} row" if n == 1 else f"{n} rows"


def announce_relay_stopped(r: Relay) -> None:
    """`jobs.relay.counts`: the rows the relay published, when it stopped."""
    announce(
        "jobs.relay.counts",
        f"relay stopped: {rows_said(r.published)} published",
        relay_id=r.relay_id,
        published=r.published,
    )


# -- the text banner's width --

#: The widest a line of a role's text banner is: an 80-column terminal never wraps one.
BANNER_WIDTH: Final = 80
#: What a banner line carried on from the one above starts with.
INDENT: Final = "  "
_CUT: Final = "\u2026"


def elided(text: str, width: int, after: str = "") -> str:
    """`text` within `width` columns: whole when it fits, else cut, `…` where the cut is —
    right after the first `after` in it when that leaves its end room (a URL's `://`: its
    scheme stays, then its host, port, database and schema or prefix, the user goes first),
    else in its middle, so both ends stay."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return _CUT[:width]
    at = text.find(after) + len(after) if after and after in text else -1
    if at > 0 and cell_len(text[:at]) * 2 < width:
        head, tail = text[:at], text[at:]
        while cell_len(head) + cell_len(tail) + 1 > width:
            tail = tail[1:]
        return head + _CUT + tail
    keep = width // 2
    head, tail = text[:keep], text[len(text) - (width - 1 - keep) :]
    while cell_len(head) + cell_len(tail) + 1 > width:  # wide characters take two columns
        if len(head) >= len(tail):
            head = head[:-1]
        else:
            tail = tail[1:]
    return head + _CUT + tail


def listed(items: Sequence[str], width: int) -> str:
    """`items` joined by ", " within `width` columns: all when they fit, else the first ones
    that fit and `… (+N more)` (the first one elided when even it alone does not)."""
    whole = ", ".join(items)
    if cell_len(whole) <= width:
        return whole
    for n in range(len(items) - 1, 0, -1):
        text = ", ".join(items[:n]) + f", {_CUT} (+{len(items) - n} more)"
        if cell_len(text) <= width:
            return text
    more = f", {_CUT} (+{len(items) - 1} more)" if len(items) > 1 else ""
    return elided(items[0], width - cell_len(more)) + more


def fitted(head: str, parts: Sequence[str], sep: str = ", ", after: str = "") -> list[str]:
    """`head` then `parts` joined by `sep`, as lines of at most `BANNER_WIDTH` columns: a part
    that does not fit on its line starts the next (indented by `INDENT`), and a part wider
    than a line alone is `elided` (cut after `after`). Each part is text already shown
    (`jobs_core.visible`)."""
    lines: list[str] = []
    line, empty = head, True
    for part in parts:
        piece = part if empty else sep + part
        if cell_len(line + piece) <= BANNER_WIDTH:
            line, empty = line + piece, False
            continue
        if not empty:
            lines.append(line + sep.rstrip())
            line = INDENT
        line, empty = line + elided(part, BANNER_WIDTH - cell_len(line), after), False
    lines.append(line)
    return lines


def role_head(role: str, who: str, store: str) -> list[Text]:
    """A role's first banner lines: `ujobs <role> <id> on <store>` when it fits
    `BANNER_WIDTH`, else the store on lines of its own, a URL too long for one cut after its
    scheme. `who` and `store` are text already shown (`jobs_core.visible`), passwords masked."""
    name = f"ujobs {role}"
    if cell_len(f"{name} {who} on {store}") <= BANNER_WIDTH:
        return [Text.assemble((name, "bold"), f" {who} on ", (store, "cyan"))]
    return [
        Text.assemble((name, "bold"), " ", elided(who, BANNER_WIDTH - cell_len(name) - 1)),
        *(Text(line) for line in fitted(f"{INDENT}on ", store.split(" "), " ", "://")),
    ]
