"""The OAuth 2.0 client-credentials decisions of :class:`kafkastate.oauth.OIDCTokenProvider`,
pure: what to send to the token endpoint, what its answer means, when to refresh a token
and how long to wait before trying again.

Theory of operation
-------------------
The provider (IO: HTTP, the clock, sleeping) asks :func:`token_request` for the request
(RFC 6749 §4.4.2, client authentication with HTTP Basic, §2.3.1), posts it, and hands the
status and body to :func:`read_token_response`, which returns an :class:`IssuedToken` or
raises:

* :class:`~kafkastate.errors.AuthenticationFailedError` when the endpoint refuses the client
  (RFC 6749 §5.2 ``invalid_client``, ``unauthorized_client``, ``invalid_grant``,
  ``invalid_scope``... any 4xx but 408 and 429): retrying cannot help;
* :class:`TokenEndpointUnavailable` (retriable) for 5xx, 408, 429 and unreadable answers,
  which the provider retries after :func:`retry_delay` until its retry budget is spent.

A token is refreshed once ``refresh_window`` (Java's ``sasl.login.refresh.window.factor``,
0.8) of its lifetime has passed -- lifetime from ``expires_in``, else from the JWT's ``exp``
claim -- so that every (re-)authentication (KIP-368 asks for one at 85-95 % of the broker's
session, which is at most the token's remaining life) gets a token with life left in it.
Nothing here reads a clock or draws randomness it is not handed.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

import attrs

from kafkastate.errors import AuthenticationFailedError, KafkaConnectionError

__all__ = [
    "IssuedToken",
    "TokenEndpointUnavailable",
    "jwt_claims",
    "read_token_response",
    "retry_delay",
    "token_request",
]

DEFAULT_LIFETIME: Final = 3600.0
"""Seconds a token is taken to live when neither ``expires_in`` nor ``exp`` says."""
_RETRIABLE_STATUS: Final = frozenset({408, 429})
_JITTER: Final = 0.2


class TokenEndpointUnavailable(KafkaConnectionError):
    """The token endpoint did not answer usefully (unreachable, 5xx, 429, unreadable):
    worth trying again."""


@attrs.frozen(kw_only=True)
class IssuedToken:
    """A token the endpoint issued, with when to refresh it."""

    token: str = attrs.field(repr=False)
    """The access token (a JWT, compact serialization)."""
    expires_at: float
    """When it expires, on the clock the response was read with."""
    refresh_at: float
    """When to fetch the next one: ``refresh_window`` of the lifetime after issue."""

    def usable(self, now: float) -> bool:
        """Whether it may still be handed out (it has not expired)."""
        return now < self.expires_at


def token_request(
    client_id: str,
    client_secret: str,
    *,
    scope: str | None = None,
    audience: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], bytes]:
    """The headers and form body of a client-credentials token request.

    Args:
        client_id: the client's id at the identity provider.
        client_secret: its secret (sent in the Basic authorization header only).
        scope: space-separated scopes, if the provider wants any.
        audience: an ``audience`` form field (Auth0, Okta and others ask for one).
        extra: more form fields.

    Returns:
        ``(headers, body)``.
    """
    form = {"grant_type": "client_credentials"}
    if scope:
        form["scope"] = scope
    if audience:
        form["audience"] = audience
    form.update(extra or {})
    # RFC 6749 §2.3.1: id and secret are form-urlencoded, then joined and base64-encoded.
    pair = f"{urllib.parse.quote_plus(client_id)}:{urllib.parse.quote_plus(client_secret)}"
    headers = {
        "Authorization": "Basic " + base64.b64encode(pair.encode()).decode("ascii"),
        "Content-Type": "application/x-www-form-urlencoded",
        "Accept": "application/json",
    }
    return headers, urllib.parse.urlencode(form).encode()


def jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a compact JWT, unverified (the broker verifies the signature).

    Returns:
        The payload object, or ``{}`` when the token is not a readable JWT.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


def read_token_response(
    status: int,
    body: bytes,
    *,
    now: float,
    wall_now: float,
    refresh_window: float = 0.8,
    endpoint: str = "the token endpoint",
) -> IssuedToken:
    """What the token endpoint's answer means.

    Args:
        status: the HTTP status.
        body: the response body (JSON).
        now: the provider's clock (monotonic) when the answer arrived.
        wall_now: Unix time then, to read the JWT's ``exp`` against.
        refresh_window: the share of the lifetime after which to refresh (0.5 to 1.0).
        endpoint: how messages name the endpoint.

    Returns:
        The token and its refresh and expiry times on the ``now`` clock.

    Raises:
        AuthenticationFailedError: the endpoint refused the client (never worth retrying).
        TokenEndpointUnavailable: a server error or an answer that cannot be used; retry.
    """
    try:
        answer = json.loads(body) if body else {}
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        answer = {}
    if status >= 500 or status in _RETRIABLE_STATUS:
        raise TokenEndpointUnavailable(f"{endpoint} answered HTTP {status}{_oauth_error(answer)}")
    if status >= 400:
        raise AuthenticationFailedError(
            f"{endpoint} refused the token request: HTTP {status}{_oauth_error(answer)}"
        )
    token = answer.get("access_token")
    if status != 200 or not isinstance(token, str) or not token:
        raise TokenEndpointUnavailable(f"{endpoint} answered HTTP {status} without an access_token")
    lifetime = _lifetime(answer.get("expires_in"), jwt_claims(token), wall_now)
    return IssuedToken(
        token=token, expires_at=now + lifetime, refresh_at=now + lifetime * refresh_window
    )


def _lifetime(expires_in: Any, claims: Mapping[str, Any], wall_now: float) -> float:
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and expires_in > 0:
        return float(expires_in)
    if isinstance(expires_in, str) and expires_in.isdigit() and int(expires_in) > 0:
        return float(expires_in)
    exp = claims.get("exp")
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        return max(float(exp) - wall_now, 0.0)
    return DEFAULT_LIFETIME


def _oauth_error(answer: Mapping[str, Any]) -> str:
    # RFC 6749 §5.2 error codes are ASCII words; descriptions are for humans. Neither
    # carries the secret, which we only ever send in a header.
    error = answer.get("error")
    if not isinstance(error, str):
        return ""
    description = answer.get("error_description")
    shown = f": {error}"
    if isinstance(description, str) and description:
        shown += f" ({description[:200]})"
    return shown


def retry_delay(attempt: int, *, base: float, maximum: float, rng: random.Random) -> float:
    """Seconds to wait before retry number ``attempt`` (0 for the first retry): exponential
    from ``base`` up to ``maximum``, +-20 % jitter (Java's ``sasl.login.retry.backoff.ms``
    / ``.max.ms``)."""
    delay = min(base * (2**attempt), maximum)
    return float(delay * (1 + rng.uniform(-_JITTER, _JITTER)))
