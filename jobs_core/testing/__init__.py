"""The parity suite every driver runs: a reference model, a state machine, fixed scenarios; and
the `ujobs` pytest fixture's harness (`UJobs`) for testing your own jobs.

A driver's test file subclasses `DriverSuite` and gives one `driver_factory` fixture (an outbox
store's, `OutboxSuite` and an `outbox_factory`: `jobs_core.testing.outbox`); the profiles
(`HYPOTHESIS_PROFILE`) ship in `jobs_core.testing.profiles`. See docs/writing-a-driver.md.

Names are imported on first use: pytest loads our plugin (`jobs_core.testing.pytest_plugin`)
in every session of an environment that has this package, and that import must not need
Hypothesis, which only the parity suite uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import pytest

# Under pytest a failing scenario shows the values it compared, as a test module's assert would;
# the registration must come before the scenarios module is first imported.
pytest.register_assert_rewrite("jobs_core.testing.scenarios")

if TYPE_CHECKING:
    from jobs_core.testing.harness import RunError, RunOutcome, UJobs, ujobs_for
    from jobs_core.testing.machine import (
        DriverFactory,
        DriverNotEmptyError,
        ParityError,
        ParityMachine,
        check_empty,
        make_machine,
    )
    from jobs_core.testing.model import ReferenceModel
    from jobs_core.testing.outbox import (
        OutboxFactory,
        OutboxHarness,
        OutboxNotEmptyError,
        OutboxSuite,
    )
    from jobs_core.testing.profiles import PROFILES, register_profiles, suite_settings
    from jobs_core.testing.scenarios import SCENARIOS, Scenario
    from jobs_core.testing.suite import DriverSuite, run_machine, run_scenario

#: Each public name and the module that defines it.
_HOMES = {
    "PROFILES": "profiles",
    "SCENARIOS": "scenarios",
    "DriverFactory": "machine",
    "DriverNotEmptyError": "machine",
    "DriverSuite": "suite",
    "OutboxFactory": "outbox",
    "OutboxHarness": "outbox",
    "OutboxNotEmptyError": "outbox",
    "OutboxSuite": "outbox",
    "ParityError": "machine",
    "ParityMachine": "machine",
    "ReferenceModel": "model",
    "RunError": "harness",
    "RunOutcome": "harness",
    "Scenario": "scenarios",
    "UJobs": "harness",
    "check_empty": "machine",
    "make_machine": "machine",
    "register_profiles": "profiles",
    "run_machine": "suite",
    "run_scenario": "suite",
    "suite_settings": "profiles",
    "ujobs_for": "harness",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


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
    "RunError",
    "RunOutcome",
    "Scenario",
    "UJobs",
    "check_empty",
    "make_machine",
    "register_profiles",
    "run_machine",
    "run_scenario",
    "suite_settings",
    "ujobs_for",
]
