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


class _Disconnecting:
    """A WSGI input whose client goes away after `keep` bytes: the server then raises (`how`
    "raise": gunicorn, uWSGI) or reports the end early ("short": wsgiref)."""

    def __init__(self, body: bytes, keep: int, how: str) -> None:
        self._rest = io.BytesIO(body[:keep])
        self._how = how

    def read(self, n: int = -1) -> bytes:
        got = self._rest.read(n)
        if not got and self._how == "raise":
            raise OSError("client went away")
        return got

    def readline(self, limit: int = -1) -> bytes:
        return self.read(limit)

    def readinto(self, buffer: bytearray | memoryview) -> int:
        got = self.read(len(buffer))
        buffer[: len(got)] = got
        return len(got)


@pytest.mark.parametrize("how", ["raise", "short"])
@pytest.mark.parametrize("url", ["pg"], indirect=True)
def test_django_a_client_gone_mid_body_is_a_400_and_stores_nothing(how: str, jobs: Jobs) -> None:
    """A delivery whose client disconnects mid-body answered 500 (Django's `UnreadablePostError`
    escaped the view) or read a partial body as the whole; it is a small JSON 400
    (`X_WEBHOOK_REQUEST_INVALID`) and nothing is stored — even when the part that arrived is a
    complete, validly signed body of its own."""
    from django.test import RequestFactory

    django_set_up()
    hook = receiver()
    whole = event_body()
    # The part that arrives is itself a signed body: only the length can tell it is cut.
    headers = sign(whole, "msg_cut")
    padded = whole + b" " * 100
    request = RequestFactory().post(
        "/hooks/acme",
        data=b"",
        content_type="application/json",
        headers={k: v for k, v in headers.items() if k != "content-type"},
    )
    request.META["CONTENT_TYPE"] = "application/json"
    request.META["CONTENT_LENGTH"] = str(len(padded))
    request.META["wsgi.input"] = _Disconnecting(padded, len(whole), how)
    from django.core.handlers.wsgi import WSGIRequest

    cut = WSGIRequest(request.META)
    answer = receiver_django.view(hook, jobs)(cut)
    assert answer.status_code == 400, answer.content
    refused(json.loads(answer.content), answer.content.decode(), "X_WEBHOOK_REQUEST_INVALID")
    assert ids(jobs) == []


@pytest.mark.parametrize("how", ["raise", "short"])
@pytest.mark.parametrize("url", ["pg"], indirect=True)
def test_flask_a_client_gone_mid_body_is_a_json_400_and_stores_nothing(
    how: str, jobs: Jobs
) -> None:
    """As on Django: a JSON 400 (`X_WEBHOOK_REQUEST_INVALID`), never the HTML of Werkzeug's
    own `ClientDisconnected` page nor a 500, and nothing stored."""
    hook = receiver()
    whole = event_body()
    padded = whole + b" " * 100
    app = Flask(__name__)
    app.add_url_rule("/hooks/acme", view_func=receiver_flask.view(hook, jobs), methods=["POST"])
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/hooks/acme",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "wsgi.url_scheme": "http",
        "wsgi.input": _Disconnecting(padded, len(whole), how),
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(padded)),
        **{f"HTTP_{k.upper().replace('-', '_')}": v for k, v in sign(whole, "msg_cut").items()},
    }
    seen: list[Any] = []
    chunks = app.wsgi_app(environ, lambda status, headers: seen.append(status))
    text = b"".join(chunks).decode()
    assert seen and seen[0].startswith("400"), (seen, text)
    refused(json.loads(text), text, "X_WEBHOOK_REQUEST_INVALID")
    assert ids(jobs) == []
