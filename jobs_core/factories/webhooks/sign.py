"""The Standard Webhooks wire format: the three headers a delivery carries, signed by the
`standardwebhooks` package (no HMAC written here).

`webhook-id` is the event's id (the same on every attempt, so a receiver dedupes a retry),
`webhook-timestamp` the attempt's time in whole epoch seconds, and `webhook-signature` one
`v1,<base64 HMAC-SHA256 of id.timestamp.body>` per active secret, space-separated: while a
secret is rotated, the old and the new both sign, and a receiver holding either verifies.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from standardwebhooks import Webhook

from jobs_core.errors import WebhookDeclarationInvalidError


def signers(secrets: Sequence[str], what: str) -> tuple[Webhook, ...]:
    """One signer per secret (`whsec_<base64>` or bare base64), at least one;
    `X_WEBHOOK_DECLARATION_INVALID` naming `what` otherwise (never the secret itself)."""
    if isinstance(secrets, str | bytes) or not isinstance(secrets, Sequence) or not secrets:
        raise WebhookDeclarationInvalidError("at least one secret, as a list", detail=what)
    out = []
    for i, s in enumerate(secrets):
        try:
            if not isinstance(s, str):
                raise TypeError("not a string")
            out.append(Webhook(s))
        except Exception as exc:
            # The secret stays out of the message: only its position and what was wrong.
            raise WebhookDeclarationInvalidError(
                f"secret #{i + 1} is not a Standard Webhooks secret ({type(exc).__name__})",
                detail=what,
            ) from None
    return tuple(out)


def headers(
    event_id: str, now_ms: int, body: bytes, signed_by: Sequence[Webhook]
) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt, signed with every signer."""
    at = dt.datetime.fromtimestamp(now_ms // 1000, tz=dt.UTC)
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(now_ms // 1000),
        "webhook-signature": " ".join(w.sign(event_id, at, body) for w in signed_by),
    }
