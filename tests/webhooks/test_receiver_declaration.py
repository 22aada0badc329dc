"""A receiver's declaration: every bad option refused, naming it, before anything is registered;
the verifiers' own refusals; what a declared receiver is (a job, its payload sensitive)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jobs_core.errors import (
    JobDuplicateError,
    WebhookReceiverDeclarationInvalidError,
)
from jobs_core.factories.webhooks import (
    standard_webhooks_verifier,
    stripe_verifier,
    webhook_receiver,
)
from jobs_core.job import JobRegistry
from tests.webhooks.support import SECRET


async def on_event(event: Any, ctx: Any) -> None:
    return None


async def async_org(event: Any) -> str:
    return "org_1"


VERIFY = standard_webhooks_verifier(SECRET)
GOOD: dict[str, Any] = {"name": "acme.orders", "verify": VERIFY, "handle": on_event, "tenant": "o"}


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("name", ""),
        ("name", "a\x00b"),
        ("name", 7),
        ("verify", "not a function"),
        ("handle", None),
        ("tenant", ""),
        ("tenant", None),
        ("tenant", async_org),
        ("max_bytes", 0),
        ("max_bytes", True),
        ("max_bytes", 10_000_000),
        ("id_pattern", "("),
        ("id_pattern", re.compile(b"x")),
        ("content_types", "application/json"),
        ("content_types", []),
        ("content_types", ["json"]),
        ("sensitive", "card"),
    ],
)
def test_a_bad_option_is_refused_naming_it_and_registers_nothing(option: str, value: Any) -> None:
    registry = JobRegistry()
    with pytest.raises(WebhookReceiverDeclarationInvalidError) as refused:
        webhook_receiver(**{**GOOD, option: value}, registry=registry)
    assert refused.value.detail in {option, "acme.orders"}, refused.value
    assert registry.names() == []


def test_a_declared_receiver_is_a_job_whose_payload_is_sensitive() -> None:
    registry = JobRegistry()
    hook = webhook_receiver(**GOOD, sensitive=["card"], registry=registry)
    assert registry.get("acme.orders") is hook
    assert hook.sensitive == frozenset({"payload", "card"})
    assert hook.tenant_for({"event_id": "e", "payload": {}}) == "o"
    assert webhook_receiver(**{**GOOD, "tenant": "none"}, registry=JobRegistry()).tenant == "none"
    with pytest.raises(JobDuplicateError):
        webhook_receiver(**GOOD, registry=registry)


@pytest.mark.parametrize(
    ("make", "option"),
    [
        (lambda: standard_webhooks_verifier(""), "secret"),
        (lambda: standard_webhooks_verifier([]), "secret"),
        (lambda: standard_webhooks_verifier("whsec_%%%not-base64"), "secret"),
        (lambda: stripe_verifier(""), "secret"),
        (lambda: stripe_verifier([b"bytes"]), "secret"),  # type: ignore[list-item]
        (lambda: stripe_verifier("whsec_x", tolerance_s=0), "tolerance_s"),
    ],
)
def test_a_verifier_refuses_a_bad_secret_or_tolerance(make: Any, option: str) -> None:
    with pytest.raises(WebhookReceiverDeclarationInvalidError) as refused:
        make()
    assert refused.value.detail == option
