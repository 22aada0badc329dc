"""The parity suite every driver runs: a reference model, a state machine, fixed scenarios.

A driver's test file subclasses `DriverSuite` and gives one `driver_factory` fixture (an outbox
store's, `OutboxSuite` and an `outbox_factory`: `jobs_core.testing.outbox`); the profiles
(`HYPOTHESIS_PROFILE`) ship in `jobs_core.testing.profiles`. See docs/writing-a-driver.md.
"""

import pytest

# Under pytest a failing scenario shows the values it compared, as a test module's assert would;
# the registration must come before the scenarios module is first imported.
pytest.register_assert_rewrite("jobs_core.testing.scenarios")

from jobs_core.testing.machine import (  # noqa: E402 - after the rewrite registration
    DriverFactory,
    DriverNotEmptyError,
    ParityError,
    ParityMachine,
    check_empty,
    make_machine,
)
from jobs_core.testing.model import ReferenceModel  # noqa: E402
from jobs_core.testing.outbox import (  # noqa: E402
    OutboxFactory,
    OutboxHarness,
    OutboxNotEmptyError,
    OutboxSuite,
)
from jobs_core.testing.profiles import (  # noqa: E402
    PROFILES,
    register_profiles,
    suite_settings,
)
from jobs_core.testing.scenarios import SCENARIOS, Scenario  # noqa: E402
from jobs_core.testing.suite import DriverSuite, run_machine, run_scenario  # noqa: E402

__all__ = [
    "PROFILES",
    "SCENARIOS",
    "DriverFactory",
    "DriverNotEmptyError",
    "DriverSuite",
    "OutboxFactory",
    "OutboxHarness",
    "OutboxNotEmptyError",
    "OutboxSuite",
    "ParityError",
    "ParityMachine",
    "ReferenceModel",
    "Scenario",
    "check_empty",
    "make_machine",
    "register_profiles",
    "run_machine",
    "run_scenario",
    "suite_settings",
]
