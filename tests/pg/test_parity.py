"""The Postgres driver against the parity suite: the same answers as the memory driver."""

from collections.abc import Iterator

import pytest

from jobs_core.testing import DriverFactory, DriverSuite
from tests.pg.conftest import parity_factory


class TestPgParity(DriverSuite):
    @pytest.fixture
    def driver_factory(self, pg_schema: str) -> Iterator[DriverFactory]:
        with parity_factory(pg_schema) as factory:
            yield factory
