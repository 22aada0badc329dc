"""`NewJobs`, a batch as columns: the records it reads as, the checks of `job_enqueue_many` on
it (the same refusal, the same first record, as on the list of its records) and the facade's
batches built as one."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import jobs_core.ids as ids_module
from jobs_core.clock import FakeClock
from jobs_core.driver import check_new_jobs
from jobs_core.errors import InputInvalidError, JobsError
from jobs_core.facade import Jobs, build_record, build_records
from jobs_core.ids import FreshIds
from jobs_core.job import JobRegistry, job
from jobs_core.jsonform import MAX_JSON_BYTES, MAX_JSON_DEPTH, dumps, dumps_many
from jobs_core.records import NewJob, NewJobs
from jobs_memory import MemoryDriver
from tests.core.support import T0, new_job

_REG = JobRegistry()


@job(
    name="orgs",
    queue="q",
    idempotency_key=lambda inp: inp["k"],
    tenant=lambda inp: inp["org"],
    registry=_REG,
)
async def orgs(inp: Any, ctx: Any) -> None:
    return None


def _columns(records: list[NewJob], *, dumped: bool = False) -> NewJobs:
    acts = [r.acts_for for r in records]
    return NewJobs(
        records[0],
        [r.id for r in records],
        [r.run_id for r in records],
        [r.idempotency_key for r in records],
        [r.input_json for r in records],
        None if all(a is None for a in acts) else acts,
        _dumped=dumped,
    )


def test_a_batch_reads_as_its_records() -> None:
    records = [
        dataclasses.replace(
            new_job(f"j{i}", f"k{i}", tenant="t"), input_json=f"[{i}]", acts_for=f"o{i}"
        )
        for i in range(5)
    ]
    batch = _columns(records)
    assert len(batch) == 5
    assert list(batch) == records
    assert [batch[i] for i in range(-5, 5)] == records + records
    assert list(batch[1:4]) == records[1:4]
    assert list(batch[::2]) == records[::2]
    assert isinstance(batch[1:4], NewJobs)


def test_columns_of_different_lengths_are_refused() -> None:
    r = new_job("j1", "k1")
    with pytest.raises(ValueError, match="one value per record"):
        NewJobs(r, ["j1", "j2"], ["r1"], ["k1", "k2"], ["{}", "{}"])
    with pytest.raises(ValueError, match="one value per record"):
        NewJobs(r, ["j1"], ["r1"], ["k1"], ["{}"], [None, None])


def test_build_records_are_build_record_of_each_input() -> None:
    clock = FakeClock(T0)
    inputs = [{"k": f"k{i}", "org": f"org{i}é"} for i in range(4)]
    ids = [f"id{i}" for i in range(4)]
    options: dict[str, Any] = {"priority": 7, "delay_ms": 50, "tenant_id": "t", "key": None}
    batch = build_records(orgs, inputs, clock=clock, ids=ids, **options)
    assert isinstance(batch, NewJobs) and batch.dumped
    for got, inp, job_id in zip(batch, inputs, ids, strict=True):
        one = build_record(orgs, inp, clock=clock, id=job_id, **options)
        assert got == dataclasses.replace(one, run_id=got.run_id)
    assert len({r.run_id for r in batch}) == 4


def _refusal(records: Any) -> tuple[str, str | None] | None:
    import asyncio

    async def go() -> tuple[str, str | None] | None:
        async with MemoryDriver() as d:
            try:
                await d.job_enqueue_many(records)
            except JobsError as exc:
                assert await d.job_get_many([f"j{i}" for i in range(5)]) == {}
                return exc.code, exc.detail
            return None

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("at", "field", "value"),
    [
        (0, "id", "a\x00b"),
        (3, "id", ""),
        (3, "run_id", "x" * 201),
        (2, "idempotency_key", "k" * 1025),
        (4, "input_json", "{"),
        (1, "acts_for", ""),
        (3, "id", "é" * 100),  # fine: not ASCII, so checked field by field
        (0, "priority", -1),  # a shared field: refused with the first record
    ],
)
def test_a_bad_record_is_refused_as_in_a_list(at: int, field: str, value: Any) -> None:
    records = [new_job(f"j{i}", f"k{i}") for i in range(5)]
    if field == "priority":
        records = [dataclasses.replace(r, priority=value) for r in records]
    else:
        records[at] = dataclasses.replace(records[at], **{field: value})
    want = _refusal(records)
    assert want is None or want[1] == field
    assert _refusal(_columns(records)) == want


def test_a_second_bad_record_does_not_hide_the_first() -> None:
    records = [new_job(f"j{i}", f"k{i}") for i in range(5)]
    records[1] = dataclasses.replace(records[1], input_json="[")
    records[3] = dataclasses.replace(records[3], id="")
    assert _refusal(_columns(records)) == ("X_JOB_RECORD_INVALID", "input_json")


def test_only_a_dumped_batch_skips_its_json_check() -> None:
    records = [new_job(f"j{i}", f"k{i}") for i in range(3)]
    records[2] = dataclasses.replace(records[2], input_json="NaN")
    assert _refusal(_columns(records)) == ("X_JOB_RECORD_INVALID", "input_json")
    # `dumped` vouches that `dumps` wrote each text: the facade's batches, never a caller's.
    assert _refusal(_columns(records, dumped=True)) is None


def test_only_the_facades_own_ids_are_fresh_and_only_once() -> None:
    """`take_fresh` (a store may skip looking up ids no row can hold): True once for a batch
    whose ids the facade made; False for ids a caller gave, a slice, a batch built by hand,
    and the same batch taken again (a retry may find what its first try wrote)."""
    inputs = [{"k": "a", "org": "o"}, {"k": "b", "org": "o"}]
    made = build_records(orgs, inputs, clock=FakeClock(T0))
    assert made[0:1].take_fresh() is False
    assert made.take_fresh() is True
    assert made.take_fresh() is False
    assert build_records(orgs, inputs, clock=FakeClock(T0), ids=["a", "b"]).take_fresh() is False
    assert _columns([new_job("j", "k")]).take_fresh() is False


async def test_the_facade_refuses_a_whole_batch_for_one_input() -> None:
    async with MemoryDriver() as d:
        jobs = Jobs(d, clock=FakeClock(T0))
        inputs: list[Any] = [{"k": "a", "org": "o"}, {"k": "b", "org": "o"}, {"k": "c"}]
        with pytest.raises(JobsError) as caught:
            await jobs.enqueue_many(orgs, inputs, ids=["a", "b", "c"])
        assert caught.value.code == "X_JOB_TENANT_REQUIRED"
        assert await d.job_get_many(["a", "b", "c"]) == {}
        done = await jobs.enqueue_many(orgs, [*inputs[:2], {"k": "a", "org": "o"}])
        assert [r.deduped for r in done] == [False, False, True]
        assert done[2].id == done[0].id
        assert await jobs.enqueue_many(orgs, []) == []


async def test_a_driver_not_reading_columns_is_handed_a_list_of_records() -> None:
    """`enqueue_columns` False (a third party's driver, the default): `_job_enqueue_many` gets
    the facade's batch as a plain list of `NewJob`, the same records; True: the `NewJobs`."""
    given: list[object] = []

    class Listing(MemoryDriver):
        async def _job_enqueue_many(self, jobs: Any) -> Any:
            given.append(jobs)
            return await super()._job_enqueue_many(list(jobs))

    class Columns(Listing):
        enqueue_columns = True

    inputs = [{"k": "a", "org": "o1"}, {"k": "b", "org": "o2"}]
    for driver, kind in ((Listing(), list), (Columns(), NewJobs)):
        async with driver as d:
            await Jobs(d, clock=FakeClock(T0)).enqueue_many(orgs, inputs, ids=["x", "y"])
            (batch,) = given[-1:]
            assert type(batch) is kind
            assert [(r.id, r.acts_for) for r in batch] == [("x", "o1"), ("y", "o2")]  # type: ignore[attr-defined]


class _Unset:
    """A value with no JSON form."""


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "bad",
    [
        "a\x00b",
        {"k": "\ud83d"},
        {"\udc00": 1},
        _Unset(),
        float("nan"),
        _nested(MAX_JSON_DEPTH + 1),
        "x" * MAX_JSON_BYTES,
    ],
    ids=["nul", "surrogate", "surrogate-key", "no-form", "nan", "deep", "long"],
)
def test_a_batchs_texts_are_each_inputs_dumps_or_none(bad: Any) -> None:
    """`dumps_many` answers `dumps` of each value, or None (`dumps` then refuses one) as soon
    as one of them is a value `dumps` refuses, wherever it stands."""
    good: list[Any] = [
        {"k": "a"},
        ["é", "😀", "\\u0000", 1.5, None, True],
        _nested(MAX_JSON_DEPTH),
        "y" * (MAX_JSON_BYTES // 4 + 1),
        "{[" * 60,
    ]
    assert dumps_many(good) == [dumps(v) for v in good]
    with pytest.raises(InputInvalidError):
        dumps(bad)
    for at in range(len(good) + 1):
        assert dumps_many([*good[:at], bad, *good[at:]]) is None


@pytest.mark.parametrize(
    ("inputs", "code"),
    [
        ([{"k": "a", "org": "o"}, {"k": "b"}, {"k": "c", "org": "o", "v": _Unset()}], "TENANT"),
        ([{"k": "a", "org": "o"}, {"k": "b", "org": "o", "v": _Unset()}, {"k": "c"}], "INPUT"),
        ([{"k": "a", "org": "o"}, {"k": "b", "org": "\x00"}, {"k": "c"}], "INPUT"),
    ],
)
def test_a_batch_raises_the_refusal_of_its_first_bad_input(inputs: list[Any], code: str) -> None:
    """Whether its texts were written at once or one by one: the first input refused raises,
    and its first refusal (its JSON before its tenant)."""
    clock = FakeClock(T0)
    with pytest.raises(JobsError) as one:
        for inp in inputs:
            build_record(orgs, inp, clock=clock)
    with pytest.raises(JobsError) as batch:
        build_records(orgs, inputs, clock=clock)
    assert code in one.value.code
    assert (batch.value.code, batch.value.detail) == (one.value.code, one.value.detail)


@pytest.mark.parametrize(
    "cut",
    [
        slice(None),
        slice(2, 5),
        slice(-3, None),
        slice(-5, -2),
        slice(None, None, -1),
        slice(7, 1, -2),
        slice(3, 3),
        slice(1, 9, 3),
        slice(20, 30),
    ],
)
def test_fresh_ids_read_as_the_list_they_stand_for(cut: slice) -> None:
    """Whatever is read first: the same ids, in position order (and so in sort order)."""
    ids = FreshIds(10)
    first_cut, first_at = ids[cut], ids[-4]
    whole = list(ids)
    assert first_cut == whole[cut] and first_at == whole[-4]
    assert len(ids) == 10 and len(set(whole)) == 10 and whole == sorted(whole)
    assert list(ids) == whole and [ids[i] for i in range(-10, 10)] == whole + whole
    with pytest.raises(IndexError):
        ids[10]


def test_a_batch_is_checked_without_making_its_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """The facade's ids are made as a driver reads them, not before the first write: building
    and checking a batch makes the first record's only (its shared row's)."""
    made: list[str] = []
    new_id = ids_module.new_id

    def counted() -> str:
        made.append(new_id())
        return made[-1]

    monkeypatch.setattr(ids_module, "new_id", counted)
    batch = build_records(
        orgs, [{"k": f"k{i}", "org": "o"} for i in range(50)], clock=FakeClock(T0)
    )
    check_new_jobs(batch)
    assert len(made) <= 2
    assert [r.id for r in batch][:1] == made[:1]
    assert len(made) == 100
