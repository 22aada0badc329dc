"""`DriverSuite`: the whole parity suite as a pytest base class a driver's test file subclasses.

A driver's parity test is one fixture::

    class TestMyDriverParity(DriverSuite):
        @pytest.fixture
        def driver_factory(self) -> DriverFactory:
            return lambda: MyDriver(url=..., schema=fresh_schema())

The factory must answer a fresh, empty driver each call (the machine makes one per example);
leaving its context must drop whatever it stored. Everything runs synchronously (one event
loop per machine or scenario), so the suite needs no pytest-asyncio.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from jobs_core.testing.machine import DriverFactory, make_machine
from jobs_core.testing.scenarios import SCENARIOS, Scenario


def run_scenario(factory: DriverFactory, scenario: Scenario) -> None:
    """Run one scenario on a fresh driver from `factory`, in its own event loop."""

    async def go() -> None:
        async with factory() as driver:
            await scenario(driver)

    asyncio.run(go())


class DriverSuite:
    """Subclass with a `driver_factory` fixture; the random walk and every scenario then run."""

    def test_state_machine(self, driver_factory: DriverFactory) -> None:
        """Random operation sequences answer exactly as the reference model does."""
        # settings() is the currently loaded profile (HYPOTHESIS_PROFILE in our conftest).
        run_state_machine_as_test(make_machine(driver_factory), settings=settings())

    @pytest.mark.parametrize("scenario", sorted(SCENARIOS))
    def test_scenario(self, driver_factory: DriverFactory, scenario: str) -> None:
        """One fixed scenario, on a fresh driver."""
        run_scenario(driver_factory, SCENARIOS[scenario])
