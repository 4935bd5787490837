"""OAUTHBEARER tokens from an OpenID Connect / OAuth 2.0 identity provider.

:class:`OIDCTokenProvider` fetches tokens with the client-credentials grant (RFC 6749 §4.4)
and refreshes them before they expire::

    from kafkastate.asyncio import AIOKafkaProducer
    from kafkastate.oauth import OIDCTokenProvider

    provider = OIDCTokenProvider(
        "https://idp.example.com/oauth2/token",
        client_id="orders-service",
        client_secret=os.environ["ORDERS_CLIENT_SECRET"],
        scope="kafka",
    )
    producer = AIOKafkaProducer(
        bootstrap_servers="broker:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=provider,
    )

It is an aiokafka-style :class:`~kafkastate.abc.AbstractTokenProvider` (``await
provider.token()``) and works with every client: the blocking ones (``kafkastate.sync``,
kafka-python's spelling) run it on a private event loop. HTTP is httpx's (the ``oauth``
extra: ``pip install kafkastate[oauth]``); the decisions -- the request, what an answer
means, when to refresh, how long to back off -- are :mod:`kafkastate.core.oauth`'s.
"""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Mapping
from typing import Any

import anyio

try:
    import httpx
except ImportError as exc:  # pragma: no cover - the ``oauth`` extra installs it
    raise ImportError("kafkastate.oauth needs httpx: pip install 'kafkastate[oauth]'") from exc

from kafkastate.abc import AbstractTokenProvider
from kafkastate.core.oauth import (
    IssuedToken,
    TokenEndpointUnavailable,
    read_token_response,
    retry_delay,
    token_request,
)
from kafkastate.errors import KafkaConfigurationError

__all__ = ["OIDCTokenProvider"]


class OIDCTokenProvider(AbstractTokenProvider):
    """Client-credentials tokens from an OAuth 2.0 / OIDC token endpoint.

    A token is cached and handed out until ``refresh_window`` of its lifetime has passed
    (``expires_in``, else the JWT's ``exp``); then the next :meth:`token` fetches a new one.
    If that refresh fails while the cached token has not expired yet, the cached token is
    handed out (the broker still accepts it) and the next call tries again.

    Args:
        token_endpoint_url: the identity provider's token endpoint
            (``sasl.oauthbearer.token.endpoint.url``).
        client_id: the client's id (``sasl.oauthbearer.client.credentials.client.id``).
        client_secret: its secret; sent in the Authorization header only, never shown in
            ``repr()``, logs or errors.
        scope: space-separated scopes to ask for (``sasl.oauthbearer.scope``).
        audience: an ``audience`` form field, for providers that want one.
        extensions: SASL extensions (KIP-342) sent with every token.
        refresh_window: share of a token's lifetime after which it is refreshed, 0.5-1.0
            (``sasl.login.refresh.window.factor``, 0.8).
        retry_backoff_ms: first wait before retrying an unavailable endpoint
            (``sasl.login.retry.backoff.ms``); doubles, jittered.
        retry_backoff_max_ms: longest wait (``sasl.login.retry.backoff.max.ms``).
        retry_timeout_ms: give up retrying after this long and raise.
        http_timeout_ms: connect and read timeout of one HTTP request
            (``sasl.login.connect.timeout.ms`` / ``sasl.login.read.timeout.ms``).
        ssl_context: TLS settings for an ``https`` endpoint (default: the system's).

    Raises:
        KafkaConfigurationError: a missing URL or credential, or a value out of range.
    """

    def __init__(
        self,
        token_endpoint_url: str,
        client_id: str,
        client_secret: str,
        *,
        scope: str | None = None,
        audience: str | None = None,
        extensions: Mapping[str, str] | None = None,
        refresh_window: float = 0.8,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 10_000,
        retry_timeout_ms: float = 30_000,
        http_timeout_ms: float = 10_000,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__()
        if not token_endpoint_url.startswith(("https://", "http://")):
            raise KafkaConfigurationError(
                f"token_endpoint_url must be an http(s) URL, got {token_endpoint_url!r}"
            )
        if not client_id or not client_secret:
            raise KafkaConfigurationError("OIDCTokenProvider needs a client_id and client_secret")
        if not 0.5 <= refresh_window <= 1.0:
            raise KafkaConfigurationError(
                f"refresh_window must be between 0.5 and 1.0, got {refresh_window!r}"
            )
        for name, value in (
            ("retry_backoff_ms", retry_backoff_ms),
            ("retry_backoff_max_ms", retry_backoff_max_ms),
            ("retry_timeout_ms", retry_timeout_ms),
            ("http_timeout_ms", http_timeout_ms),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise KafkaConfigurationError(f"{name} must be a number of ms >= 0, got {value!r}")
        self.token_endpoint_url = token_endpoint_url
        self.client_id = client_id
        self.__secret = client_secret
        self.scope = scope
        self.audience = audience
        self._extensions = dict(extensions or {})
        self.refresh_window = refresh_window
        self._backoff = retry_backoff_ms / 1000
        self._backoff_max = retry_backoff_max_ms / 1000
        self._retry_timeout = retry_timeout_ms / 1000
        self._http_timeout = http_timeout_ms / 1000
        self._ssl_context = ssl_context
        self._rng = random.SystemRandom()
        self._current: IssuedToken | None = None
        self.fetches = 0
        """How many tokens this provider fetched from the endpoint."""

    def __repr__(self) -> str:
        return (
            f"OIDCTokenProvider({self.token_endpoint_url!r}, client_id={self.client_id!r}, "
            f"scope={self.scope!r})"
        )

    async def token(self) -> str:
        """A valid token: the cached one until its refresh time, else a fresh one.

        Raises:
            AuthenticationFailedError: the endpoint refused the client (a wrong secret,
                an unknown client or scope): at once, without retrying.
            TokenEndpointUnavailable: the endpoint stayed unreachable or failing for
                ``retry_timeout_ms`` (a retriable KafkaConnectionError).
        """
        current = self._current
        now = time.monotonic()
        if current is not None and now < current.refresh_at:
            return current.token
        try:
            issued = await self._fetch()
        except TokenEndpointUnavailable:
            if current is not None and current.usable(time.monotonic()):
                return current.token  # still accepted; the next call retries the refresh
            raise
        self._current = issued
        return issued.token

    def extensions(self) -> dict[str, str]:
        """The SASL extensions given to the constructor."""
        return dict(self._extensions)

    async def _fetch(self) -> IssuedToken:
        headers, body = token_request(
            self.client_id, self.__secret, scope=self.scope, audience=self.audience
        )
        give_up = time.monotonic() + self._retry_timeout
        verify: Any = self._ssl_context if self._ssl_context is not None else True
        attempt = 0
        async with httpx.AsyncClient(timeout=self._http_timeout, verify=verify) as http:
            while True:
                try:
                    response = await http.post(
                        self.token_endpoint_url, headers=headers, content=body
                    )
                    issued = read_token_response(
                        response.status_code,
                        response.content,
                        now=time.monotonic(),
                        wall_now=time.time(),
                        refresh_window=self.refresh_window,
                        endpoint=self.token_endpoint_url,
                    )
                except httpx.HTTPError as exc:
                    failure = TokenEndpointUnavailable(
                        f"{self.token_endpoint_url}: {type(exc).__name__}: {exc}"
                    )
                except TokenEndpointUnavailable as exc:
                    failure = exc
                else:
                    self.fetches += 1
                    return issued
                delay = retry_delay(
                    attempt, base=self._backoff, maximum=self._backoff_max, rng=self._rng
                )
                attempt += 1
                if time.monotonic() + delay > give_up:
                    raise TokenEndpointUnavailable(
                        f"no token after {attempt} attempt(s) in "
                        f"{self._retry_timeout:g} s: {failure}"
                    ) from failure
                await anyio.sleep(delay)
