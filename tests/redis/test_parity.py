"""The Redis driver against the shared parity suite, on a real server, fakeredis and a cluster."""

import pytest

from jobs_core.testing import DriverFactory, DriverSuite
from tests.redis.conftest import BACKENDS, factory_for


class TestRedisParity(DriverSuite):
    @pytest.fixture(params=BACKENDS)
    def driver_factory(self, request: pytest.FixtureRequest) -> DriverFactory:
        return factory_for(request.param, request)
