"""One delivery attempt: a POST with httpx to an address `url.resolve` passed, and what came
back, bounded.

The connection goes to that very address (the URL's host swapped for it; `Host` and, for https,
the TLS server name and certificate check stay the endpoint's name), so a lookup between the
check and the connect cannot send it elsewhere. Redirects are never followed by httpx: a 3xx is
answered as it is, and `webhook()` refuses it unless its declaration allows redirects (then it
checks each hop as it checked the first). At most `READ_BYTES` of the body are read; the excerpt
kept is sanitized (every store can hold it) and cut to `MAX_WEBHOOK_EXCERPT_BYTES`.
"""

from __future__ import annotations

import functools
import re
import ssl
import time
from dataclasses import dataclass
from typing import Final

import certifi
import httpx

from jobs_core.driver import MAX_WEBHOOK_EXCERPT_BYTES
from jobs_core.factories.webhooks.url import Target
from jobs_core.jsonform import storable

#: Response bytes read at most (the rest is never downloaded).
READ_BYTES: Final = 4_096
#: Control characters other than tab and newline, which an excerpt shows as U+FFFD.
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Answer:
    """What one attempt got: a status (None: no answer, `error` says why), its latency, the
    start of the body (or of the error), and the headers a retry or a redirect reads."""

    status_code: int | None
    latency_ms: int
    excerpt: str
    retry_after: str | None = None
    location: str | None = None
    error: str | None = None


def excerpt_of(text: str) -> str:
    """`text` as an attempt records it: storable, control characters shown as U+FFFD, and at
    most `MAX_WEBHOOK_EXCERPT_BYTES` UTF-8 bytes (cut between characters)."""
    text = _CONTROL.sub("\ufffd", storable(text))
    raw = text.encode("utf-8")
    if len(raw) <= MAX_WEBHOOK_EXCERPT_BYTES:
        return text
    return raw[:MAX_WEBHOOK_EXCERPT_BYTES].decode("utf-8", errors="ignore")


def pinned(target: Target) -> tuple[httpx.URL, dict[str, str], dict[str, object]]:
    """The URL with its host swapped for the checked address, the `Host` header, and the TLS
    server name extension (https) that keep the endpoint's name on the wire."""
    url = httpx.URL(target.url)
    default = 443 if target.scheme == "https" else 80
    name = f"[{target.host}]" if ":" in target.host else target.host
    host_header = name if target.port == default else f"{name}:{target.port}"
    extensions: dict[str, object] = {}
    if target.scheme == "https":
        extensions["sni_hostname"] = target.host
    return url.copy_with(host=str(target.address)), {"host": host_header}, extensions


async def post(
    target: Target,
    body: bytes,
    headers: dict[str, str],
    *,
    connect_s: float,
    read_s: float,
) -> Answer:
    """POST `body` once; a network failure or timeout is an `Answer` without a status (a
    cancellation propagates: a cancelled attempt is not an attempt)."""
    url, host, extensions = pinned(target)
    timeout = httpx.Timeout(connect=connect_s, read=read_s, write=read_s, pool=connect_s)
    sent = {
        **headers,
        **host,
        "content-type": "application/json",
        "user-agent": "ujobs-webhook",
    }
    started = time.monotonic()
    try:
        async with (
            httpx.AsyncClient(
                timeout=timeout, follow_redirects=False, trust_env=False, verify=_tls()
            ) as client,
            client.stream(
                "POST", url, content=body, headers=sent, extensions=extensions
            ) as response,
        ):
            got = bytearray()
            unread = ""
            try:
                async for chunk in response.aiter_bytes():
                    got += chunk
                    if len(got) >= READ_BYTES:
                        break
            except httpx.DecodingError as exc:
                # The status came: the attempt is the answer's, its body shown as unreadable.
                unread = f" [the body does not decode: {type(exc).__name__}: {exc}]"
            text = bytes(got[:READ_BYTES]).decode("utf-8", errors="replace") + unread
            return Answer(
                status_code=response.status_code,
                latency_ms=_since(started),
                excerpt=excerpt_of(text),
                retry_after=response.headers.get("retry-after"),
                location=response.headers.get("location"),
            )
    # RequestError, not only TransportError: every failure of the exchange is an attempt
    # without an answer, recorded, never an error that skips the record.
    except (httpx.RequestError, OSError) as exc:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return Answer(None, _since(started), excerpt_of(why), error=why)


@functools.cache
def _tls() -> ssl.SSLContext:
    """The one TLS context this process's sends share, verifying against certifi's CA store as
    httpx's default does: building one loads that store, about 18 ms of CPU, which a client per
    POST paid on every send (even plain http; bench/webhooks.py)."""
    return ssl.create_default_context(cafile=certifi.where())


def _since(started: float) -> int:
    return max(0, round((time.monotonic() - started) * 1000))
