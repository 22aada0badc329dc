"""`DriverSuite`: the whole parity suite as a pytest base class a driver's test file subclasses.

A driver's parity test is one fixture::

    class TestMyDriverParity(DriverSuite):
        @pytest.fixture
        def driver_factory(self) -> DriverFactory:
            return lambda: MyDriver(url=..., schema=fresh_schema())

The factory must answer a fresh, empty driver each call (the machine makes one per example);
leaving its context must drop whatever it stored. Everything runs synchronously (one event
loop per machine or scenario), so the suite needs no pytest-asyncio.

The state machine runs under the profile `HYPOTHESIS_PROFILE` names (`jobs_core.testing.profiles`:
`default`, `ci`, `nightly`, `debug`). Each run prints its seed; a failing one is replayed with
`pytest --hypothesis-seed=<seed>` under the same profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from hypothesis import seed as use_seed
from hypothesis.stateful import run_state_machine_as_test

from jobs_core.testing.machine import FAMILIES, DriverFactory, check_empty, make_machine
from jobs_core.testing.profiles import selected_profile, suite_settings
from jobs_core.testing.scenarios import SCENARIOS, Scenario


def run_scenario(factory: DriverFactory, scenario: Scenario) -> None:
    """Run one scenario on a fresh driver from `factory` (checked empty), in its own loop."""

    async def go() -> None:
        async with factory() as driver:
            await check_empty(driver)
            await scenario(driver)

    asyncio.run(go())


def _seed_of(config: pytest.Config) -> int:
    """`--hypothesis-seed` when given, else a fresh random seed (printed, so it replays)."""
    given = config.getoption("hypothesis_seed", default=None)
    if given is None:
        return random.SystemRandom().randrange(2**32)
    try:
        return int(given)
    except ValueError:
        # Hypothesis accepts any string as a seed; so do we, through a stable hash.
        return int.from_bytes(str(given).encode()[:8].ljust(8, b"\0"), "big")


def _tally_lines(tally: Counter[str]) -> list[str]:
    return [f"  - {n:6d}  {what}" for what, n in sorted(tally.items())]


@contextlib.contextmanager
def _statistics_to(note: Callable[[str], None] | None, tally: Counter[str]) -> Iterator[None]:
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


def run_machine(
    factory: DriverFactory,
    seed: int,
    *,
    statistics: Callable[[str], None] | None = None,
    families: frozenset[str] = FAMILIES,
) -> None:
    """One state-machine run on `factory`'s drivers under the selected profile and `seed`.

    Prints the seed and what the walks reached (`tally`); a failure carries a note saying how
    to replay it. `statistics`, when given, receives Hypothesis's statistics of the run (rules,
    events, phases) with the tally.
    """
    machine = make_machine(factory, families)
    profile = selected_profile()
    replay = f"replay: HYPOTHESIS_PROFILE={profile} pytest <this test> --hypothesis-seed={seed}"
    print(f"parity state machine: profile {profile}, seed {seed}")
    try:
        with _statistics_to(statistics, machine.tally):
            run_state_machine_as_test(use_seed(seed)(machine), settings=suite_settings())
    except BaseException as exc:
        exc.add_note(replay)
        print(replay)
        raise
    finally:
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(machine.tally.items()))
        print(f"reached: {counts}")


class DriverSuite:
    """Subclass with a `driver_factory` fixture; the random walk and every scenario then run."""

    def test_state_machine(
        self, driver_factory: DriverFactory, request: pytest.FixtureRequest
    ) -> None:
        """Random operation sequences answer exactly as the reference model does."""
        node = request.node

        def note(text: str) -> None:
            # Where Hypothesis's pytest plugin looks for a test's statistics: printed in the
            # summary under `--hypothesis-show-statistics`.
            node.hypothesis_statistics = text

        run_machine(driver_factory, _seed_of(request.config), statistics=note)

    @pytest.mark.parametrize("scenario", sorted(SCENARIOS))
    def test_scenario(self, driver_factory: DriverFactory, scenario: str) -> None:
        """One fixed scenario, on a fresh driver."""
        run_scenario(driver_factory, SCENARIOS[scenario])
