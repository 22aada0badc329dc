"""The parity suite every driver runs: a reference model, a state machine, fixed scenarios.

A driver's test file subclasses `DriverSuite` and gives one `driver_factory` fixture (SPEC §15).
"""

from jobs_core.testing.machine import DriverFactory, ParityError, ParityMachine, make_machine
from jobs_core.testing.model import ReferenceModel
from jobs_core.testing.scenarios import SCENARIOS, Scenario
from jobs_core.testing.suite import DriverSuite, run_scenario

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
