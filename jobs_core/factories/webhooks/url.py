"""Where a webhook may go: the endpoint URL's shape, and every address its host resolves to.

A URL is refused (`X_WEBHOOK_URL_REFUSED`) unless it is `http` or `https`, names a host, holds
no credentials and only printable ASCII without markup; and unless EVERY address its host
resolves to is public: not private, loopback, link-local, multicast, unspecified, reserved or
otherwise not global (an IPv4 address mapped into IPv6 is judged as itself) — or inside one of
the networks the declaration allows (`allow_networks`). The check runs when an endpoint is
registered and again before each send, since a name can resolve elsewhere later; the send then
connects to an address this check passed, never to a fresh lookup (`Target.address`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import SplitResult, urlsplit

from jobs_core.driver import MAX_WEBHOOK_URL_BYTES
from jobs_core.errors import WebhookDeclarationInvalidError, WebhookUrlRefusedError, shown

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Characters a URL may hold as they are: RFC 3986's unreserved, reserved and `%`; no space,
#: quote, angle bracket, backslash or control character (what markup and header injection need).
_URL_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~:/?#[]@!$&()*+,;=%"
)
_SCHEMES: Final = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Target:
    """A URL that passed, and the address its send connects to."""

    url: str
    scheme: str
    host: str
    port: int
    #: Every address the host resolved to, each checked; the send connects to the first.
    addresses: tuple[IpAddress, ...]

    @property
    def address(self) -> IpAddress:
        return self.addresses[0]


def networks(allowed: Sequence[str]) -> tuple[IpNetwork, ...]:
    """The declaration's `allow_networks` as networks (`X_WEBHOOK_DECLARATION_INVALID` for one
    that is not a CIDR block or an address)."""
    given: object = allowed
    if isinstance(given, str | bytes) or not isinstance(given, Iterable):
        # A number was a bare TypeError ('not iterable').
        raise WebhookDeclarationInvalidError("a list of networks", detail="allow_networks")
    out = []
    for n in allowed:
        try:
            if not isinstance(n, str):
                # ipaddress spells any other value with repr (a deep list: RecursionError).
                raise TypeError(type(n).__name__)
            out.append(ipaddress.ip_network(n, strict=False))
        except (TypeError, ValueError) as exc:
            raise WebhookDeclarationInvalidError(
                f"not a network: {shown(n, 80)}", detail="allow_networks"
            ) from exc
    return tuple(out)


def parse_url(url: object) -> SplitResult:
    """`url` split, or `X_WEBHOOK_URL_REFUSED` saying why its shape is refused."""
    if not isinstance(url, str) or not url:
        raise WebhookUrlRefusedError("must be a non-empty string", detail="url")
    if len(url) > MAX_WEBHOOK_URL_BYTES:
        raise WebhookUrlRefusedError(f"longer than {MAX_WEBHOOK_URL_BYTES} bytes", detail="url")
    bad = next((c for c in url if c not in _URL_CHARS), None)
    if bad is not None:
        raise WebhookUrlRefusedError(
            f"holds {bad!r}: only printable ASCII without spaces, quotes or markup (percent-"
            "encode the rest, punycode a host)",
            detail="url",
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise WebhookUrlRefusedError(f"unreadable: {exc}", detail="url") from exc
    if parts.scheme not in _SCHEMES:
        raise WebhookUrlRefusedError("the scheme must be http or https", detail="url")
    if not parts.hostname:
        raise WebhookUrlRefusedError("names no host", detail="url")
    if parts.username is not None or parts.password is not None:
        raise WebhookUrlRefusedError("holds credentials", detail="url")
    if port == 0:
        raise WebhookUrlRefusedError("port 0", detail="url")
    if _literal(parts.hostname) is None:
        try:
            # What the resolver does to a name first: one it cannot encode (an empty label, a
            # label past 63 bytes) is a shape no send reaches, not a network failure.
            parts.hostname.encode("idna")
        except UnicodeError:
            raise WebhookUrlRefusedError(
                "the host is not a DNS name (an empty label, or one past 63 bytes)", detail="url"
            ) from None
    return parts


def refusal(address: IpAddress, allowed: Sequence[IpNetwork]) -> str | None:
    """Why a send to `address` is refused, or None (public, or inside an allowed network)."""
    mapped = getattr(address, "ipv4_mapped", None)
    judged: IpAddress = mapped if mapped is not None else address
    if any(judged in n for n in allowed if n.version == judged.version):
        return None
    if judged.is_loopback:
        return "a loopback address"
    if judged.is_unspecified:
        return "an unspecified address"
    if judged.is_link_local:
        return "a link-local address"
    if judged.is_multicast:
        return "a multicast address"
    if judged.is_private:
        return "a private address"
    if not judged.is_global:
        return "an address that is not global"
    return None


async def resolve(url: str, allowed: Sequence[IpNetwork], timeout_s: float) -> Target:
    """Check `url` and every address its host resolves to now; the `Target` a send connects
    to. `X_WEBHOOK_URL_REFUSED` for a refused shape or address; `OSError` when the name does
    not resolve (the caller treats it as a network failure: retried)."""
    parts = parse_url(url)
    host = parts.hostname
    assert host is not None
    port = parts.port or _SCHEMES[parts.scheme]
    literal = _literal(host)
    addresses: list[IpAddress] = [] if literal is None else [literal]
    if literal is None:
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout_s
            )
        except TimeoutError as exc:
            raise OSError(f"resolving {host} timed out") from exc
        for *_, sockaddr in infos:
            a = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
            if a not in addresses:
                addresses.append(a)
        if not addresses:
            raise OSError(f"{host} resolved to no address")
    for a in addresses:
        why = refusal(a, allowed)
        if why is not None:
            raise WebhookUrlRefusedError(f"{host} resolves to {why} ({a})", detail="url")
    return Target(url, parts.scheme, host, port, tuple(addresses))


def _literal(host: str) -> IpAddress | None:
    """`host` as an address when it is one (an IPv6 one without its brackets), else None."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None
