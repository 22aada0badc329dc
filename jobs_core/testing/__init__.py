"""The parity suite every driver runs: a reference model, a state machine, fixed scenarios.

A driver's test file subclasses `DriverSuite` and gives one `driver_factory` fixture (SPEC §15).
"""

import pytest

# Under pytest a failing scenario shows the values it compared, as a test module's assert would;
# the registration must come before the scenarios module is first imported.
pytest.register_assert_rewrite("jobs_core.testing.scenarios")

from jobs_core.testing.machine import (  # noqa: E402 - after the rewrite registration
    DriverFactory,
    ParityError,
    ParityMachine,
    make_machine,
)
from jobs_core.testing.model import ReferenceModel  # noqa: E402
from jobs_core.testing.scenarios import SCENARIOS, Scenario  # noqa: E402
from jobs_core.testing.suite import DriverSuite, run_scenario  # noqa: E402

__all__ = [
    "SCENARIOS",
    "DriverFactory",
    "DriverSuite",
    "ParityError",
    "ParityMachine",
    "ReferenceModel",
    "Scenario",
    "make_machine",
    "run_scenario",
]
