"""Running a parity machine's walks: the seed each run prints and replays, the statistics
Hypothesis shows for it, and the note that says how to replay a failure."""

from __future__ import annotations

import contextlib
import random
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, Final

import pytest
from hypothesis import seed as use_seed
from hypothesis.stateful import run_state_machine_as_test

from jobs_core.testing.compare import PairedMachine
from jobs_core.testing.profiles import selected_profile, suite_settings


def _pool_now() -> Any:
    """Hypothesis's pool of local constants as of now, or None where it keeps none."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        return None
    found = getattr(providers, "_get_local_constants", None)
    if found is None:
        return None
    with warnings.catch_warnings():
        # Hypothesis warns that reading its constants cache at a conftest's import is slow:
        # reading it here, once, is the point.
        warnings.simplefilter("ignore")
        return found()


#: The pool as this module's import found it (a test run imports the suite from its conftest,
#: before collecting any test module, so every run of one checkout finds the same pool).
_POOL_AT_IMPORT: Final = _pool_now()


@contextlib.contextmanager
def steady_constants() -> Iterator[None]:
    """Walks that do not depend on which modules the process imported since the suite.

    Hypothesis (6.13x and later) now and then draws a constant it found in the source of the
    local modules imported so far. One seed then walks one way in a run that collected a web
    app's tests beside the suite and another way alone: a failure would not replay by its seed,
    and a derandomized walk would change with the tests collected beside it. Inside this block
    the pool is the one this module's import found, so a seed walks the same way in every
    process of one checkout. Touches a Hypothesis internal when it is there, nothing when not.
    """
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        yield
        return
    found = getattr(providers, "_get_local_constants", None)
    cache = getattr(getattr(providers, "CONSTANTS_CACHE", None), "cache", None)
    if found is None or _POOL_AT_IMPORT is None:
        yield
        return
    providers._get_local_constants = lambda: _POOL_AT_IMPORT
    # Pools already cached were built from another pool: build them again from this one.
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
) -> None:
    """Run `machine` under the selected profile and `seed`, printing `title` with both and
    what the walks reached; a failure carries a note saying how to replay it."""
    profile = selected_profile()
    replay = f"replay: HYPOTHESIS_PROFILE={profile} pytest <this test> --hypothesis-seed={seed}"
    print(f"{title}: profile {profile}, seed {seed}")
    try:
        with statistics_to(statistics, machine.tally), steady_constants():
            run_state_machine_as_test(use_seed(seed)(machine), settings=suite_settings())
    except BaseException as exc:
        exc.add_note(replay)
        print(replay)
        raise
    finally:
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(machine.tally.items()))
        print(f"reached: {counts}")
