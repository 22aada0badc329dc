"""Webhooks out and in.

Out: `webhook()`, signed delivery of one event to one endpoint, over the endpoint ledger (the
driver's `webhooks` family). `declare` is the factory and its run, `endpoints` registering and
re-enabling, `url` where a delivery may go (SSRF), `sign` the Standard Webhooks headers and
`send` one POST.

In: `webhook_receiver()`, a route that verifies a delivery before it reads it and stores its
event as a job before it answers 2xx (`receiver`), with the verifiers that ship (`verify`) and
the Starlette, Flask and Django adapters (`receiver_starlette`, `receiver_flask`,
`receiver_django`).

Needs the `webhooks` extra (httpx, standardwebhooks, stripe).
"""

from jobs_core.factories.webhooks.declare import (
    DEFAULT_DISABLE_AFTER,
    DEFAULT_NAME,
    Secrets,
    webhook,
    webhook_event,
)
from jobs_core.factories.webhooks.endpoints import (
    ENDPOINT_PATTERN,
    enable_endpoint,
    register_endpoint,
)
from jobs_core.factories.webhooks.receiver import WebhookReceiver, webhook_receiver
from jobs_core.factories.webhooks.verify import (
    ReceivedEvent,
    standard_webhooks_verifier,
    stripe_verifier,
)

__all__ = [
    "DEFAULT_DISABLE_AFTER",
    "DEFAULT_NAME",
    "ENDPOINT_PATTERN",
    "ReceivedEvent",
    "Secrets",
    "WebhookReceiver",
    "enable_endpoint",
    "register_endpoint",
    "standard_webhooks_verifier",
    "stripe_verifier",
    "webhook",
    "webhook_event",
    "webhook_receiver",
]
