"""Fleet-wide limits under chaos: a job with `concurrency=4`; one keyed with limit 1 over 4 keys
(`when_busy="wait"`); one keyed with limit 1 and `when_busy="fail"`, fed in pairs on a key of
their own, the second either at once (a refusal may be right) or 12 s later (none is); and one
with `RateLimit(5, per=1.0)`.

The ledger's start and end lines of each body are the intervals it ran (a body whose process was
killed stopped then). Their overlaps are read against the limits; the starts against the rate;
each refusal against the runs of the key's other jobs that could have held its slot then.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections import defaultdict
from dataclasses import replace
from typing import Any, Final

from bench.chaos.families import Evidence, Family, workers
from bench.chaos.feed import Feeder
from bench.chaos.figures import Config, Ends, Figure, Findings, Life, Row, Run, lost_figures
from bench.chaos.ledger import logged
from jobs_core import JobContext, RateLimit, Retry, job

CONCURRENCY: Final = 4
KEYS: Final = 4
RATE: Final = 5
PER_S: Final = 1.0
#: A rate stamp is taken at the claim, the body's start line written a moment later: a window
#: this much shorter than `PER_S` is checked, so that lag cannot pass for a breach.
RATE_SLACK_S: Final = 0.3
#: The second job of a "late" pair on a `when_busy="fail"` key comes this long after the first.
LATE_PAIR_S: Final = 12.0
#: A refusal's evidence may be a slot taken this long before its run's start line (a claim, or
#: a claim killed before its body started).
CLAIM_SLACK_MS: Final = 2_000.0
#: A slot may outlive its body's end line by its hand-back, at most a lease after it (a kill).
HOLD_SLACK_MS: Final = 1_000.0
REFUSED: Final = "concurrency key busy"

_retry = Retry(attempts=5, base_ms=100, cap_ms=1_000, jitter="full")


async def _sleep_body(inp: dict[str, Any], ctx: JobContext) -> None:
    async def body(run: dict[str, Any]) -> None:
        await asyncio.sleep(inp["ms"] / 1000)

    await logged(inp, ctx, body)


@job(
    name="chaos_conc",
    queue="chaos_limits",
    idempotency_key=lambda i: i["k"],
    tenant="none",
    retry=_retry,
    concurrency=CONCURRENCY,
)
async def chaos_conc(inp: dict[str, Any], ctx: JobContext) -> None:
    await _sleep_body(inp, ctx)


@job(
    name="chaos_keyed",
    queue="chaos_limits",
    idempotency_key=lambda i: i["k"],
    tenant="none",
    retry=_retry,
    concurrency={"key": lambda i: i["key"], "limit": 1},
)
async def chaos_keyed(inp: dict[str, Any], ctx: JobContext) -> None:
    await _sleep_body(inp, ctx)


@job(
    name="chaos_fail",
    queue="chaos_limits",
    idempotency_key=lambda i: i["k"],
    tenant="none",
    retry=_retry,
    concurrency={"key": lambda i: i["key"], "limit": 1, "when_busy": "fail"},
)
async def chaos_fail(inp: dict[str, Any], ctx: JobContext) -> None:
    await _sleep_body(inp, ctx)


@job(
    name="chaos_rate",
    queue="chaos_limits",
    idempotency_key=lambda i: i["k"],
    tenant="none",
    retry=_retry,
    rate_limit=RateLimit(RATE, per=PER_S),
)
async def chaos_rate(inp: dict[str, Any], ctx: JobContext) -> None:
    await _sleep_body(inp, ctx)


async def feed(f: Feeder) -> None:
    """Rounds of 1-6 jobs: a third `chaos_conc` (200-1200 ms), a quarter `chaos_keyed`
    (100-600 ms), a quarter `chaos_rate` (10-50 ms), the rest `chaos_fail` pairs (300-1500 ms)."""
    later: list[tuple[float, dict[str, Any]]] = []
    pairs = 0
    while f.made < f.total and f.elapsed() < f.seconds:
        for _ in range(min(f.rng.randint(1, 6), f.total - f.made)):
            r = f.rng.random()
            if r < 0.35:
                await f.enqueue(chaos_conc, [f.intent(ms=f.rng.randint(200, 1_200))])
            elif r < 0.6:
                key = f"kw{f.rng.randrange(KEYS)}"
                await f.enqueue(chaos_keyed, [f.intent(key=key, ms=f.rng.randint(100, 600))])
            elif r < 0.85:
                await f.enqueue(chaos_rate, [f.intent(ms=f.rng.randint(10, 50))])
            else:
                pairs += 1
                key = f"kf{pairs}"
                first = f.intent(key=key, ms=f.rng.randint(300, 1_500))
                second = f.intent(key=key, ms=f.rng.randint(300, 1_500))
                late = f.rng.random() < 0.5 and f.elapsed() + LATE_PAIR_S < f.seconds
                await f.enqueue(chaos_fail, [first] if late else [first, second], late=False)
                if late:
                    later.append((f.elapsed() + LATE_PAIR_S, second))
        for item in [x for x in later if x[0] <= f.elapsed()]:
            later.remove(item)
            await f.enqueue(chaos_fail, [item[1]], late=True)
        await f.pace()
    for due, inp in later:
        await asyncio.sleep(max(0.0, due - f.elapsed()))
        await f.enqueue(chaos_fail, [inp], late=True)


def _over(intervals: list[tuple[float, float, str]], limit: int) -> tuple[list[str], int]:
    """Runs that started while `limit` others were running, and the most at once."""
    over: list[str] = []
    most = 0
    for start, _, job_id in intervals:
        running = [j for s, e, j in intervals if s <= start < e]
        most = max(most, len(running))
        if len(running) > limit:
            over.append(f"{job_id} started with {len(running) - 1} others running")
    return over, most


def analyse(ev: Evidence) -> Findings:
    cfg, ends = ev.cfg, Ends.of(ev.lives)
    inputs = {str(a["id"]): a for a in ev.answers if a.get("id")}
    runs = ev.runs()
    end_of = cfg.ended_t or max((r.start_t for r in runs), default=0.0)

    def interval(r: Run) -> tuple[float, float, str]:
        return (r.start_t, ends.stopped(r, end_of), r.job)

    conc = [interval(r) for r in runs if r.name == "chaos_conc"]
    over_conc, most = _over(conc, CONCURRENCY)
    per_key: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for r in runs:
        if r.name in ("chaos_keyed", "chaos_fail") and r.job in inputs:
            per_key[inputs[r.job]["key"]].append(interval(r))
    over_keyed: list[str] = []
    for key, spans in sorted(per_key.items()):
        over_keyed += [f"{key}: {o}" for o in _over(spans, 1)[0]]

    starts = sorted(r.start_t for r in runs if r.name == "chaos_rate")
    window = (PER_S - RATE_SLACK_S) * 1000
    over_rate = [
        f"{RATE + 1} starts within {starts[n + RATE] - t:.0f} ms from {t:.0f}"
        for n, t in enumerate(starts[:-RATE])
        if starts[n + RATE] - t < window
    ]

    refused = [
        row for row in ev.rows.values() if row.state == "failed" and _is_refusal(row.last_error)
    ]
    for_nothing = [
        f"{row.id} refused at {row.finished_t:.0f}"
        for row in refused
        if not _held(cfg, ends, row, inputs, runs, ev.rows)
    ]
    late_refused = sum(1 for row in refused if inputs.get(row.id, {}).get("late"))
    figures = [
        Figure("jobs enqueued", len(inputs), False, f"{len(runs):,} body runs"),
        *lost_figures(cfg, inputs, ev.rows),
        Figure(
            "concurrency=4 exceeded",
            len(over_conc),
            True,
            f"chaos_conc bodies started with 4 others running (most at once: {most})",
            over_conc[:3],
        ),
        Figure(
            "keyed limit exceeded",
            len(over_keyed),
            True,
            "chaos_keyed/chaos_fail bodies started with another of their key running",
            over_keyed[:3],
        ),
        Figure(
            "rate windows exceeded",
            len(over_rate),
            True,
            f"{RATE + 1} chaos_rate starts within {window / 1000:g} s (the limit: {RATE} per"
            f" {PER_S:g} s, less {RATE_SLACK_S:g} s for the claim-to-start lag)",
            over_rate[:3],
        ),
        Figure(
            "jobs refused for nothing",
            len(for_nothing),
            True,
            "a when_busy=fail refusal while no other job of its key could hold the slot",
            for_nothing[:3],
        ),
        Figure(
            "jobs refused",
            len(refused),
            False,
            f"when_busy=fail refusals with another job's run as evidence ({late_refused} of a"
            " late pair)",
        ),
    ]
    return Findings(figures, {})


def _is_refusal(last_error: str | None) -> bool:
    return bool(last_error) and REFUSED in (last_error or "")


def _held(
    cfg: Config,
    ends: Ends,
    row: Row,
    inputs: dict[str, dict[str, Any]],
    runs: list[Run],
    rows: dict[str, Row],
) -> bool:
    """Whether another job of the refused row's key could hold its slot when it was refused: one
    of its runs was on (widened by the claim before and the hand-back after), or it was claimed
    without a body run near a kill -9 (the slot outlives the kill by a lease)."""
    t = row.finished_t
    key = inputs.get(row.id, {}).get("key")
    if t is None or key is None:
        return True
    lease = cfg.lease_s * 1000
    others = {j for j, a in inputs.items() if a.get("key") == key and j != row.id}
    for r in runs:
        if r.job in others:
            stop = ends.stopped(r, cfg.ended_t or t)
            hold = lease if r.pid in ends.killed else HOLD_SLACK_MS
            if r.start_t - CLAIM_SLACK_MS <= t <= stop + hold:
                return True
    kills = sorted(ends.killed.values())
    for j in others:
        other = rows.get(j)
        ran = sum(1 for r in runs if r.job == j)
        refusals = 1 if other and other.state == "failed" and _is_refusal(other.last_error) else 0
        if other is not None and other.claims - ran - refusals > 0:
            at = bisect_left(kills, t - lease - CLAIM_SLACK_MS)
            if at < len(kills) and kills[at] <= t:
                return True
    return False


# -- self-check ---------------------------------------------------------------------------------

T = 1_000_000.0


def _run(
    r: str, job_id: str, name: str, start: float, end: float, pid: int = 100
) -> list[dict[str, Any]]:
    base = {"r": r, "job": job_id, "name": name, "i": job_id, "k": job_id, "pid": pid}
    return [
        {"ev": "start", **base, "attempt": 1, "t": start},
        {"ev": "end", **base, "how": "ok", "t": end},
    ]


def clean() -> Evidence:
    """4 chaos_conc at once; two keyed runs back to back; 5 rate starts in a second; a fail pair
    whose second was refused while the first ran."""
    cfg = Config("pg", True, lease_s=5.0, drain_timeout_s=3.0, outage_s=3.0, family="limits")
    answers: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []
    rows: dict[str, Row] = {}

    def add(job_id: str, name: str, start: float, end: float, **inp: Any) -> None:
        answers.append({"ev": "enqueued", "id": job_id, "i": job_id, "k": job_id, **inp})
        lines.extend(_run(f"r{job_id}", job_id, name, start, end))
        rows[job_id] = Row(job_id, name, "completed", 1, None, job_id, job_id, claims=1)

    for n in range(CONCURRENCY):
        add(f"c{n}", "chaos_conc", T + n, T + 500)
    add("w1", "chaos_keyed", T, T + 100, key="kw0")
    add("w2", "chaos_keyed", T + 100, T + 200, key="kw0")
    for n in range(RATE):
        add(f"r{n}", "chaos_rate", T + n * 150, T + n * 150 + 10)
    add("f1", "chaos_fail", T, T + 1_000, key="kf1")
    answers.append({"ev": "enqueued", "id": "f2", "i": "f2", "k": "f2", "key": "kf1"})
    rows["f2"] = Row("f2", "chaos_fail", "failed", 0, f"{REFUSED}: held by 1", "f2", "f2", claims=1)
    rows["f2"] = _refused_at(rows["f2"], T + 500)
    return Evidence(cfg, answers, rows, lines, [Life(0, 100, T)])


def _refused_at(row: Row, t: float) -> Row:
    return replace(row, finished_t=t)


def _conc_over(ev: Evidence) -> None:
    ev.answers.append({"ev": "enqueued", "id": "c9", "i": "c9", "k": "c9"})
    ev.lines += _run("rc9", "c9", "chaos_conc", T + 100, T + 200)
    ev.rows["c9"] = Row("c9", "chaos_conc", "completed", 1, None, "c9", "c9")


def _keyed_over(ev: Evidence) -> None:
    for d in ev.lines:
        if d["r"] == "rw2" and d["ev"] == "start":
            d["t"] = T + 50


def _rate_over(ev: Evidence) -> None:
    ev.answers.append({"ev": "enqueued", "id": "r9", "i": "r9", "k": "r9"})
    ev.lines += _run("rr9", "r9", "chaos_rate", T + 650, T + 660)
    ev.rows["r9"] = Row("r9", "chaos_rate", "completed", 1, None, "r9", "r9")


def _for_nothing(ev: Evidence) -> None:
    ev.rows["f2"] = _refused_at(ev.rows["f2"], T + 20_000)


FAMILY = Family(
    name="limits",
    title="concurrency=, keyed limits (wait, fail) and a rate limit: never exceeded,"
    " no refusal for nothing",
    fleet=workers("bench.chaos.families.limits"),
    feed=("-m", "bench.chaos.feed", "--family", "limits"),
    jobs=400,
    seconds=30.0,
    analyse=analyse,
    clean=clean,
    cases={
        "jobs lost: answered, missing": lambda ev: ev.rows.clear(),
        "jobs lost: answered, never finished": lambda ev: ev.rows.update(
            c0=Row("c0", "chaos_conc", "ready", 0, None, "c0", "c0")
        ),
        "concurrency=4 exceeded": _conc_over,
        "keyed limit exceeded": _keyed_over,
        "rate windows exceeded": _rate_over,
        "jobs refused for nothing": _for_nothing,
    },
    tallies=frozenset({"jobs enqueued", "jobs refused"}),
)
