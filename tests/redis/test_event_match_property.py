"""The Redis event match equals `jobs_core.semantics.event_matches` on generated JSON.

Redis's Lua cannot tell `1` from `1.0` (cjson) nor integers past 2**53, so the driver matches
on canonical lines made in Python (`jobs_redis.match`) and compared as text in Lua
(`lua/includes/match.lua`). Two properties pin that: the canonical text of two values is equal
exactly when `json_equal` holds, and a stored event is found by a wait exactly when
`event_matches` says so — through the real scripts, on a real server and on fakeredis's Lua.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs_core.records import EventRecord, EventWait
from jobs_core.semantics import event_matches, json_equal
from jobs_redis import RedisDriver
from jobs_redis.match import canonical, match_lines
from tests.redis.conftest import factory_for

T0 = 1_800_000_000_000

#: Numbers whose classes json_equal draws finely: ints beside equal floats, 2**53 + 1 beside
#: its nearest double, signed zeros, an overflowed literal, huge integers beside huge floats.
_EDGE_NUMBERS: list[int | float] = [
    0,
    -0.0,
    0.0,
    1,
    1.0,
    -1,
    -1.0,
    1.5,
    2**53,
    2**53 + 1,
    float(2**53),
    10**16,
    1e16,
    2**63,
    float(2**63),
    10**300,
    1e300,
    math.inf,
    -math.inf,
    5e-324,
]

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(_EDGE_NUMBERS),
    st.integers(),
    st.floats(allow_nan=False),
    st.sampled_from(["", "1", "true", "a", "é", "\t", "\n", '"', "\\", "😀", "\u2028"]),
    # No NUL and no lone surrogate: the contract refuses JSON text holding either
    # (`check_text`, before any script), so neither can reach the Lua match.
    st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=4),
)
_keys = st.sampled_from(["a", "b", "1", "é", "a b", "\t", "\n", '"', "😀", ""])
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=3)),
    max_leaves=8,
)


def _twin(value: object) -> list[object]:
    """Values close to `value`: json_equal ones (1 -> 1.0) and near misses (1 -> true, "1")."""
    out: list[object] = [value]
    if isinstance(value, bool):
        out += [int(value), float(value), str(value).lower()]
    elif isinstance(value, int):
        out += [float(value), value + 1, str(value), value == 1]
    elif isinstance(value, float):
        if value.is_integer():
            out += [int(value), -value]
        out += [value * 2, repr(value)]
    elif isinstance(value, list):
        out += [list(reversed(value)), [*value, None], [_twin(v)[1] for v in value]]
    elif isinstance(value, dict):
        out += [{k: _twin(v)[1] for k, v in value.items()}, {**value, "extra": 1}]
    else:
        out += [None, [value]]
    return out


def to_text(value: object) -> str:
    """JSON text of `value`; an infinite float is spelled as an overflowing literal (1e999), the
    one way JSON text decodes to it, and a float keeps its float spelling (1.0, -0.0, 1e+16)."""
    if isinstance(value, float):
        if math.isinf(value):
            return "1e999" if value > 0 else "-1e999"
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(to_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k) + ":" + to_text(v) for k, v in value.items()) + "}"
    return json.dumps(value)


@st.composite
def match_and_data(draw: st.DrawFn) -> tuple[dict[str, object], object]:
    """A data value (mostly an object) and a match that often shares its keys and values."""
    data = draw(st.one_of(st.dictionaries(_keys, _json, max_size=4), _json))
    match: dict[str, object] = {}
    if isinstance(data, dict) and data and draw(st.booleans()):
        for k in draw(st.lists(st.sampled_from(sorted(data)), max_size=3, unique=True)):
            match[k] = draw(st.sampled_from(_twin(data[k])))
    else:
        match = draw(st.dictionaries(_keys, _json, max_size=2))
    return match, data


@given(
    st.tuples(_json, _json)
    | _json.flatmap(lambda v: st.tuples(st.just(v), st.sampled_from(_twin(v))))
)
@settings(max_examples=2_000, deadline=None)
def test_canonical_text_is_json_equal(pair: tuple[object, object]) -> None:
    """Two values share a canonical text exactly when `json_equal` holds (after a JSON round
    trip, as a driver sees them)."""
    a, b = (json.loads(to_text(v)) for v in pair)
    assert (canonical(a) == canonical(b)) == json_equal(a, b), (a, b)


def test_match_lines_hold_no_separator() -> None:
    """A line holds no newline and exactly one tab: the Lua side splits on nothing else."""
    lines = match_lines({"\n\t": "\t\n", "k": {"\n": ["\t"]}, "😀": "\u2028"})
    assert all(line.count("\t") == 1 for line in lines.split("\n"))
    assert len(lines.split("\n")) == 3


@pytest.fixture(params=["real", "fake"])
def loop_driver(request: pytest.FixtureRequest) -> Iterator[tuple[asyncio.Runner, RedisDriver]]:
    """One driver on one event loop for the whole property run (a driver per example would cost
    a connection each)."""
    factory = factory_for(request.param, request)
    with asyncio.Runner() as runner:
        cm: contextlib.AbstractAsyncContextManager[RedisDriver] = factory()
        driver = runner.run(cm.__aenter__())
        try:
            yield runner, driver
        finally:
            runner.run(cm.__aexit__(None, None, None))


@given(case=match_and_data())
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_lua_match_is_event_matches(
    loop_driver: tuple[asyncio.Runner, RedisDriver], case: tuple[dict[str, object], object]
) -> None:
    """`event_find` through the Lua match finds the event exactly when `event_matches` holds."""
    runner, driver = loop_driver
    match, data = case
    match_text, data_text = to_text(match), to_text(data)
    want = event_matches(json.loads(match_text), json.loads(data_text))
    name = f"e{next(_names)}"
    event = EventRecord(name, name, data_text, T0, T0 + 1_000)

    async def go() -> Any:
        await driver.event_publish(event)
        return await driver.event_find(EventWait(name, match_text, T0), T0)

    found = runner.run(go())
    assert (found is not None) == want, (match_text, data_text)
    if found is not None:
        assert found.data_json == data_text


_names = itertools.count()
