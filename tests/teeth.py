"""What the teeth tests of both parity suites share: the seeds their walks run from, and a walk
run exactly as a suite runs it under the `ci` profile.

A suite's rules aim at the edges its broken drivers get wrong, so its `ci` walk catches each of
them from most seeds (a driver's CI, whatever its seed, within a run or two). A broken driver
must fail the walk from one of `SEEDS`; a reach test adds up what the walks from all of them
reached. Fixed seeds keep these tests' answers, and their time, the same on every run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping
from typing import Any

from hypothesis import seed as use_seed
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from jobs_core.testing.compare import PairedMachine, ParityError
from jobs_core.testing.walks import steady_constants
from jobs_memory import MemoryDriver

SEEDS = (20261214, 1, 2)

#: Makes a fresh machine class (with a `tally` of its own) for one walk.
MachineMaker = Callable[[], type[PairedMachine[Any]]]


def ci_walk(machine: type[PairedMachine[Any]], walks: settings, seed: int) -> None:
    """Run `machine`'s walks under `walks` from `seed`, drawing no local constants."""
    with steady_constants():
        run_state_machine_as_test(use_seed(seed)(machine), settings=walks)


def first_catch(make: MachineMaker, walks: settings) -> ParityError | None:
    """The divergence found from the first seed of `SEEDS` that finds one; None if none does."""
    for seed in SEEDS:
        try:
            ci_walk(make(), walks, seed)
        except ParityError as exc:
            return exc
    return None


def reached(make: MachineMaker, walks: settings) -> Counter[str]:
    """What the walks from every seed of `SEEDS` reached, added up."""
    total: Counter[str] = Counter()
    for seed in SEEDS:
        machine = make()
        ci_walk(machine, walks, seed)
        total += machine.tally
    return total


def assert_each_listed_once(
    namespace: Mapping[str, object],
    module: str,
    listed: Collection[type],
    helpers: Collection[type] = (),
) -> None:
    """Every broken driver `module` writes (a subclass of the memory driver in `namespace`,
    its globals) but `helpers` is `listed`, once: one written and left out would test nothing."""
    written = {
        v
        for v in namespace.values()
        if isinstance(v, type) and issubclass(v, MemoryDriver) and v.__module__ == module
    }
    assert len(listed) == len(set(listed)), "a broken driver is listed twice"
    assert written - set(helpers) == set(listed), (written - set(helpers)) ^ set(listed)
