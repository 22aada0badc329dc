"""Running a parity machine's walks: the seed each run prints and replays, the statistics
Hypothesis shows for it, and the note that says how to replay a failure."""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import seed as use_seed
from hypothesis.stateful import run_state_machine_as_test

from jobs_core.testing.compare import PairedMachine
from jobs_core.testing.profiles import selected_profile, suite_settings


@contextlib.contextmanager
def steady_constants() -> Iterator[None]:
    """Walks that do not depend on which modules the process imported.

    Hypothesis (6.13x and later) now and then draws a constant it found in the source of the
    local modules imported so far. One seed would then walk one way in a run that collected a
    web app's tests beside the suite and another way alone, and a failure would not replay by
    its seed. Inside this block Hypothesis finds no local constants at all, so a seed walks the
    same way in every process. (The walks reach their edges by the strategies that aim at them,
    never by a constant.) Touches a Hypothesis internal when it is there, nothing when not.
    """
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:
        yield
        return
    found = getattr(providers, "_get_local_constants", None)
    cache = getattr(getattr(providers, "CONSTANTS_CACHE", None), "cache", None)
    if found is None:
        yield
        return
    none = Constants()
    providers._get_local_constants = lambda: none
    # Pools already cached were built from the modules' constants: build them again without.
    if cache is not None:
        cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = found
        if cache is not None:
            cache.clear()


def seed_of(config: pytest.Config) -> int:
    """`--hypothesis-seed` when given, else a fresh random seed (printed, so it replays)."""
    given = config.getoption("hypothesis_seed", default=None)
    if given is None:
        return random.SystemRandom().randrange(2**32)
    try:
        return int(given)
    except ValueError:
        # Hypothesis accepts any string as a seed; so do we, through a stable hash.
        return int.from_bytes(str(given).encode()[:8].ljust(8, b"\0"), "big")


def statistics_note(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Where a test's walk hands its statistics: shown under `--hypothesis-show-statistics`."""
    node = request.node

    def note(text: str) -> None:
        # Where Hypothesis's pytest plugin looks for a test's statistics.
        node.hypothesis_statistics = text

    return note


def _tally_lines(tally: Counter[str]) -> list[str]:
    return [f"  - {n:6d}  {what}" for what, n in sorted(tally.items())]


@contextlib.contextmanager
def statistics_to(note: Callable[[str], None] | None, tally: Counter[str]) -> Iterator[None]:
    """Hand Hypothesis's statistics of the run (and the walk's tally) to `note`."""
    if note is None:
        yield
        return
    try:
        from hypothesis.statistics import collector, describe_statistics
    except ImportError:  # an internal module: without it, the tally alone
        yield
        note("\n".join(["The walks reached:", *_tally_lines(tally)]))
        return

    def collect(stats: dict[str, object]) -> None:
        text = describe_statistics(stats)  # type: ignore[arg-type]
        note("\n".join([text, "  - The walks reached, in all:", *_tally_lines(tally)]))

    with collector.with_value(collect):  # type: ignore[arg-type]
        yield


def run_walk(
    machine: type[PairedMachine[Any]],
    seed: int,
    *,
    title: str,
    statistics: Callable[[str], None] | None = None,
    family: str = "jobs",
) -> None:
    """Run `machine` under the selected profile (scaled to `family`'s walk) and `seed`,
    printing `title` with both and what the walks reached; a failure carries a note saying how
    to replay it."""
    profile = selected_profile()
    replay = f"replay: HYPOTHESIS_PROFILE={profile} pytest <this test> --hypothesis-seed={seed}"
    print(f"{title}: profile {profile}, seed {seed}")
    try:
        with statistics_to(statistics, machine.tally), steady_constants():
            run_state_machine_as_test(use_seed(seed)(machine), settings=suite_settings(family))
    except BaseException as exc:
        exc.add_note(replay)
        print(replay)
        raise
    finally:
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(machine.tally.items()))
        print(f"reached: {counts}")
