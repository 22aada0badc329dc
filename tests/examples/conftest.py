"""The web-app examples' tests: each on a migrated schema of its own, dropped after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.examples.support import migrated_schema


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh schema holding the jobs' tables and the outbox; the app adds its own there."""
    with migrated_schema() as name:
        yield name
