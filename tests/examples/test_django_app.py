"""The Django example through `django.test.Client` on a schema of its own: a sign-up stages its
welcome on Django's connection inside `transaction.atomic()`, the relay publishes it, a worker
runs it; a sign-up that fails at commit leaves neither its member nor its job. Django is set up
once per process (`tests/examples/django_site.py`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from django.test import Client

from examples.django_app import jobs
from jobs_core.states import JobState
from tests.examples.django_site import site_on
from tests.examples.support import ANN, pending, relay_and_work, signed_up, table


@pytest.fixture
def client(schema: str) -> Iterator[Client]:
    """A test client of the site on `schema`."""
    with site_on(schema):
        yield Client()


def test_a_sign_up_stages_its_welcome_and_the_relay_publishes_it(
    schema: str, client: Client
) -> None:
    answer = client.post("/signups", ANN, content_type="application/json")
    assert answer.status_code == 201, answer.content
    signed = answer.json()
    job_id = signed["welcome_job_id"]
    signed_up(schema, "members", jobs.send_welcome, job_id, signed["user_id"])

    done = asyncio.run(relay_and_work(schema, jobs, job_id))
    assert done.state is JobState.COMPLETED, done.last_error
    assert json.loads(done.result_json or "null") == {"sent_to": ANN["email"]}


def test_a_sign_up_that_fails_at_commit_leaves_no_member_and_no_job(
    schema: str, client: Client
) -> None:
    first = client.post("/signups", ANN, content_type="application/json")
    assert first.status_code == 201, first.content
    # The e-mail is checked at commit, after this request's welcome was staged.
    taken = client.post(
        "/signups", {"email": ANN["email"], "name": "Impostor"}, content_type="application/json"
    )
    assert taken.status_code == 409, taken.content
    assert [r.job.id for r in asyncio.run(pending(schema))] == [first.json()["welcome_job_id"]]
    assert table(schema, "members") == [(ANN["email"], ANN["name"])]
