"""`OutboxSuite`: the outbox store's parity suite as a pytest base class a store's test subclasses.

A store's parity test is one fixture answering a factory of harnesses::

    class TestMyOutboxParity(OutboxSuite):
        @pytest.fixture
        def outbox_factory(self) -> OutboxFactory:
            return my_fresh_harness  # () -> async context manager of OutboxHarness

The factory must answer a fresh, empty store each call (the machine makes one per example) with
a `stage(records, commit)` that writes through the store's own transaction kind; leaving its
context must drop whatever it stored. The machine runs under the profile `HYPOTHESIS_PROFILE`
names (`jobs_core.testing.profiles`), prints its seed, and replays with `--hypothesis-seed`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from hypothesis import seed as use_seed
from hypothesis.stateful import run_state_machine_as_test

from jobs_core.testing.outbox.harness import OutboxFactory
from jobs_core.testing.outbox.machine import check_outbox_empty, make_outbox_machine
from jobs_core.testing.outbox.scenarios import OUTBOX_SCENARIOS, Scenario
from jobs_core.testing.profiles import selected_profile, suite_settings
from jobs_core.testing.suite import _seed_of, _statistics_to


def run_outbox_scenario(factory: OutboxFactory, scenario: Scenario) -> None:
    """Run one scenario on a fresh harness from `factory` (checked empty), in its own loop."""

    async def go() -> None:
        async with factory() as harness:
            await check_outbox_empty(harness.store)
            await scenario(harness)

    asyncio.run(go())


def run_outbox_machine(
    factory: OutboxFactory, seed: int, *, statistics: Callable[[str], None] | None = None
) -> None:
    """One outbox state-machine run on `factory`'s harnesses under the selected profile and
    `seed`; prints the seed and what the walks reached, and a failure says how to replay it."""
    machine = make_outbox_machine(factory)
    profile = selected_profile()
    replay = f"replay: HYPOTHESIS_PROFILE={profile} pytest <this test> --hypothesis-seed={seed}"
    print(f"outbox state machine: profile {profile}, seed {seed}")
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


class OutboxSuite:
    """Subclass with an `outbox_factory` fixture; the random walk and every scenario then run.

    The test names differ from `DriverSuite`'s, so one class may subclass both.
    """

    def test_outbox_state_machine(
        self, outbox_factory: OutboxFactory, request: pytest.FixtureRequest
    ) -> None:
        """Random stage, claim, publish and release sequences answer exactly as the model."""
        node = request.node

        def note(text: str) -> None:
            node.hypothesis_statistics = text  # shown under --hypothesis-show-statistics

        run_outbox_machine(outbox_factory, _seed_of(request.config), statistics=note)

    @pytest.mark.parametrize("scenario", sorted(OUTBOX_SCENARIOS))
    def test_outbox_scenario(self, outbox_factory: OutboxFactory, scenario: str) -> None:
        """One fixed scenario, on a fresh store."""
        run_outbox_scenario(outbox_factory, OUTBOX_SCENARIOS[scenario])
