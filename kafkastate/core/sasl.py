"""SASL client mechanisms as pure exchanges of byte strings.

Theory of operation
-------------------
A mechanism object produces the client's messages and checks the server's, one step at a
time: ``first_message()`` gives the initial response; ``on_challenge(data)`` takes the
server's next message and returns the client's answer (or None when the client has nothing
more to send); ``complete`` tells whether the exchange ended successfully on our side.
The connection machine carries these bytes in SaslAuthenticate requests (KIP-152).

* PLAIN (RFC 4616): one message ``authzid NUL authcid NUL passwd``.
* SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677, KIP-84): two round trips; the client
  proves the password and *verifies the server's signature* so a server that does not
  know the password cannot impersonate the broker.
* OAUTHBEARER (RFC 7628, KIP-255, KIP-342 extensions): one message carrying a bearer token
  the caller obtained; token refresh belongs to the adapter that owns the token provider.
* GSSAPI (RFC 4752, Kerberos V5, KIP-43): the core sequences the exchange -- opaque security
  context tokens until the context is established, then the security-layer negotiation
  (the server's wrapped 4-byte offer, our wrapped choice of "no security layer", as Kafka
  has no SASL security layer). The Kerberos calls themselves (a credentials cache, a KDC)
  are IO: a :class:`GssapiContext` made outside the core does them (kafkastate[gssapi]).
* AWS_MSK_IAM (Amazon MSK): one JSON message of SigV4-signed query parameters; signing
  needs the clock and AWS credentials, so an :data:`AwsMskIamSigner` made outside the core
  writes it; the core checks the server's JSON answer.

Randomness (the SCRAM client nonce) comes from a ``random.Random`` handed in: adapters pass
``random.SystemRandom()``, the simulator a seeded generator.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import json
import random
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from kafkastate.errors import AuthenticationFailedError, KafkaConfigurationError

__all__ = [
    "MECHANISMS",
    "AwsMskIamMechanism",
    "AwsMskIamSigner",
    "GssapiContext",
    "GssapiContextFactory",
    "GssapiMechanism",
    "OAuthBearerMechanism",
    "PlainMechanism",
    "SaslMechanism",
    "ScramMechanism",
    "kerberos_target",
    "make_mechanism",
]

MECHANISMS: Final = (
    "PLAIN",
    "SCRAM-SHA-256",
    "SCRAM-SHA-512",
    "OAUTHBEARER",
    "GSSAPI",
    "AWS_MSK_IAM",
)
"""Every ``sasl_mechanism`` kafkastate speaks."""

# RFC 5802 §5.1: servers must use an iteration count >= 4096 for these hashes (RFC 7677).
_MIN_SCRAM_ITERATIONS: Final = 4096
# Kafka's ScramMechanism never stores more than 16384 (brokers refuse such credentials); a
# larger count from a server is corrupt or hostile, and PBKDF2 runs on the event loop's
# thread: 10,000,000 SHA-512 rounds would block it for half a minute.
_MAX_SCRAM_ITERATIONS: Final = 16384


class SaslMechanism(Protocol):
    """A client-side SASL exchange."""

    name: str

    def first_message(self) -> bytes:
        """The client's initial response."""
        ...

    def on_challenge(self, data: bytes) -> bytes | None:
        """Take the server's message; return the reply, or None when the client is done.

        Raises:
            AuthenticationFailedError: the server's message is invalid or fails verification.
        """
        ...

    @property
    def complete(self) -> bool:
        """Whether the client side finished successfully."""
        ...


class PlainMechanism:
    """SASL/PLAIN (RFC 4616). Send it only over TLS or to a trusted network."""

    name = "PLAIN"

    def __init__(self, username: str, password: str, authzid: str = "") -> None:
        self._message = b"\0".join(s.encode() for s in (authzid, username, password))
        self._done = False

    def first_message(self) -> bytes:
        return self._message

    def on_challenge(self, data: bytes) -> bytes | None:
        # The server answers PLAIN with an empty message on success.
        self._done = True
        return None

    @property
    def complete(self) -> bool:
        return self._done


def _saslname(name: str) -> str:
    # RFC 5802 §5.1: "=" and "," in the username are escaped.
    return name.replace("=", "=3D").replace(",", "=2C")


def _parse_attributes(message: bytes, what: str) -> dict[str, str]:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailedError(f"SCRAM {what} is not UTF-8") from None
    out: dict[str, str] = {}
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailedError(f"malformed SCRAM {what}: {text!r}")
        out[part[0]] = part[2:]
    return out


class ScramMechanism:
    """SCRAM-SHA-256 / SCRAM-SHA-512 client (RFC 5802) with server signature check.

    Args:
        mechanism: ``"SCRAM-SHA-256"`` or ``"SCRAM-SHA-512"``.
        username: the SCRAM user.
        password: its password.
        rng: source of the client nonce (``random.SystemRandom()`` outside the simulator).
        client_nonce: a fixed nonce instead of one drawn from ``rng`` (test vectors only).
    """

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        rng: random.Random,
        *,
        client_nonce: str | None = None,
    ) -> None:
        if mechanism == "SCRAM-SHA-256":
            self._hash = "sha256"
        elif mechanism == "SCRAM-SHA-512":
            self._hash = "sha512"
        else:
            raise KafkaConfigurationError(f"unknown SCRAM mechanism {mechanism!r}")
        self.name = mechanism
        self._username = username
        # RFC 5802 asks for SASLprep; NFKC is its core and matches what Kafka's Java
        # client effectively sends for ASCII passwords.
        self._password = unicodedata.normalize("NFKC", password).encode()
        if client_nonce is None:
            client_nonce = base64.b64encode(rng.getrandbits(192).to_bytes(24, "big")).decode()
        self._client_nonce = client_nonce
        self._client_first_bare = f"n={_saslname(username)},r={self._client_nonce}"
        self._server_signature: bytes | None = None
        self._step = 0
        self._done = False

    def first_message(self) -> bytes:
        self._step = 1
        # gs2 header "n,," = no channel binding, no authzid.
        return ("n,," + self._client_first_bare).encode()

    def on_challenge(self, data: bytes) -> bytes | None:
        if self._step == 1:
            self._step = 2
            return self._client_final(data)
        if self._step == 2:
            self._step = 3
            self._verify_server_final(data)
            return None
        raise AuthenticationFailedError(f"{self.name}: unexpected extra server message")

    @property
    def complete(self) -> bool:
        return self._done

    def _client_final(self, server_first: bytes) -> bytes:
        attrs = _parse_attributes(server_first, "server-first-message")
        if "e" in attrs:
            raise AuthenticationFailedError(f"{self.name} failed: {attrs['e']}")
        try:
            nonce = attrs["r"]
            salt = base64.b64decode(attrs["s"], validate=True)
            iterations = int(attrs["i"])
        except (KeyError, ValueError) as exc:
            raise AuthenticationFailedError(
                f"malformed SCRAM server-first-message: {server_first!r}"
            ) from exc
        if not nonce.startswith(self._client_nonce) or len(nonce) == len(self._client_nonce):
            raise AuthenticationFailedError("SCRAM server nonce does not extend the client nonce")
        if not _MIN_SCRAM_ITERATIONS <= iterations <= _MAX_SCRAM_ITERATIONS:
            raise AuthenticationFailedError(f"SCRAM iteration count {iterations} out of range")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"  # biws = base64("n,,")
        auth_message = ",".join(
            (self._client_first_bare, server_first.decode(), without_proof)
        ).encode()
        client_signature = hmac.digest(stored_key, auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", self._hash)
        self._server_signature = hmac.digest(server_key, auth_message, self._hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final: bytes) -> None:
        attrs = _parse_attributes(server_final, "server-final-message")
        if "e" in attrs:
            raise AuthenticationFailedError(f"{self.name} failed: {attrs['e']}")
        try:
            signature = base64.b64decode(attrs["v"], validate=True)
        except (KeyError, ValueError) as exc:
            raise AuthenticationFailedError(
                f"malformed SCRAM server-final-message: {server_final!r}"
            ) from exc
        if self._server_signature is None or not hmac.compare_digest(
            signature, self._server_signature
        ):
            raise AuthenticationFailedError(
                f"{self.name}: the server's signature is wrong; it does not know the password"
            )
        self._done = True


class OAuthBearerMechanism:
    """OAUTHBEARER client (RFC 7628) with a token handed in by the caller.

    Args:
        token: the compact-serialized bearer token.
        extensions: SASL extensions (KIP-342), e.g. ``{"logicalCluster": "lkc-1"}``.
    """

    name = "OAUTHBEARER"

    def __init__(self, token: str, extensions: Mapping[str, str] | None = None) -> None:
        if not token:
            raise KafkaConfigurationError("OAUTHBEARER needs a non-empty token")
        ext = extensions or {}
        for key in ext:
            if key == "auth" or not key.isalpha():
                raise KafkaConfigurationError(f"invalid OAUTHBEARER extension name {key!r}")
        kvs = "".join(f"\x01{k}={v}" for k, v in sorted(ext.items()))
        self._message = f"n,,\x01auth=Bearer {token}{kvs}\x01\x01".encode()
        self._done = False

    def first_message(self) -> bytes:
        return self._message

    def on_challenge(self, data: bytes) -> bytes | None:
        if data:
            # RFC 7628 §3.2.3: a non-empty reply is an error status in JSON.
            raise AuthenticationFailedError(
                f"OAUTHBEARER rejected: {data.decode('utf-8', 'replace')}"
            )
        self._done = True
        return None

    @property
    def complete(self) -> bool:
        return self._done


class GssapiContext(Protocol):
    """One Kerberos security context on the initiating side: the GSS-API calls (RFC 2743)
    the core's :class:`GssapiMechanism` sequences. Made outside the core (they read a
    credentials cache and may ask a KDC for a service ticket); see ``kafkastate[gssapi]``.
    Each method raises :class:`~kafkastate.errors.AuthenticationFailedError` when the
    GSS-API call fails."""

    def step(self, token: bytes | None) -> bytes | None:
        """GSS_Init_sec_context: take the server's token (None at first), return the next
        token for the server (None or empty: nothing to send)."""
        ...

    @property
    def complete(self) -> bool:
        """Whether the context is established (GSS_S_COMPLETE)."""
        ...

    def unwrap(self, message: bytes) -> bytes:
        """GSS_Unwrap: check and open a message the server wrapped."""
        ...

    def wrap(self, message: bytes) -> bytes:
        """GSS_Wrap with integrity and no confidentiality (RFC 4752 section 3.1)."""
        ...


class GssapiContextFactory(Protocol):
    """Makes a fresh :class:`GssapiContext` for the broker's Kerberos name."""

    def __call__(self, name: Any, /, *, principal: bool = False) -> GssapiContext:
        """Args:
        name: a host-based service name ``"service@host"`` (RFC 2743 section 4.1,
            GSS_C_NT_HOSTBASED_SERVICE), e.g. ``"kafka@broker1.example.com"``; with
            ``principal``, a Kerberos principal name ``"kafka/broker1.example.com@REALM"``
            (GSS_KRB5_NT_PRINCIPAL_NAME); or a name object of the GSS-API library the
            user made (kafka-python's ``sasl_kerberos_name=gssapi.Name(...)``), used as it
            is."""
        ...


def kerberos_target(
    service_name: str, host: str | None, name: object | None
) -> tuple[object, bool] | None:
    """Which Kerberos name a GSSAPI client asks a service ticket for.

    Args:
        service_name: ``sasl_kerberos_service_name``.
        host: the service host: ``sasl_kerberos_domain_name``, else the broker's host.
        name: ``sasl_kerberos_name``, which overrides both when given.

    Returns:
        ``(name, principal)`` for :class:`GssapiContextFactory`, or None when no host
        is known.
    """
    if isinstance(name, str):
        # kafka-python's text form is a host-based service; a "/" only appears in a
        # principal name (service/host@REALM), which Java clients' users know better
        return name, "/" in name
    if name is not None:
        return name, False
    if not host:
        return None
    return f"{service_name}@{host}", False


AwsMskIamSigner = Callable[[str], bytes]
"""Writes the AWS_MSK_IAM initial message for a broker host: the JSON object of SigV4
query parameters, signed now with the current AWS credentials."""

# RFC 4752 section 3.1: bit-mask of security layers; Kafka speaks none of the others.
_LAYER_NONE: Final = 0x01


class _GssapiPhase(enum.Enum):
    ESTABLISHING = "establishing"
    """Context tokens go back and forth."""
    NEGOTIATING = "negotiating"
    """The context is established; the server's wrapped layer offer comes next."""
    CHOSEN = "chosen"
    """Our wrapped choice is sent; the server's empty answer ends the exchange."""
    DONE = "done"


class GssapiMechanism:
    """SASL/GSSAPI client (RFC 4752) over a Kerberos context made outside the core.

    Args:
        context: a fresh security context for the broker's service name.
        authzid: the authorization identity to ask for; empty (the default) means the
            authenticated Kerberos principal, which is what Kafka brokers expect.
    """

    name = "GSSAPI"

    def __init__(self, context: GssapiContext, authzid: str = "") -> None:
        self._context = context
        self._authzid = authzid.encode()
        self._phase = _GssapiPhase.ESTABLISHING

    def first_message(self) -> bytes:
        token = self._context.step(None)
        if self._context.complete:
            self._phase = _GssapiPhase.NEGOTIATING
        return token or b""

    def on_challenge(self, data: bytes) -> bytes | None:
        if self._phase is _GssapiPhase.ESTABLISHING:
            token = self._context.step(data)
            if self._context.complete:
                # RFC 4752 section 3.1: once established the client answers with the last
                # token, or an empty response, and the server sends its layer offer.
                self._phase = _GssapiPhase.NEGOTIATING
            return token or b""
        if self._phase is _GssapiPhase.NEGOTIATING:
            self._phase = _GssapiPhase.CHOSEN
            return self._choose_layer(self._context.unwrap(data))
        if self._phase is _GssapiPhase.CHOSEN and not data:
            # Kafka's SaslAuthenticate answer to the last client message is empty.
            self._phase = _GssapiPhase.DONE
            return None
        raise AuthenticationFailedError("GSSAPI: unexpected server message after the exchange")

    @property
    def complete(self) -> bool:
        return self._phase is _GssapiPhase.DONE

    def _choose_layer(self, offer: bytes) -> bytes:
        if len(offer) != 4:
            raise AuthenticationFailedError(
                f"GSSAPI: the server's security layer offer has {len(offer)} bytes, not 4"
            )
        if not offer[0] & _LAYER_NONE:
            raise AuthenticationFailedError(
                f"GSSAPI: the server requires a SASL security layer (offer 0x{offer[0]:02x}); "
                "Kafka clients use none (protect the connection with TLS instead)"
            )
        # No security layer: the maximum message size we can receive must be 0.
        return self._context.wrap(bytes((_LAYER_NONE, 0, 0, 0)) + self._authzid)


class AwsMskIamMechanism:
    """AWS_MSK_IAM client (Amazon MSK IAM access control): one SigV4-signed JSON message.

    Args:
        signer: writes the signed message for a broker host (outside the core: it reads
            the clock and AWS credentials).
        host: the broker's host name, which the signature covers.
    """

    name = "AWS_MSK_IAM"

    def __init__(self, signer: AwsMskIamSigner, host: str) -> None:
        self._signer = signer
        self._host = host
        self._done = False

    def first_message(self) -> bytes:
        return self._signer(self._host)

    def on_challenge(self, data: bytes) -> bytes | None:
        # The broker answers success with a JSON object naming its version and request id.
        try:
            answer = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            answer = None
        if not isinstance(answer, dict) or "version" not in answer:
            raise AuthenticationFailedError(
                f"AWS_MSK_IAM: the server's answer is not the expected JSON object "
                f"({len(data)} bytes)"
            )
        self._done = True
        return None

    @property
    def complete(self) -> bool:
        return self._done


def make_mechanism(
    mechanism: str,
    *,
    username: str | None = None,
    password: str | None = None,
    oauth_token: str | None = None,
    oauth_extensions: Mapping[str, str] | None = None,
    rng: random.Random | None = None,
    host: str | None = None,
    kerberos_service_name: str = "kafka",
    kerberos_domain_name: str | None = None,
    kerberos_name: object | None = None,
    gssapi: GssapiContextFactory | None = None,
    aws_msk_iam: AwsMskIamSigner | None = None,
) -> SaslMechanism:
    """Build the mechanism named by ``mechanism`` (aiokafka's ``sasl_mechanism`` values).

    Args:
        host: the broker's host name (GSSAPI's default service host; AWS_MSK_IAM signs it).
        kerberos_service_name: GSSAPI: the broker's Kerberos service (``sasl.kerberos.
            service.name``).
        kerberos_domain_name: GSSAPI: the host part of the broker's service principal
            instead of ``host`` (kafka-python's ``sasl_kerberos_domain_name``).
        kerberos_name: GSSAPI: the broker's whole Kerberos name, overriding the two
            above (kafka-python's ``sasl_kerberos_name``; see :func:`kerberos_target`).
        gssapi: GSSAPI: makes the Kerberos security context.
        aws_msk_iam: AWS_MSK_IAM: writes the signed message.

    Raises:
        KafkaConfigurationError: unknown mechanism or missing credentials.
    """
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        if username is None or password is None:
            raise KafkaConfigurationError(
                f"sasl_mechanism={mechanism!r} needs sasl_plain_username and sasl_plain_password"
            )
        if mechanism == "PLAIN":
            return PlainMechanism(username, password)
        if rng is None:
            raise KafkaConfigurationError(
                f"sasl_mechanism={mechanism!r} needs a random source for its nonce (rng=...)"
            )
        return ScramMechanism(mechanism, username, password, rng)
    if mechanism == "OAUTHBEARER":
        if oauth_token is None:
            raise KafkaConfigurationError("sasl_mechanism='OAUTHBEARER' needs a token")
        return OAuthBearerMechanism(oauth_token, oauth_extensions)
    if mechanism == "GSSAPI":
        target = kerberos_target(kerberos_service_name, kerberos_domain_name or host, kerberos_name)
        if gssapi is None or target is None:
            raise KafkaConfigurationError(
                "sasl_mechanism='GSSAPI' needs a Kerberos context factory "
                "(pip install 'kafkastate[gssapi]') and the broker's host name"
            )
        target_name, principal = target
        if principal:
            return GssapiMechanism(gssapi(target_name, principal=True))
        return GssapiMechanism(gssapi(target_name))
    if mechanism == "AWS_MSK_IAM":
        if aws_msk_iam is None or not host:
            raise KafkaConfigurationError(
                "sasl_mechanism='AWS_MSK_IAM' needs a signer (pip install 'kafkastate[aws]') "
                "and the broker's host name"
            )
        return AwsMskIamMechanism(aws_msk_iam, host)
    raise KafkaConfigurationError(
        f"unsupported sasl_mechanism {mechanism!r}; choose one of {', '.join(MECHANISMS)}"
    )
