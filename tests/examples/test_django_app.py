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
from tests.examples.support import (
    ANN,
    UNREADABLE_SIGN_UPS,
    pending,
    relay_and_work,
    signed_up,
    table,
)


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


@pytest.mark.parametrize("body", list(UNREADABLE_SIGN_UPS.values()), ids=list(UNREADABLE_SIGN_UPS))
def test_a_sign_up_that_cannot_be_read_is_a_400_and_stages_nothing(
    schema: str, client: Client, body: bytes
) -> None:
    """An unreadable sign-up answered 500 (the view parsed it bare); it is a 400 and nothing
    is written, neither the member nor its welcome."""
    answer = client.post("/signups", body, content_type="application/json")
    assert answer.status_code == 400, answer.content
    assert "error" in answer.json()
    assert asyncio.run(pending(schema)) == [] and table(schema, "members") == []


def test_a_sign_up_whose_client_went_away_mid_body_is_a_400_and_stages_nothing(
    schema: str,
) -> None:
    """Django raises `UnreadablePostError` for a body the client stopped sending: that was a
    500; it is a 400, and nothing is written."""
    from django.core.handlers.wsgi import WSGIRequest
    from django.test import RequestFactory

    from examples.django_app.views import sign_up

    class Gone:
        def read(self, n: int = -1) -> bytes:
            raise OSError("client went away")

        def readline(self, limit: int = -1) -> bytes:
            return self.read(limit)

    with site_on(schema):
        meta = RequestFactory().post("/signups", ANN, content_type="application/json").META
        meta.update({"wsgi.input": Gone(), "CONTENT_LENGTH": "50"})
        answer = sign_up(WSGIRequest(meta))
    assert answer.status_code == 400, answer.content
    assert asyncio.run(pending(schema)) == [] and table(schema, "members") == []
