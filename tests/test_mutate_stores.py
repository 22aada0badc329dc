"""scripts/mutate_stores.py lists the mutants it promises, each one edit that still compiles.

A mutant that no longer parses is killed by any call, which would count a syntax error as the
suite's catch: every Lua mutant must load, and every mutant must change its text.
"""

from __future__ import annotations

import importlib
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import lupa
import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.fixture(scope="module")
def sampler() -> ModuleType:
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module("mutate_stores")
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.mark.parametrize(
    ("store", "kinds"),
    [
        ("pg", {"cmp", "filter", "set", "limit", "state", "skip_locked"}),
        ("redis", {"cmp", "drop_write", "limit", "state"}),
    ],
)
def test_every_kind_has_sites(sampler: ModuleType, store: str, kinds: set[str]) -> None:
    found = Counter(m.kind for m in sampler.enumerate_mutants(store))
    assert set(found) == kinds, found


def test_every_mutant_changes_its_text(sampler: ModuleType) -> None:
    for store in ("pg", "redis"):
        texts = sampler.texts(store)
        for m in sampler.enumerate_mutants(store):
            text = texts[m.func]
            assert sampler.apply(store, text, m.kind, m.ordinal, m.variant) != text, m


def test_every_lua_mutant_loads(sampler: ModuleType) -> None:
    load = lupa.LuaRuntime().globals().load

    def error_of(source: str) -> object:
        got = load(source)  # the chunk alone, or (nil, the error)
        return got[1] if isinstance(got, tuple) else None

    texts = sampler.texts("redis")
    assert error_of("if then") is not None  # the check can fail
    for name, text in texts.items():
        assert error_of(text) is None, name
    for m in sampler.enumerate_mutants("redis"):
        mutated = sampler.apply("redis", texts[m.func], m.kind, m.ordinal, m.variant)
        assert error_of(mutated) is None, (m.key, m.what)
