"""The Postgres driver against the parity suite: the same answers as the memory driver."""

import pytest

from jobs_core.testing import DriverFactory, DriverSuite
from tests.pg.conftest import driver_factory_for_suite


class TestPgParity(DriverSuite):
    @pytest.fixture
    def driver_factory(self) -> DriverFactory:
        return driver_factory_for_suite
