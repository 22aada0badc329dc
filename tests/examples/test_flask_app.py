"""The Flask example through its own test client on a schema of its own: a sign-up stages its
welcome in the view's `Session` transaction, the relay publishes it, a worker runs it; a
sign-up that fails at commit leaves neither its user nor its job; the resend view enqueues
with `enqueue_sync`, deduped while its job is live."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from examples.flask_app import jobs
from examples.flask_app.app import create_app
from jobs_core import facade
from jobs_core.states import JobState
from jobs_pg import PgDriver
from tests.examples.support import (
    ANN,
    UNREADABLE_SIGN_UPS,
    jobs_url,
    on_schema,
    pending,
    relay_and_work,
    signed_up,
    table,
)
from tests.pg.conftest import PG_URL


@pytest.fixture
def app(schema: str) -> Iterator[Flask]:
    """The app on `schema`; the jobs client it configures is closed and forgotten after."""
    before = facade._default
    made = create_app(
        {
            "DATABASE_URL": on_schema(PG_URL, schema),
            "UJOBS_DRIVER": jobs_url(schema),
            "JOBS_PG_SCHEMA": schema,
        }
    )
    try:
        yield made
    finally:
        made.extensions["jobs"].close_sync()
        made.extensions["engine"].dispose()
        facade._default = before


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


async def job_row(schema: str, job_id: str) -> Any:
    async with PgDriver(PG_URL, schema=schema, pool_size=1) as driver:
        return (await driver.job_get_many([job_id])).get(job_id)


def test_a_sign_up_stages_its_welcome_and_the_relay_publishes_it(
    schema: str, client: FlaskClient
) -> None:
    answer = client.post("/signups", json=ANN)
    assert answer.status_code == 201, answer.text
    signed = answer.get_json()
    job_id = signed["welcome_job_id"]
    signed_up(schema, "users", jobs.send_welcome, job_id, signed["user_id"])
    assert asyncio.run(job_row(schema, job_id)) is None  # staged, not published

    done = asyncio.run(relay_and_work(schema, jobs, job_id))
    assert done.state is JobState.COMPLETED, done.last_error
    assert json.loads(done.result_json or "null") == {"sent_to": ANN["email"]}


def test_a_sign_up_that_fails_at_commit_leaves_no_user_and_no_job(
    schema: str, client: FlaskClient
) -> None:
    first = client.post("/signups", json=ANN)
    assert first.status_code == 201, first.text
    # The e-mail is checked at commit, after this request's welcome was staged.
    taken = client.post("/signups", json={"email": ANN["email"], "name": "Impostor"})
    assert taken.status_code == 409, taken.text
    assert [r.job.id for r in asyncio.run(pending(schema))] == [first.get_json()["welcome_job_id"]]
    assert table(schema, "users") == [(ANN["email"], ANN["name"])]


def test_the_resend_view_enqueues_at_once_deduped_while_live(
    schema: str, client: FlaskClient
) -> None:
    user_id = client.post("/signups", json=ANN).get_json()["user_id"]
    sent = client.post(f"/users/{user_id}/welcome")
    assert sent.status_code == 202, sent.text
    first = sent.get_json()
    assert first["deduped"] is False
    row = asyncio.run(job_row(schema, first["job_id"]))
    assert row is not None and row.state is JobState.READY
    assert row.input == {"user_id": user_id, "email": ANN["email"]}
    again = client.post(f"/users/{user_id}/welcome").get_json()
    assert again == {"job_id": first["job_id"], "deduped": True}
    assert client.post("/users/999999/welcome").status_code == 404


@pytest.mark.parametrize("body", list(UNREADABLE_SIGN_UPS.values()), ids=list(UNREADABLE_SIGN_UPS))
def test_a_sign_up_that_cannot_be_read_is_a_400_and_stages_nothing(
    schema: str, client: FlaskClient, body: bytes
) -> None:
    """An unreadable sign-up answered 500 (a missing field, a list, a NUL the table refused);
    it is a JSON 400 and nothing is written."""
    answer = client.post("/signups", data=body, content_type="application/json")
    assert answer.status_code == 400, answer.data
    assert "error" in (answer.get_json() or {})
    assert asyncio.run(pending(schema)) == [] and table(schema, "users") == []


def test_a_user_id_past_the_column_is_a_404_not_a_500(schema: str, client: FlaskClient) -> None:
    """Flask's `int` converter takes any digits: an id past Postgres's integer failed in the
    database (a 500); no such user can exist, so it is a 404."""
    assert client.post(f"/users/{10**30}/welcome").status_code == 404
    assert client.post(f"/users/{2**31}/welcome").status_code == 404
