"""BrokerConnection: the byte-level machine for one TCP connection to one broker.

Theory of operation
-------------------
The adapter opens the socket (plain or TLS) and then calls :meth:`connection_made`. From
then on the machine is driven by three inputs and read through three outputs:

* inputs: :meth:`receive_data` (bytes at any split point; ``b""`` = EOF),
  :meth:`handle_timer`, and commands (:meth:`send_request`, :meth:`close`);
* outputs: :meth:`data_to_send`, :meth:`next_event` (drain until None), :meth:`get_timer`.

Right after ``connection_made`` the machine runs the handshake on its own:

1. ApiVersions at the highest version we know (KIP-511 fields in v3+). A broker that does
   not speak that version answers UNSUPPORTED_VERSION with a v0 body listing its own
   ApiVersions range; we retry once at the highest version it names.
2. With SASL configured: SaslHandshake v1 (mechanism) then SaslAuthenticate (KIP-152)
   rounds until the mechanism is complete. Any failure is an AuthenticationFailedError
   that closes the connection at once: no retry can fix wrong credentials.
   Credentials are read at the start of every exchange (the first and each
   re-authentication): a callable username/password is called then; an OAUTHBEARER token
   from a provider is asked for with :class:`TokenRequested` (the adapter awaits the
   user's provider and answers :meth:`~BrokerConnection.token_received` or
   :meth:`~BrokerConnection.token_failed`) while the SaslHandshake is on the wire; the
   first SaslAuthenticate goes once both the handshake answer and the token are in.
3. READY: :class:`ConnectionReady` carries the negotiated :class:`ApiVersionTable`.

Requests submitted before READY wait in a queue and go out when the handshake ends.
At most ``max_in_flight`` requests are on the wire; Kafka answers in order on a
connection, so a response whose correlation id is not the oldest in-flight one is a
protocol violation. A request that outlives its timeout closes the connection (its
response can no longer be matched safely), failing every in-flight request, as the Java
client's NetworkClient does.

Malformed bytes raise :class:`RemoteProtocolError` from :meth:`receive_data` and leave the
machine in the terminal ERROR state; the adapter closes the socket.

TLS mismatches are named, never retried into a loop: a TLS listener reached without TLS
answers the first request with a TLS record (an alert), whose header would read as a frame
of more than 350 MB; the first bytes of a connection are checked for that header and such a
connection ends with :class:`SecurityProtocolMismatchError`. A TLS refusal the adapter
reports to :meth:`connection_lost` (an :class:`AuthenticationFailedError`, such as
:class:`SslAuthenticationError`) keeps its type, so the client does not retry it either.
"""

from __future__ import annotations

import enum
import random
import re
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final, NewType

import attrs

from kafkastate._version import __version__
from kafkastate.core.deadlines import earliest
from kafkastate.core.protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    EncodedRequest,
    FrameDecoder,
    decode_body,
    decode_response_header,
    encode_body,
    frame_request,
    response_header_version,
)
from kafkastate.core.protocol.versions import (
    CLIENT_VERSIONS,
    ApiKey,
    ApiVersionTable,
    api_name,
    request_type,
    response_type,
)
from kafkastate.core.sasl import (
    MECHANISMS,
    AwsMskIamSigner,
    GssapiContextFactory,
    SaslMechanism,
    make_mechanism,
)
from kafkastate.core.states import StateTable, register, transition
from kafkastate.errors import (
    AuthenticationFailedError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    LocalProtocolError,
    RemoteProtocolError,
    SecurityProtocolMismatchError,
    UnsupportedVersionError,
    error_for_code,
)

__all__ = [
    "BrokerConnection",
    "ConnectionClosed",
    "ConnectionConfig",
    "ConnectionEvent",
    "ConnectionReady",
    "ConnectionReauthenticated",
    "CONNECTION_STATES",
    "ConnectionState",
    "CorrelationId",
    "RequestFailed",
    "ResponseReceived",
    "TokenRequested",
]

CorrelationId = NewType("CorrelationId", int)

_UNSUPPORTED_VERSION: Final = 35
_UNSUPPORTED_SASL_MECHANISM: Final = 33
# KIP-511: software name/version must match this, or the broker answers INVALID_REQUEST.
_SOFTWARE_RE: Final = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


class ConnectionState(enum.Enum):
    """States of :class:`BrokerConnection`."""

    IDLE = "idle"
    """Created; the socket is not connected yet."""
    API_VERSIONS = "api_versions"
    """ApiVersions request sent, waiting for the answer."""
    SASL_HANDSHAKE = "sasl_handshake"
    """SaslHandshake sent."""
    SASL_AUTHENTICATE = "sasl_authenticate"
    """SaslAuthenticate rounds under way."""
    READY = "ready"
    """Handshake done; user requests flow."""
    REAUTHENTICATING = "reauthenticating"
    """SASL re-authentication (KIP-368): in-flight requests drain, new ones wait."""
    CLOSED = "closed"
    """Closed by us, by the peer, or after a timeout or authentication failure."""
    ERROR = "error"
    """The peer broke the protocol; terminal."""


_TERMINAL: Final = (ConnectionState.CLOSED, ConnectionState.ERROR)  # a tuple: no enum hashing
# (On Python 3.11 ``EnumClass.MEMBER`` goes through EnumType.__getattr__'s slow lookup,
# several times a global's: the hot paths below compare with these module constants.)
_READY: Final = ConnectionState.READY
_REAUTHENTICATING: Final = ConnectionState.REAUTHENTICATING

# RFC 8446 5.1 (and RFC 5246 6.2.1): a TLS record starts with its content type (21 alert,
# 22 handshake) and the legacy version 3.0-3.4; read as a Kafka size prefix these three
# bytes mean a frame of at least 352 MB, which no first response is.
_TLS_RECORD_TYPES: Final = {21: "a TLS alert", 22: "a TLS handshake record"}
_TLS_HEADER_SIZE: Final = 3

_DECODED: dict[tuple[type[Any], bytes], Any] = {}
"""Small response bodies already decoded, by entity class and bytes (see :func:`_decode`)."""
_DECODED_MAX: Final = 256  # entries; the cache is emptied when full
_DECODED_BODY_MAX: Final = 2048  # bytes: a bigger body is decoded every time, never kept


_ENCODED: dict[Any, bytes] = {}
"""Small request bodies already encoded, by entity (frozen, compared by value)."""
_ENCODED_MAX: Final = 256  # entries; the cache is emptied when full
_ENCODED_BODY_MAX: Final = 2048  # bytes: a bigger body is not kept
# Never kept process-wide: the SASL exchange carries credentials, proofs and tokens.
_NEVER_KEPT: Final = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


def _decode(cls: type[Any], view: memoryview, offset: int) -> Any:
    """The response entity of class ``cls`` in ``view[offset:]``. A small body decoded
    before -- the answers that repeat byte for byte are small: a Heartbeat's, a commit's,
    an empty Fetch's, ApiVersions and Metadata on each new connection -- is not checked
    and decoded again: decoding is a pure function of the class and the bytes, and kio
    entities are frozen, so sharing one is safe (also across connections and threads)."""
    if len(view) - offset > _DECODED_BODY_MAX or cls.__api_key__ in _NEVER_KEPT:
        return decode_body(cls, view, offset)
    key = (cls, bytes(view[offset:]))
    response = _DECODED.get(key)
    if response is None:
        response = decode_body(cls, view, offset)  # raises on malformed bytes: not kept
        if len(_DECODED) >= _DECODED_MAX:
            _DECODED.clear()
        _DECODED[key] = response
    return response


# STYLE §6: the legal transitions; anything not listed raises LocalProtocolError.
CONNECTION_STATES: Final = register(
    StateTable(
        machine="BrokerConnection",
        states=ConnectionState,
        initial=ConnectionState.IDLE,
        transitions={
            ConnectionState.IDLE: {ConnectionState.API_VERSIONS, *_TERMINAL},
            ConnectionState.API_VERSIONS: {
                ConnectionState.SASL_HANDSHAKE,
                ConnectionState.READY,
                *_TERMINAL,
            },
            ConnectionState.SASL_HANDSHAKE: {ConnectionState.SASL_AUTHENTICATE, *_TERMINAL},
            ConnectionState.SASL_AUTHENTICATE: {ConnectionState.READY, *_TERMINAL},
            ConnectionState.READY: {ConnectionState.REAUTHENTICATING, *_TERMINAL},
            ConnectionState.REAUTHENTICATING: {ConnectionState.READY, *_TERMINAL},
            ConnectionState.CLOSED: set(),
            ConnectionState.ERROR: set(),
        },
    )
)


def _positive(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attr.name} must be > 0, got {value!r}")


def _software(_inst: object, attr: attrs.Attribute[Any], value: str) -> None:
    if not _SOFTWARE_RE.match(value):
        raise ValueError(
            f"{attr.name} {value!r} must be letters, digits, '-' and '.', "
            "starting and ending with a letter or digit (KIP-511)"
        )


def _sasl_mechanism(_inst: object, _attr: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and value not in MECHANISMS:
        raise KafkaConfigurationError(
            f"sasl_mechanism must be one of {', '.join(MECHANISMS)}, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class ConnectionConfig:
    """Settings of one broker connection. Durations are float seconds."""

    client_id: str | None = "kafkastate"
    """Sent in every request header (``client.id``)."""
    request_timeout: float = attrs.field(default=30.0, validator=_positive)
    """How long a request may wait for its response (``request.timeout.ms``)."""
    max_in_flight: int = attrs.field(default=5, validator=_positive)
    """Requests on the wire at once (``max.in.flight.requests.per.connection``)."""
    client_software_name: str = attrs.field(default="kafkastate", validator=_software)
    """KIP-511 ``client.software.name`` sent in ApiVersions v3+."""
    client_software_version: str = attrs.field(
        default=__version__.replace("+", "-"), validator=_software
    )
    """KIP-511 ``client.software.version``."""
    sasl_mechanism: str | None = attrs.field(default=None, validator=_sasl_mechanism)
    """``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``, ``OAUTHBEARER``, ``GSSAPI``,
    ``AWS_MSK_IAM`` or None (no SASL)."""
    sasl_username: str | Callable[[], str] | None = None
    """Username for PLAIN and SCRAM (aiokafka: ``sasl_plain_username``), or a callable
    returning the current one, called at every (re-)authentication."""
    sasl_password: str | Callable[[], str] | None = attrs.field(default=None, repr=False)
    """Password for PLAIN and SCRAM (aiokafka: ``sasl_plain_password``), or a callable
    returning the current one (rotated without a restart), called at every
    (re-)authentication."""
    sasl_oauth_token: str | None = attrs.field(default=None, repr=False)
    """A fixed bearer token for OAUTHBEARER, obtained by the caller."""
    sasl_oauth_token_provider: bool = False
    """OAUTHBEARER tokens come from the user's token provider (``sasl_oauth_token_provider``):
    each (re-)authentication emits :class:`TokenRequested` and waits (up to
    ``request_timeout``) for the adapter's :meth:`BrokerConnection.token_received`."""
    sasl_oauth_extensions: Mapping[str, str] | None = None
    """SASL extensions for OAUTHBEARER (KIP-342)."""
    sasl_kerberos_service_name: str = "kafka"
    """GSSAPI: the brokers' Kerberos service name (``sasl.kerberos.service.name``)."""
    sasl_kerberos_domain_name: str | None = None
    """GSSAPI: the host part of the brokers' service principal (default: each broker's
    own host name, as kafka-python's ``sasl_kerberos_domain_name``)."""
    sasl_kerberos_name: object | None = None
    """GSSAPI: the brokers' Kerberos name, overriding the two above (kafka-python's
    ``sasl_kerberos_name``): ``"service@host"``, a principal ``"service/host@REALM"``, or
    a ``gssapi.Name`` handed to the context factory as it is."""
    sasl_gssapi: GssapiContextFactory | None = attrs.field(default=None, eq=False)
    """GSSAPI: makes the Kerberos security contexts (kafkastate[gssapi] provides one)."""
    sasl_aws_msk_iam: AwsMskIamSigner | None = attrs.field(default=None, eq=False, repr=False)
    """AWS_MSK_IAM: writes the signed message (kafkastate[aws] provides one)."""
    max_frame_size: int = attrs.field(default=DEFAULT_MAX_FRAME_SIZE, validator=_positive)
    """Largest response accepted, in bytes; larger is treated as corrupt input."""

    def __attrs_post_init__(self) -> None:
        mechanism = self.sasl_mechanism
        if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and (
            self.sasl_username is None or self.sasl_password is None
        ):
            raise KafkaConfigurationError(
                f"sasl_mechanism {mechanism} needs a username and a password "
                "(sasl_plain_username / sasl_plain_password)"
            )
        if (
            mechanism == "OAUTHBEARER"
            and not self.sasl_oauth_token
            and not self.sasl_oauth_token_provider
        ):
            raise KafkaConfigurationError(
                "sasl_mechanism OAUTHBEARER needs a token provider (sasl_oauth_token_provider)"
                " or a fixed token (sasl_oauth_token)"
            )
        if mechanism == "GSSAPI" and self.sasl_gssapi is None:
            raise KafkaConfigurationError(
                "sasl_mechanism GSSAPI needs the gssapi package: pip install 'kafkastate[gssapi]'"
            )
        if mechanism == "AWS_MSK_IAM" and self.sasl_aws_msk_iam is None:
            raise KafkaConfigurationError(
                "sasl_mechanism AWS_MSK_IAM needs botocore: pip install 'kafkastate[aws]'"
            )
        if mechanism == "GSSAPI" and not self.sasl_kerberos_service_name:
            raise KafkaConfigurationError("sasl_kerberos_service_name must not be empty")


@attrs.frozen(kw_only=True)
class ConnectionReady:
    """The handshake finished; requests can flow."""

    versions: ApiVersionTable
    """The negotiated API versions."""
    sasl_session_lifetime: float | None = None
    """Seconds until the broker expects re-authentication (KIP-368), if it said."""


@attrs.frozen(kw_only=True)
class ResponseReceived:
    """A response arrived for a request sent with :meth:`BrokerConnection.send_request`."""

    correlation_id: CorrelationId
    """The id :meth:`~BrokerConnection.send_request` returned."""
    request: Any
    """The kio request entity that was sent."""
    response: Any
    """The decoded kio response entity."""


@attrs.frozen(kw_only=True)
class RequestFailed:
    """A request will get no response (timeout, connection closed)."""

    correlation_id: CorrelationId
    """The id :meth:`~BrokerConnection.send_request` returned."""
    request: Any
    """The kio request entity."""
    error: KafkaError
    """Why: ``KafkaTimeoutError`` for the request that timed out, otherwise the error that
    closed the connection."""


@attrs.frozen(kw_only=True)
class ConnectionClosed:
    """The connection ended; the adapter must close the socket. Emitted once, last."""

    error: KafkaError | None
    """None when :meth:`~BrokerConnection.close` was called; otherwise the cause
    (``AuthenticationFailedError`` means: do not reconnect with the same credentials)."""


@attrs.frozen(kw_only=True)
class ConnectionReauthenticated:
    """A KIP-368 re-authentication succeeded on the live connection."""

    sasl_session_lifetime: float | None
    """Seconds until the next one is due, if the broker said."""


@attrs.frozen(kw_only=True)
class TokenRequested:
    """An OAUTHBEARER (re-)authentication needs a token: the adapter calls the user's token
    provider (``await provider.token()``, or ``provider.token()`` on a blocking client)
    and answers with :meth:`BrokerConnection.token_received` or
    :meth:`BrokerConnection.token_failed`."""


ConnectionEvent = (
    ConnectionReady
    | ResponseReceived
    | RequestFailed
    | ConnectionClosed
    | TokenRequested
    | ConnectionReauthenticated
)


@attrs.define(slots=True)
class _Request:
    correlation_id: CorrelationId
    request: Any
    api_key: int
    version: int
    flexible: bool
    timeout: float
    deadline: float
    internal: bool
    expect_response: bool


class BrokerConnection:
    """The sans-IO machine for one broker connection.

    Args:
        config: connection settings.
        rng: randomness for the SCRAM nonce; adapters pass ``random.SystemRandom()``,
            the simulator a seeded ``random.Random``. Needed only with SCRAM.
        known_versions: what this broker answered to ApiVersions on an earlier connection
            (the :class:`~kafkastate.core.client.Client` keeps it per node); the handshake
            then skips the ApiVersions round trip.
        host: the broker's host name as connected to: GSSAPI's default service host and
            what AWS_MSK_IAM signs. Needed only with those mechanisms.
    """

    def __init__(
        self,
        config: ConnectionConfig,
        *,
        rng: random.Random | None = None,
        known_versions: ApiVersionTable | None = None,
        host: str | None = None,
    ) -> None:
        self.config = config
        self._host = host
        self._known_versions = known_versions
        self._state = ConnectionState.IDLE
        self._rng = rng
        self._decoder = FrameDecoder(config.max_frame_size)
        self._head = b""
        """The connection's first bytes, kept until a TLS record header is ruled out."""
        self._out = bytearray()
        self._last_bodies: dict[type[Any], tuple[Any, bytes]] = {}  # see _body()
        self._events: deque[ConnectionEvent] = deque()
        self._in_flight: deque[_Request] = deque()
        self._pending: deque[_Request] = deque()
        self._next_correlation_id = 0
        self._versions: ApiVersionTable | None = None
        self._api_versions_version = CLIENT_VERSIONS[ApiKey.API_VERSIONS][1]
        self._api_versions_retried = False
        self._mechanism: SaslMechanism | None = None
        self._session_lifetime: float | None = None
        self._reauth_at: float | None = None
        self._reauth_started = False
        self._token_deadline: float | None = None
        """Set while a TokenRequested waits for its answer."""
        self._handshake_answered = False

    # ----------------------------------------------------------------- properties

    @property
    def state(self) -> ConnectionState:
        """The current state."""
        return self._state

    @property
    def versions(self) -> ApiVersionTable | None:
        """The negotiated versions, once the ApiVersions answer arrived."""
        return self._versions

    @property
    def versions_reused(self) -> bool:
        """Whether the handshake took the versions of an earlier connection (no ApiVersions)."""
        return self._known_versions is not None

    @property
    def in_flight_count(self) -> int:
        """Requests written and awaiting a response (handshake requests included)."""
        return len(self._in_flight)

    @property
    def queued_count(self) -> int:
        """Requests accepted but not yet written (waiting for READY or a free slot)."""
        return len(self._pending)

    @property
    def awaiting_token(self) -> bool:
        """Whether a :class:`TokenRequested` waits for :meth:`token_received`."""
        return self._token_deadline is not None

    def can_send(self) -> bool:
        """Whether a request sent now would go on the wire at once."""
        return (
            self._state is ConnectionState.READY
            and not self._pending
            and len(self._in_flight) < self.config.max_in_flight
        )

    # ------------------------------------------------------------------- inputs

    def connection_made(self, *, now: float) -> None:
        """The socket is connected (and TLS established): start the handshake.

        Raises:
            LocalProtocolError: called twice, or after close.
        """
        self._transition(ConnectionState.API_VERSIONS, what="connection_made")
        if self._known_versions is not None:
            self._versions = self._known_versions
            self._versions_known(now)
            return
        self._send_api_versions(now)

    def send_request(
        self,
        request: Any,
        *,
        now: float,
        timeout: float | None = None,
        expect_response: bool = True,
    ) -> CorrelationId:
        """Queue a kio request entity; it is written once READY and a slot is free.

        Args:
            request: a kio request entity of a version the broker supports (build it with
                ``connection.versions.request_type(api_key)``).
            now: the driver's clock.
            timeout: seconds until :class:`RequestFailed` with a timeout; defaults to
                ``config.request_timeout``.
            expect_response: False only for Produce with ``acks=0``, which gets no answer.

        Returns:
            The correlation id later events carry.

        Raises:
            LocalProtocolError: the connection is closed, or the entity is not a request.
        """
        if self._state in _TERMINAL:
            raise LocalProtocolError(f"send_request on a connection in state {self._state.name}")
        cls = type(request)
        try:
            api_key = int(cls.__api_key__)
            version = int(cls.__version__)
            flexible = bool(cls.__flexible__)
        except AttributeError:
            raise LocalProtocolError(f"{cls.__name__} is not a kio request entity") from None
        if timeout is None:
            timeout = self.config.request_timeout
        self._begin_reauth_if_due(now)
        req = _Request(
            correlation_id=self._new_correlation_id(),
            request=request,
            api_key=api_key,
            version=version,
            flexible=flexible,
            timeout=timeout,
            deadline=now + timeout,
            internal=False,
            expect_response=expect_response,
        )
        self._pending.append(req)
        self._flush_pending(now)
        return req.correlation_id

    def token_received(
        self, token: str, *, now: float, extensions: Mapping[str, str] | None = None
    ) -> None:
        """The answer to :class:`TokenRequested`: the token (and KIP-342 extensions) to
        authenticate with. Ignored when no token is awaited (a late answer).

        Args:
            token: the compact-serialized bearer token.
            now: the driver's clock.
            extensions: SASL extensions from the provider's ``extensions()``.
        """
        if self._token_deadline is None or self._state in _TERMINAL:
            return
        self._token_deadline = None
        try:
            self._mechanism = make_mechanism(
                "OAUTHBEARER", oauth_token=token, oauth_extensions=extensions
            )
        except KafkaError as exc:
            self._close(AuthenticationFailedError(f"unusable OAUTHBEARER token: {exc}"))
            return
        self._maybe_authenticate(now)

    def token_failed(self, error: BaseException, *, now: float) -> None:
        """The token provider raised instead of answering :class:`TokenRequested`: the
        connection closes with its error (a KafkaError as is, anything else as the cause
        of an AuthenticationFailedError). Ignored when no token is awaited.

        Args:
            error: what the provider raised.
            now: the driver's clock.
        """
        del now
        if self._token_deadline is None or self._state in _TERMINAL:
            return
        self._token_deadline = None
        if isinstance(error, KafkaError):
            self._close(error)
            return
        exc = AuthenticationFailedError(
            f"the OAUTHBEARER token provider failed: {type(error).__name__}: {error}"
        )
        exc.__cause__ = error
        self._close(exc)

    def receive_data(self, data: bytes | bytearray | memoryview, *, now: float) -> None:
        """Feed bytes read from the socket; ``b""`` means the peer closed it.

        Raises:
            RemoteProtocolError: the bytes break framing or decoding; the machine is in
                ERROR and has queued RequestFailed/ConnectionClosed events.
            LocalProtocolError: called before :meth:`connection_made`.
        """
        if self._state in _TERMINAL:
            return  # late bytes after close: nothing to do with them
        if self._state is ConnectionState.IDLE:
            raise LocalProtocolError("receive_data before connection_made")
        if not data:
            self._close(KafkaConnectionError("connection closed by the broker"))
            return
        if len(self._head) < _TLS_HEADER_SIZE and self._answered_in_tls(data):
            return
        self._begin_reauth_if_due(now)
        try:
            self._decoder.feed(data)
            while self._state not in _TERMINAL:
                frame = self._decoder.next_frame()
                if frame is None:
                    break
                self._handle_frame(frame, now)
        except RemoteProtocolError as exc:
            self._close(exc, state=ConnectionState.ERROR)
            raise

    def connection_lost(self, *, now: float, error: BaseException | None = None) -> None:
        """The socket failed or closed underneath us (reset, TLS error...). An
        :class:`AuthenticationFailedError` (the adapter's typed TLS refusal) ends the
        connection with that error as it is: it is not a lost connection to retry."""
        if self._state in _TERMINAL:
            return
        if isinstance(error, AuthenticationFailedError):
            self._close(error)
            return
        cause = f": {error}" if error is not None else ""
        exc = KafkaConnectionError(f"connection lost{cause}")
        if error is not None:
            exc.__cause__ = error
        self._close(exc)

    def _answered_in_tls(self, data: bytes | bytearray | memoryview) -> bool:
        """Whether the connection's first bytes are a TLS record header: then the
        connection is closed with SecurityProtocolMismatchError."""
        self._head += bytes(data[: _TLS_HEADER_SIZE - len(self._head)])
        if len(self._head) < _TLS_HEADER_SIZE:
            return False
        content_type, major, minor = self._head
        kind = _TLS_RECORD_TYPES.get(content_type)
        if kind is None or major != 3 or minor > 4:
            return False
        self._close(
            SecurityProtocolMismatchError(
                f"the broker answered with {kind}: it is a TLS listener, so set "
                "security_protocol='SSL' (or 'SASL_SSL'), or use its PLAINTEXT port"
            ),
            state=ConnectionState.ERROR,
        )
        return True

    def close(self) -> None:
        """Close from our side; queued and in-flight requests fail with KafkaConnectionError."""
        if self._state in _TERMINAL:
            return
        self._close(None)

    def handle_timer(self, *, now: float) -> None:
        """Expire requests whose deadline passed. Safe to call early or twice."""
        if self._state in _TERMINAL:
            return
        # Unsent requests time out alone: nothing is on the wire for them.
        if self._pending:
            keep: deque[_Request] = deque()
            for req in self._pending:
                if req.deadline <= now:
                    self._events.append(
                        RequestFailed(
                            correlation_id=req.correlation_id,
                            request=req.request,
                            error=KafkaTimeoutError(
                                f"{api_name(req.api_key)} request timed out after "
                                f"{req.timeout:g} s before it could be sent"
                            ),
                        )
                    )
                else:
                    keep.append(req)
            self._pending = keep
        self._begin_reauth_if_due(now)
        if self._token_deadline is not None and self._token_deadline <= now:
            self._token_deadline = None
            self._close(
                KafkaTimeoutError(
                    "the OAUTHBEARER token provider gave no token within "
                    f"{self.config.request_timeout:g} s"
                )
            )
            return
        for req in self._in_flight:
            if req.deadline <= now:
                what = "handshake " if req.internal else ""
                error = KafkaTimeoutError(
                    f"{what}{api_name(req.api_key)} request (correlation id "
                    f"{req.correlation_id}) got no response within {req.timeout:g} s"
                )
                self._close(error, timed_out=req)
                return

    # ------------------------------------------------------------------ outputs

    def data_to_send(self) -> bytes:
        """Bytes to write to the socket (possibly empty); clears the buffer."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def next_event(self) -> ConnectionEvent | None:
        """The next event, or None; call until None after every input."""
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        """The earliest deadline at which :meth:`handle_timer` must be called, or None."""
        if self._state in _TERMINAL:
            return None
        best = self._token_deadline
        if self._state is _READY:
            best = earliest(best, self._reauth_at)
        # earliest() inlined: the client asks every connection after each of its inputs
        for queue in (self._in_flight, self._pending):
            for r in queue:
                t = r.deadline
                if best is None or t < best:
                    best = t
        return best

    # ---------------------------------------------------------------- internals

    def _transition(self, new: ConnectionState, *, what: str) -> None:
        self._state = transition(CONNECTION_STATES, self._state, new, what=what)

    def _new_correlation_id(self) -> CorrelationId:
        cid = self._next_correlation_id
        self._next_correlation_id = (cid + 1) & 0x7FFFFFFF
        return CorrelationId(cid)

    def _write(self, req: _Request) -> None:
        self._out += frame_request(
            req.request,
            self._body(req.request),
            correlation_id=req.correlation_id,
            client_id=self.config.client_id,
        )
        if req.expect_response:
            self._in_flight.append(req)

    def _body(self, entity: Any) -> bytes:
        """The encoding of a request entity; a request equal to the last one of its class
        on this connection (a Fetch of a caught-up consumer, a Heartbeat) is not encoded
        again (kio entities are frozen and compare by value), nor a small one encoded
        before on any connection (the handshake's ApiVersions, Metadata, FindCoordinator,
        a JoinGroup again: see :data:`_ENCODED`)."""
        if isinstance(entity, EncodedRequest):
            return entity.body
        cls = type(entity)
        last = self._last_bodies.get(cls)
        if last is not None and (last[0] is entity or last[0] == entity):
            return last[1]
        keep = cls.__api_key__ not in _NEVER_KEPT
        try:
            body = _ENCODED.get(entity) if keep else None
        except TypeError:  # a field kio holds unhashable: encode it every time
            body = None
        if body is None:
            body = encode_body(entity)
            if keep and len(body) <= _ENCODED_BODY_MAX:
                if len(_ENCODED) >= _ENCODED_MAX:
                    _ENCODED.clear()
                _ENCODED[entity] = body
        self._last_bodies[cls] = (entity, body)
        return body

    def _send_internal(self, request: Any, now: float) -> None:
        cls = type(request)
        timeout = self.config.request_timeout
        self._write(
            _Request(
                correlation_id=self._new_correlation_id(),
                request=request,
                api_key=int(cls.__api_key__),
                version=int(cls.__version__),
                flexible=bool(cls.__flexible__),
                timeout=timeout,
                deadline=now + timeout,
                internal=True,
                expect_response=True,
            )
        )

    def _flush_pending(self, now: float) -> None:
        if self._state is not _READY:
            return
        while self._pending and len(self._in_flight) < self.config.max_in_flight:
            req = self._pending.popleft()
            # The timeout measures time on the wire, as the Java client does.
            req.deadline = now + req.timeout
            if self._versions is not None and not self._versions.supports(req.api_key):
                self._events.append(
                    RequestFailed(
                        correlation_id=req.correlation_id,
                        request=req.request,
                        error=self._unsupported(req),
                    )
                )
                continue
            self._write(req)

    def _unsupported(self, req: _Request) -> UnsupportedVersionError:
        assert self._versions is not None
        try:
            self._versions.version_for(req.api_key)
        except UnsupportedVersionError as exc:
            return exc
        return UnsupportedVersionError(f"{api_name(req.api_key)} v{req.version} not supported")

    def _handle_frame(self, frame: bytes, now: float) -> None:
        if not self._in_flight:
            raise RemoteProtocolError(f"unsolicited response frame of {len(frame)} bytes")
        req = self._in_flight[0]
        view = memoryview(frame)
        header_version = response_header_version(req.api_key, req.flexible)
        correlation_id, offset = decode_response_header(view, header_version)
        if correlation_id != req.correlation_id:
            raise RemoteProtocolError(
                f"response correlation id {correlation_id} does not match the oldest "
                f"in-flight request ({api_name(req.api_key)}, id {req.correlation_id})"
            )
        self._in_flight.popleft()
        if req.api_key == ApiKey.API_VERSIONS and req.internal:
            self._on_api_versions(req, view, offset, now)
            return
        response = _decode(response_type(req.api_key, req.version), view, offset)
        if req.internal:
            self._on_internal_response(req, response, now)
        else:
            self._events.append(
                ResponseReceived(
                    correlation_id=req.correlation_id, request=req.request, response=response
                )
            )
            if self._state is _REAUTHENTICATING:
                self._maybe_start_reauth(now)
            else:
                self._flush_pending(now)

    # -- handshake

    def _send_api_versions(self, now: float) -> None:
        cls = request_type(ApiKey.API_VERSIONS, self._api_versions_version)
        if self._api_versions_version >= 3:
            request = cls(
                client_software_name=self.config.client_software_name,
                client_software_version=self.config.client_software_version,
            )
        else:
            request = cls()
        self._send_internal(request, now)

    def _on_api_versions(self, req: _Request, view: memoryview, offset: int, now: float) -> None:
        if len(view) - offset < 2:
            raise RemoteProtocolError("ApiVersions response has no error code")
        error_code = int.from_bytes(view[offset : offset + 2], "big", signed=True)
        if error_code == _UNSUPPORTED_VERSION:
            # KIP-511: the broker answers in v0 and names the versions it supports.
            body = decode_body(response_type(ApiKey.API_VERSIONS, 0), view, offset)
            theirs = {int(k.api_key): int(k.max_version) for k in body.api_keys}
            retry_at = theirs.get(ApiKey.API_VERSIONS, 0)
            if self._api_versions_retried or retry_at >= self._api_versions_version:
                self._close(
                    UnsupportedVersionError(
                        f"broker refused ApiVersions v{self._api_versions_version} and offers "
                        f"up to v{retry_at}",
                        api_key=ApiKey.API_VERSIONS,
                        api_name="ApiVersions",
                        client_range=CLIENT_VERSIONS[ApiKey.API_VERSIONS],
                        broker_range=(0, retry_at),
                    )
                )
                return
            self._api_versions_retried = True
            self._api_versions_version = retry_at
            self._send_api_versions(now)
            return
        body = _decode(response_type(ApiKey.API_VERSIONS, req.version), view, offset)
        if error_code != 0:
            self._close(error_for_code(error_code)("ApiVersions failed"))
            return
        self._versions = ApiVersionTable.from_api_keys(body.api_keys)
        self._versions_known(now)

    def _versions_known(self, now: float) -> None:
        if self.config.sasl_mechanism is None:
            self._become_ready(now)
            return
        self._start_sasl(now)

    def _begin_reauth_if_due(self, now: float) -> None:
        # Checked on every input that carries `now`, not only in handle_timer: a lazy driver
        # must not get a user request written after the session expired (KIP-368).
        if (
            self._state is ConnectionState.READY
            and self._reauth_at is not None
            and self._reauth_at <= now
        ):
            # Stop sending, let in-flight requests drain, then authenticate again.
            self._transition(ConnectionState.REAUTHENTICATING, what="re-authentication due")
            self._reauth_at = None
            self._reauth_started = False
            self._maybe_start_reauth(now)

    def _maybe_start_reauth(self, now: float) -> None:
        if self._reauth_started or any(not r.internal for r in self._in_flight):
            return
        self._reauth_started = True
        self._start_sasl(now)

    def _start_sasl(self, now: float) -> None:
        assert self._versions is not None
        config = self.config
        mechanism = config.sasl_mechanism
        if mechanism is None:  # pragma: no cover - only called with SASL configured
            raise LocalProtocolError("SASL exchange without a configured mechanism")
        self._mechanism = None
        self._handshake_answered = False
        try:
            version = self._versions.version_for(ApiKey.SASL_HANDSHAKE)
            self._versions.version_for(ApiKey.SASL_AUTHENTICATE)
            if version < 1:
                # v0 sends raw SASL tokens outside Kafka framing; Kafka >= 1.0 supports v1.
                raise AuthenticationFailedError("broker supports only SaslHandshake v0")
            if mechanism == "OAUTHBEARER" and config.sasl_oauth_token_provider:
                # A fresh token for every exchange; fetched while the handshake is on
                # the wire (KIP-368: a re-authentication needs an unexpired token).
                self._token_deadline = now + config.request_timeout
                self._events.append(TokenRequested())
            else:
                self._mechanism = make_mechanism(
                    mechanism,
                    username=_current(config.sasl_username, "sasl_plain_username"),
                    password=_current(config.sasl_password, "sasl_plain_password"),
                    oauth_token=config.sasl_oauth_token,
                    oauth_extensions=config.sasl_oauth_extensions,
                    rng=self._rng,
                    host=self._host,
                    kerberos_service_name=config.sasl_kerberos_service_name,
                    kerberos_domain_name=config.sasl_kerberos_domain_name,
                    kerberos_name=config.sasl_kerberos_name,
                    gssapi=config.sasl_gssapi,
                    aws_msk_iam=config.sasl_aws_msk_iam,
                )
        except KafkaError as exc:
            self._token_deadline = None
            self._close(exc)
            return
        if self._state is not ConnectionState.REAUTHENTICATING:
            self._transition(ConnectionState.SASL_HANDSHAKE, what="ApiVersions answered")
        handshake = request_type(ApiKey.SASL_HANDSHAKE, version)
        self._send_internal(handshake(mechanism=mechanism), now)

    def _on_internal_response(self, req: _Request, response: Any, now: float) -> None:
        if req.api_key == ApiKey.SASL_HANDSHAKE:
            self._on_sasl_handshake(response, now)
        elif req.api_key == ApiKey.SASL_AUTHENTICATE:
            self._on_sasl_authenticate(response, now)
        else:  # pragma: no cover - we only send the three handshake APIs internally
            raise LocalProtocolError(f"no handler for internal {api_name(req.api_key)}")

    def _on_sasl_handshake(self, response: Any, now: float) -> None:
        code = int(response.error_code)
        if code == _UNSUPPORTED_SASL_MECHANISM:
            offered = ", ".join(response.mechanisms) or "none"
            self._close(
                AuthenticationFailedError(
                    f"broker does not enable SASL mechanism {self.config.sasl_mechanism!r}; "
                    f"it offers: {offered}"
                )
            )
            return
        if code != 0:
            err = error_for_code(code)
            self._close(AuthenticationFailedError(f"SaslHandshake failed: {err.__name__}"))
            return
        self._handshake_answered = True
        self._maybe_authenticate(now)

    def _maybe_authenticate(self, now: float) -> None:
        # The first SaslAuthenticate needs both the handshake's answer and the credentials.
        if not self._handshake_answered or self._mechanism is None:
            return
        self._handshake_answered = False
        if self._state is not ConnectionState.REAUTHENTICATING:
            self._transition(ConnectionState.SASL_AUTHENTICATE, what="SaslHandshake answered")
        try:
            # GSSAPI's first token can fail here already: no Kerberos ticket, unknown service
            first = self._mechanism.first_message()
        except AuthenticationFailedError as exc:
            self._close(exc)
            return
        self._send_sasl_authenticate(first, now)

    def _send_sasl_authenticate(self, payload: bytes, now: float) -> None:
        assert self._versions is not None
        cls = self._versions.request_type(ApiKey.SASL_AUTHENTICATE)
        self._send_internal(cls(auth_bytes=payload), now)

    def _on_sasl_authenticate(self, response: Any, now: float) -> None:
        assert self._mechanism is not None
        code = int(response.error_code)
        if code != 0:
            message = response.error_message or error_for_code(code).__name__
            self._close(
                AuthenticationFailedError(
                    f"SASL {self._mechanism.name} authentication failed: {message}"
                )
            )
            return
        lifetime = getattr(response, "session_lifetime", None)
        if lifetime is not None:
            seconds = lifetime.total_seconds()
            self._session_lifetime = seconds if seconds > 0 else None
        try:
            reply = self._mechanism.on_challenge(bytes(response.auth_bytes))
        except AuthenticationFailedError as exc:
            self._close(exc)
            return
        if reply is not None:
            self._send_sasl_authenticate(reply, now)
        elif self._mechanism.complete:
            if self._state is _REAUTHENTICATING:
                self._transition(ConnectionState.READY, what="re-authenticated")
                self._events.append(
                    ConnectionReauthenticated(sasl_session_lifetime=self._session_lifetime)
                )
                self._schedule_reauth(now)
                self._flush_pending(now)
            else:
                self._become_ready(now)
        else:
            self._close(
                AuthenticationFailedError(f"SASL {self._mechanism.name} exchange ended early")
            )

    def _schedule_reauth(self, now: float) -> None:
        # KIP-368: re-authenticate at 85-95 % of the session lifetime, like the Java client.
        if self._session_lifetime is None:
            self._reauth_at = None
            return
        fraction = 0.85 + 0.1 * self._rng.random() if self._rng is not None else 0.9
        self._reauth_at = now + self._session_lifetime * fraction

    def _become_ready(self, now: float) -> None:
        assert self._versions is not None
        self._transition(ConnectionState.READY, what="handshake done")
        self._schedule_reauth(now)
        self._events.append(
            ConnectionReady(versions=self._versions, sasl_session_lifetime=self._session_lifetime)
        )
        self._flush_pending(now)

    # -- closing

    def _close(
        self,
        error: KafkaError | None,
        *,
        state: ConnectionState = ConnectionState.CLOSED,
        timed_out: _Request | None = None,
    ) -> None:
        self._transition(state, what="close")
        others = error if error is not None else KafkaConnectionError("connection closed")
        if isinstance(others, KafkaTimeoutError):
            others = KafkaConnectionError(f"connection closed after a request timed out: {error}")
        for req in (*self._in_flight, *self._pending):
            if req.internal:
                continue
            err = error if (req is timed_out and error is not None) else others
            self._events.append(
                RequestFailed(correlation_id=req.correlation_id, request=req.request, error=err)
            )
        self._in_flight.clear()
        self._pending.clear()
        self._out.clear()
        self._token_deadline = None
        self._events.append(ConnectionClosed(error=error))


def _current(value: str | Callable[[], str] | None, name: str) -> str | None:
    """A credential's value now: a callable is called at each (re-)authentication, so a
    rotated password is used without a restart. Its value never appears in an error."""
    if not callable(value):
        return value
    try:
        current = value()
    except Exception as exc:
        raise AuthenticationFailedError(f"the {name} callable raised {type(exc).__name__}") from exc
    if not isinstance(current, str):
        raise AuthenticationFailedError(
            f"the {name} callable must return a str, got a {type(current).__name__}"
        )
    return current
