"""`webhook()`: signed delivery of one event to one endpoint, over the endpoint ledger (the
driver's `webhooks` family). `declare` is the factory and its run, `endpoints` registering and
re-enabling, `url` where a delivery may go (SSRF), `sign` the Standard Webhooks headers and
`send` one POST. Needs the `webhooks` extra (httpx, standardwebhooks).
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

__all__ = [
    "DEFAULT_DISABLE_AFTER",
    "DEFAULT_NAME",
    "ENDPOINT_PATTERN",
    "Secrets",
    "enable_endpoint",
    "register_endpoint",
    "webhook",
    "webhook_event",
]
