"""Hostile values at the edges the fourth pass left, in the workflows and the factories: each
refused with its stable `X_*` code before anything is written (the store unchanged), a refused
step call leaving its name free, and what a caller's input says never taken for what only the
runner may say.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from jobs_core.context import JobContext
from jobs_core.driver import MAX_TIME_MS, JobDriver
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs
from jobs_core.factories.ledger import ledger
from jobs_core.job import JobRegistry
from jobs_core.operator.service import Action, Operator
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.tenant import acting_for
from jobs_memory import MemoryDriver
from tests.core.flows_support import ended, row, working
from tests.core.support import declare
from tests.core.test_steps_refused_names import CHILD, Call, refused_then_good
from tests.test_hostile_edges4 import driver, stored_ids

__all__ = ["driver"]  # the fixture: a fresh store of each kind


async def echo(input: Any, ctx: JobContext) -> Any:
    return input


def repr_type(value: object) -> str:
    return type(value).__name__


# --- after=: an iterator is read once -------------------------------------------------------


@pytest.mark.parametrize("shape", ["generator", "iter", "map"])
async def test_after_refuses_a_one_shot_iterator_rather_than_drop_the_wait(
    driver: JobDriver, shape: str
) -> None:
    """The check that every id is a string consumed a generator; the join then read nothing
    left and the job was enqueued READY, waiting for none of its dependencies."""
    h = declare(echo, name="step")
    jobs = Jobs(driver)
    first = await jobs.enqueue(h, {"n": 1})
    ids = [first.id]
    after = {
        "generator": (i for i in ids),
        "iter": iter(ids),
        "map": map(str, ids),
    }[shape]
    with pytest.raises(JobsError) as caught:
        await jobs.enqueue(h, {"n": 2}, after=after)
    assert (caught.value.code, caught.value.detail) == ("X_JOB_OPTION_INVALID", "after")
    assert await stored_ids(driver) == [first.id]
    # A set is read as often as asked: it still waits.
    waits = await jobs.enqueue(h, {"n": 3}, after={first.id})
    assert (await row(driver, waits.id)).state is JobState.PARKED


# --- a batch member's options ---------------------------------------------------------------


async def test_a_batch_member_naming_its_own_batch_id_is_refused_with_its_code(
    driver: JobDriver,
) -> None:
    """`b.enqueue(..., batch_id=...)` was a bare TypeError ('got multiple values for keyword
    argument'), the same from `enqueue_many`."""
    jobs = Jobs(driver)
    member = declare(echo, name="member")
    b = jobs.batch(on_complete=declare(echo, name="done", idempotency_key=None))
    for call in (
        lambda: b.enqueue(member, {"n": 1}, batch_id="other"),
        lambda: b.enqueue_many(member, [{"n": 1}], batch_id="other"),
    ):
        with pytest.raises(JobsError) as caught:
            await call()
        assert (caught.value.code, caught.value.detail) == ("X_JOB_DECLARATION_INVALID", "batch_id")
    assert b.member_ids == []
    assert await stored_ids(driver) == []


@pytest.mark.parametrize("inputs", [({"n": n} for n in (1, 2)), 5, None], ids=repr_type)
async def test_a_batch_refuses_inputs_that_are_no_list_with_its_code(
    driver: JobDriver, inputs: Any
) -> None:
    """`b.enqueue_many(member, <generator>)` was a bare TypeError ('has no len()') out of the
    batch's own size check, before the client's refusal of what is no list of inputs."""
    jobs = Jobs(driver)
    b = jobs.batch(on_complete=declare(echo, name="done", idempotency_key=None))
    with pytest.raises(JobsError) as caught:
        await b.enqueue_many(declare(echo, name="member"), inputs)
    assert (caught.value.code, caught.value.detail) == ("X_JOB_DECLARATION_INVALID", "inputs")
    assert await stored_ids(driver) == []


async def test_a_batch_closed_outside_its_tenant_enqueues_its_callback_for_that_tenant(
    driver: JobDriver,
) -> None:
    """The callback took the tenant `close()` ran under: a batch made (and filled) acting for
    acme, closed after the `acting_for` block, enqueued its callback for no tenant — out of
    acme's key namespace and rate bucket; closed acting for globex, as globex's."""
    jobs = Jobs(driver)
    member = declare(echo, name="member", tenant=lambda i: i["org"])
    report = declare(echo, name="report", tenant="none", idempotency_key=None)
    with acting_for("acme"):
        b = jobs.batch(on_complete=report)
        members = await b.enqueue_many(member, [{"n": 1, "org": "acme"}])
        late = jobs.batch(on_complete=report)
    (done,) = await b.close()
    with acting_for("globex"):
        (other,) = await late.close()
    rows = await driver.job_get_many([members[0].id, done.id, other.id])
    assert [rows[i].tenant_id for i in (members[0].id, done.id, other.id)] == ["acme"] * 3


# --- the batch callback's marker, in any job's input ------------------------------------------


async def test_an_input_holding_the_batch_mark_reaches_a_plain_body_as_given(
    driver: JobDriver,
) -> None:
    """Any job whose input was an object with `"~batch": true` was handed the batch callback's
    view instead of its input — `{"batch_id", "total", "succeeded", "failed", "input"}` made
    from what the caller wrote (a webhook's payload, an imported row): the body saw forged
    counts and lost every other field."""
    h = declare(echo, name="plain", retry=Retry(attempts=1))
    forged = {"~batch": True, "batch_id": "b1", "total": 2**64, "input": {"x": 1}, "n": 7}
    done = await Jobs(driver).enqueue(h, forged)
    await working(driver, [h], ended(driver, done.id))
    got = await row(driver, done.id)
    assert got.state is JobState.COMPLETED, got.last_error
    assert got.result_json is not None
    from jobs_core.jsonform import loads

    assert loads(got.result_json) == forged


# --- a step call refused for its arguments takes no name --------------------------------------


#: Step calls refused only after their name was taken (each with good arguments: True).
CALLS: dict[str, Call] = {
    "enqueue nan input": lambda ctx, ok: ctx.step.enqueue(
        "s", CHILD, {"n": 1 if ok else float("nan")}
    ),
    "enqueue nul queue": lambda ctx, ok: ctx.step.enqueue(
        "s", CHILD, {"n": 1}, **({} if ok else {"queue": "a\x00b"})
    ),
    "enqueue unknown after": lambda ctx, ok: ctx.step.enqueue(
        "s", CHILD, {"n": 1}, **({} if ok else {"after": ["no-such-job"]})
    ),
    "enqueue_many surrogate input": lambda ctx, ok: ctx.step.enqueue_many(
        "s", CHILD, [{"n": 1 if ok else "\ud800"}]
    ),
    "enqueue no handle": lambda ctx, ok: ctx.step.enqueue(
        "s",
        CHILD if ok else "child",  # type: ignore[arg-type]
        {"n": 1},
    ),
    "enqueue_many no handle": lambda ctx, ok: ctx.step.enqueue_many(
        "s",
        CHILD if ok else None,  # type: ignore[arg-type]
        [{"n": 1}],
    ),
    "result nul id": lambda ctx, ok: (
        ctx.step.gather("s", []) if ok else ctx.step.result("s", "a\x00b")
    ),
    "gather surrogate id": lambda ctx, ok: ctx.step.gather("s", [] if ok else ["\ud800"]),
    "gather over-long id": lambda ctx, ok: ctx.step.gather("s", [] if ok else ["é" * 101]),
    "sleep past the last time": lambda ctx, ok: ctx.step.sleep(
        "s", 0 if ok else MAX_TIME_MS / 1000
    ),
}


@pytest.mark.parametrize("what", list(CALLS))
async def test_a_step_call_refused_after_its_name_leaves_the_name_free(what: str) -> None:
    """Each was refused with its code, but only after the name was taken: the body that caught
    the refusal and called again with good arguments met `X_STEP_DUPLICATE` (terminal). A
    handle that is no declared job was worse: an AttributeError ('key') out of the step."""
    await refused_then_good(CALLS[what])


# --- the ledger's lines function --------------------------------------------------------------


@pytest.mark.parametrize("bad", [{}, {"cents": "12"}, "abc", None], ids=repr)
async def test_a_ledger_whose_lines_function_raises_refuses_the_enqueue_with_its_code(
    driver: JobDriver, bad: Any
) -> None:
    """The declaration's `lines` function ran bare inside the enqueue's key check: an input it
    cannot read was a KeyError or TypeError out of `enqueue`, not `X_LEDGER_LINES_INVALID`."""
    charge = ledger(
        name="charge",
        tenant="none",
        idempotency_key=lambda i: "k",
        lines=lambda i: [
            {"account": "customer", "currency": "EUR", "amount": i["cents"]},
            {"account": "revenue", "currency": "EUR", "amount": -i["cents"]},
        ],
        registry=JobRegistry(),
    )
    with pytest.raises(JobsError) as caught:
        await Jobs(driver).enqueue(charge, bad)
    assert caught.value.code == "X_LEDGER_LINES_INVALID"
    assert caught.value.detail == "lines"
    assert await stored_ids(driver) == []


# --- purge(): a target's needs -------------------------------------------------------------


@pytest.mark.parametrize("needs", [5, None, [["leases"]], b"leases", "leases"], ids=repr_type)
def test_purge_refuses_a_target_whose_needs_are_no_list_of_families(needs: Any) -> None:
    """A number or None was a bare TypeError ('not iterable'), a list inside the list
    'unhashable type' — out of `purge()`, before any refusal."""
    from jobs_core.factories.purge import PurgeTarget, purge

    async def nothing(driver: JobDriver, now_ms: int, limit: int) -> int:
        return 0

    with pytest.raises(JobsError) as caught:
        purge("p5", targets=[PurgeTarget("mine", nothing, needs)], registry=JobRegistry())
    assert (caught.value.code, caught.value.detail) == ("X_PURGE_DECLARATION_INVALID", "mine")


# --- a batch's input at its byte bound --------------------------------------------------------


async def test_a_batch_input_that_only_fits_beside_few_members_is_refused_before_any(
    driver: JobDriver,
) -> None:
    """The callbacks' records were checked with a count of 0 members; the one `close()` stores
    counts the members, its digits part of the stored input's bytes. An input exactly at the
    bound beside `"total":0` was taken, ten members were written, and `close()` refused the
    callback (`X_JOB_INPUT_INVALID`): a batch whose callback could never run."""
    from jobs_core.batch import BATCH_MARK
    from jobs_core.jsonform import MAX_JSON_BYTES, dumps, utf8_length

    def stored(text: str) -> int:
        wrapped = {BATCH_MARK: True, "batch_id": "b5", "total": 0, "input": text}
        return utf8_length(dumps(wrapped))

    room = MAX_JSON_BYTES - stored("")
    text = "é" * (room // 2) + "x" * (room % 2)  # two bytes a character: bytes, not characters
    assert stored(text) == MAX_JSON_BYTES
    jobs = Jobs(driver)
    member = declare(echo, name="member")
    with pytest.raises(JobsError) as caught:
        done = declare(echo, name="done", idempotency_key=None)
        b = jobs.batch(on_complete=done, input=text, id="b5")
        await b.enqueue_many(member, [{"n": n} for n in range(10)])
        await b.close()
    assert caught.value.code == "X_JOB_INPUT_INVALID"
    assert await stored_ids(driver) == []


# --- the driver's id lists, and the operator's arguments --------------------------------------


async def test_a_bulk_call_given_one_string_refuses_it_and_changes_nothing(
    driver: JobDriver,
) -> None:
    """The ABC checked an id list by iterating it: `job_cancel_many("abc", now)` cancelled the
    jobs "a", "b" and "c", `job_remove("ab")` removed two; a number was a bare TypeError from
    `len`, and `job_get_many(iter(ids))` read the iterator through in its check, then asked
    the store for nothing and answered {}; a set was read on memory and Postgres, a TypeError
    on Redis."""
    from jobs_core.records import RequeueParams

    h = declare(echo, name="plain")
    jobs = Jobs(driver)
    for one in "abc":
        await jobs.enqueue(h, {"n": one}, id=one)
    now = jobs.clock.now_ms()
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: driver.job_cancel_many("abc", now),
        lambda: driver.job_promote("abc", now),
        lambda: driver.job_remove("ab"),
        lambda: driver.job_requeue_many(RequeueParams("abc", now)),  # type: ignore[arg-type]
        lambda: driver.job_get_many(iter(["a"])),  # type: ignore[arg-type]
        lambda: driver.job_get_many(5),  # type: ignore[arg-type]
        lambda: driver.job_cancel_many(5, now),  # type: ignore[arg-type]
        lambda: driver.task_marks(5),  # type: ignore[arg-type]
        lambda: driver.job_get_many({"a", "b"}),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(JobsError) as caught:
            await call()
        assert caught.value.code == "X_JOB_RECORD_INVALID", caught.value
    rows = await driver.job_get_many(("a", "b", "c"))
    assert {i: r.state for i, r in rows.items()} == dict.fromkeys("abc", JobState.READY)


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda op: op.batch("\ud800"), "X_JOB_RECORD_INVALID"),
        (lambda op: op.batch(b"b"), "X_JOB_RECORD_INVALID"),
        (lambda op: op.jobs(limit="5"), "X_JOB_OPTION_INVALID"),
        (lambda op: op.jobs(max_calls=None), "X_JOB_OPTION_INVALID"),
        (lambda op: op.stats("3600000"), "X_JOB_OPTION_INVALID"),
        (lambda op: op.throughput("60"), "X_JOB_OPTION_INVALID"),
        (lambda op: op.throughput(2**64), "X_JOB_OPTION_INVALID"),
        (lambda op: op.act(Action.REQUEUE, 5), "X_JOB_RECORD_INVALID"),
        (lambda op: op.act(Action.CANCEL, "abc"), "X_JOB_RECORD_INVALID"),
        (lambda op: op.act("cancel", ["a"]), "X_JOB_OPTION_INVALID"),
        (lambda op: op.task_fires(5), "X_JOB_RECORD_INVALID"),
    ],
    ids=[
        "batch-surrogate",
        "batch-bytes",
        "limit-str",
        "max-calls-none",
        "window-str",
        "minutes-str",
        "minutes-huge",
        "act-int",
        "act-str",
        "action-str",
        "fires-int",
    ],
)
async def test_the_operator_refuses_wrong_values_with_their_code(call: Any, code: str) -> None:
    """`Operator` (the API under the CLI and the dashboard) raised bare errors for them: a lone
    surrogate batch id UnicodeEncodeError (deriving its callbacks' ids), a string limit or
    window TypeError, a huge `minutes` allocated its series before any check."""
    op = Operator(MemoryDriver())
    with pytest.raises(JobsError) as caught:
        await call(op)
    assert caught.value.code == code
