"""Each row's attempt history against the memory semantics (`jobs_core.attempts`): every
claim ends once, in one entry, the entries in claim order with no gap (the last
`ATTEMPT_HISTORY` kept), and a row that is not running has its last claim's entry, `completed`
for a completed row.

    python -m bench.chaos.histories bench/results/raw/chaos-<family>-<backend>-<stamp> ...
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from jobs_core.attempts import ATTEMPT_HISTORY


def history_faults(row: dict[str, Any]) -> list[str]:
    """What in one row's history (`rows.jsonl`'s `attempts`) breaks the rule; empty when it
    keeps it."""
    entries: Sequence[Sequence[Any]] = row.get("attempts") or ()
    claims = int(row["claims"])
    ended = claims - 1 if row["state"] == "running" else claims
    faults = []
    numbers = [int(e[0]) for e in entries]
    want = list(range(max(1, ended - ATTEMPT_HISTORY + 1), ended + 1))
    if numbers != want:
        faults.append(f"claims {numbers} where {want} ended")
    outcomes = [e[2] for e in entries]
    if "completed" in outcomes[:-1]:
        faults.append(f"a completed entry before the last: {outcomes}")
    if row["state"] == "completed" and (not outcomes or outcomes[-1] != "completed"):
        faults.append(f"a completed row whose last entry is {outcomes[-1:]}")
    return faults


def check(rundirs: Iterable[Path]) -> int:
    """Print each run's rows whose history breaks the rule; the count of such rows."""
    bad = 0
    for rundir in rundirs:
        rows = [json.loads(line) for line in (rundir / "rows.jsonl").read_text().splitlines()]
        kinds: Counter[str] = Counter()
        shown = 0
        for row in rows:
            faults = history_faults(row)
            if not faults:
                continue
            bad += 1
            kinds[faults[0].split(" ")[0]] += 1
            if shown < 5:
                shown += 1
                print(
                    f"  {row['id']} {row['name']} {row['state']} claims={row['claims']}: {faults}"
                )
        outcomes = Counter(e[2] for row in rows for e in row.get("attempts") or ())
        print(
            f"{rundir.name}: {len(rows)} rows, {sum(outcomes.values())} entries "
            f"{dict(outcomes)}; rows off the rule: {sum(kinds.values())}"
        )
    return bad


if __name__ == "__main__":
    sys.exit(1 if check(Path(a) for a in sys.argv[1:]) else 0)
