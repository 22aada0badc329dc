"""What the receiver's tests share: signed deliveries (Standard Webhooks and Stripe), a store on
each backend, the receivers they declare, and the hostile deliveries every framework must
answer with a small JSON refusal, nothing stored."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook

from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.factories.webhooks import (
    ReceivedEvent,
    WebhookReceiver,
    standard_webhooks_verifier,
    webhook_receiver,
)
from jobs_core.job import JobRegistry
from jobs_core.records import JobListParams
from tests.conftest import fresh_store_url

SECRET = "whsec_" + base64.b64encode(b"receiver-tests-secret-32-bytes!!").decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"the-secret-being-rotated-out....").decode()
STRIPE_SECRET = "whsec_stripe_test_secret"
#: A text every test body holds: no answer may ever show it.
MARKER = "SECRET-CARD-4242"
ORG = "org_acme"
MAX_BYTES = 8_192


@contextlib.contextmanager
def recording_endpoint(
    hold_first: threading.Event | None = None,
) -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A real HTTP server on a spare loopback port, answering 200 and keeping each POST (its
    lower-cased headers and body); with `hold_first`, the first answer waits until it is set
    (at most 30 s). Yields the URL to send to and what it got."""
    got: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            n = int(self.headers.get("content-length", "0"))
            got.append(({k.lower(): v for k, v in self.headers.items()}, self.rfile.read(n)))
            if hold_first is not None and len(got) == 1:
                hold_first.wait(30)
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/in", got
    finally:
        if hold_first is not None:
            hold_first.set()
        server.shutdown()  # serve_forever polls every 0.05 s
        server.server_close()
        thread.join()


def sign(
    body: bytes, msg_id: str, *, secret: str = SECRET, at: dt.datetime | None = None
) -> dict[str, str]:
    """The Standard Webhooks headers of a delivery of `body` as event `msg_id`."""
    when = at or dt.datetime.now(dt.UTC)
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, when, body),
    }


def stripe_sign(
    body: bytes, *, at: int | None = None, secret: str = STRIPE_SECRET
) -> dict[str, str]:
    """Stripe's `Stripe-Signature` for `body`, computed here as Stripe documents it (HMAC-SHA256
    of `t.body`, hex), not by the package the verifier uses."""
    t = int(time.time()) if at is None else at
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return {"content-type": "application/json", "stripe-signature": f"t={t},v1={mac}"}


def event_body(n: int = 1, **extra: Any) -> bytes:
    return json.dumps({"type": "order.paid", "n": n, "card": MARKER, **extra}).encode()


@dataclass
class Seen:
    """What the job bodies were handed."""

    events: list[tuple[ReceivedEvent, str | None]] = field(default_factory=list)


def receiver(
    name: str = "acme.orders", seen: Seen | None = None, **options: Any
) -> WebhookReceiver:
    """A Standard Webhooks receiver for `ORG`, on a registry of its own."""
    noted = seen if seen is not None else Seen()

    async def on_event(event: ReceivedEvent, ctx: JobContext) -> str:
        noted.events.append((event, ctx.tenant))
        return event.id

    options.setdefault("verify", standard_webhooks_verifier([SECRET, OLD_SECRET]))
    options.setdefault("tenant", ORG)
    options.setdefault("max_bytes", MAX_BYTES)
    return webhook_receiver(name=name, handle=on_event, registry=JobRegistry(), **options)


def store(kind: str) -> contextlib.AbstractContextManager[str]:
    """A fresh store's URL: memory, a migrated Postgres schema, or a Redis key prefix."""
    return fresh_store_url(kind)


async def all_ids(driver: JobDriver) -> list[str]:
    """Every job row's id in the store."""
    return [j.id for j in (await driver.job_list(JobListParams(limit=500))).jobs]


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


#: Hostile deliveries, each signed as a sender holding the secret would (so only the receiver's
#: own checks stand in the way): (case, body, headers, status, code).
def hostile() -> list[tuple[str, bytes, dict[str, str], int, str]]:
    good = event_body()
    cases: list[tuple[str, bytes, dict[str, str], int, str]] = [
        (
            "wrong-secret",
            good,
            sign(
                good,
                "msg_1",
                secret="whsec_" + base64.b64encode(b"another-secret-entirely-32bytes!").decode(),
            ),
            401,
            "X_WEBHOOK_SIGNATURE_INVALID",
        ),
        ("tampered", good + b" ", sign(good, "msg_1"), 401, "X_WEBHOOK_SIGNATURE_INVALID"),
        (
            "no-signature",
            good,
            {"content-type": "application/json"},
            401,
            "X_WEBHOOK_SIGNATURE_INVALID",
        ),
        (
            "stale",
            good,
            sign(good, "msg_1", at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)),
            401,
            "X_WEBHOOK_SIGNATURE_INVALID",
        ),
        (
            "huge-header",
            good,
            {**sign(good, "msg_1"), "webhook-signature": "v1," + "A" * 100_000},
            401,
            "X_WEBHOOK_SIGNATURE_INVALID",
        ),
        (
            "nan-timestamp",
            good,
            {**sign(good, "msg_1"), "webhook-timestamp": "nan"},
            401,
            "X_WEBHOOK_SIGNATURE_INVALID",
        ),
        (
            "wrong-type",
            good,
            {**sign(good, "msg_1"), "content-type": "text/plain"},
            415,
            "X_WEBHOOK_CONTENT_TYPE_INVALID",
        ),
        (
            "too-large",
            b"[" + b"1," * MAX_BYTES + b"1]",
            {"content-type": "application/json"},
            413,
            "X_WEBHOOK_BODY_TOO_LARGE",
        ),
        ("bad-id", good, sign(good, "../etc/passwd"), 422, "X_WEBHOOK_EVENT_ID_INVALID"),
        ("id-newline", good, sign(good, "msg_1\n"), 422, "X_WEBHOOK_EVENT_ID_INVALID"),
    ]
    for case, body in [
        ("lone-surrogate", b'{"card": "' + MARKER.encode() + b'", "x": "\\ud800"}'),
        ("nul", b'{"card": "' + MARKER.encode() + b'", "x": "\\u0000"}'),
        ("deep", deep(200)),
        ("not-utf8", b'{"card": "\xff\xfe"}'),
        ("nan", b'{"n": NaN}'),
        ("infinite", b'{"n": 1e400}'),
        ("huge-int", b'{"n": ' + b"9" * 5000 + b"}"),
        ("not-json", b"card=" + MARKER.encode()),
    ]:
        cases.append((case, body, sign(body, "msg_2"), 400, "X_WEBHOOK_BODY_INVALID"))
    return cases


def refused(answer_json: Any, answer_text: str, code: str) -> None:
    """A refusal's body is its code and title, and nothing the request sent."""
    assert set(answer_json) == {"code", "title"} and answer_json["code"] == code, answer_json
    assert MARKER not in answer_text and "ud800" not in answer_text
