"""Durable steps: jobs of three steps, each step's side effect written to the ledger by the step's
own function, the value it answered written after `ctx.step.run` returned (its record landed),
and a pause between steps for the kill -9 to land in. Some jobs fail their first attempt after a
step, so a retry replays the steps before it.

A step's function runs at least once (a crash between it and its record runs it again); once
its record landed it never runs again, and every run of the job gets the one recorded answer.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter, defaultdict
from functools import partial
from typing import Any

from bench.chaos.families import Evidence, Family, workers
from bench.chaos.feed import Feeder
from bench.chaos.figures import Config, Ends, Figure, Findings, Life, Row, fate, lost_figures
from bench.chaos.ledger import logged, note
from jobs_core import JobContext, Retry, job

STEPS = 3


class ChaosFailure(Exception):
    """A deliberate failure of a first attempt after a step: the retry replays the steps."""


def _effect(run: dict[str, Any], step: str) -> str:
    value = uuid.uuid4().hex[:12]
    note("effect", **run, step=step, value=value)
    return value


@job(
    name="chaos_steps",
    queue="chaos_steps",
    idempotency_key=lambda i: i["k"],
    tenant="none",
    retry=Retry(attempts=5, base_ms=100, cap_ms=1_000, jitter="full"),
)
async def chaos_steps(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    async def body(run: dict[str, Any]) -> dict[str, Any]:
        for n, gap in enumerate(inp["gaps"]):
            step = f"s{n}"
            got = await ctx.step.run(step, partial(_effect, run, step))
            note("got", **run, step=step, value=got)
            if n == inp["fail_after"] and ctx.attempt == 1:
                raise ChaosFailure(f"attempt 1 fails after {step} on purpose")
            await asyncio.sleep(gap / 1000)
        return {"i": inp["i"]}

    return await logged(inp, ctx, body)


async def feed(f: Feeder) -> None:
    """Batches of 1-10 jobs over the run; a step's pause is 10-300 ms, or 0.5-2 s one in five;
    15 % fail their first attempt after one of their steps."""
    while f.made < f.total:
        if f.elapsed() > f.seconds:
            break
        batch = []
        for _ in range(min(f.rng.randint(1, 10), f.total - f.made)):
            gaps = [
                f.rng.randint(500, 2_000) if f.rng.random() < 0.2 else f.rng.randint(10, 300)
                for _ in range(STEPS)
            ]
            fails = f.rng.random() < 0.15
            batch.append(f.intent(gaps=gaps, fail_after=f.rng.randrange(STEPS) if fails else -1))
        await f.enqueue(chaos_steps, batch)
        await f.pace()


def analyse(ev: Evidence) -> Findings:
    ends = Ends.of(ev.lives)
    runs = {r.r: r for r in ev.runs()}
    effects: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    gots: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for d in ev.of("effect"):
        effects[d["job"], d["step"]].append(d)
    for d in ev.of("got"):
        gots[d["job"], d["step"]].append(d)

    # Once a `got` line exists, the step's record had landed: no effect may follow it.
    after: list[str] = []
    before: list[tuple[str, str]] = []
    for pair, es in effects.items():
        landed = gots[pair][0]["t"] if gots.get(pair) else None
        if landed is not None and any(e["t"] > landed for e in es):
            after.append(f"{pair[0]} {pair[1]}: {len(es)} effects, record landed first")
        elif len(es) > 1:
            before.append(pair)
    why: Counter[str] = Counter()
    for pair in before:
        for e in effects[pair][:-1]:
            run = runs.get(e["r"])
            why[fate(ev.cfg, run, ends) if run else "its run has no start line"] += 1

    # Every run of a job answers the one recorded value, which an effect produced.
    changed = []
    for pair, gs in gots.items():
        values = {g["value"] for g in gs}
        made = {e["value"] for e in effects.get(pair, [])}
        if len(values) > 1 or not values <= made:
            changed.append(f"{pair[0]} {pair[1]}: answered {sorted(values)}, made {sorted(made)}")

    unrun = []
    for row in ev.rows.values():
        if row.name == "chaos_steps" and row.state == "completed":
            missing = [f"s{n}" for n in range(STEPS) if (row.id, f"s{n}") not in effects]
            if missing:
                unrun.append(f"{row.id}: {missing}")

    answered = {str(a["id"]) for a in ev.answers if a.get("id")}
    replays = sum(
        1
        for g in ev.of("got")
        if not any(e["r"] == g["r"] for e in effects.get((g["job"], g["step"]), []))
    )
    figures = [
        Figure("jobs enqueued", len(answered), False, f"{len(effects):,} steps run"),
        *lost_figures(ev.cfg, answered, ev.rows),
        Figure(
            "step effects run again after their record landed",
            len(after),
            True,
            "a step's function ran after a run had got its recorded answer",
            after[:3],
        ),
        Figure(
            "step answers that changed",
            len(changed),
            True,
            "runs of one job got different answers from one step, or one no run of it made",
            changed[:3],
        ),
        Figure(
            "completed jobs with a step never run",
            len(unrun),
            True,
            "the job completed, yet a step's function never ran",
            unrun[:3],
        ),
        Figure(
            "step effects run again before their record landed",
            len(before),
            False,
            "at least once: the run that ran it died before its record landed; why: below",
        ),
        Figure(
            "steps replayed",
            replays,
            False,
            "a later run of the job got the recorded answer without running the step",
        ),
    ]
    return Findings(figures, {"effects run again before the record, by the run before": dict(why)})


# -- self-check ---------------------------------------------------------------------------------

T = 1_000_000.0


def clean() -> Evidence:
    """One job, answered, run twice (attempt 1 failed after s0); s0 replayed, all recorded."""
    cfg = Config("pg", True, lease_s=5.0, drain_timeout_s=3.0, outage_s=3.0, family="steps")
    run1 = {"r": "r1", "job": "j1", "name": "chaos_steps", "i": "i1", "k": "k1", "attempt": 1}
    run2 = {**run1, "r": "r2", "attempt": 2}
    lines = [
        {"ev": "start", **run1, "pid": 100, "t": T},
        {"ev": "effect", **run1, "step": "s0", "value": "v0", "pid": 100, "t": T + 1},
        {"ev": "got", **run1, "step": "s0", "value": "v0", "pid": 100, "t": T + 2},
        {"ev": "end", **run1, "how": "fail", "pid": 100, "t": T + 3},
        {"ev": "start", **run2, "pid": 100, "t": T + 10},
        {"ev": "got", **run2, "step": "s0", "value": "v0", "pid": 100, "t": T + 11},
        *(
            line
            for n in (1, 2)
            for line in (
                {
                    "ev": "effect",
                    **run2,
                    "step": f"s{n}",
                    "value": f"v{n}",
                    "pid": 100,
                    "t": T + 12,
                },
                {"ev": "got", **run2, "step": f"s{n}", "value": f"v{n}", "pid": 100, "t": T + 13},
            )
        ),
        {"ev": "end", **run2, "how": "ok", "pid": 100, "t": T + 14},
    ]
    rows = {"j1": Row("j1", "chaos_steps", "completed", 2, None, "i1", "k1")}
    answers = [{"ev": "enqueued", "id": "j1", "i": "i1", "k": "k1"}]
    return Evidence(cfg, answers, rows, lines, [Life(0, 100, T)])


def _rerun_after(ev: Evidence) -> None:
    ev.lines.append(
        {
            "ev": "effect",
            "r": "r2",
            "job": "j1",
            "step": "s0",
            "value": "v9",
            "pid": 100,
            "t": T + 12,
        }
    )


def _rerun_before(ev: Evidence) -> None:
    """Run 1 was killed between s0's effect and its record: run 2 ran s0 again."""
    ev.lines[:] = [d for d in ev.lines if not (d["r"] == "r1" and d["ev"] in ("got", "end"))]
    ev.lines.append(
        {
            "ev": "effect",
            "r": "r2",
            "job": "j1",
            "step": "s0",
            "value": "v0",
            "pid": 100,
            "t": T + 10.5,
        }
    )
    ev.lives.append(Life(1, 200, T, killed_t=T + 1.5))
    for d in ev.lines:
        if d["r"] == "r1":
            d["pid"] = 200


def _changed(ev: Evidence) -> None:
    next(d for d in ev.lines if d["ev"] == "got" and d["r"] == "r2")["value"] = "v9"


def _unrun(ev: Evidence) -> None:
    ev.lines[:] = [d for d in ev.lines if not (d["ev"] == "effect" and d["step"] == "s2")]
    ev.lines[:] = [d for d in ev.lines if not (d["ev"] == "got" and d["step"] == "s2")]


def _lost(ev: Evidence) -> None:
    ev.rows["j1"] = Row("j1", "chaos_steps", "running", 2, None, "i1", "k1")


FAMILY = Family(
    name="steps",
    title="3-step jobs killed between steps: a recorded step never runs again",
    fleet=workers("bench.chaos.families.steps"),
    feed=("-m", "bench.chaos.feed", "--family", "steps"),
    jobs=400,
    seconds=30.0,
    analyse=analyse,
    clean=clean,
    cases={
        "jobs lost: answered, missing": lambda ev: ev.rows.clear(),
        "jobs lost: answered, never finished": _lost,
        "step effects run again after their record landed": _rerun_after,
        "step answers that changed": _changed,
        "completed jobs with a step never run": _unrun,
        "step effects run again before their record landed": _rerun_before,
    },
    tallies=frozenset({"jobs enqueued", "steps replayed"}),
)
