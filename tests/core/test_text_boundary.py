"""Text no store can hold, on the memory driver and in the JSON form: a lone surrogate or a NUL
is refused typed wherever text crosses the driver boundary, text the library writes is made
storable, and a settle batch is never sunk by one item (tests/pg and tests/redis run the same
cases on the real stores)."""

from __future__ import annotations

import io
import json
import logging
import socket
import sys
from typing import Any

import pytest

from jobs_core.context import JobContext
from jobs_core.errors import DeclarationInvalidError, InputInvalidError, JobsError
from jobs_core.facade import Jobs
from jobs_core.job import JobRegistry, job
from jobs_core.jsonform import check_text, dumps, storable, unstorable
from jobs_core.outbox import OutboxRelease
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_memory import MemoryDriver, MemoryOutbox
from tests.core import text_boundary_cases as cases
from tests.core.support import declare, until
from tests.core.text_boundary_cases import SURROGATE, quick_worker


@pytest.mark.parametrize("bad", [SURROGATE, "\udc00", "\x00"], ids=["high", "low", "nul"])
async def test_every_text_crossing_the_driver_is_refused_typed(bad: str) -> None:
    await cases.every_text_is_refused_before_a_write(MemoryDriver(), bad)


async def test_one_unstorable_value_fails_only_its_own_job() -> None:
    await cases.one_unstorable_value_fails_only_its_own_job(MemoryDriver())


async def test_a_settle_batch_with_one_unstorable_ack_lands_the_others() -> None:
    await cases.a_settle_batch_with_one_unstorable_ack_lands_the_others(MemoryDriver())


async def test_send_event_refuses_unstorable_text() -> None:
    await cases.send_event_refuses_unstorable_text(MemoryDriver())


async def test_a_forged_cursor_naming_an_unstorable_id_is_a_page_error() -> None:
    await cases.a_forged_cursor_naming_an_unstorable_id_is_a_page_error(MemoryDriver())


async def test_a_concurrency_key_no_store_can_hold_fails_its_own_job() -> None:
    await cases.a_concurrency_key_no_store_can_hold_fails_its_own_job(MemoryDriver())


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (SURROGATE, "$"),
        ({"a": [1, f"x{SURROGATE}"]}, ".a[1]"),
        ({f"k{SURROGATE}": 1}, "$"),
        ({"a": {"\udc00": 1}}, ".a"),
        (["\x00"], "[0]"),
    ],
)
def test_dumps_refuses_unstorable_text_naming_its_path(value: Any, path: str) -> None:
    with pytest.raises(InputInvalidError) as info:
        dumps(value)
    assert info.value.detail == path


def test_dumps_keeps_every_storable_character() -> None:
    text = "😀 é \u2028 \ufffd \U0010ffff"
    assert json.loads(dumps({text: text})) == {text: text}


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ('"\\ud83d\\ude00"', False),  # an escaped pair is one character
        ('"\\uD83D\\uDE00"', False),
        ('"\\\\ud83d"', False),  # an escaped backslash, then six plain characters
        ('"😀"', False),
        ('"\\ud83d"', True),
        ('"\\ude00"', True),
        ('"\\ud83dx\\ude00"', True),
        ('"\\ude00\\ud83d"', True),
        ('"\\\\\\ud83d"', True),
        ('{"\\ud83d":1}', True),
        (f'"{SURROGATE}"', True),
    ],
)
def test_check_text_refuses_a_lone_surrogate_raw_or_escaped(text: str, refused: bool) -> None:
    try:
        check_text(text, "t")
    except JobsError as exc:
        assert refused and (exc.code, exc.detail) == ("X_JOB_RECORD_INVALID", "t")
    else:
        assert not refused


def test_storable_replaces_what_no_store_can_hold_and_keeps_the_rest() -> None:
    assert storable(f"a\x00b{SURROGATE}c😀") == "a\\0b\ufffdc😀"
    assert unstorable(storable(f"\x00{SURROGATE}\udc00")) is None
    plain = "nothing to do ☃"
    assert storable(plain) is plain


def test_a_job_or_task_name_no_store_can_hold_is_refused_at_declaration() -> None:
    async def body(input: Any, ctx: JobContext) -> None:
        return None

    for options in ({"name": f"n{SURROGATE}"}, {"name": "n", "queue": "q\x00"}):
        with pytest.raises(DeclarationInvalidError):
            job(body, tenant="none", registry=JobRegistry(), **options)


async def test_an_outbox_release_error_no_store_can_hold_is_refused() -> None:
    box = MemoryOutbox()
    with pytest.raises(JobsError) as info:
        await box.outbox_release(OutboxRelease("t", ("a",), 0, f"e{SURROGATE}"))
    assert (info.value.code, info.value.detail) == ("X_JOB_RECORD_INVALID", "error")


async def test_a_runs_error_text_is_stored_storable_on_every_path() -> None:
    """The library's own text from a user's exception — its message and traceback — is made
    storable, never refused: the attempt is retried as any failure."""
    driver = MemoryDriver()

    class Odd(Exception):
        pass

    def body(input: Any, ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise Odd(f"bad \x00 {SURROGATE}")

    handle = declare(body, name="odd", retry=Retry(attempts=2, base_ms=1, cap_ms=1))
    done = await Jobs(driver).enqueue(handle, {"n": 1})
    worker = quick_worker(driver, [handle])
    await worker.start()
    try:

        async def completed() -> bool:
            row = (await driver.job_get_many([done.id]))[done.id]
            return row.state is JobState.COMPLETED

        await until(completed, within=20)
    finally:
        await worker.stop()
    row = (await driver.job_get_many([done.id]))[done.id]
    error = json.loads(row.last_error or "")
    assert row.attempt == 2
    assert (error["type"], error["message"]) == ("Odd", "bad \\0 \ufffd")
    assert unstorable(error["traceback"]) is None and "bad \\0 \ufffd" in error["traceback"]


async def test_a_worker_on_a_host_whose_name_is_not_utf8_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "host\udcff")
    await cases.a_worker_on_a_host_whose_name_is_not_utf8_works(MemoryDriver())


def test_a_log_line_of_the_jobs_logger_is_writable_to_any_utf8_sink() -> None:
    """An exception's text may hold a lone surrogate: the `jobs` logger's records, message and
    traceback alike, reach a strict UTF-8 stream (a log file, a pipe) written, never as a
    `--- Logging error ---` (nor an unsendable test report)."""
    sink = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    handler = logging.StreamHandler(sink)
    errors: list[BaseException | None] = []
    handler.handleError = lambda record: errors.append(sys.exc_info()[1])  # type: ignore[method-assign]
    log = logging.getLogger("jobs")
    log.addHandler(handler)
    try:
        try:
            raise RuntimeError(f"it broke {SURROGATE}")
        except RuntimeError as exc:
            log.error("jobs.run.failed %s: %s", "j1", exc, exc_info=True)
    finally:
        log.removeHandler(handler)
    sink.flush()
    written = sink.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
    assert errors == []
    assert "jobs.run.failed j1: it broke \ufffd" in written
    assert "RuntimeError: it broke \ufffd" in written
