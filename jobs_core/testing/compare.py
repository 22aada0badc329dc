"""What both parity machines share: answers compared type-exactly, and `PairedMachine`, the
plumbing that runs each call on the side under test and on the model and blames a difference
on the step that made it.

JSON is compared by meaning AND type: `1`, `1.0` and `true` differ (Python's `==` would not
tell them apart), while spacing and key order do not (a driver may store jsonb).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from types import FrameType
from typing import Any, ClassVar, Generic, Protocol, TypeAlias, TypeVar

from hypothesis import event, target
from hypothesis.stateful import RuleBasedStateMachine

from jobs_core.errors import JobsError
from jobs_core.jsonform import utf8_length

T = TypeVar("T")
#: What a machine drives: a driver, or an outbox store with its stage.
S = TypeVar("S")

#: One comparison of the observable state: a name, the model's answer, the side's call.
Check: TypeAlias = tuple[str, Callable[[], object], Callable[[], Coroutine[Any, Any, object]]]


class ParityError(AssertionError):
    """The driver answered differently from the reference model."""


class DriverNotEmptyError(AssertionError):
    """The factory answered a driver that already held rows, pauses or workers."""


def exactly_bytes(prefix: str, cycle: str, size: int) -> str:
    """`prefix` then `cycle`'s characters in turn, exactly `size` UTF-8 bytes long."""
    out, i = prefix, 0
    while utf8_length(out) < size:
        c = cycle[i % len(cycle)]
        out += c if utf8_length(out + c) <= size else "a"
        i += 1
    return out


def _typed(value: object) -> object:
    """A parsed JSON value with every scalar tagged by its type, so `1`, `1.0`, `true` differ."""
    if isinstance(value, dict):
        return ("object", sorted((k, _typed(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("array", [_typed(v) for v in value])
    if value is None:
        return ("null",)
    # bool before int: `True` is an int to Python.
    for kind, t in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if isinstance(value, t):
            return (kind, value)
    raise AssertionError(f"not a JSON value: {value!r}")


def typed_json(text: str) -> object:
    """JSON text as a comparable value: its meaning with every scalar's type (`1` is not `1.0`
    is not `true`), regardless of spacing and key order."""
    return _typed(json.loads(text))


def _canonical_json(text: object) -> object:
    # Drivers may store jsonb: compare what the text means (and its types), not its spelling.
    if not isinstance(text, str):
        return text
    try:
        return ("json", typed_json(text))
    except ValueError:
        return ("not JSON", text)


_JSON_FIELDS = frozenset(
    {
        "input_json",
        "progress_json",
        "result_json",
        "info_json",
        "output_json",
        "data_json",
        "match_json",
        "cursor_json",
    }
)


def comparable(value: object) -> object:
    """`value` as plain data for comparison and display: JSON texts parsed, enums and bools typed.

    Enum and bool answers keep their type, so a driver answering `"dead"` for `JobState.DEAD`
    or `1` for `True` differs (callers compare states with `is`).
    """
    if isinstance(value, JobsError):
        return ("raised", value.code)
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.value)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float):
        # An integer field answered as a float (attempt 1.0) is a different answer.
        return ("float", value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, object] = {"type": type(value).__name__}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            out[f.name] = _canonical_json(v) if f.name in _JSON_FIELDS else comparable(v)
        return out
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [comparable(v) for v in value]
    return value


def difference(got: object, want: object) -> object:
    """The parts of two comparable values that differ, as (driver, model) pairs."""
    if isinstance(got, dict) and isinstance(want, dict):
        missing = object()
        keys = sorted(set(got) | set(want), key=str)
        return {
            k: difference(got.get(k, missing), want.get(k, missing))
            for k in keys
            if got.get(k, missing) != want.get(k, missing)
        }
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        pairs = enumerate(zip(got, want, strict=True))
        return {f"[{i}]": difference(g, w) for i, (g, w) in pairs if g != w}
    return (got, want)


def assert_same(
    what: str,
    got: object,
    want: object,
    context: str = "",
    *,
    side: str = "driver",
    explain: Callable[[object, object], str] | None = None,
) -> None:
    """Raise a `ParityError` naming `what` unless `got` (the `side`'s answer) and `want` (the
    model's) are the same value, JSON compared type-exactly; `explain` words a difference."""
    # Same repr: same types and values field by field (a float shows `1.0`, a state its enum),
    # and the same JSON spelling; only a different repr needs the full, type-exact comparison.
    if type(got) is type(want) and repr(got) == repr(want):
        return
    g, w = comparable(got), comparable(want)
    if g != w:
        detail = repr(difference(g, w)) if explain is None else explain(got, want)
        raise ParityError(f"{context}{what}: ({side}, model) differ: {detail}")


def short(value: object, limit: int = 400) -> str:
    """`value`'s repr, cut to `limit` characters (saying how long it was)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


class Runner(Protocol):
    """Runs a machine's async calls one by one on one event loop."""

    def run(self, coro: Coroutine[Any, Any, T]) -> T: ...

    def close(self) -> None: ...


class PairedMachine(RuleBasedStateMachine, Generic[S]):
    """A walk over the side under test (`S`) and a model, call by call.

    `_open` enters the side and checks it empty (a side that is not runs the walk on the model
    alone and fails at teardown); `_both` makes one call on both and fails on the first
    difference; `_compare_state` compares the whole state after a step and ends it. A failure
    names the step, its rule with the arguments it resolved to, and every call the step made.
    """

    #: What the walks reached, across every example of a bound class.
    tally: ClassVar[Counter[str]] = Counter()
    #: The side under test, as failures name it.
    SIDE: ClassVar[str] = "driver"
    #: The label of the Hypothesis target that steers walks towards the edges.
    EDGES_LABEL: ClassVar[str] = "edges"

    def _open(
        self,
        runner: Runner,
        cm: AbstractAsyncContextManager[S],
        check_empty: Callable[[S], Coroutine[Any, Any, None]],
    ) -> S:
        """Enter `cm` on `runner` and check what it answers empty; that side."""
        self._serial = 0
        #: Steps run so far; the current step's rule (with arguments) and its calls.
        self._steps = 0
        self._rule: str | None = None
        self._calls: list[str] = []
        self._edges = 0
        self._runner = runner
        self._side_cm = cm
        try:
            side = runner.run(_enter(cm))
        except BaseException:
            runner.close()
            raise
        #: Set when the factory's side was not empty. The walk then runs on the model alone
        #: and fails at teardown: failing here, before any draw, would make Hypothesis see an
        #: example that drew less than an earlier one and report `FlakyStrategyDefinition`.
        self._not_empty: DriverNotEmptyError | None = None
        try:
            runner.run(check_empty(side))
        except DriverNotEmptyError as exc:
            self._not_empty = exc
        except BaseException:
            self.teardown()
            raise
        return side

    def teardown(self) -> None:
        try:
            self._runner.run(_exit(self._side_cm))
        finally:
            self._runner.close()
        if self._not_empty is not None:
            raise self._not_empty
        # Steers Hypothesis's target phase towards walks that reach the edges.
        target(float(self._edges), label=self.EDGES_LABEL)

    # -- what the walk reached ----------------------------------------------------------------

    def _note(self, what: str, *, edge: bool = False) -> None:
        """Count one occurrence of something interesting (also a Hypothesis event)."""
        self.tally[what] += 1
        self._edges += edge
        event(what)

    def _begin(self, rule: str, **args: object) -> None:
        """Name the step now running, with the arguments its draws resolved to (a rule another
        one calls keeps the outer rule's name)."""
        if self._rule is None:
            self._rule = f"{rule}({', '.join(f'{k}={short(v, 200)}' for k, v in args.items())})"
            self._note(f"rule {rule}")

    def _rule_from_stack(self) -> None:
        # The outermost frame of a method of this machine is the rule Hypothesis called: the
        # step is named without every rule (a later one too) having to announce itself.
        frame: FrameType | None = sys._getframe(2)
        outer: FrameType | None = None
        while frame is not None:
            # Hypothesis's rule wrappers sit between a rule and a rule it calls: walk them all.
            if frame.f_locals.get("self") is self:
                outer = frame
            frame = frame.f_back
        if outer is None or outer.f_code.co_name == "check_invariants":
            return
        code = outer.f_code
        names = code.co_varnames[1 : code.co_argcount]
        self._begin(code.co_name, **{n: outer.f_locals.get(n) for n in names})

    def _context(self) -> str:
        return f"step {self._steps + 1}, rule {self._rule or '?'}: "

    # -- comparing ----------------------------------------------------------------------------

    def _explain(self, got: object, want: object) -> str:
        """How a failure words a difference between two answers."""
        return repr(difference(comparable(got), comparable(want)))

    def _both(
        self,
        what: str,
        model_call: Callable[[], T],
        side_call: Callable[[], Coroutine[Any, Any, T]],
    ) -> T | JobsError:
        """Run the same call on both; fail unless the answers (or refusal codes) agree."""
        want: T | JobsError
        got: T | JobsError
        if self._rule is None:
            self._rule_from_stack()
        self._calls.append(what)
        try:
            want = model_call()
        except JobsError as exc:
            want = exc
        if self._not_empty is not None:
            return want
        try:
            got = self._runner.run(side_call())
        except JobsError as exc:
            got = exc
        assert_same(what, got, want, self._context(), side=self.SIDE, explain=self._explain)
        return got

    def _compare_state(self, checks: Sequence[Check]) -> None:
        """Compare the state `checks` read on both, blamed on the step that just ran; then
        end that step."""
        calls = ", ".join(self._calls) or f"no {self.SIDE} call"
        context = (
            f"the state after step {self._steps + 1} (rule {self._rule or '?'}, which called "
            f"{calls}) differs — "
        )
        for what, model_call, side_call in checks:
            want, got = model_call(), self._runner.run(side_call())
            assert_same(what, got, want, context, side=self.SIDE, explain=self._explain)
        self._steps += 1
        self._rule = None
        self._calls = []


class WalkLoop:
    """One event loop for a machine's whole walk, run call by call (`asyncio.Runner` installs
    a SIGINT handler on every run, which costs more than a memory driver's call)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def run(self, coro: Awaitable[T]) -> T:
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        """Cancel what the store left running, then close the loop."""
        loop = self._loop
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


async def _enter(cm: AbstractAsyncContextManager[T]) -> T:
    return await cm.__aenter__()


async def _exit(cm: AbstractAsyncContextManager[T]) -> None:
    await cm.__aexit__(None, None, None)
