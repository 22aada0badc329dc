"""Who may look and who may act: credentials from the environment, a signed session cookie,
and a token against request forgery on every action.

The rules, decided here and stated in the README:
- With no credentials set, the dashboard shows its pages and refuses every action
  (`X_DASHBOARD_READ_ONLY`): nothing changes a job without auth.
- With a token (`UJOBS_DASHBOARD_TOKEN`) or a user and password (`UJOBS_DASHBOARD_USER`,
  `UJOBS_DASHBOARD_PASSWORD`), every page and every action needs them
  (`X_DASHBOARD_AUTH_REQUIRED`): an `Authorization: Bearer` or `Basic` header, or the session
  cookie the login form sets. A token never travels in a URL.
- `UJOBS_DASHBOARD_READ_ONLY=1` (or `read_only=True`) refuses every action whatever the
  credentials.
- Every action is a POST carrying the CSRF token (a form field or the `X-CSRF-Token` header):
  an HMAC of a random per-browser cookie, so a page on another site can neither read nor
  forge it; a POST whose `Origin` is another site is refused before that.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from jobs_core.errors import CliUsageInvalidError

TOKEN_ENV: Final = "UJOBS_DASHBOARD_TOKEN"
USER_ENV: Final = "UJOBS_DASHBOARD_USER"
PASSWORD_ENV: Final = "UJOBS_DASHBOARD_PASSWORD"
READ_ONLY_ENV: Final = "UJOBS_DASHBOARD_READ_ONLY"
#: A key shared by replicas behind one load balancer, so each accepts the others' sessions.
SECRET_ENV: Final = "UJOBS_DASHBOARD_SECRET"

SESSION_COOKIE: Final = "ujobs_session"
CSRF_COOKIE: Final = "ujobs_csrf"
CSRF_HEADER: Final = "x-csrf-token"
CSRF_FIELD: Final = "csrf"
#: How long a login lasts.
SESSION_TTL_S: Final = 12 * 3600

_TRUE = {"1", "true", "yes", "on"}
#: Digits of a session's expiry (epoch seconds) this dashboard could have written.
_EXPIRY_DIGITS = 12


def _same(given: str, expected: str) -> bool:
    """In constant time; as bytes, so text the client sent (any characters) compares, never
    raises."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in _TRUE


@dataclass(frozen=True)
class Access:
    """The dashboard's credentials and mode. `secret` signs sessions and CSRF tokens: random
    per process unless given (then every replica sharing it accepts the others' cookies)."""

    token: str | None = None
    user: str | None = None
    password: str | None = None
    read_only: bool = False
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def __post_init__(self) -> None:
        if (self.user is None) != (self.password is None):
            raise CliUsageInvalidError(
                f"set both {USER_ENV} and {PASSWORD_ENV}, or neither", detail="dashboard auth"
            )
        if self.token is not None and len(self.token) < 16:
            raise CliUsageInvalidError(
                f"{TOKEN_ENV} must be at least 16 characters", detail="dashboard auth"
            )

    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None, *, read_only: bool = False) -> Access:
        """Credentials and mode from `UJOBS_DASHBOARD_*` (empty values count as unset)."""
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            return env.get(name) or None

        secret = get(SECRET_ENV)
        return Access(
            token=get(TOKEN_ENV),
            user=get(USER_ENV),
            password=get(PASSWORD_ENV),
            read_only=read_only or _flag(get(READ_ONLY_ENV)),
            secret=(
                hashlib.sha256(secret.encode()).digest()
                if secret is not None
                else secrets.token_bytes(32)
            ),
        )

    @property
    def guarded(self) -> bool:
        """Whether credentials are set (then every request needs them)."""
        return self.token is not None or self.user is not None

    @property
    def can_act(self) -> bool:
        return self.guarded and not self.read_only

    @property
    def kind(self) -> str:
        """How a person signs in: `token`, `basic`, `token or basic`, or `none`."""
        kinds = [k for k, on in (("token", self.token), ("basic", self.user)) if on is not None]
        return " or ".join(kinds) or "none"

    # -- credentials ---------------------------------------------------------------------------

    def _key(self, purpose: str) -> bytes:
        # Changing a credential ends every session signed under the old one.
        material = "\0".join([purpose, self.token or "", self.user or "", self.password or ""])
        return hmac.new(self.secret, material.encode(), hashlib.sha256).digest()

    def token_ok(self, given: str) -> bool:
        return self.token is not None and _same(given, self.token)

    def header_ok(self, authorization: str | None) -> bool:
        """Whether an `Authorization` header carries the token or the user and password."""
        if not authorization:
            return False
        scheme, _, value = authorization.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            return self.token_ok(value.strip())
        if scheme == "basic" and self.user is not None and self.password is not None:
            try:
                user, sep, password = base64.b64decode(value.strip()).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            return bool(sep) and (_same(user, self.user) & _same(password, self.password))
        return False

    # -- the session cookie --------------------------------------------------------------------

    def new_session(self, now_s: float | None = None) -> str:
        expires = int((time.time() if now_s is None else now_s) + SESSION_TTL_S)
        return f"{expires}.{self._sign('session', str(expires))}"

    def session_ok(self, cookie: str | None, now_s: float | None = None) -> bool:
        if not cookie or not self.guarded:
            return False
        expires, _, mac = cookie.partition(".")
        # ASCII digits only, at most 12 (`isdigit` takes `²`, and `int` refuses past 4,300
        # digits): an edited cookie signs nobody in, it never fails the page.
        if not (expires.isascii() and expires.isdigit() and len(expires) <= _EXPIRY_DIGITS):
            return False
        if int(expires) < (time.time() if now_s is None else now_s):
            return False
        return _same(mac, self._sign("session", expires))

    # -- forgery -------------------------------------------------------------------------------

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_urlsafe(24)

    def csrf_token(self, nonce: str) -> str:
        """The token a page embeds for the browser holding cookie `nonce`."""
        return self._sign("csrf", nonce)

    def csrf_ok(self, nonce: str | None, given: str | None) -> bool:
        if not nonce or not given:
            return False
        return _same(given, self.csrf_token(nonce))

    def _sign(self, purpose: str, value: str) -> str:
        mac = hmac.new(self._key(purpose), value.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")
