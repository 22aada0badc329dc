"""The outbox store's parity suite: a reference model, a state machine, fixed scenarios.

A store's test file subclasses `OutboxSuite` and gives one `outbox_factory` fixture answering
fresh `OutboxHarness(store, stage)`s. See docs/writing-a-driver.md, "An outbox store".
"""

import pytest

# Under pytest a failing scenario shows the values it compared; registered before the import.
pytest.register_assert_rewrite("jobs_core.testing.outbox.scenarios")

from jobs_core.testing.outbox.harness import (  # noqa: E402 - after the rewrite registration
    OutboxFactory,
    OutboxHarness,
    StageCall,
)
from jobs_core.testing.outbox.machine import (  # noqa: E402
    OutboxMachine,
    OutboxNotEmptyError,
    check_outbox_empty,
    make_outbox_machine,
)
from jobs_core.testing.outbox.model import OutboxModel  # noqa: E402
from jobs_core.testing.outbox.scenarios import OUTBOX_SCENARIOS  # noqa: E402
from jobs_core.testing.outbox.suite import (  # noqa: E402
    OutboxSuite,
    run_outbox_machine,
    run_outbox_scenario,
)

__all__ = [
    "OUTBOX_SCENARIOS",
    "OutboxFactory",
    "OutboxHarness",
    "OutboxMachine",
    "OutboxModel",
    "OutboxNotEmptyError",
    "OutboxSuite",
    "StageCall",
    "check_outbox_empty",
    "make_outbox_machine",
    "run_outbox_machine",
    "run_outbox_scenario",
]
