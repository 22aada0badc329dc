"""The FastAPI example through its own TestClient (lifespan included) on a schema of its own:
a sign-up from the `async def` endpoint and from the `def` one stages its welcome in the
request's transaction, the relay publishes it, a worker runs it; a sign-up that fails at
commit leaves neither its user nor its job."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from examples.fastapi_app import jobs
from examples.fastapi_app.app import Settings, create_app
from jobs_core.states import JobState
from tests.examples.support import (
    ANN,
    jobs_url,
    on_schema,
    pending,
    relay_and_work,
    signed_up,
    table,
)
from tests.pg.conftest import PG_URL

#: The async endpoint (AsyncSession) and the def endpoint (Session), side by side.
SIGN_UPS = ["/signups", "/signups/sync"]


def client_on(schema: str) -> TestClient:
    settings = Settings(on_schema(PG_URL, schema), jobs_url(schema), jobs_schema=schema)
    return TestClient(create_app(settings))


@pytest.mark.parametrize("path", SIGN_UPS)
def test_a_sign_up_stages_its_welcome_and_the_relay_publishes_it(schema: str, path: str) -> None:
    with client_on(schema) as client:
        answer = client.post(path, json=ANN)
        assert answer.status_code == 201, answer.text
        signed = answer.json()
        job_id = signed["welcome_job_id"]
        signed_up(schema, "users", jobs.send_welcome, job_id, signed["user_id"])
        # Staged, not published: the jobs' store has no such job yet.
        assert client.get(f"/jobs/{job_id}").status_code == 404

        done = asyncio.run(relay_and_work(schema, jobs, job_id))
        assert done.state is JobState.COMPLETED, done.last_error
        seen = client.get(f"/jobs/{job_id}")
        assert seen.status_code == 200, seen.text
        assert seen.json() == {
            "id": job_id,
            "state": "completed",
            "result": {"sent_to": ANN["email"]},
        }


@pytest.mark.parametrize("path", SIGN_UPS)
def test_a_sign_up_that_fails_at_commit_leaves_no_user_and_no_job(schema: str, path: str) -> None:
    with client_on(schema) as client:
        first = client.post(path, json=ANN)
        assert first.status_code == 201, first.text
        # The e-mail is checked at commit, after this request's welcome was staged.
        taken = client.post(path, json={"email": ANN["email"], "name": "Impostor"})
        assert taken.status_code == 409, taken.text
    assert [r.job.id for r in asyncio.run(pending(schema))] == [first.json()["welcome_job_id"]]
    assert table(schema, "users") == [(ANN["email"], ANN["name"])]


@pytest.mark.parametrize("path", SIGN_UPS)
@pytest.mark.parametrize(
    "body",
    [
        b'{"email": "b@example.com", "name": "\\ud800"}',
        b'{"email": "c@example.com", "name": "a\\u0000b"}',
        b'{"email": "", "name": "x"}',
    ],
    ids=["a-lone-surrogate", "a-nul", "empty"],
)
def test_a_sign_up_the_table_cannot_hold_is_a_422_and_stages_nothing(
    schema: str, path: str, body: bytes
) -> None:
    """A name with a NUL or a lone surrogate passed the model and failed in the database: a
    500. It is refused with the model's 422, nothing written."""
    with client_on(schema) as client:
        answer = client.post(path, content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 422, answer.text
    assert asyncio.run(pending(schema)) == [] and table(schema, "users") == []


@pytest.mark.parametrize(
    "job_id", ["a\x00b", "x" * 300, "\ud800"], ids=["nul", "long", "surrogate"]
)
def test_a_job_id_no_store_holds_is_a_404_not_a_500(schema: str, job_id: str) -> None:
    with client_on(schema) as client:
        answer = client.get(f"/jobs/{quote(job_id, errors='surrogatepass')}")
        assert answer.status_code == 404, answer.text
