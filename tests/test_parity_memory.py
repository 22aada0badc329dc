"""The memory driver against the parity suite: the reference semantics pin themselves."""

import pytest

from jobs_core.testing import DriverFactory, DriverSuite
from jobs_memory import MemoryDriver


class TestMemoryParity(DriverSuite):
    @pytest.fixture
    def driver_factory(self) -> DriverFactory:
        return MemoryDriver
