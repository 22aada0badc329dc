"""One pickup's phases, for any system: read from the probes `bench/probe_site/sitecustomize.py`
writes in the worker (`python -m bench.pickup_pairs --probe ...`).

Each job, from its producer's stamp `t`, its enqueue call's return `r` and its body's start `s`,
and the worker's events: the claim is the statement answered last before `s` (its send the
earliest open one of the same label), the wake the first NOTIFY the worker saw after `t` and by
the claim's send (none: the claim was not a wake's). Parts, ms: `enqueue` t→r, `notify` r→the
NOTIFY (negative when the worker saw it before the producer saw its commit), `to_claim` the
NOTIFY→the claim's send, `claim` its send→its answer, `to_body` its answer→s. The claim's round
trips (the probes' `step_*` lines of the claim's task inside it): `claim_trips` how many,
`claim_wire` their time, `claim_client` the rest of the claim (its gathering, its pool, its
Python). Read them at a trickle (the idle phase): under a stream a claim's jobs and NOTIFYs
interleave. `tail_<part>` are `enqueue`, `to_send` (the return to the claim's send), `claim`,
`claim_wire` and `to_body` of the jobs whose pickup is at or above its p95.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict, deque
from pathlib import Path

PARTS = (
    "enqueue",
    "notify",
    "to_claim",
    "claim",
    "claim_trips",
    "claim_wire",
    "claim_client",
    "to_body",
)
#: The parts also read for the slowest 5 % of the jobs (`tail_<part>`).
TAIL = ("enqueue", "to_send", "claim", "claim_wire", "to_body")


def _task(label: str) -> str:
    return label.rpartition("@")[2]


def phases(probe: Path, jobs: list[tuple[float, float, float]]) -> dict[str, list[float]]:
    """Each part of each job's pickup, ms (`jobs`: stamp, return, body start)."""
    notifies: list[float] = []
    claims: list[tuple[float, float, str]] = []  # (answer, send, task), by answer
    open_sends: dict[str, deque[float]] = defaultdict(deque)
    #: Each task's round trips, (send, answer), in the order they ended.
    trips: dict[str, list[tuple[float, float]]] = defaultdict(list)
    open_steps: dict[str, deque[float]] = defaultdict(deque)
    for line in probe.read_text().splitlines():
        event, at, *rest = line.split(" ")
        t = float(at)
        label = rest[0] if rest else ""
        if event == "notify":
            notifies.append(t)
        elif event == "send":
            open_sends[label].append(t)
        elif event == "answer" and open_sends[label]:
            claims.append((t, open_sends[label].popleft(), _task(label)))
        elif event == "step_send":
            open_steps[label].append(t)
        elif event == "step_answer" and open_steps[label]:
            trips[label].append((open_steps[label].pop(), t))
    notifies.sort()
    claims.sort()
    answers = [a for a, _, _ in claims]
    for got in trips.values():
        got.sort()
    starts = {task: [a for a, _ in got] for task, got in trips.items()}
    out: dict[str, list[float]] = {k: [] for k in (*PARTS, *(f"tail_{k}" for k in TAIL))}
    slow = sorted(s - t for t, _, s in jobs)[int(len(jobs) * 0.95)] if jobs else 0.0
    for t, r, s in jobs:
        i = bisect.bisect_right(answers, s) - 1
        if i < 0:
            continue
        answer, send, task = claims[i]
        mine = trips.get(task, [])
        k = bisect.bisect_left(starts.get(task, []), send)
        inside = []
        while k < len(mine) and mine[k][0] <= answer:
            if mine[k][1] <= answer:
                inside.append(mine[k])
            k += 1
        got = {
            "enqueue": (r - t) * 1000,
            "claim": (answer - send) * 1000,
            "to_body": (s - answer) * 1000,
            # The return to the claim's send, however the worker got there (a wake or not).
            "to_send": (send - r) * 1000,
        }
        if inside:
            wire = sum(b - a for a, b in inside) * 1000
            got["claim_trips"] = float(len(inside))
            got["claim_wire"] = wire
            got["claim_client"] = got["claim"] - wire
        j = bisect.bisect_left(notifies, t)
        if j < len(notifies) and notifies[j] <= send:
            got["notify"] = (notifies[j] - r) * 1000
            got["to_claim"] = (send - notifies[j]) * 1000
        for k, v in got.items():
            if k in out:
                out[k].append(v)
            if s - t >= slow and k in TAIL:
                out[f"tail_{k}"].append(v)
    return out


def medians(parts: dict[str, list[float]]) -> dict[str, float]:
    return {k: statistics.median(v) for k, v in parts.items() if v}
