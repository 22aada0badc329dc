"""`webhook_receiver()` on Flask (its test client) and Django (`django.test.Client`), on memory,
Postgres and Redis: the same answers as on Starlette — a job before the 200, a redelivery
deduped, hostile deliveries refused in small JSON with nothing stored — with the verify and
the enqueue run on the jobs client's own loop from a sync view."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import path
from flask import Flask

from jobs_core import facade
from jobs_core.errors import WebhookBodyTooLargeError
from jobs_core.facade import Jobs
from jobs_core.factories.webhooks import WebhookReceiver, receiver_django, receiver_flask
from jobs_core.urls import driver_from_url
from tests.examples.django_site import django_set_up
from tests.webhooks.support import (
    MARKER,
    MAX_BYTES,
    ORG,
    all_ids,
    event_body,
    hostile,
    receiver,
    refused,
    sign,
    store,
)

#: `post(body, headers)` -> (status, JSON answer, answer text).
Post = Callable[[bytes, dict[str, str]], tuple[int, Any, str]]


@contextmanager
def flask_site(hook: WebhookReceiver, jobs: Jobs | None) -> Iterator[Post]:
    app = Flask(__name__)
    app.add_url_rule("/hooks/acme", view_func=receiver_flask.view(hook, jobs), methods=["POST"])
    client = app.test_client()

    def post(body: bytes, headers: dict[str, str]) -> tuple[int, Any, str]:
        answer = client.post("/hooks/acme", data=body, headers=headers)
        return answer.status_code, answer.get_json(), answer.get_data(as_text=True)

    yield post


def urlconf(view: Any) -> ModuleType:
    """A URLconf of one route, as a module (Django caches resolvers by it)."""
    urls = ModuleType("receiver_urls")
    urls.urlpatterns = [path("hooks/acme", view)]  # type: ignore[attr-defined]
    return urls


@contextmanager
def django_site(hook: WebhookReceiver, jobs: Jobs | None) -> Iterator[Post]:
    django_set_up()
    urls = urlconf(receiver_django.view(hook, jobs))
    client = Client()

    def post(body: bytes, headers: dict[str, str]) -> tuple[int, Any, str]:
        rest = {k: v for k, v in headers.items() if k != "content-type"}
        kind = headers.get("content-type", "application/octet-stream")
        answer = client.post("/hooks/acme", body, content_type=kind, headers=rest)
        return answer.status_code, json.loads(answer.content), answer.content.decode()

    with override_settings(ROOT_URLCONF=urls):
        yield post


SITES = {"flask": flask_site, "django": django_site}


@pytest.fixture(params=["memory", "pg", "redis"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    with store(request.param) as made:
        yield made


@pytest.fixture
def jobs(url: str) -> Iterator[Jobs]:
    made = Jobs(driver_from_url(url), enqueue_retry_s=0)
    try:
        yield made
    finally:
        made.close_sync()


def ids(jobs: Jobs) -> list[str]:
    return jobs._run_sync(all_ids(jobs.driver))


@pytest.mark.parametrize("site", SITES)
def test_a_verified_delivery_is_a_job_before_the_200_and_a_redelivery_is_deduped(
    site: str, jobs: Jobs
) -> None:
    hook = receiver()
    body = event_body()
    with SITES[site](hook, jobs) as post:
        status, first, text = post(body, sign(body, "msg_1"))
        assert status == 200 and first == {
            "job_id": hook.job_id_for("msg_1", ORG),
            "deduped": False,
        }, text
        job = jobs._run_sync(jobs.driver.job_get_many([first["job_id"]]))[first["job_id"]]
        assert (job.tenant_id, job.idempotency_key) == (ORG, "msg_1")
        assert json.loads(job.input_json)["payload"] == json.loads(body)
        status, again, _ = post(body, sign(body, "msg_1"))
        assert status == 200 and again == {"job_id": first["job_id"], "deduped": True}
        assert ids(jobs) == [first["job_id"]] and MARKER not in text


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("url", ["pg"], indirect=True)
def test_every_hostile_delivery_is_a_small_refusal_and_stores_nothing(
    site: str, jobs: Jobs
) -> None:
    hook = receiver()
    with SITES[site](hook, jobs) as post:
        for case, body, headers, status, code in hostile():
            if site == "flask" and any("\n" in v for v in headers.values()):
                continue  # Werkzeug's client refuses to send a newline in a header at all
            got, answer, text = post(body, headers)
            assert got == status, (case, text)
            refused(answer, text, code)
    assert ids(jobs) == []


def test_django_answers_another_method_in_json() -> None:
    hook = receiver()
    django_set_up()
    urls = urlconf(receiver_django.view(hook))
    with override_settings(ROOT_URLCONF=urls):
        answer = Client().get("/hooks/acme")
    assert answer.status_code == 405
    refused(json.loads(answer.content), answer.content.decode(), "X_WEBHOOK_REQUEST_INVALID")


def test_a_wsgi_body_is_read_no_further_than_max_bytes_and_one_byte() -> None:
    hook = receiver()
    stream = io.BytesIO(b"x" * (10 * MAX_BYTES))
    with pytest.raises(WebhookBodyTooLargeError):
        hook.read_sync(stream.read, chunk=1000)
    assert stream.tell() == MAX_BYTES + 1
    assert hook.read_sync(io.BytesIO(b"y" * MAX_BYTES).read) == b"y" * MAX_BYTES


@pytest.mark.parametrize("site", SITES)
def test_no_jobs_client_to_enqueue_on_answers_503(
    site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facade, "_default", None)
    hook = receiver()
    body = event_body()
    with SITES[site](hook, None) as post:
        status, answer, text = post(body, sign(body, "msg_1"))
    assert status == 503, text
    refused(answer, text, "X_DRIVER_UNAVAILABLE")
