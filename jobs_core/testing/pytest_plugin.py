"""The pytest plugin (entry point `ujobs` in `pytest11`): the `ujobs` fixture for testing your
own jobs through the real worker, on memory or on a real store.

The store is memory unless a driver URL is named — `--ujobs-driver URL`, else the environment's
`UJOBS_TEST_DRIVER`, else the ini option `ujobs_driver` (so CI can switch a checked-in ini
without editing it) — and then each test gets a scratch store of its own on that server (a
migrated Postgres schema, a Redis key prefix), dropped after the test. Pytest loads this module
in every session of an environment that has the package: it imports nothing heavy until a test
asks for the fixture. Disable it with `-p no:ujobs`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

import pytest

if TYPE_CHECKING:
    from jobs_core.testing.harness import UJobs

#: The command-line option, the ini option and the environment variable naming the driver.
OPTION: Final = "--ujobs-driver"
INI: Final = "ujobs_driver"
ENV: Final = "UJOBS_TEST_DRIVER"
DEFAULT_URL: Final = "memory"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ujobs", "ultimat3-jobs: the ujobs fixture")
    group.addoption(
        OPTION,
        dest="ujobs_driver",
        metavar="URL",
        default=None,
        help=(
            f"driver URL for the ujobs fixture (default: ${ENV}, then the ini {INI}, then"
            " memory); each test gets its own Postgres schema or Redis key prefix there"
        ),
    )
    parser.addini(INI, f"driver URL for the ujobs fixture when {OPTION} and ${ENV} are unset")


def driver_url(config: pytest.Config) -> str:
    """The driver URL the `ujobs` fixture uses: the option, else the environment, else the ini,
    else memory."""
    given = config.getoption("ujobs_driver")
    if given:
        return str(given)
    env = os.environ.get(ENV, "").strip()
    if env:
        return env
    ini = str(config.getini(INI) or "").strip()
    return ini or DEFAULT_URL


def pytest_report_header(config: pytest.Config) -> str | None:
    url = driver_url(config)
    if url == DEFAULT_URL:
        return None
    from jobs_core.urls import mask_url

    return f"ujobs fixture driver: {mask_url(url)}"


@pytest.fixture
def ujobs(request: pytest.FixtureRequest) -> Iterator[UJobs]:
    """A fresh store, a `FakeClock` and a client bound as the default for this test, with
    `drain` / `drain_sync` (run the real worker until nothing is ready), `run` / `run_sync` (call
    one body with a real context) and `jobs` / `enqueued` (what was enqueued); see `UJobs`."""
    from jobs_core.testing.harness import ujobs_for

    with ujobs_for(driver_url(request.config)) as harness:
        yield harness
