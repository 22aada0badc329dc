"""`webhook_receiver()` on FastAPI (Starlette) through its TestClient, on memory, Postgres and
Redis: a verified delivery is a job before the 200, a redelivery is deduped, every hostile
delivery is a small JSON refusal with nothing stored, and a store that cannot take the event
answers 503."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette

from jobs_core import facade
from jobs_core.facade import Jobs
from jobs_core.factories.webhooks import (
    ReceivedEvent,
    WebhookReceiver,
    receiver_starlette,
    standard_webhooks_verifier,
    stripe_verifier,
    webhook_receiver,
)
from jobs_core.factories.webhooks.receiver_starlette import route
from jobs_core.job import JobRegistry
from jobs_core.jsonform import loads
from jobs_core.redact import REDACTED, mask
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.support import until
from tests.outage import throwaway_redis
from tests.webhooks.support import (
    MARKER,
    ORG,
    SECRET,
    STRIPE_SECRET,
    Seen,
    all_ids,
    event_body,
    hostile,
    receiver,
    refused,
    sign,
    store,
    stripe_sign,
)


@pytest.fixture(params=["memory", "pg", "redis"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    with store(request.param) as made:
        yield made


def app_for(hook: WebhookReceiver, url: str, *, fastapi: bool = True) -> Starlette:
    """An app whose lifespan opens the store and its client; the route enqueues on it."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        driver: Any = driver_from_url(url)
        async with driver:
            app.state.jobs = Jobs(driver, enqueue_retry_s=0)
            yield

    app: Starlette = FastAPI(lifespan=lifespan) if fastapi else Starlette(lifespan=lifespan)
    app.router.routes.append(route(hook, "/hooks/acme", client=lambda: app.state.jobs))
    return app


def stored(client: TestClient, app: Starlette) -> Callable[[], list[str]]:
    def ids() -> list[str]:
        assert client.portal is not None
        return client.portal.call(all_ids, app.state.jobs.driver)

    return ids


def row(client: TestClient, app: Starlette, job_id: str) -> Any:
    assert client.portal is not None
    return client.portal.call(app.state.jobs.driver.job_get_many, [job_id])[job_id]


def test_a_verified_delivery_is_a_job_before_the_200_and_a_redelivery_is_deduped(
    url: str,
) -> None:
    hook = receiver()
    app = app_for(hook, url)
    body = event_body(1)
    with TestClient(app) as client:
        first = client.post("/hooks/acme", content=body, headers=sign(body, "msg_1"))
        assert first.status_code == 200, first.text
        assert first.json() == {"job_id": hook.job_id_for("msg_1", ORG), "deduped": False}
        job = row(client, app, first.json()["job_id"])
        assert (job.name, job.tenant_id, job.idempotency_key) == (hook.name, ORG, "msg_1")
        assert json.loads(job.input_json) == {"event_id": "msg_1", "payload": json.loads(body)}
        # Stored as sensitive: every view that masks by the job's fields hides the payload.
        assert mask(loads(job.input_json), hook.sensitive) == {
            "event_id": "msg_1",
            "payload": REDACTED,
        }

        again = client.post("/hooks/acme", content=body, headers=sign(body, "msg_1"))
        assert again.status_code == 200 and again.json() == {
            "job_id": first.json()["job_id"],
            "deduped": True,
        }
        other = event_body(2)
        second = client.post("/hooks/acme", content=other, headers=sign(other, "msg_2"))
        assert second.status_code == 200 and second.json()["deduped"] is False
        assert sorted(stored(client, app)()) == sorted(
            [first.json()["job_id"], second.json()["job_id"]]
        )
        assert MARKER not in first.text + again.text + second.text


def test_a_redelivery_after_the_job_finished_is_still_deduped(url: str) -> None:
    hook = receiver()
    app = app_for(hook, url)
    body = event_body(1)
    with TestClient(app) as client:
        first = client.post("/hooks/acme", content=body, headers=sign(body, "msg_1")).json()
        assert client.portal is not None
        driver = app.state.jobs.driver
        worker = Worker(driver, [hook], poll_floor=0.01)

        async def run_until_done() -> None:
            await worker.start()
            try:

                async def done() -> bool:
                    got = (await driver.job_get_many([first["job_id"]]))[first["job_id"]]
                    return got.state is JobState.COMPLETED

                await until(done)
            finally:
                await worker.stop()

        client.portal.call(run_until_done)
        again = client.post("/hooks/acme", content=body, headers=sign(body, "msg_1"))
        assert again.json() == {"job_id": first["job_id"], "deduped": True}
        assert stored(client, app)() == [first["job_id"]]


@pytest.mark.parametrize("url", ["redis"], indirect=True)
def test_every_hostile_delivery_is_a_small_refusal_and_stores_nothing(url: str) -> None:
    hook = receiver()
    app = app_for(hook, url, fastapi=False)  # plain Starlette: the same route
    with TestClient(app) as client:
        for case, body, headers, status, code in hostile():
            answer = client.post("/hooks/acme", content=body, headers=headers)
            assert answer.status_code == status, (case, answer.text)
            refused(answer.json(), answer.text, code)
        for method in ("GET", "PUT", "DELETE"):
            wrong = client.request(method, "/hooks/acme")
            assert wrong.status_code == 405, method
            refused(wrong.json(), wrong.text, "X_WEBHOOK_REQUEST_INVALID")
        assert stored(client, app)() == []


def test_hostile_deliveries_store_nothing_on_every_backend(url: str) -> None:
    """Three representative refusals per backend (the full list runs once, above)."""
    hook = receiver()
    app = app_for(hook, url)
    picked = {"lone-surrogate", "bad-id", "wrong-secret"}
    with TestClient(app) as client:
        for case, body, headers, status, code in hostile():
            if case in picked:
                answer = client.post("/hooks/acme", content=body, headers=headers)
                assert answer.status_code == status, (case, answer.text)
                refused(answer.json(), answer.text, code)
        assert stored(client, app)() == []


def test_a_body_without_a_length_stops_being_read_past_max_bytes() -> None:
    hook = receiver()
    app = app_for(hook, "memory://")
    sent: list[int] = []

    def chunks() -> Iterator[bytes]:
        for _ in range(1_000):
            sent.append(1)
            yield b"x" * 1024

    with TestClient(app) as client:
        answer = client.post(
            "/hooks/acme", content=chunks(), headers={"content-type": "application/json"}
        )
        assert answer.status_code == 413, answer.text
        refused(answer.json(), answer.text, "X_WEBHOOK_BODY_TOO_LARGE")
        assert stored(client, app)() == []


def test_the_checks_before_the_read() -> None:
    hook = receiver()
    assert hook.precheck("POST", "12", "application/json; charset=utf-8") is None
    for length, status in [("abc", 400), ("-1", 400), ("1" * 40, 400), ("٣", 400), ("8193", 413)]:
        answer = hook.precheck("POST", length, "application/json")
        assert answer is not None and answer.status == status, length
    for kind in [None, "", "text/json", "application/jsonx"]:
        answer = hook.precheck("POST", "1", kind)
        assert answer is not None and answer.status == 415, kind
    answer = hook.precheck("PUT", "1", "application/json")
    assert answer is not None and answer.status == 405


def test_a_tenant_of_the_verified_event_and_one_it_cannot_name() -> None:
    seen = Seen()

    def org_of(event: ReceivedEvent) -> str | None:
        assert isinstance(event.payload, dict)
        account = event.payload.get("account")
        return account if isinstance(account, str) else None

    hook = receiver(seen=seen, tenant=org_of)
    app = app_for(hook, "memory://")
    named, unnamed, bad = event_body(1, account="org_9"), event_body(2), event_body(3, account="")
    with TestClient(app) as client:
        ok = client.post("/hooks/acme", content=named, headers=sign(named, "msg_1"))
        assert ok.status_code == 200 and ok.json()["job_id"] == hook.job_id_for("msg_1", "org_9")
        assert row(client, app, ok.json()["job_id"]).tenant_id == "org_9"
        for body, msg in [(unnamed, "msg_2"), (bad, "msg_3")]:
            answer = client.post("/hooks/acme", content=body, headers=sign(body, msg))
            assert answer.status_code == 422
            refused(answer.json(), answer.text, "X_WEBHOOK_TENANT_INVALID")
        assert stored(client, app)() == [ok.json()["job_id"]]

        driver = app.state.jobs.driver
        worker = Worker(driver, [hook], poll_floor=0.01)

        async def run() -> None:
            await worker.start()
            try:
                await until(lambda: bool(seen.events))
            finally:
                await worker.stop()

        assert client.portal is not None
        client.portal.call(run)
    [(event, acting)] = seen.events
    assert event == ReceivedEvent("msg_1", json.loads(named)) and acting == "org_9"


#: A Stripe-Signature header that is not ASCII (as bytes: the client would not encode it).
NOT_ASCII: Any = ("t=x,v1=" + "é" * 9).encode()


def test_a_stripe_delivery() -> None:
    hook = receiver(verify=stripe_verifier(STRIPE_SECRET, tolerance_s=300))
    app = app_for(hook, "memory://")
    body = json.dumps({"id": "evt_1NqX", "type": "charge.succeeded", "card": MARKER}).encode()
    no_id = json.dumps({"type": "charge.succeeded"}).encode()
    with TestClient(app) as client:
        ok = client.post("/hooks/acme", content=body, headers=stripe_sign(body))
        assert ok.status_code == 200 and ok.json()["job_id"] == hook.job_id_for("evt_1NqX", ORG)
        for content, headers, status, code in [
            (body, stripe_sign(body, secret="whsec_other"), 401, "X_WEBHOOK_SIGNATURE_INVALID"),
            (body, stripe_sign(body, at=1_000_000), 401, "X_WEBHOOK_SIGNATURE_INVALID"),
            (
                body,
                {
                    "content-type": "application/json",
                    "stripe-signature": ("t=x,v1=" + "é" * 9).encode(),
                },
                401,
                "X_WEBHOOK_SIGNATURE_INVALID",
            ),
            (
                b'{"id": "\xff"}',
                {"content-type": "application/json", "stripe-signature": "t=1,v1=a"},
                401,
                "X_WEBHOOK_SIGNATURE_INVALID",
            ),
            (no_id, stripe_sign(no_id), 422, "X_WEBHOOK_EVENT_ID_INVALID"),
        ]:
            answer = client.post("/hooks/acme", content=content, headers=headers)
            assert answer.status_code == status, answer.text
            refused(answer.json(), answer.text, code)
        assert stored(client, app)() == [ok.json()["job_id"]]


def test_a_custom_verifier_that_breaks_verifies_nothing() -> None:
    def broken(body: bytes, headers: Any) -> ReceivedEvent:
        raise RuntimeError(MARKER)

    async def wrong_answer(body: bytes, headers: Any) -> Any:
        return {"id": "msg_1", "payload": {}}

    async def custom(body: bytes, headers: Any) -> ReceivedEvent:
        if headers.get("x-token") != "let-me-in":
            from jobs_core.errors import WebhookSignatureInvalidError

            raise WebhookSignatureInvalidError()
        return ReceivedEvent(headers["x-event"], {"raw": body.decode()})

    for verify, token, status in [
        (broken, "", 401),
        (wrong_answer, "", 401),
        (custom, "no", 401),
        (custom, "let-me-in", 200),
    ]:
        hook = receiver(verify=verify)
        app = app_for(hook, "memory://")
        with TestClient(app) as client:
            answer = client.post(
                "/hooks/acme",
                content=b"{}",
                headers={"content-type": "application/json", "x-token": token, "x-event": "e_1"},
            )
            assert answer.status_code == status, answer.text
            assert MARKER not in answer.text


def test_a_store_down_answers_503_and_the_retry_once_it_is_back_is_stored(
    tmp_path: Path,
) -> None:
    hook = receiver()
    body = event_body()
    with throwaway_redis(tmp_path) as server:
        app = app_for(hook, f"{server.url}?prefix=receiver")
        with TestClient(app) as client:
            server.stop()
            down = client.post("/hooks/acme", content=body, headers=sign(body, "msg_1"))
            assert down.status_code == 503, down.text
            refused(down.json(), down.text, "X_DRIVER_UNAVAILABLE")
            server.start()
            back = client.post("/hooks/acme", content=body, headers=sign(body, "msg_1"))
            assert back.status_code == 200 and back.json()["deduped"] is False, back.text
            assert stored(client, app)() == [back.json()["job_id"]]


def test_a_rotated_out_secret_still_verifies() -> None:
    from tests.webhooks.support import OLD_SECRET

    hook = receiver()
    app = app_for(hook, "memory://")
    body = event_body()
    with TestClient(app) as client:
        answer = client.post(
            "/hooks/acme", content=body, headers=sign(body, "msg_1", secret=OLD_SECRET)
        )
        assert answer.status_code == 200, answer.text


def test_a_verified_body_whose_stored_form_outgrows_the_bound_is_refused_not_stored() -> None:
    # `1e15` is stored as `1000000000000000.0`: within max_bytes as sent, past the bound as kept.
    hook = receiver(max_bytes=400_000)
    app = app_for(hook, "memory://")
    body = b"[" + b",".join([b"1e15"] * 70_000) + b"]"
    with TestClient(app) as client:
        answer = client.post("/hooks/acme", content=body, headers=sign(body, "msg_1"))
        assert answer.status_code == 422, answer.text
        refused(answer.json(), answer.text, "X_WEBHOOK_BODY_INVALID")
        assert stored(client, app)() == []


def test_a_failing_run_stores_its_error_with_the_payload_scrubbed_out() -> None:
    async def fails(event: ReceivedEvent, ctx: Any) -> None:
        assert isinstance(event.payload, dict)
        raise RuntimeError(f"declined card {event.payload['card']}")

    hook = webhook_receiver(
        name="acme.declines",
        verify=standard_webhooks_verifier(SECRET),
        tenant=ORG,
        handle=fails,
        retry=Retry(attempts=1),
        registry=JobRegistry(),
    )
    app = app_for(hook, "memory://")
    body = event_body()
    with TestClient(app) as client:
        job_id = client.post("/hooks/acme", content=body, headers=sign(body, "msg_1")).json()[
            "job_id"
        ]
        driver = app.state.jobs.driver
        worker = Worker(driver, [hook], poll_floor=0.01)

        async def run() -> None:
            await worker.start()
            try:

                async def finished() -> bool:
                    return (await driver.job_get_many([job_id]))[job_id].state is JobState.DEAD

                await until(finished)
            finally:
                await worker.stop()

        assert client.portal is not None
        client.portal.call(run)
        done = row(client, app, job_id)
    assert done.last_error is not None and "declined card" in done.last_error
    assert MARKER not in done.last_error


def test_no_jobs_client_to_enqueue_on_answers_503(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facade, "_default", None)
    app = Starlette(routes=[route(receiver(), "/hooks/acme")])
    body = event_body()
    with TestClient(app) as client:
        answer = client.post("/hooks/acme", content=body, headers=sign(body, "msg_1"))
    assert answer.status_code == 503, answer.text
    refused(answer.json(), answer.text, "X_DRIVER_UNAVAILABLE")


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(
    body=st.binary(max_size=200)
    | JSONISH.map(lambda v: json.dumps(v).encode())
    | st.text().map(lambda t: json.dumps({"t": t}).encode("utf-8", "surrogatepass")),
    msg_id=st.text(max_size=40),
    signature=st.none() | st.text(max_size=60),
)
def test_any_delivery_is_answered_never_raised_and_stored_only_when_whole(
    body: bytes, msg_id: str, signature: str | None
) -> None:
    """Whatever a sender holding the secret signs (or anyone forges): an answer, never an error;
    a 200 only for a body that reads back as the stored payload, under a well-formed id."""
    hook = receiver()
    loop = asyncio.new_event_loop()
    try:
        jobs = Jobs(MemoryDriver(), enqueue_retry_s=0)
        headers = sign(body, msg_id) if signature is None else {
            "webhook-id": msg_id, "webhook-timestamp": "1", "webhook-signature": signature,
        }  # fmt: skip
        answer = loop.run_until_complete(hook.receive(body, headers, jobs))
        if answer.status == 200:
            job = loop.run_until_complete(jobs.driver.job_get_many([answer.body["job_id"]]))
            stored = json.loads(job[str(answer.body["job_id"])].input_json)
            assert stored == {"event_id": msg_id, "payload": json.loads(body)}
        else:
            assert answer.status in {400, 401, 422}, answer
            assert set(answer.body) == {"code", "title"}
            assert loop.run_until_complete(all_ids(jobs.driver)) == []
    finally:
        loop.close()


@pytest.mark.parametrize("how", ["short", "disconnect", "past_int_digits"])
def test_a_body_cut_short_of_its_length_is_a_400_and_stores_nothing(how: str) -> None:
    """An ASGI body that ends before its Content-Length (a server that hands what it got and
    says no more body; a length of more digits than Python's int conversion takes), or a
    disconnect: a JSON 400 and nothing stored — even when the part that arrived is a validly
    signed body of its own."""
    from starlette.requests import Request

    hook = receiver()
    whole = event_body()
    length = "9" * 5_000 if how == "past_int_digits" else str(len(whole) + 100)
    headers = {**sign(whole, "msg_cut"), "content-length": length}
    jobs = Jobs(MemoryDriver(), enqueue_retry_s=0)
    messages = [{"type": "http.request", "body": whole, "more_body": how == "disconnect"}]
    if how == "disconnect":
        messages.append({"type": "http.disconnect"})

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/hooks/acme",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "query_string": b"",
    }
    loop = asyncio.new_event_loop()
    try:
        request = Request(scope, receive)  # type: ignore[arg-type]
        answer = loop.run_until_complete(receiver_starlette.answer(hook, request, jobs))
        assert answer.status_code == 400, answer.body
        refused(json.loads(answer.body), answer.body.decode(), "X_WEBHOOK_REQUEST_INVALID")
        assert loop.run_until_complete(all_ids(jobs.driver)) == []
    finally:
        loop.close()
