"""Verifying an inbound webhook BEFORE anything reads its body, and the event it names.

A verifier is a function `(body, headers) -> ReceivedEvent` (sync or async): it checks the
delivery's signature over the raw body bytes and answers the event id and payload from what it
verified, or raises `WebhookSignatureInvalidError` (401). Two ship:

- `standard_webhooks_verifier(secret, ...)`: the Standard Webhooks wire format (`webhook-id`,
  `webhook-timestamp`, `webhook-signature` HMAC-SHA256 over `id.timestamp.body`, five minutes'
  tolerance), verified by the `standardwebhooks` package. The id is the signed `webhook-id`
  header. Several secrets verify during a rotation.
- `stripe_verifier(secret, ...)`: Stripe's `Stripe-Signature: t=…,v1=…` (HMAC-SHA256 of
  `t.body`), verified by the `stripe` package with its tolerance. The id is the verified body's
  `id` field.

Both parse the body only once it verified, with `parse_body`: UTF-8 JSON that every store can
hold (no NUL, no lone surrogate, raw or escaped; within the depth and size bounds; no NaN),
else `WebhookBodyInvalidError` (400). A custom verifier is any function of the same shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jobs_core.errors import (
    RecordInvalidError,
    WebhookBodyInvalidError,
    WebhookReceiverDeclarationInvalidError,
    WebhookSignatureInvalidError,
)
from jobs_core.jsonform import JsonValue, check_text

#: A signature header longer than this is refused unread (no sender signs with more).
MAX_SIGNATURE_HEADER_CHARS: Final = 8192
#: Stripe's own default: a delivery signed more than five minutes ago is refused (a replay).
STRIPE_TOLERANCE_S: Final = 300


@dataclass(frozen=True, slots=True)
class ReceivedEvent:
    """One verified delivery: its event `id` and its `payload` (JSON), both from verified data.

    What the receiver's job body is handed, rebuilt from the stored input."""

    id: str
    payload: JsonValue


#: `verify(body, headers)`: the event of a delivery whose signature holds, else raises
#: `WebhookSignatureInvalidError`. `headers` are keyed in lower case. Sync or async.
Verifier = Callable[[bytes, Mapping[str, str]], "ReceivedEvent | Awaitable[ReceivedEvent]"]


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


_STRICT: Final = json.JSONDecoder(parse_constant=_refuse_constant)


def parse_body(body: bytes) -> JsonValue:
    """The JSON value of a verified body; `WebhookBodyInvalidError` when it is not UTF-8 JSON
    every store can hold. The error never carries the body."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise WebhookBodyInvalidError("the body is not UTF-8 text") from None
    try:
        check_text(text.strip(), "body")  # NUL, lone surrogates, depth, size: before decoding
        value: JsonValue = _STRICT.decode(text)
    except RecordInvalidError as exc:
        raise WebhookBodyInvalidError(exc.message) from None
    except (ValueError, RecursionError):
        # ValueError covers an integer past Python's digit limit too.
        raise WebhookBodyInvalidError("the body is not JSON text") from None
    if not _finite(value):
        raise WebhookBodyInvalidError("a number of the body is not finite")
    return value


def _finite(value: JsonValue) -> bool:
    """No float of `value` is infinite (`1e400` decodes to one without a NaN constant)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if not value:
        raise WebhookSignatureInvalidError(f"no {name} header")
    if len(value) > MAX_SIGNATURE_HEADER_CHARS:
        raise WebhookSignatureInvalidError(f"the {name} header is too long")
    return value


def _secrets(secret: str | bytes | Sequence[str | bytes], option: str) -> list[str | bytes]:
    given = [secret] if isinstance(secret, str | bytes) else list(secret)
    if not given or not all(isinstance(s, str | bytes) and s for s in given):
        raise WebhookReceiverDeclarationInvalidError(
            "one secret, or a list of them while one is rotated out", detail=option
        )
    return given


def standard_webhooks_verifier(
    secret: str | bytes | Sequence[str | bytes],
) -> Callable[[bytes, Mapping[str, str]], ReceivedEvent]:
    """A verifier of the Standard Webhooks wire format (the `standardwebhooks` package).

    `secret`: a `whsec_…` (base64) secret or its raw bytes, or several while one is rotated
    out (a delivery verifies against any of them). The event id is the signed `webhook-id`.
    """
    try:
        from standardwebhooks.webhooks import Webhook, WebhookVerificationError
    except ImportError as exc:  # pragma: no cover - the extra is part of dev
        raise WebhookReceiverDeclarationInvalidError(
            "needs the standardwebhooks package: pip install 'ultimat3-jobs[webhooks]'",
            detail="verify",
        ) from exc
    hooks = []
    for s in _secrets(secret, "secret"):
        try:
            hooks.append(Webhook(s))
        except Exception:
            raise WebhookReceiverDeclarationInvalidError(
                "a Standard Webhooks secret is 'whsec_' and base64, or raw bytes",
                detail="secret",
            ) from None

    def verify(body: bytes, headers: Mapping[str, str]) -> ReceivedEvent:
        signed = {
            name: _header(headers, name)
            for name in ("webhook-id", "webhook-timestamp", "webhook-signature")
        }
        for hook in hooks:
            try:
                hook.verify(body, signed, json_parse=False)
            except WebhookVerificationError:
                continue
            except Exception:  # a hostile header the package trips on verifies nothing
                continue
            return ReceivedEvent(signed["webhook-id"], parse_body(body))
        raise WebhookSignatureInvalidError()

    return verify


def stripe_verifier(
    secret: str | Sequence[str], *, tolerance_s: int = STRIPE_TOLERANCE_S
) -> Callable[[bytes, Mapping[str, str]], ReceivedEvent]:
    """A verifier of Stripe's `Stripe-Signature` header (the `stripe` package's
    `WebhookSignature.verify_header`), refusing a signature older than `tolerance_s`.

    `secret`: the endpoint's `whsec_…` signing secret, or several while one is rolled. The
    event id is the verified body's `id` (a string), its payload the whole body.
    """
    try:
        from stripe import SignatureVerificationError, WebhookSignature
    except ImportError as exc:  # pragma: no cover - the extra is part of dev
        raise WebhookReceiverDeclarationInvalidError(
            "needs the stripe package: pip install 'ultimat3-jobs[webhooks]'", detail="verify"
        ) from exc
    given = _secrets(secret, "secret")
    secrets = [s for s in given if isinstance(s, str)]
    if len(secrets) != len(given):
        raise WebhookReceiverDeclarationInvalidError("a Stripe secret is text", detail="secret")
    if isinstance(tolerance_s, bool) or not isinstance(tolerance_s, int) or tolerance_s < 1:
        raise WebhookReceiverDeclarationInvalidError(
            "a positive number of seconds", detail="tolerance_s"
        )

    def verify(body: bytes, headers: Mapping[str, str]) -> ReceivedEvent:
        header = _header(headers, "stripe-signature")
        try:
            text = body.decode("utf-8")  # Stripe signs the text: a body not UTF-8 is not its
        except UnicodeDecodeError:
            raise WebhookSignatureInvalidError() from None
        for s in secrets:
            try:
                WebhookSignature.verify_header(text, header, s, tolerance_s)
            except SignatureVerificationError:
                continue
            except Exception:  # a hostile header the package trips on verifies nothing
                continue
            payload = parse_body(body)
            event_id: Any = payload.get("id") if isinstance(payload, dict) else None
            return ReceivedEvent(event_id, payload)
        raise WebhookSignatureInvalidError()

    return verify
