"""Webhooks in: `webhook_receiver()`, a route that verifies a delivery before it reads it and
stores its event as a job before it answers 2xx (`receiver`), with the verifiers that ship
(`verify`) and the Flask and Django adapters (`receiver_flask`, `receiver_django`)."""

from jobs_core.factories.webhooks.receiver import WebhookReceiver, webhook_receiver
from jobs_core.factories.webhooks.verify import (
    ReceivedEvent,
    standard_webhooks_verifier,
    stripe_verifier,
)

__all__ = [
    "ReceivedEvent",
    "WebhookReceiver",
    "standard_webhooks_verifier",
    "stripe_verifier",
    "webhook_receiver",
]
