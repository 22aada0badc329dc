"""The suite's order (tests/ordering.py): longest recorded first, a module-scoped fixture's
users kept together, a module with no record first; and `--record-costs` writes the record."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
from pathlib import Path
import pytest
from tests.ordering import longest_first

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    items[:] = longest_first(items, Path(__file__).with_name("costs.json"))
"""


def test_longest_first_keeps_shared_fixtures_together_and_guesses_new_modules_long(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_short="def test_a(): pass\ndef test_b(): pass\n",
        test_walks=(
            "import pytest\n"
            "@pytest.fixture(scope='module')\n"
            "def shared(): return 1\n"
            "def test_quick(): pass\n"
            "def test_long(): pass\n"
            "def test_long_shared(shared): pass\n"
            "def test_after(shared): pass\n"
        ),
        test_new="def test_new(): pass\n",
    )
    (pytester.path / "costs.json").write_text(
        json.dumps(
            {
                "modules": {"test_short.py": 2.0, "test_walks.py": 30.0},
                "tests": {
                    "test_walks.py::test_long": 20.0,
                    "test_walks.py::test_long_shared": 5.0,
                    "test_short.py::test_b": 1.5,
                },
            }
        ),
        encoding="utf-8",
    )
    out = pytester.runpytest("--collect-only", "-q")
    order = [line for line in out.outlines if "::" in line]
    assert order == [
        # No record: guessed long, first.
        "test_new.py::test_new",
        "test_walks.py::test_long",
        # What is left of the module (30 - 20), its module-scoped fixture's users together.
        "test_walks.py::test_quick",
        "test_walks.py::test_long_shared",
        "test_walks.py::test_after",
        "test_short.py::test_b",
        "test_short.py::test_a",
    ], out.outlines


def test_record_costs_writes_each_module_and_each_long_test(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(
        "from tests.conftest import pytest_addoption, pytest_configure  # noqa: F401\n"
    )
    pytester.makepyfile(
        test_timed="import time\ndef test_slow(): time.sleep(1.05)\ndef test_fast(): pass\n"
    )
    pytester.runpytest("--record-costs", "costs.json").assert_outcomes(passed=2)
    record = json.loads((pytester.path / "costs.json").read_text(encoding="utf-8"))
    assert list(record["modules"]) == ["test_timed.py"]
    assert record["modules"]["test_timed.py"] >= 1.0
    assert list(record["tests"]) == ["test_timed.py::test_slow"]
