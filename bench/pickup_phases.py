"""One pickup's phases, for any system: read from the probes `bench/probe_site/sitecustomize.py`
writes in the worker (`python -m bench.pickup_pairs --probe ...`).

Each job, from its producer's stamp `t`, its enqueue call's return `r` and its body's start `s`,
and the worker's events: the claim is the statement answered last before `s` (its send the
earliest open one of the same label), the wake the first NOTIFY the worker saw after `t` and by
the claim's send (none: the claim was not a wake's). Parts, ms: `enqueue` t→r, `notify` r→the
NOTIFY (negative when the worker saw it before the producer saw its commit), `to_claim` the
NOTIFY→the claim's send, `claim` its send→its answer, `to_body` its answer→s. Read them at a
trickle (the idle phase): under a stream a claim's jobs and NOTIFYs interleave. `tail_<part>`
are `enqueue`, `to_send` (the return to the claim's send), `claim` and `to_body` of the jobs whose
pickup is at or above its p95.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict, deque
from pathlib import Path

PARTS = ("enqueue", "notify", "to_claim", "claim", "to_body")
#: The parts also read for the slowest 5 % of the jobs (`tail_<part>`).
TAIL = ("enqueue", "to_send", "claim", "to_body")


def phases(probe: Path, jobs: list[tuple[float, float, float]]) -> dict[str, list[float]]:
    """Each part of each job's pickup, ms (`jobs`: stamp, return, body start)."""
    notifies: list[float] = []
    claims: list[tuple[float, float]] = []  # (answer, send), by answer
    open_sends: dict[str, deque[float]] = defaultdict(deque)
    for line in probe.read_text().splitlines():
        event, at, *rest = line.split(" ")
        t = float(at)
        label = rest[0] if rest else ""
        if event == "notify":
            notifies.append(t)
        elif event == "send":
            open_sends[label].append(t)
        elif event == "answer" and open_sends[label]:
            claims.append((t, open_sends[label].popleft()))
    notifies.sort()
    claims.sort()
    answers = [a for a, _ in claims]
    out: dict[str, list[float]] = {k: [] for k in (*PARTS, *(f"tail_{k}" for k in TAIL))}
    slow = sorted(s - t for t, _, s in jobs)[int(len(jobs) * 0.95)] if jobs else 0.0
    for t, r, s in jobs:
        i = bisect.bisect_right(answers, s) - 1
        if i < 0:
            continue
        answer, send = claims[i]
        got = {
            "enqueue": (r - t) * 1000,
            "claim": (answer - send) * 1000,
            "to_body": (s - answer) * 1000,
            # The return to the claim's send, however the worker got there (a wake or not).
            "to_send": (send - r) * 1000,
        }
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
