"""The Postgres driver against the parity suite: the same answers as the memory driver."""

from collections.abc import Iterator

import pytest

from jobs_core.testing import DriverFactory, DriverSuite
from tests.pg.conftest import parity_factory


class TestPgParity(DriverSuite):
    @pytest.fixture
    def driver_factory(self, module_schema: str) -> Iterator[DriverFactory]:
        # The module's one schema: the factory empties every table each time a driver is left,
        # as it does between a walk's examples, so each test starts on an empty schema without
        # a migration and a drop of its own (0.3 s a test, 123 tests).
        with parity_factory(module_schema) as factory:
            yield factory
