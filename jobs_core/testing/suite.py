"""`DriverSuite`: the whole parity suite as a pytest base class a driver's test file subclasses.

A driver's parity test is one fixture::

    class TestMyDriverParity(DriverSuite):
        @pytest.fixture
        def driver_factory(self) -> DriverFactory:
            return lambda: MyDriver(url=..., schema=fresh_schema())

The factory must answer a fresh, empty driver each call (the machine makes one per example);
leaving its context must drop whatever it stored. Everything runs synchronously (one event
loop per machine or scenario), so the suite needs no pytest-asyncio.

Each family is walked apart (`test_state_machine[jobs]`, `[operator]`, `[counters]`,
`[durable]`, `[leases]`, `[tasks]`, `[retention]`, `[flows]`, `[sweeps]`, `[postings]`,
`[consumers]`, `[webhooks]`): its own rules and the job rules it needs, under the profile
`HYPOTHESIS_PROFILE` names (`jobs_core.testing.profiles`: `default`, `ci`, `nightly`, `debug`)
scaled to the family. Each
run prints the contract version it checks (`jobs_core.driver.CONTRACT_VERSION`), the families
the driver declares, and its seed; a failing one is replayed with
`pytest --hypothesis-seed=<seed>` under the same profile.

Only what a driver declares is walked: the core job family always, each optional family when
its `Capabilities` flag is set (a walk of a family the driver does not declare draws only the
job rules it borrows). A scenario runs as far as the declared families take it (see
`run_scenario`), so a driver written for the core family alone passes the whole suite.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from jobs_core.driver import CONTRACT_VERSION, OPTIONAL_FAMILIES
from jobs_core.errors import CapabilityMissingError
from jobs_core.testing.machine import FAMILIES, DriverFactory, check_empty, make_machine
from jobs_core.testing.scenarios import SCENARIOS, Scenario
from jobs_core.testing.walks import run_walk, seed_of, statistics_note


def run_scenario(factory: DriverFactory, scenario: Scenario) -> None:
    """Run one scenario on a fresh driver from `factory` (checked empty), in its own loop.

    The scenario runs as far as the driver's declared families take it: its first call of a
    family the driver does not declare must be refused with `X_DRIVER_CAPABILITY_MISSING`
    naming that family, which ends it there (what it checked before stands). That refusal for
    a family the driver declares fails it, as any other error does.
    """

    async def go() -> None:
        async with factory() as driver:
            await check_empty(driver)
            try:
                await scenario(driver)
            except CapabilityMissingError as exc:
                family = exc.capability
                if family not in OPTIONAL_FAMILIES or getattr(driver.capabilities(), family):
                    raise

    asyncio.run(go())


def declared_families(factory: DriverFactory) -> frozenset[str]:
    """The families a driver from `factory` declares, the core `jobs` family included: what the
    walks and the scenarios cover."""

    async def read() -> frozenset[str]:
        async with factory() as driver:
            return driver.capabilities().declared()

    return asyncio.run(read())


def run_machine(
    factory: DriverFactory,
    seed: int,
    *,
    statistics: Callable[[str], None] | None = None,
    families: frozenset[str] = FAMILIES,
) -> None:
    """One state-machine run on `factory`'s drivers under the selected profile and `seed`,
    walking `families` (one family's walk takes that family's share of the profile's walks;
    several, the job family's).

    Prints the contract version, the families the driver declares, the seed and what the walks
    reached (`tally`); a failure carries a note saying how to replay it. `statistics`, when
    given, receives Hypothesis's statistics of the run (rules, events, phases) with the tally.
    """
    declared = ", ".join(sorted(declared_families(factory)))
    print(f"driver contract v{CONTRACT_VERSION}; the driver declares: {declared}")
    (family,) = families if len(families) == 1 else ("jobs",)
    walked = "" if families == FAMILIES else f" of {', '.join(sorted(families))}"
    run_walk(
        make_machine(factory, families),
        seed,
        title=f"parity state machine{walked}",
        statistics=statistics,
        family=family,
    )


class DriverSuite:
    """Subclass with a `driver_factory` fixture; the random walk and every scenario then run."""

    @pytest.mark.parametrize("family", sorted(FAMILIES))
    def test_state_machine(
        self, driver_factory: DriverFactory, family: str, request: pytest.FixtureRequest
    ) -> None:
        """Random operation sequences of one family (and the job rules it needs) answer
        exactly as the reference model does."""
        run_machine(
            driver_factory,
            seed_of(request.config),
            statistics=statistics_note(request),
            families=frozenset({family}),
        )

    @pytest.mark.parametrize("scenario", sorted(SCENARIOS))
    def test_scenario(self, driver_factory: DriverFactory, scenario: str) -> None:
        """One fixed scenario, on a fresh driver."""
        run_scenario(driver_factory, SCENARIOS[scenario])
