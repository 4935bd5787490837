"""A small, real OAuth 2.0 / OIDC token endpoint for tests: client-credentials grant,
RS256-signed JWTs, a JWKS document and an OpenID discovery document, over HTTP on loopback.

It is the token server of the OAUTHBEARER integration tests: the client fetches tokens from
:attr:`OIDCServer.token_url` with :class:`kafkastate.oauth.OIDCTokenProvider`, and a harness
broker started with ``KafkaCluster.start(oauth=server.spec())`` checks their signatures
against :attr:`OIDCServer.jwks_url` (Kafka's ``OAuthBearerValidatorCallbackHandler``).

Signing uses ``cryptography`` (RSA PKCS#1 v1.5 with SHA-256, RFC 7518 §3.3); it is imported
when a server starts, so ``kafkastate.testing`` imports without it.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import urllib.parse
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ._config import HOST, OAuthSpec
from ._errors import PrerequisiteError

__all__ = ["OIDCServer"]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _uint(value: int) -> str:
    return _b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class _Key:
    """One RSA signing key and its JWK."""

    def __init__(self, kid: str) -> None:
        try:
            from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415
        except ImportError:  # pragma: no cover - the dev extra installs it
            raise PrerequisiteError(
                "cryptography", "the test OIDC server signs JWTs with it (pip install cryptography)"
            ) from None
        self.kid = kid
        self._private = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwk(self) -> dict[str, str]:
        numbers = self._private.public_key().public_numbers()
        return {
            "kty": "RSA",
            "use": "sig",
            "alg": "RS256",
            "kid": self.kid,
            "n": _uint(numbers.n),
            "e": _uint(numbers.e),
        }

    def sign(self, claims: Mapping[str, Any], kid: str | None = None) -> str:
        from cryptography.hazmat.primitives import hashes  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import padding  # noqa: PLC0415

        header = {"alg": "RS256", "typ": "JWT", "kid": kid or self.kid}
        signing_input = ".".join(
            _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
        )
        signature = self._private.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"


class OIDCServer:
    """An OAuth 2.0 authorization server for tests (client-credentials grant only).

    Endpoints (``http://127.0.0.1:PORT``): ``POST /token`` (RFC 6749 §4.4; client
    authentication with HTTP Basic or ``client_id``/``client_secret`` form fields),
    ``GET /jwks`` (RFC 7517) and ``GET /.well-known/openid-configuration``. An unknown client
    or a wrong secret gets ``401 {"error": "invalid_client"}`` (RFC 6749 §5.2).

    Args:
        clients: client id -> secret.
        audience: the ``aud`` claim of every token.
        token_lifetime: seconds until a token's ``exp`` (also its ``expires_in``).
        subject: the ``sub`` claim (the Kafka principal); default the client id.

    Attributes:
        token_requests: how many token requests were answered with a token.
        refused: how many were refused (bad client or secret, or an injected failure).
    """

    def __init__(
        self,
        clients: Mapping[str, str] | None = None,
        *,
        audience: str = "kafka",
        token_lifetime: float = 3600.0,
        subject: str | None = None,
    ) -> None:
        self.clients = dict(clients or {"kafka-client": "kafka-client-secret"})
        self.audience = audience
        self.token_lifetime = token_lifetime
        self.subject = subject
        self.token_requests = 0
        self.refused = 0
        self._failures: list[int] = []
        self._lock = threading.Lock()
        self._key: _Key | None = None
        self._rogue: _Key | None = None
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> OIDCServer:
        """Generate the keys and serve on a free loopback port (a daemon thread)."""
        self._key = _Key("kafkastate-test-1")
        self._rogue = _Key("kafkastate-test-1")  # same kid, another key: a forged token
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._get(self)

            def do_POST(self) -> None:
                server._post(self)

            def log_message(self, format: str, *args: Any) -> None:
                del format, args  # quiet: tests read counters, not logs

        self._httpd = ThreadingHTTPServer((HOST, 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="kafkastate OIDC server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> OIDCServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the issuer)."""
        if self._httpd is None:
            raise RuntimeError("the OIDC server is not running")
        return f"http://{HOST}:{self._httpd.server_address[1]}"

    @property
    def token_url(self) -> str:
        """The token endpoint."""
        return self.url + "/token"

    @property
    def jwks_url(self) -> str:
        """The JWKS endpoint the broker validates signatures with."""
        return self.url + "/jwks"

    def spec(self) -> OAuthSpec:
        """The harness listener that trusts this server: ``KafkaCluster.start(oauth=...)``."""
        return OAuthSpec(jwks_url=self.jwks_url, audience=self.audience, issuer=self.url)

    # -- tokens

    def issue(
        self,
        subject: str = "kafka-client",
        *,
        lifetime: float | None = None,
        expired: bool = False,
        bad_signature: bool = False,
        scope: str | None = None,
    ) -> str:
        """Mint a token directly (what ``POST /token`` returns, or a broken one).

        Args:
            subject: the ``sub`` claim.
            lifetime: seconds until ``exp`` (default :attr:`token_lifetime`).
            expired: issued two hours ago, expired an hour ago.
            bad_signature: signed with a key the JWKS does not have (same ``kid``).
            scope: the ``scope`` claim, if any.
        """
        if self._key is None or self._rogue is None:
            raise RuntimeError("the OIDC server is not running")
        now = int(time.time()) - (7200 if expired else 0)
        life = int(self.token_lifetime if lifetime is None else lifetime)
        if expired:
            life = 3600
        claims: dict[str, Any] = {
            "iss": self.url,
            "sub": subject,
            "aud": self.audience,
            "iat": now,
            "nbf": now,
            "exp": now + life,
        }
        if scope:
            claims["scope"] = scope
        key = self._rogue if bad_signature else self._key
        return key.sign(claims)

    def fail_next(self, count: int, status: int = 503) -> None:
        """Answer the next ``count`` token requests with HTTP ``status`` (an outage)."""
        with self._lock:
            self._failures.extend([status] * count)

    # -- HTTP

    def _send_json(self, handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("Cache-Control", "no-store")
        handler.end_headers()
        handler.wfile.write(data)

    def _get(self, handler: BaseHTTPRequestHandler) -> None:
        path = urllib.parse.urlsplit(handler.path).path
        if path == "/jwks":
            assert self._key is not None
            self._send_json(handler, 200, {"keys": [self._key.jwk()]})
        elif path == "/.well-known/openid-configuration":
            self._send_json(
                handler,
                200,
                {
                    "issuer": self.url,
                    "token_endpoint": self.token_url,
                    "jwks_uri": self.jwks_url,
                    "grant_types_supported": ["client_credentials"],
                    "token_endpoint_auth_methods_supported": [
                        "client_secret_basic",
                        "client_secret_post",
                    ],
                    "id_token_signing_alg_values_supported": ["RS256"],
                },
            )
        else:
            self._send_json(handler, 404, {"error": "not_found"})

    def _post(self, handler: BaseHTTPRequestHandler) -> None:
        if urllib.parse.urlsplit(handler.path).path != "/token":
            self._send_json(handler, 404, {"error": "not_found"})
            return
        length = int(handler.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(handler.rfile.read(length).decode("utf-8", "replace"))
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
        if failure is not None:
            self.refused += 1
            self._send_json(handler, failure, {"error": "temporarily_unavailable"})
            return
        if form.get("grant_type") != ["client_credentials"]:
            self.refused += 1
            self._send_json(handler, 400, {"error": "unsupported_grant_type"})
            return
        client_id, secret = self._client_auth(handler, form)
        if client_id is None or self.clients.get(client_id) != secret:
            self.refused += 1
            self._send_json(
                handler,
                401,
                {"error": "invalid_client", "error_description": "client authentication failed"},
            )
            return
        scope = (form.get("scope") or [""])[0]
        token = self.issue(self.subject or client_id, scope=scope or None)
        self.token_requests += 1
        body = {"access_token": token, "token_type": "Bearer", "expires_in": self.token_lifetime}
        if scope:
            body["scope"] = scope
        self._send_json(handler, 200, body)

    @staticmethod
    def _client_auth(
        handler: BaseHTTPRequestHandler, form: Mapping[str, list[str]]
    ) -> tuple[str | None, str | None]:
        header = handler.headers.get("Authorization") or ""
        if header.startswith("Basic "):
            try:
                raw = base64.b64decode(header[6:], validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return None, None
            user, _, password = raw.partition(":")
            # RFC 6749 §2.3.1: both parts are form-urlencoded before Basic encoding
            return urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(password)
        ids = form.get("client_id")
        secrets = form.get("client_secret")
        if ids and secrets:
            return ids[0], secrets[0]
        return None, None
