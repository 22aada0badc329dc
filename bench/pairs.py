"""Two trees measured in interleaved pairs (`bench/pg_pair.py`, `bench/enqueue_cost.py`).

Each measurement is a process of its own that runs a script FILE with PYTHONPATH set to the
tree it measures, so a tree older than the script can be measured; the pairs alternate which
side goes first, and a ratio is taken within each pair, where both sides met the same minute
of a shared machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

Row = dict[str, float]


def in_tree(script: str, tree: Path, argv: Sequence[str], env: Mapping[str, str] = {}) -> Row:
    """Run `script argv` on this interpreter with `tree` importable first; the JSON object its
    last line prints."""
    done = subprocess.run(
        [sys.executable, script, *argv],
        env={**os.environ, **env, "PYTHONPATH": str(tree.resolve())},
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"a measurement on {tree} failed:\n{done.stderr[-3000:]}")
    row: Row = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def alternate(
    pairs: int, sides: tuple[str, str], measure: Callable[[str], Row]
) -> dict[str, list[Row]]:
    """`pairs` measurements of each side, the first side first in even pairs, last in odd."""
    seen: dict[str, list[Row]] = {side: [] for side in sides}
    for pair in range(pairs):
        for side in sides if pair % 2 == 0 else sides[::-1]:
            seen[side].append(measure(side))
    return seen


def ratios(before: list[Row], after: list[Row], key: str) -> list[float]:
    """`after / before` of `key`, pair by pair."""
    return [b[key] / a[key] for a, b in zip(before, after, strict=True)]
