"""`check_new_job` and `check_text` answer by their quick paths as by their full checks."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from jobs_core import jsonform
from jobs_core.driver import (
    MAX_ATTEMPTS_LIMIT,
    MAX_KEY_BYTES,
    MAX_NAME_BYTES,
    MAX_TIME_MS,
    _check_new_job_fields,
    check_new_job,
)
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs
from jobs_core.job import JobRegistry, job
from jobs_core.jsonform import check_text, dumps
from jobs_memory import MemoryDriver
from tests.core.support import new_job


class _Str(str):
    pass


_EDGES: list[tuple[str, Any]] = [
    ("id", "x" * MAX_NAME_BYTES),
    ("id", "x" * (MAX_NAME_BYTES + 1)),
    ("id", "é" * (MAX_NAME_BYTES // 2)),
    ("id", "é" * (MAX_NAME_BYTES // 2 + 1)),
    ("id", ""),
    ("id", "a\x00b"),
    ("id", _Str("sub")),
    ("id", 5),
    ("run_id", "r\x00"),
    ("name", "n" * (MAX_NAME_BYTES // 4 + 1)),
    ("name", None),
    ("queue", "☃" * 51),
    ("tenant_id", ""),
    ("tenant_id", "org\x00"),
    ("tenant_id", "o" * 201),
    ("idempotency_key", "k" * MAX_KEY_BYTES),
    ("idempotency_key", "k" * (MAX_KEY_BYTES + 1)),
    ("idempotency_key", "😀" * (MAX_KEY_BYTES // 4 + 1)),
    ("enqueued_by", ""),
    ("enqueued_by", "me\x00"),
    ("input_json", "{"),
    ("input_json", '"\\u0000"'),
    ("input_json", "NaN"),
    ("priority", True),
    ("priority", -1),
    ("priority", 101),
    ("priority", 7.0),
    ("max_attempts", 0),
    ("max_attempts", MAX_ATTEMPTS_LIMIT + 1),
    ("run_at_ms", MAX_TIME_MS + 1),
    ("run_at_ms", -1),
    ("created_at_ms", False),
    ("traceparent", "00-" + "a" * 32 + "-" + "b" * 16 + "-01"),
    ("traceparent", "00-" + "A" * 32 + "-" + "b" * 16 + "-01"),
    ("traceparent", ""),
]


def _answer(check: Any, record: Any) -> tuple[str, str | None] | None:
    try:
        check(record)
    except JobsError as exc:
        return exc.code, exc.detail
    return None


@pytest.mark.parametrize(("field", "value"), _EDGES)
def test_check_new_job_answers_as_the_field_by_field_checks(field: str, value: Any) -> None:
    record = dataclasses.replace(new_job("j1", "k1"), **{field: value})
    assert _answer(check_new_job, record) == _answer(_check_new_job_fields, record)


def test_two_bad_fields_are_named_in_the_same_order() -> None:
    record = dataclasses.replace(new_job("j1", "k1"), input_json="{", priority=-1)
    assert _answer(check_new_job, record) == ("X_JOB_RECORD_INVALID", "input_json")


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("{}", True),
        (" {} ", True),
        ("\t[]\n", True),
        ("1 ", True),
        ('"\\ud83d\\ude00"', True),
        ('"\\ud800"', False),  # a lone surrogate: JSON's grammar allows it, no store can hold it
        ('{"a":1} x', False),
        ('{"a":1}{"b":2}', False),
        ("", False),
        (" ", False),
        ("tru", False),
        ("[1,]", False),
        ("01", False),
        ('"a\x01"', False),
        ('{"a":NaN}', False),
        ("-Infinity", False),
    ],
)
def test_check_text_judges_whole_texts_only(text: str, valid: bool) -> None:
    # The quick scan accepts a value that ends where the text ends; the rest goes to `decode`.
    record = dataclasses.replace(new_job("j1", "k1"), input_json=text)
    answer = _answer(check_new_job, record)
    assert answer == (None if valid else ("X_JOB_RECORD_INVALID", "input_json"))


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts `check_text` reads in full from now on (each one its JSON scan reads)."""
    reads: list[str] = []
    scan = jsonform._scan_end

    def counted(text: str) -> int:
        reads.append(text)
        return scan(text)

    monkeypatch.setattr(jsonform, "_scan_end", counted)
    return reads


async def test_a_lone_enqueue_reads_its_json_text_once_when_dumps_wrote_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The facade's text is `dumps`' own: the driver's check takes that very object as valid.
    reads = _counting_reads(monkeypatch)
    handle = job(
        lambda i, c: None,
        name="one",
        tenant="none",
        idempotency_key=lambda i: i["k"],
        registry=JobRegistry(),
    )
    answer = await Jobs(MemoryDriver()).enqueue(handle, {"k": "a", "n": [1, 2]})
    assert answer.deduped is False
    assert reads == []


def test_only_the_very_text_dumps_made_skips_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _counting_reads(monkeypatch)
    made = dumps({"k": "v"})
    check_text(made, "input_json")
    assert reads == []
    equal = "".join(['{"k":', '"v"}'])  # the same text, another object: read in full
    check_text(equal, "input_json")
    assert reads == [equal]
    # Right after a `dumps`, a text it did not make is judged as ever.
    for bad in ('"\\ud800"', "{", '{"a":NaN}'):
        record = dataclasses.replace(new_job("j1", "k1"), input_json=bad)
        assert _answer(check_new_job, record) == ("X_JOB_RECORD_INVALID", "input_json")
