"""Durable sleeps and event waits across restarts: jobs that sleep 0.2-4 s (`ctx.step.sleep`), and
jobs that wait for an event of their own (`ctx.step.wait_for_event`, matched on their intent).
The feed sends each waiter its event with a nonce: for `since="enqueued"` waiters at any time
after the enqueue, even before the run began waiting; for `since="wait"` ones once the row reads
`parked` (the wait's start is recorded). One waiter in ten gets no event and a 2-5 s timeout.

Each body writes a `woke` line as the sleep or wait returns. No wake may be lost (every run
completes with its own event's data, or None at its timeout), early (before the sleep's end, the
timeout or the event), or doubled (the run passing its wake twice, but after a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections import Counter, defaultdict
from typing import Any, Final

from bench.chaos.families import Evidence, Family, workers
from bench.chaos.feed import Feeder
from bench.chaos.figures import (
    Config,
    Ends,
    Figure,
    Findings,
    Life,
    Row,
    Run,
    fate,
    in_long_outage,
    killed_before_settle,
    lost_figures,
    runs_by_job,
)
from bench.chaos.ledger import logged, note
from jobs_core import JobContext, Retry, job

EVENT: Final = "chaos.go"
#: A waiter that is sent its event waits at most this long: its timeout firing is a lost wake.
LONG_TIMEOUT_S: Final = 600
#: Clocks are read in whole ms by the library: a wake this early is rounding, not early.
ROUNDING_MS: Final = 2.0


@job(
    name="chaos_sleep",
    queue="chaos_waits",
    idempotency_key=lambda i: i["k"],
    tenant="none",
    retry=Retry(attempts=5, base_ms=100, cap_ms=1_000, jitter="full"),
)
async def chaos_sleep(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    async def body(run: dict[str, Any]) -> dict[str, Any]:
        await ctx.step.sleep("nap", inp["ms"] / 1000)
        note("woke", **run)
        return {"i": inp["i"]}

    return await logged(inp, ctx, body)


@job(
    name="chaos_wait",
    queue="chaos_waits",
    idempotency_key=lambda i: i["k"],
    tenant="none",
    retry=Retry(attempts=5, base_ms=100, cap_ms=1_000, jitter="full"),
)
async def chaos_wait(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    async def body(run: dict[str, Any]) -> dict[str, Any]:
        data = await ctx.step.wait_for_event(
            "go", EVENT, match={"w": inp["i"]}, timeout=inp["timeout"], since=inp["since"]
        )
        note("woke", **run, data=data)
        return {"data": data}

    return await logged(inp, ctx, body)


async def feed(f: Feeder) -> None:
    """Sleepers (4 in 10), waiters `since="enqueued"` and `since="wait"` (a quarter each), and
    waiters with a short timeout and no event; then every event still owed, bounded in time."""
    owed: list[tuple[float, dict[str, Any]]] = []  # (due, waiter input): since="enqueued"
    parking: dict[str, dict[str, Any]] = {}  # job id -> input: since="wait", sent once parked
    parked_at: dict[str, float] = {}
    while f.made < f.total and f.elapsed() < f.seconds:
        sleepers, waiters = [], []
        for _ in range(min(f.rng.randint(1, 6), f.total - f.made)):
            r = f.rng.random()
            if r < 0.4:
                sleepers.append(f.intent(ms=f.rng.randint(200, 4_000)))
            elif r < 0.9:
                since = "enqueued" if r < 0.65 else "wait"
                waiters.append(f.intent(since=since, timeout=LONG_TIMEOUT_S, nonce=f.made))
            else:
                waiters.append(f.intent(since="wait", timeout=f.rng.randint(2, 5), nonce=None))
        if sleepers:
            await f.enqueue(chaos_sleep, sleepers)
        if waiters:
            for job_id, inp in zip(await f.enqueue(chaos_wait, waiters), waiters, strict=True):
                if job_id is None or inp["nonce"] is None:
                    continue
                if inp["since"] == "enqueued":
                    owed.append((f.elapsed() + f.rng.uniform(0, 3), inp))
                else:
                    parking[job_id] = inp
        await _send_owed(f, owed, parking, parked_at)
        await f.pace()
    deadline = f.elapsed() + 60
    while (owed or parking or parked_at) and f.elapsed() < deadline:
        await _send_owed(f, owed, parking, parked_at)
        await asyncio.sleep(0.2)
    for inp in [i for _, i in owed] + list(parking.values()):
        f.record({"ev": "unsent", "i": inp["i"]})


async def _send_owed(
    f: Feeder,
    owed: list[tuple[float, dict[str, Any]]],
    parking: dict[str, dict[str, Any]],
    parked_at: dict[str, float],
) -> None:
    """Send the events that are due: `since="enqueued"` ones at their time, `since="wait"` ones
    0-1 s after their row was seen parked."""
    for item in [o for o in owed if o[0] <= f.elapsed()]:
        owed.remove(item)
        await _send(f, item[1])
    if parking:
        with contextlib.suppress(Exception):  # the store is down: look again next round
            rows = await f.client.driver.job_get_many(list(parking))
            for job_id, rec in rows.items():
                if rec.state.value == "parked" and job_id not in parked_at:
                    parked_at[job_id] = f.elapsed() + f.rng.uniform(0, 1)
    for job_id, at in list(parked_at.items()):
        if at <= f.elapsed():
            del parked_at[job_id]
            await _send(f, parking.pop(job_id))


async def _send(f: Feeder, inp: dict[str, Any]) -> None:
    """A send given up is recorded `sent: false`: its waiter may rightly wait on."""
    await f.send_event(EVENT, {"w": inp["i"], "nonce": inp["nonce"]}, i=inp["i"])


def analyse(ev: Evidence) -> Findings:
    cfg, ends = ev.cfg, Ends.of(ev.lives)
    inputs = {str(a["id"]): a for a in ev.answers if a.get("ev") == "enqueued" and a.get("id")}
    # Every send tried, answered or given up (a send given up may still have been stored).
    sent = {a["i"]: a for a in ev.answers if a.get("ev") == "sent"}
    unsent = {a["i"] for a in ev.answers if a.get("ev") == "unsent" or a.get("sent") is False}
    runs = {r.r: r for r in ev.runs()}
    by_job = runs_by_job(runs.values())
    wokes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in ev.of("woke"):
        wokes[d["job"]].append(d)

    lost, early, doubled = [], [], []
    late_ms: dict[str, list[float]] = {"sleep": [], "event": []}
    passes_after_crash: Counter[str] = Counter()
    for job_id, a in inputs.items():
        row = ev.rows.get(job_id)
        kind = "sleep" if a["name"] == "chaos_sleep" else "event"
        if row is None or row.state in ("ready", "running", "parked"):
            continue  # counted by the lost figures (or waiting, correctly, for an unsent event)
        wants = _expected(a, sent)
        if row.state != "completed" or wants is _NEVER or row_data(row, kind) != wants:
            lost.append(f"{job_id} {row.name} {row.state}: {row.result_json} (wanted {wants})")
        first = by_job[job_id][0].start_t if by_job.get(job_id) else None
        for w in wokes.get(job_id, []):
            floor = _floor(a, first, sent.get(a["i"]))
            if floor is not None and w["t"] < floor - ROUNDING_MS:
                early.append(f"{job_id} {row.name}: woke {floor - w['t']:.0f} ms early")
            elif floor is not None:
                late_ms[kind].append(w["t"] - floor)
        passes = [runs[w["r"]] for w in wokes.get(job_id, []) if w["r"] in runs]
        for prev, nxt in itertools.pairwise(passes):
            why = _double(cfg, prev, nxt, ends)
            if why is None:
                passes_after_crash[fate(cfg, prev, ends)] += 1
            else:
                doubled.append(f"{job_id}: {why}")

    waiting = {i for i, r in ev.rows.items() if r.state == "parked" and r.intent in unsent}
    answered = set(inputs) - waiting
    figures = [
        Figure(
            "jobs enqueued",
            len(inputs),
            False,
            f"{sum(1 for a in inputs.values() if a['name'] == 'chaos_sleep')} sleepers;"
            f" events sent: {len(sent) - len(unsent & set(sent))}",
        ),
        *lost_figures(cfg, answered, ev.rows),
        Figure(
            "wakes lost",
            len(lost),
            True,
            "finished without its own event's data (or None at its timeout, or its sleep's end)",
            lost[:3],
        ),
        Figure(
            "wakes early",
            len(early),
            True,
            "woke before its sleep's end, its timeout, or its event was sent",
            early[:3],
        ),
        Figure(
            "wakes doubled",
            len(doubled),
            True,
            "passed its wake again though the pass before returned (no kill -9 before its"
            " settle, no long outage) or was still running",
            doubled[:3],
        ),
        Figure(
            "wakes passed again after a crash",
            sum(passes_after_crash.values()),
            False,
            "the pass before died (kill -9, lost lease, drain): resumed, as promised",
        ),
        Figure(
            "waiters left without their event",
            len(waiting),
            False,
            "the feed never saw their row parked, so never sent it (still parked: correct)",
        ),
        Figure(
            "latest wake (ms after its due time)",
            round(max(late_ms["sleep"] + late_ms["event"], default=0)),
            False,
            f"sleeps: max {max(late_ms['sleep'], default=0):.0f} ms; events: max"
            f" {max(late_ms['event'], default=0):.0f} ms (outages and claim polls delay wakes)",
        ),
    ]
    return Findings(figures, {"wakes passed again, by the pass before": dict(passes_after_crash)})


_NEVER = object()


def row_data(row: Row, kind: str) -> Any:
    """What the run answered: the event's data for a waiter, its intent for a sleeper."""
    result = json.loads(row.result_json or "null")
    if not isinstance(result, dict):
        return _NEVER
    return result.get("i") if kind == "sleep" else result.get("data", _NEVER)


def _expected(a: dict[str, Any], sent: dict[str, dict[str, Any]]) -> Any:
    """What the run should answer: its intent (a sleeper), None (a waiter sent no event), or
    the data of the event sent to it (never, when none was tried)."""
    if a["name"] == "chaos_sleep":
        return a["i"]
    if a["nonce"] is None:
        return None  # no event: its timeout
    event = sent.get(a["i"])
    return event["data"] if event is not None else _NEVER


def _floor(a: dict[str, Any], first: float | None, event: dict[str, Any] | None) -> float | None:
    """The earliest a wake may come: the sleep's end, the timeout, or the event's send."""
    if a["name"] == "chaos_sleep":
        return None if first is None else first + a["ms"]
    if a["nonce"] is None:
        return None if first is None else first + a["timeout"] * 1000
    return None if event is None else float(event["from"])


def _double(cfg: Config, prev: Run, nxt: Run, ends: Ends) -> str | None:
    """Why a second pass past the wake is a doubled wake, or None when a crash explains it."""
    if ends.stopped(prev, cfg.ended_t or nxt.start_t) > nxt.start_t:
        return f"pid {nxt.pid} woke while pid {prev.pid}'s pass was still running"
    if prev.end_how != "ok":
        return None
    if killed_before_settle(cfg, prev, ends) or in_long_outage(cfg, prev):
        return None
    return f"the pass before (pid {prev.pid}) returned and no crash explains the next"


# -- self-check ---------------------------------------------------------------------------------

T = 1_000_000.0


def clean() -> Evidence:
    """A sleeper (500 ms) and a waiter sent its event, each parked once and woken once."""
    cfg = Config("pg", True, lease_s=5.0, drain_timeout_s=3.0, outage_s=3.0, family="waits")
    answers = [
        {"ev": "enqueued", "id": "j1", "i": "i1", "k": "k1", "name": "chaos_sleep", "ms": 500},
        {
            "ev": "enqueued",
            "id": "j2",
            "i": "i2",
            "k": "k2",
            "name": "chaos_wait",
            "since": "wait",
            "timeout": 600,
            "nonce": 7,
        },
        {
            "ev": "sent",
            "i": "i2",
            "sent": True,
            "data": {"w": "i2", "nonce": 7},
            "from": T + 300,
            "t": T + 310,
        },
    ]
    lines: list[dict[str, Any]] = []
    for job_id, name, t_woke, data in (
        ("j1", "chaos_sleep", T + 600, None),
        ("j2", "chaos_wait", T + 400, {"w": "i2", "nonce": 7}),
    ):
        base = {"job": job_id, "name": name, "i": f"i{job_id[1]}", "k": f"k{job_id[1]}"}
        lines += [
            {"ev": "start", "r": f"{job_id}a", **base, "attempt": 1, "pid": 100, "t": T},
            {"ev": "end", "r": f"{job_id}a", **base, "how": "parked", "pid": 100, "t": T + 1},
            {"ev": "start", "r": f"{job_id}b", **base, "attempt": 1, "pid": 100, "t": t_woke - 1},
            {"ev": "woke", "r": f"{job_id}b", **base, "data": data, "pid": 100, "t": t_woke},
            {"ev": "end", "r": f"{job_id}b", **base, "how": "ok", "pid": 100, "t": t_woke + 1},
        ]
    rows = {
        "j1": Row("j1", "chaos_sleep", "completed", 1, None, "i1", "k1", result_json='{"i":"i1"}'),
        "j2": Row(
            "j2",
            "chaos_wait",
            "completed",
            1,
            None,
            "i2",
            "k2",
            result_json='{"data":{"w":"i2","nonce":7}}',
        ),
    }
    return Evidence(cfg, answers, rows, lines, [Life(0, 100, T)])


def _timed_out(ev: Evidence) -> None:
    ev.rows["j2"] = Row(
        "j2", "chaos_wait", "completed", 1, None, "i2", "k2", result_json='{"data":null}'
    )


def _early(ev: Evidence) -> None:
    """The waiter woke before its event was sent."""
    for d in ev.lines:
        if d["r"] == "j2b":
            d["t"] -= 200


def _again(ev: Evidence, overlap: bool) -> None:
    """A second pass of the sleeper past its wake, 50 ms after the first returned (or while it
    still ran)."""
    base = {"r": "j1c", "job": "j1", "name": "chaos_sleep", "i": "i1", "k": "k1", "pid": 200}
    t = T + 600 + (-0.5 if overlap else 50)
    ev.lines += [
        {"ev": "start", **base, "attempt": 1, "t": t},
        {"ev": "woke", **base, "t": t + 1},
        {"ev": "end", **base, "how": "ok", "t": t + 2},
    ]
    ev.lives.append(Life(1, 200, T))


def _after_crash(ev: Evidence) -> None:
    _again(ev, overlap=False)
    ev.lines[:] = [d for d in ev.lines if not (d["r"] == "j1b" and d["ev"] == "end")]
    ev.lives[0] = Life(0, 100, T, killed_t=T + 610, exit_t=T + 611)


def _unsent(ev: Evidence) -> None:
    ev.answers[2]["sent"] = False
    ev.rows["j2"] = Row("j2", "chaos_wait", "parked", 0, None, "i2", "k2")


FAMILY = Family(
    name="waits",
    title="durable sleeps and event waits across restarts: no wake lost, early or doubled",
    fleet=workers("bench.chaos.families.waits"),
    feed=("-m", "bench.chaos.feed", "--family", "waits"),
    jobs=400,
    seconds=30.0,
    analyse=analyse,
    clean=clean,
    cases={
        "jobs lost: answered, missing": lambda ev: ev.rows.clear(),
        "jobs lost: answered, never finished": lambda ev: ev.rows.update(
            j2=Row("j2", "chaos_wait", "parked", 0, None, "i2", "k2")
        ),
        "wakes lost": _timed_out,
        "wakes early": _early,
        "wakes doubled": lambda ev: _again(ev, overlap=False),
        "wakes passed again after a crash": _after_crash,
        "waiters left without their event": _unsent,
    },
    tallies=frozenset({"jobs enqueued", "latest wake (ms after its due time)"}),
)
