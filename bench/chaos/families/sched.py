"""The scheduler under chaos: two `ujobs scheduler` processes (through the answer-losing proxy)
fire a task every second with `catch_up="run-once"`; the timeline's kill -9 hits the leader (the
process whose ledger was written last), its SIGTERM a random one.

The task's input function writes each span it is asked to fire (`Occurrence.first_ms..last_ms`)
to the ledger and dawdles 0.2 s, so kills land inside rounds. The rows are the proof: in order,
their spans must tile the run — each next span starting at the occurrence after the one before
ended — so every occurrence fired exactly once, and the task's mark must agree with the last.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from bench.chaos.families import Evidence, Family, Urls
from bench.chaos.figures import Config, Figure, Findings, Life, Row
from bench.chaos.ledger import note
from bench.chaos.servers import Store
from jobs_core import JobContext, job
from jobs_core.scheduler import Occurrence, task
from jobs_core.scheduler.cron import CronSchedule

TASK: Final = "chaos-ticks"
CRON: Final = "* * * * * *"


@job(name="chaos_tick", queue="chaos_sched", idempotency_key=lambda i: "tick", tenant="none")
async def chaos_tick(inp: dict[str, Any], ctx: JobContext) -> None:
    return None


def _span(o: Occurrence) -> dict[str, int]:
    note("fire", first=o.first_ms, last=o.last_ms)
    time.sleep(0.2)  # a round long enough to be killed in the middle of
    return {"first": o.first_ms, "last": o.last_ms}


ticks = task(TASK, cron=CRON, tz="UTC", job=chaos_tick, input=_span, catch_up="run-once")


def _fleet(urls: Urls, args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    return [
        "scheduler",
        "bench.chaos.families.sched",
        "--driver",
        urls.proxied,
        "--lease",
        str(args.lease),
        "--drain-timeout",
        str(args.drain_timeout),
    ], {}


def _pick(kind: str, active: list[Life], rundir: Path, rng: Any) -> Life | None:
    """The leader for a kill -9: the process that wrote the ledger last; any for a SIGTERM."""
    if not active:
        return None
    if kind != "kill9":
        return rng.choice(active)  # type: ignore[no-any-return]

    def written(lf: Life) -> float:
        path = rundir / "ledger" / f"ledger-{lf.pid}.jsonl"
        return path.stat().st_mtime if path.exists() else 0.0

    return max(active, key=written)


def _mark(url: str) -> dict[str, Any]:
    """The task's mark in the store: its watermark and last dispatch ({} before it is armed)."""
    from jobs_core.urls import driver_from_url

    async def read() -> dict[str, Any]:
        driver = driver_from_url(url)
        async with driver:
            mark = (await driver.task_marks([TASK])).get(TASK)
        return {} if mark is None else {"watermark": mark.watermark_ms, "fired": mark.fired_ms}

    return asyncio.run(read())


def _caught_up(stores: Mapping[str, Store], timeline_t: float) -> bool:
    """The schedulers dealt with every occurrence of the timeline (a takeover may still have
    been waiting out a lease when it ended)."""
    try:
        return int(_mark(stores["jobs"].url).get("watermark", 0)) >= timeline_t - 1000
    except Exception:
        return False


def _gather(urls: Urls, stores: Mapping[str, Store]) -> dict[str, Any]:
    return {"mark": _mark(urls.jobs)}


def _between(schedule: CronSchedule, after: int, before: int) -> int:
    """How many occurrences lie strictly between `after` and `before` (bounded)."""
    n, at = 0, schedule.next_after(after)
    while at < before and n < 100_000:
        n, at = n + 1, schedule.next_after(at)
    return n


def analyse(ev: Evidence) -> Findings:
    schedule = CronSchedule(CRON, "UTC")
    spans: list[tuple[int, int, Row]] = []
    for row in ev.rows.values():
        if row.name == "chaos_tick":
            span = json.loads(row.input_json)
            spans.append((int(span["first"]), int(span["last"]), row))
    spans.sort(key=lambda s: (s[0], s[1]))
    twice: list[tuple[int, str]] = []
    never: list[tuple[int, str]] = []
    for (_, last, _), (first, nxt_last, _) in itertools.pairwise(spans):
        if first <= last:
            n = _between(schedule, first - 1, min(last, nxt_last) + 1)
            twice.append((n, f"{n} occurrence(s) from {first}: spans overlap"))
        elif first > schedule.next_after(last):
            n = _between(schedule, last, first)
            never.append((n, f"{n} occurrence(s) after {last}: a gap before {first}"))
    # Every occurrence up to the timeline's end must be fired: the run waited (--drain-wait)
    # for the schedulers to catch up. Without any fire, from the task's arming on.
    mark = ev.extra.get("mark") or {}
    covered = max((s[1] for s in spans), default=mark.get("watermark"))
    tail = (
        _between(schedule, covered, int(ev.cfg.timeline_t) - 999)
        if covered is not None and ev.cfg.timeline_t
        else 0
    )
    if tail:
        never.append((tail, f"{tail} occurrence(s) after {covered}, up to the timeline's end"))
    wrong_keys = [
        f"{row.id}: {row.key}" for first, _, row in spans if row.key != f"task:{first}:tick"
    ]
    behind = []
    if spans and (
        mark.get("watermark", 0) < spans[-1][1] or mark.get("fired") != max(s[0] for s in spans)
    ):
        behind.append(f"mark {mark}, last span {spans[-1][:2]}")
    fires = ev.of("fire")
    fired = {(s[0], s[1]) for s in spans}
    idle = [d for d in fires if (d["first"], d["last"]) not in fired]
    # The longest the task went without a fire: outages, and takeovers waiting out a lease.
    made = sorted(row.created_t for *_, row in spans)
    quiet = max((b - a for a, b in itertools.pairwise([ev.cfg.started_t, *made])), default=0.0)
    leaders = {d["pid"] for d in fires if (d["first"], d["last"]) in fired}
    figures = [
        Figure(
            "fires",
            len(spans),
            False,
            f"by {len(leaders)} leader(s); {sum(1 for s in spans if s[1] > s[0])} caught up a span",
        ),
        Figure(
            "occurrences fired twice",
            sum(n for n, _ in twice),
            True,
            "an occurrence in the spans of two fires",
            [text for _, text in twice[:3]],
        ),
        Figure(
            "occurrences never fired",
            sum(n for n, _ in never),
            True,
            "an occurrence between two fires' spans, or after the last one, that none covered",
            [text for _, text in never[:3]],
        ),
        Figure(
            "fires under another occurrence's key",
            len(wrong_keys),
            True,
            "a run-once fire is keyed by the first occurrence of its span",
            wrong_keys[:3],
        ),
        Figure(
            "task mark behind the fires",
            len(behind),
            True,
            "the watermark before the last fire's span end, or the last dispatch not its own",
            behind,
        ),
        Figure(
            "rounds that fired nothing",
            len(idle),
            False,
            "the input was computed but no row stands for it (killed mid-round, or fenced off)",
        ),
        Figure(
            "longest time without a fire (ms)",
            round(quiet),
            False,
            f"outages, and takeovers waiting out the lease ({ev.cfg.lease_s:g} s); the fire"
            " after it catches the span up",
        ),
    ]
    return Findings(figures, {})


# -- self-check ---------------------------------------------------------------------------------

T = 1_000_000_000_000.0


def clean() -> Evidence:
    """Three fires: seconds 0, 1-3 (a catch-up after a takeover), 4; the mark at 4."""
    cfg = Config(
        "pg",
        True,
        lease_s=5.0,
        drain_timeout_s=3.0,
        outage_s=3.0,
        family="sched",
        started_t=T - 1_000,
        timeline_t=T + 5_500,
    )
    rows: dict[str, Row] = {}
    lines: list[dict[str, Any]] = []
    for n, (first, last) in enumerate(((0, 0), (1, 3), (4, 4))):
        a, b = int(T) + first * 1000, int(T) + last * 1000
        rows[f"t{n}"] = Row(
            f"t{n}",
            "chaos_tick",
            "ready",
            0,
            None,
            None,
            f"task:{a}:tick",
            json.dumps({"first": a, "last": b}),
            created_t=b + 50,
        )
        lines.append({"ev": "fire", "first": a, "last": b, "pid": 100, "t": b + 10})
    extra = {"mark": {"watermark": int(T) + 4000, "fired": int(T) + 4000}}
    return Evidence(cfg, [], rows, lines, [Life(0, 100, T)], extra)


def _overlap(ev: Evidence) -> None:
    a, b = int(T) + 3000, int(T) + 4000
    ev.rows["t9"] = Row(
        "t9",
        "chaos_tick",
        "ready",
        0,
        None,
        None,
        f"task:{a}:tick",
        json.dumps({"first": a, "last": b}),
    )


def _gap(ev: Evidence) -> None:
    del ev.rows["t1"]


FAMILY = Family(
    name="sched",
    title="two schedulers, the leader killed -9: each occurrence fired once, no gap",
    fleet=_fleet,
    feed=(),
    jobs=0,
    seconds=30.0,
    analyse=analyse,
    fleet_size=2,
    pick=_pick,
    drained=_caught_up,
    gather=_gather,
    clean=clean,
    cases={
        "occurrences fired twice": _overlap,
        "occurrences never fired": _gap,
        "fires under another occurrence's key": lambda ev: ev.rows.update(
            t0=Row(
                "t0", "chaos_tick", "ready", 0, None, None, "task:1:tick", ev.rows["t0"].input_json
            )
        ),
        "task mark behind the fires": lambda ev: ev.extra.update(mark={"watermark": int(T)}),
        "rounds that fired nothing": lambda ev: ev.lines.append(
            {"ev": "fire", "first": int(T) + 5000, "last": int(T) + 5000, "pid": 100, "t": T}
        ),
    },
    tallies=frozenset({"fires", "longest time without a fire (ms)"}),
)
