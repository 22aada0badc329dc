"""The factories' self-check: a made-up clean run, and one defect per figure — a doubled
posting, a lost consumed record, a webhook delivered twice with no kill, a backfill batch counted
twice, … — each of which must move its figure (`bench/chaos/selfcheck.py`)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bench.chaos.families import Evidence
from bench.chaos.families.factories.decl import SWEEP_ROWS, backfill_name, import_name
from bench.chaos.figures import Config, Life, Row

T = 1_000_000.0
K1 = [["cash", "EUR", 500], ["revenue", "EUR", -500]]
K2 = [["bank", "USD", -70], ["fees", "USD", 30], ["tax", "USD", 40]]


def _balances(*postings: list[list[Any]]) -> list[list[Any]]:
    sums: Counter[tuple[str, str]] = Counter()
    for lines in postings:
        for acct, cur, amount in lines:
            sums[acct, cur] += amount
    return [[a, c, n] for (a, c), n in sorted(sums.items())]


def _row(job: str, name: str, inp: Any, result: Any = None, state: str = "completed") -> Row:
    return Row(
        job,
        name,
        state,
        1,
        None,
        None,
        "",
        json.dumps(inp),
        None if result is None else json.dumps(result),
    )


def _enq(job: str, name: str, inp: Any, t: float, **fields: Any) -> dict[str, Any]:
    return {"ev": "enqueued", "id": job, "name": name, "input": inp, "t": t, **fields}


def clean() -> Evidence:
    """Two postings (one key enqueued again, answered already_applied), four records in two
    committed batches, one event 5xx'd then 2xx'd, a backfill and an import of every row."""
    cfg = Config("pg", True, lease_s=6.0, drain_timeout_s=3.0, outage_s=3.0, family="factories")
    bf, imp = backfill_name(0), import_name(0)
    event = {"endpoint": "ep0", "type": "chaos.test", "id": "evt_0", "data": {"n": 0}}
    answers = [
        _enq("p1", "chaos_fac_post", {"key": "k1", "lines": K1}, T, key="k1", repeat=False),
        _enq("p2", "chaos_fac_post", {"key": "k2", "lines": K2}, T, key="k2", repeat=False),
        _enq("p3", "chaos_fac_post", {"key": "k1", "lines": K1}, T + 9, key="k1", repeat=True),
        _enq("h1", "chaos_fac_hook", event, T, event="evt_0"),
        _enq("b0", bf, None, T, sweep=bf),
        _enq("i0", imp, {"source": "imp0.jsonl"}, T, sweep=imp),
    ]
    applied = {"key": "k1", "status": "applied"}
    rows = {
        "p1": _row("p1", "chaos_fac_post", answers[0]["input"], applied),
        "p2": _row("p2", "chaos_fac_post", answers[1]["input"], {**applied, "key": "k2"}),
        "p3": _row(
            "p3", "chaos_fac_post", answers[2]["input"], {**applied, "status": "already_applied"}
        ),
        "h1": _row("h1", "chaos_fac_hook", event),
        "b0": _row("b0", bf, None),
        "i0": _row("i0", imp, answers[5]["input"]),
    }
    at = {"pid": 100}
    lines: list[dict[str, Any]] = [
        {"ev": "consumed", "ids": [1, 2], "cursor": None, **at, "t": T + 1},
        {"ev": "handled", "ids": [1], **at, "t": T + 1.5},
        {"ev": "consumed", "ids": [3, 4], "cursor": 2, **at, "t": T + 2},
        {"ev": "handled", "ids": [3], **at, "t": T + 2.5},
        {"ev": "delivery", "event": "evt_0", "status": 500, "pid": 50, "t": T + 3},
        {
            "ev": "put",
            "event": "evt_0",
            "job": "h1",
            "claims": 1,
            "outcome": "failed",
            **at,
            "t": T + 4,
        },
        {"ev": "delivery", "event": "evt_0", "status": 200, "pid": 50, "t": T + 5},
        {
            "ev": "put",
            "event": "evt_0",
            "job": "h1",
            "claims": 2,
            "outcome": "delivered",
            **at,
            "t": T + 6,
        },
        {"ev": "swept", "name": bf, "ids": list(range(1, SWEEP_ROWS + 1)), **at, "t": T + 7},
        {
            "ev": "swept",
            "name": imp,
            "ids": [f"imp0-{n:05d}" for n in range(1, SWEEP_ROWS + 1)],
            **at,
            "t": T + 7,
        },
    ]
    attempt = {"event_id": "evt_0", "job_id": "h1"}
    extra = {
        "postings": {"k1": K1, "k2": K2},
        "balances": _balances(K1, K2),
        "cursor": 4,
        "produced": ["1", "2", "3", "4"],
        "done": ["1", "2", "3", "4"],
        "sweeps": {n: [{"status": "completed", "rows": SWEEP_ROWS}] for n in (bf, imp)},
        "attempts": [
            {**attempt, "claims": 1, "outcome": "failed"},
            {**attempt, "claims": 2, "outcome": "delivered"},
        ],
    }
    return Evidence(cfg, answers, rows, lines, [Life(0, 100, T)], extra)


def _doubled_posting(ev: Evidence) -> None:
    """k1 posted by both of its jobs: two `applied` answers, its lines in the balances twice."""
    ev.rows["p3"] = replace(ev.rows["p1"], id="p3")
    ev.extra["balances"] = _balances(K1, K1, K2)


def _off_balance(ev: Evidence) -> None:
    ev.extra["balances"] = _balances(K1, K1, K2)


def _unbalanced(ev: Evidence) -> None:
    """k1 enqueued and stored with lines that do not sum to zero (a refusal that failed)."""
    lines = [["cash", "EUR", 505], ["revenue", "EUR", -500]]
    for a in ev.answers:
        if a.get("key") == "k1":
            a["input"] = {"key": "k1", "lines": lines}
    ev.extra["postings"]["k1"] = lines
    ev.extra["balances"] = _balances(lines, K2)


def _lost_record(ev: Evidence) -> None:
    """On a stream (no writes of the turn's own): record 5 produced, never handed over."""
    ev.extra["done"] = None
    ev.extra["produced"].append("5")


def _consumed_again(ev: Evidence, killed: bool = False, outage: bool = False) -> None:
    """Records 3 and 4 handed over again from cursor 2 (their first batch never committed),
    after a kill -9 of its process, or an outage, or nothing."""
    ev.lines.append({"ev": "consumed", "ids": [3, 4], "cursor": 2, "pid": 100, "t": T + 20})
    if killed:
        ev.lives[0].killed_t = T + 2.5
    if outage:
        ev.cfg = replace(ev.cfg, outages=((T + 10, T + 15),))


def _beside(ev: Evidence) -> None:
    """A second worker handed batch 3-4 over while the first's handler of it still ran (a
    lease let go too early); the first's turn then committed."""
    ev.lines.append({"ev": "consumed", "ids": [3, 4], "cursor": 2, "pid": 200, "t": T + 2.2})
    ev.lives.append(Life(1, 200, T))


def _delivered_again(ev: Evidence, killed: bool = False, outage: bool = False) -> None:
    """evt_0 answered 2xx a second time: after no fault, after its sender's kill -9, or in an
    outage between."""
    ev.lines.append({"ev": "delivery", "event": "evt_0", "status": 200, "pid": 50, "t": T + 30})
    if killed:
        ev.lives[0].killed_t = T + 6.5
    if outage:
        ev.cfg = replace(ev.cfg, outages=((T + 10, T + 15),))


def _lost_event(ev: Evidence) -> None:
    event = {"endpoint": "ep1", "type": "chaos.test", "id": "evt_1", "data": {"n": 1}}
    ev.answers.append(_enq("h2", "chaos_fac_hook", event, T, event="evt_1"))
    ev.rows["h2"] = _row("h2", "chaos_fac_hook", event, state="dead")


def _skipped_row(ev: Evidence) -> None:
    swept = next(d for d in ev.lines if d["ev"] == "swept")
    swept["ids"] = swept["ids"][:-1]


def _swept_in_two_entries(ev: Evidence) -> None:
    ev.extra["sweeps"][backfill_name(0)].append({"status": "completed", "rows": SWEEP_ROWS})


def _set(key: str, value: Any) -> Callable[[Evidence], None]:
    def change(ev: Evidence) -> None:
        ev.extra[key] = value

    return change


#: figure name -> the defect that must make it non-zero.
CASES: dict[str, Callable[[Evidence], None]] = {
    "jobs lost: answered, missing": lambda ev: ev.rows.__delitem__("p2"),
    "jobs lost: answered, never finished": lambda ev: ev.rows.update(
        p2=replace(ev.rows["p2"], state="running")
    ),
    "jobs that ended dead or failed": lambda ev: ev.rows.update(
        b0=replace(ev.rows["b0"], state="dead")
    ),
    "postings lost": lambda ev: ev.extra["postings"].update(k2=None),
    "postings stored with other lines": lambda ev: ev.extra["postings"].update(
        k2=[["bank", "USD", -71], ["fees", "USD", 31], ["tax", "USD", 40]]
    ),
    "postings applied twice": _doubled_posting,
    "balances off the distinct postings": _off_balance,
    "currencies not summing to zero": _unbalanced,
    "consumer records never handled": _lost_record,
    "consumer records handled at or before their batch's cursor": lambda ev: ev.lines.append(
        {"ev": "consumed", "ids": [5], "cursor": 5, "pid": 100, "t": T + 20}
    ),
    "consumer cursor behind a committed batch": _set("cursor", 1),
    "consumer turns run beside another": _beside,
    "consumer records handled twice outside a batch a fault cut": _consumed_again,
    "consumer records handled twice in a batch a kill -9 cut": lambda ev: _consumed_again(
        ev, killed=True
    ),
    "consumer records handled twice in a batch an outage or a drain cut": lambda ev: (
        _consumed_again(ev, outage=True)
    ),
    "consumer records written twice by committed turns": lambda ev: ev.extra["done"].append("3"),
    "consumer records never written by a committed turn": _set("done", ["1", "2", "3"]),
    "webhook events never delivered": _lost_event,
    "webhook events 2xx'd again with no kill, outage or drain": _delivered_again,
    "webhook events 2xx'd again after a kill -9": lambda ev: _delivered_again(ev, killed=True),
    "webhook events 2xx'd again after an outage or a drain": lambda ev: _delivered_again(
        ev, outage=True
    ),
    "webhook claims with two attempts recorded": lambda ev: ev.extra["attempts"].append(
        dict(ev.extra["attempts"][1])
    ),
    "webhook attempts recorded delivered without a 2xx": lambda ev: ev.extra["attempts"].append(
        {**ev.extra["attempts"][1], "claims": 3}
    ),
    "webhook events completed with no delivered attempt recorded": lambda ev: ev.extra[
        "attempts"
    ].pop(),
    "sweep rows never handled": _skipped_row,
    "sweeps whose ledger count is not their rows": lambda ev: ev.extra["sweeps"][backfill_name(0)][
        0
    ].update(rows=SWEEP_ROWS + 15),
    "sweeps not completed exactly once": _swept_in_two_entries,
}
