"""Text no store can hold, on Postgres: refused typed before a write wherever it crosses the
driver (the stage of the outbox too), and never sinking the other jobs of a settle batch."""

from __future__ import annotations

import socket

import psycopg
import pytest
from psycopg import sql

from jobs_core.clock import FakeClock
from jobs_core.errors import JobsError
from jobs_core.job import JobRegistry, job
from jobs_core.outbox import OutboxRelease
from jobs_pg import PgDriver, PgOutbox
from jobs_pg.urls import libpq_url
from tests.core import text_boundary_cases as cases
from tests.core.support import T0
from tests.core.text_boundary_cases import SURROGATE
from tests.pg.conftest import PG_URL, admin


@pytest.mark.parametrize("bad", [SURROGATE, "\x00"], ids=["surrogate", "nul"])
async def test_every_text_crossing_the_driver_is_refused_typed(pg: PgDriver, bad: str) -> None:
    await cases.every_text_is_refused_before_a_write(pg, bad)


async def test_one_unstorable_value_fails_only_its_own_job(pg: PgDriver) -> None:
    await cases.one_unstorable_value_fails_only_its_own_job(pg)


async def test_a_settle_batch_with_one_unstorable_ack_lands_the_others(pg: PgDriver) -> None:
    await cases.a_settle_batch_with_one_unstorable_ack_lands_the_others(pg)


async def test_a_batch_the_store_fails_on_one_item_is_sent_item_by_item(pg: PgDriver) -> None:
    await cases.a_batch_the_store_fails_on_one_item_is_sent_item_by_item(pg)


async def test_send_event_refuses_unstorable_text(pg: PgDriver) -> None:
    await cases.send_event_refuses_unstorable_text(pg)


async def test_a_forged_cursor_naming_an_unstorable_id_is_a_page_error(pg: PgDriver) -> None:
    await cases.a_forged_cursor_naming_an_unstorable_id_is_a_page_error(pg)


async def test_a_concurrency_key_no_store_can_hold_fails_its_own_job(pg: PgDriver) -> None:
    await cases.a_concurrency_key_no_store_can_hold_fails_its_own_job(pg)


async def _noop(input: object, ctx: object) -> None:
    return None


async def test_a_stage_refuses_unstorable_text_in_the_callers_transaction(pg_schema: str) -> None:
    """`stage()` with half an emoji in the input (`X_JOB_INPUT_INVALID`) or in the key (`X_JOB_
    RECORD_INVALID`): refused before anything is sent, so the caller's transaction goes on and
    commits its own row alone; a release's error holding one is refused too."""
    handle = job(_noop, name="welcome", tenant="none", registry=JobRegistry())
    box = PgOutbox(PG_URL, schema=pg_schema, clock=FakeClock(T0))
    async with box:
        with psycopg.connect(libpq_url(PG_URL)) as conn:
            with pytest.raises(JobsError) as in_input:
                box.stage(conn, handle, {"email": SURROGATE}, key="k")
            with pytest.raises(JobsError) as in_key:
                box.stage(conn, handle, {"email": "a"}, key=f"k{SURROGATE}")
            conn.execute(
                sql.SQL("CREATE TABLE {}.signups (email text)").format(sql.Identifier(pg_schema))
            )
            conn.commit()
        with pytest.raises(JobsError) as in_error:
            await box.outbox_release(OutboxRelease("t", ("a",), T0, f"e{SURROGATE}"))
        assert await box.outbox_pending(10) == []
    assert (in_input.value.code, in_input.value.detail) == ("X_JOB_INPUT_INVALID", ".email")
    assert (in_key.value.code, in_key.value.detail) == ("X_JOB_RECORD_INVALID", "idempotency_key")
    assert (in_error.value.code, in_error.value.detail) == ("X_JOB_RECORD_INVALID", "error")
    with admin() as conn:
        found = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.signups").format(sql.Identifier(pg_schema))
        ).fetchone()
    assert found == (0,)


async def test_a_worker_on_a_host_whose_name_is_not_utf8_works(
    pg: PgDriver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "host\udcff")
    await cases.a_worker_on_a_host_whose_name_is_not_utf8_works(pg)
