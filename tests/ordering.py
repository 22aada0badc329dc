"""The suite's longest tests first: each test module, and each long test that can run apart from
its module, is put in order of what it cost in a recorded run (`tests/costs.json`).

xdist's `worksteal` (scripts/test.sh) hands each process a run of the collection and lets an
idle one take the back half of another's: with the longest walks and process tests at the
front, what is left to share at the end is short, and no process waits on one that started a
long walk last (in collection order the Redis walks and the process tests came late). A module
with no recorded cost (a new one) goes first: a guess that it is long costs nothing when it is
not. A test stays in its module's run when it uses a module-, class- or package-scoped fixture
(moved apart, the fixture would be made twice).

`pytest -n 2 --record-costs tests/costs.json` writes the file again from a whole run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

COSTS = Path(__file__).with_name("costs.json")
#: A test recorded at least this long (seconds) is placed on its own when it can be.
APART_S = 1.0
#: Fixture scopes a test shares with its neighbours: it stays in its module's run.
_SHARED = frozenset({"module", "class", "package"})


def recorded(path: Path = COSTS) -> tuple[dict[str, float], dict[str, float]]:
    """Each module's recorded seconds (all its tests, every phase), and each long test's."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, {}
    return dict(data["modules"]), dict(data["tests"])


def _movable(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return all(d.scope not in _SHARED for defs in info.name2fixturedefs.values() for d in defs)


def longest_first(items: list[pytest.Item], path: Path = COSTS) -> list[pytest.Item]:
    """`items` in descending recorded cost (see the module's docstring); ties keep their order."""
    modules, tests = recorded(path)
    if not modules:
        return items
    # A unit is one long test on its own, or the rest of a module in collection order; a
    # module's cost is its recorded total less what its tests placed apart cost.
    units: dict[str, list[pytest.Item]] = defaultdict(list)
    cost: dict[str, float] = {}
    for item in items:
        module = item.nodeid.partition("::")[0]
        key = item.nodeid if item.nodeid in tests and _movable(item) else module
        units[key].append(item)
        cost.setdefault(module, modules.get(module, float("inf")))
        if key != module:
            cost[key] = tests[key]
            cost[module] -= tests[key]
    order = sorted(units, key=lambda k: -cost[k])  # sorted() is stable: ties keep their order
    return [item for key in order for item in units[key]]


class CostRecorder:
    """Sums each test's phases as the reports come in; writes `tests/costs.json`'s form."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self) -> None:
        modules: dict[str, float] = defaultdict(float)
        for nodeid, s in self.seconds.items():
            modules[nodeid.partition("::")[0]] += s
        data: dict[str, Any] = {
            "modules": {m: round(s, 1) for m, s in sorted(modules.items())},
            "tests": {n: round(s, 1) for n, s in sorted(self.seconds.items()) if s >= APART_S},
        }
        self.path.write_text(json.dumps(data, indent=0) + "\n", encoding="utf-8")
