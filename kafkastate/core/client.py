"""Client: many broker connections, request routing, reconnects and metadata.

Theory of operation
-------------------
The Client owns one :class:`BrokerConnection` per broker node and the :class:`Metadata`
machine. Request-level machines (producer, fetcher, group member...) hand it *request
factories* -- ``factory(versions) -> kio request`` -- because the version to use is only
known once a connection to that node has finished its ApiVersions handshake.

Nodes. Bootstrap servers get negative ids (-1, -2, ... like the Java client) until the first
Metadata response names the real brokers; from then on only real brokers are chosen.
A node is DISCONNECTED, CONNECTING (the adapter was asked to open a socket), HANDSHAKING
(ApiVersions/SASL under way), READY, or in BACKOFF after a failure.

Socket IO is the adapter's: the Client emits :class:`ConnectRequested` and
:class:`CloseRequested`, and the adapter answers with :meth:`connection_made`,
:meth:`connection_failed` or :meth:`connection_lost`. Bytes come in through
:meth:`receive_data` and go out through :meth:`data_to_send`.

Stale connect reports. Each ConnectRequested names its ``attempt``; an attempt the Client
gave up on (its setup deadline passed, the client closed) is followed by a CloseRequested
for its node. An adapter may still act on the ConnectRequested after that -- it served its
events late (the blocking consumer between two polls), or its connect finished as the
deadline fired -- and report the outcome. Such a report (for an attempt that is not the
node's current CONNECTING one) is ignored: the CloseRequested that ended the attempt is
after it in the adapter's queue and closes that socket, and the node's own state (backoff,
or a newer attempt) stands. Refusing it would have crashed the adapter's loop.

Routing. A request for a given node waits in that node's queue until it is READY (opening
the connection if needed); a request for *any* node goes to the least-loaded READY node,
or, if none is ready, makes the Client connect to one. Queued requests fail with
``KafkaTimeoutError`` when their timeout passes before they could be sent; once sent, the
connection's own timeout applies.

Reconnects use exponential backoff from ``reconnect_backoff`` to ``reconnect_backoff_max``
with +-20 % jitter drawn from the seeded ``rng`` (Java's ``ClusterConnectionStates``). An
AuthenticationFailedError fails the node's queued requests at once: retrying cannot fix it.
TLS refusals are AuthenticationFailedErrors too (the adapter types them: an untrusted or
mismatched certificate, a TLS/plaintext mismatch), so :attr:`Client.authentication_refused`
tells a waiting constructor to give up at once for them too. A broker
that completed a handshake before and now hangs up during one is retried (it is restarting,
not a plaintext listener).
Connections idle for ``connections_max_idle`` are closed.

Versions. Each node keeps the ApiVersions answer of its first connection; later connections
to it skip that round trip (``BrokerConnection(known_versions=...)``). A reused table that
does not get a single response before its connection dies is dropped (the broker may have
been rolled to another version), and so is one whose node moved to another address.

Metadata is refreshed whenever :class:`Metadata` says it is due, on any node.

Tokens. A connection authenticating with OAUTHBEARER from a token provider asks for a token
(:class:`~kafkastate.core.connection.TokenRequested`); the Client asks the adapter once
(:class:`TokenRequested`) however many connections wait, and hands the answer
(:meth:`Client.token_received` / :meth:`Client.token_failed`) to every one still waiting. A
request unanswered for ``request_timeout`` may be asked again.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NewType

import attrs

from kafkastate.core import connection as conn_events
from kafkastate.core.connection import BrokerConnection, ConnectionConfig, CorrelationId
from kafkastate.core.deadlines import earliest
from kafkastate.core.metadata import ClusterMetadata, Metadata, MetadataConfig, NodeId
from kafkastate.core.metrics import DEFAULT_SAMPLES, DEFAULT_WINDOW, ClientCounters, Stat
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable
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
)

__all__ = [
    "Client",
    "ClientDriven",
    "ClientConfig",
    "ClientEvent",
    "CloseRequested",
    "ConnectRequested",
    "NODE_STATES",
    "MetadataUpdated",
    "NodeDisconnected",
    "NodeState",
    "RequestCompleted",
    "RequestFailed",
    "RequestFactory",
    "RequestId",
    "TokenRequested",
    "parse_bootstrap_servers",
]

RequestId = NewType("RequestId", int)
RequestFactory = Callable[[ApiVersionTable], Any]
"""Builds the kio request for the versions negotiated on the chosen connection."""

_JITTER: Final = 0.2

log = logging.getLogger("kafkastate.connection")

_API_NAMES: Final = {v: k for k, v in vars(ApiKey).items() if isinstance(v, int)}


def _describe(entity: Any) -> str:
    """``PRODUCE v13`` for a request or response entity (for DEBUG lines)."""
    key: int = getattr(entity, "__api_key__", -1)
    return f"{_API_NAMES.get(key, f'api {key}')} v{getattr(entity, '__version__', '?')}"


SEPARATE_TOP: Final = 2**31 - 1
"""Second connections (:meth:`Client.separate_connection`) have ids counting down from
here, like the Java client's coordinator connection."""
SEPARATE_BASE: Final = 2**30
"""Node ids at or above this are second connections, never brokers from metadata."""


def _broker_id(node_id: NodeId) -> NodeId:
    """The broker behind a node id (a second connection's id maps back to its broker)."""
    return NodeId(SEPARATE_TOP - node_id) if node_id >= SEPARATE_BASE else node_id


class NodeState(enum.Enum):
    """Connection state of one node, as the Client sees it."""

    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    HANDSHAKING = "handshaking"
    READY = "ready"
    BACKOFF = "backoff"


_N = NodeState
# STYLE §6: read off every change of state below. close() ends any state; _connect starts
# from DISCONNECTED or a finished BACKOFF; the socket's answer moves CONNECTING on; a lost
# connection, a refused or timed-out connect backs off; an idle READY connection is closed.
NODE_STATES: Final = register(
    StateTable(
        machine="ClientNode",
        states=NodeState,
        initial=_N.DISCONNECTED,
        transitions={
            _N.DISCONNECTED: {_N.DISCONNECTED, _N.CONNECTING},
            _N.CONNECTING: {_N.HANDSHAKING, _N.BACKOFF, _N.DISCONNECTED},
            _N.HANDSHAKING: {_N.READY, _N.BACKOFF, _N.DISCONNECTED},
            _N.READY: {_N.BACKOFF, _N.DISCONNECTED},
            _N.BACKOFF: {_N.CONNECTING, _N.DISCONNECTED},
        },
    )
)
"""The state table of one node as the Client sees it (STYLE §6)."""
_BUSY: Final = (NodeState.CONNECTING, NodeState.HANDSHAKING, NodeState.READY)  # a tuple: no hashing
# (On Python 3.11 ``EnumClass.MEMBER`` goes through EnumType.__getattr__'s slow lookup,
# several times a global's: the hot paths below compare with these module constants.)
_READY: Final = NodeState.READY
_CONNECTING: Final = NodeState.CONNECTING
_BACKOFF: Final = NodeState.BACKOFF


def parse_bootstrap_servers(
    servers: str | Sequence[str], default_port: int = 9092
) -> list[tuple[str, int]]:
    """Parse ``"host[:port],host[:port]"`` or a list of such strings.

    Raises:
        KafkaConfigurationError: an entry is empty or its port is not a number in 1..65535
            (a ValueError subclass).
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[tuple[str, int]] = []
    for raw in items:
        item = raw.strip()
        if not item:
            raise KafkaConfigurationError(f"empty entry in bootstrap servers {servers!r}")
        if item.startswith("["):  # [ipv6]:port
            host, _, rest = item[1:].partition("]")
            port_s = rest.lstrip(":") or str(default_port)
        elif item.count(":") == 1:
            host, port_s = item.split(":")
        else:
            host, port_s = item, str(default_port)
        if not port_s.isdigit() or not 0 < int(port_s) < 65536:
            raise KafkaConfigurationError(f"invalid port in bootstrap server {item!r}")
        out.append((host, int(port_s)))
    return out


def _positive(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attr.name} must be > 0, got {value!r}")


def _to_addresses(value: Any) -> tuple[tuple[str, int], ...]:
    if isinstance(value, str):
        return tuple(parse_bootstrap_servers(value))
    items = list(value)
    if items and all(isinstance(i, str) for i in items):
        return tuple(parse_bootstrap_servers(items))
    return tuple(items)


def _addresses(_inst: object, attr: attrs.Attribute[Any], value: Any) -> None:
    if not value:
        raise ValueError(f"{attr.name} must name at least one host:port")
    for item in value:
        if not (
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and item[0]
            and isinstance(item[1], int)
            and 0 < item[1] < 65536
        ):
            raise ValueError(f"{attr.name}: {item!r} is not a (host, port) pair")


@attrs.frozen(kw_only=True)
class ClientConfig:
    """Settings of a :class:`Client`. Durations are float seconds."""

    bootstrap_servers: tuple[tuple[str, int], ...] = attrs.field(
        converter=_to_addresses, validator=_addresses
    )
    """Where to start (``bootstrap.servers``): ``"host[:port],..."``, a list of such
    strings, or ``(host, port)`` pairs; the default port is 9092."""
    connection: ConnectionConfig = attrs.field(factory=ConnectionConfig)
    """Per-connection settings (client id, request timeout, in-flight limit, SASL)."""
    metadata: MetadataConfig = attrs.field(factory=MetadataConfig)
    """Metadata refresh settings."""
    reconnect_backoff: float = attrs.field(default=0.05, validator=_positive)
    """First reconnect delay (``reconnect.backoff.ms``)."""
    reconnect_backoff_max: float = attrs.field(default=1.0, validator=_positive)
    """Largest reconnect delay (``reconnect.backoff.max.ms``)."""
    connections_max_idle: float = attrs.field(default=540.0, validator=_positive)
    """Close connections unused this long (``connections.max.idle.ms``)."""
    socket_connection_setup_timeout: float = attrs.field(default=10.0, validator=_positive)
    """How long the adapter may take to open a socket
    (``socket.connection.setup.timeout.ms``)."""
    metrics_samples: int = attrs.field(default=DEFAULT_SAMPLES, validator=attrs.validators.ge(1))
    """Samples per windowed statistic (``metrics.num.samples``)."""
    metrics_window: float = attrs.field(default=DEFAULT_WINDOW, validator=_positive)
    """Seconds per sample (``metrics.sample.window.ms``)."""
    statistics_interval: float = attrs.field(default=0.0, validator=attrs.validators.ge(0.0))
    """Seconds between statistics reports (``statistics.interval.ms``); 0 = none. The
    Client keeps the schedule (:meth:`Client.statistics_due`); its owner builds the
    report."""


@attrs.frozen(kw_only=True)
class ConnectRequested:
    """The adapter must open a socket (and TLS) to this node, then call
    :meth:`Client.connection_made` or :meth:`Client.connection_failed`."""

    node_id: NodeId
    """The node (negative for bootstrap servers)."""
    host: str
    """Host to connect to."""
    port: int
    """Port to connect to."""
    attempt: int = attrs.field(default=0, eq=False)
    """Which connect attempt this is (unique per Client): hand it back to
    :meth:`Client.connection_made` / :meth:`Client.connection_failed`, so a report that
    arrives after the Client gave the attempt up is told from one for a newer attempt
    (not compared: two requests to connect the same node to the same address are equal)."""


@attrs.frozen(kw_only=True)
class CloseRequested:
    """The adapter must close this node's socket."""

    node_id: NodeId
    """The node."""


@attrs.frozen(kw_only=True)
class RequestCompleted:
    """A response arrived."""

    request_id: RequestId
    """The id :meth:`Client.send` returned."""
    node_id: NodeId
    """The node that answered."""
    request: Any
    """The kio request that was sent."""
    response: Any
    """The kio response."""
    latency: float = 0.0
    """Seconds from writing the request to reading its response (driver's clock)."""


@attrs.frozen(kw_only=True)
class RequestFailed:
    """A request will get no response."""

    request_id: RequestId
    """The id :meth:`Client.send` returned."""
    node_id: NodeId | None
    """The node it was for or sent to, if one was chosen."""
    error: KafkaError
    """Why (timeout, connection lost, authentication, unsupported version...)."""


@attrs.frozen(kw_only=True)
class MetadataUpdated:
    """A Metadata response was merged."""

    cluster: ClusterMetadata
    """The new snapshot."""


@attrs.frozen(kw_only=True)
class NodeDisconnected:
    """A connection to a node ended."""

    node_id: NodeId
    """The node."""
    error: KafkaError | None
    """Why; None for an idle close or :meth:`Client.close`."""


@attrs.frozen(kw_only=True)
class TokenRequested:
    """An OAUTHBEARER (re-)authentication needs a token: the adapter calls the user's token
    provider (``await provider.token()`` on asyncio/trio/anyio, ``provider.token()`` on a
    blocking client) and answers :meth:`Client.token_received` or
    :meth:`Client.token_failed`."""


ClientEvent = (
    ConnectRequested
    | CloseRequested
    | RequestCompleted
    | RequestFailed
    | MetadataUpdated
    | NodeDisconnected
    | TokenRequested
)


@attrs.define(slots=True)
class _Request:
    request_id: RequestId
    factory: RequestFactory
    timeout: float
    deadline: float
    expect_response: bool
    internal: bool
    node_id: NodeId | None = None
    request: Any = None
    sent_at: float = 0.0


@attrs.define(slots=True)
class _Node:
    node_id: NodeId
    host: str
    port: int
    state: NodeState = NodeState.DISCONNECTED
    conn: BrokerConnection | None = None
    failures: int = 0
    backoff_until: float = 0.0
    connect_deadline: float | None = None
    attempt: int = 0
    """The latest :attr:`ConnectRequested.attempt` for this node."""
    last_active: float = 0.0
    queue: deque[_Request] = attrs.field(factory=deque)
    sent: dict[CorrelationId, _Request] = attrs.field(factory=dict)
    versions: ApiVersionTable | None = None
    """What the broker answered to ApiVersions, kept across reconnects."""
    versions_proven: bool = False
    """A connection built on :attr:`versions` got an answer (the table is still right)."""
    handshaken: bool = False
    """A connection to this node became ready once (TLS and SASL agreed then)."""


class Client:
    """The sans-IO client: connections, routing, reconnects, metadata.

    Args:
        config: client settings.
        rng: seeded randomness for backoff jitter, node choice and SASL nonces; adapters
            pass ``random.SystemRandom()``, the simulator a seeded ``random.Random``.
        topics: topics whose metadata to track (None = all topics).
    """

    def __init__(
        self, config: ClientConfig, *, rng: random.Random, topics: Iterable[str] | None = ()
    ) -> None:
        self.config = config
        self._rng = rng
        self._metadata = Metadata(config.metadata, topics)
        self._nodes: dict[NodeId, _Node] = {}
        self._by_id: list[_Node] | None = None  # _sorted_nodes(), until a node is added
        self._walk: tuple[float | None, float | None] | None = None  # see get_timer()
        self._candidates_cache: list[_Node] | None = None
        for i, (host, port) in enumerate(config.bootstrap_servers):
            self._add_node(NodeId(-(i + 1)), host, port)
        self._any: deque[_Request] = deque()
        self._events: deque[ClientEvent] = deque()
        self._out: list[tuple[NodeId, bytes]] = []
        self._next_request_id = 0
        self._attempts = 0  # the last ConnectRequested.attempt handed out
        self._closed = False
        self._last_connection_error: KafkaError | None = None
        self._token_asked_at: float | None = None
        self._reauthentications = 0
        self.counters: Final = ClientCounters(config.metrics_samples, config.metrics_window)
        """Requests, latencies, bytes and connections counted (:mod:`.metrics`)."""
        self.last_now = 0.0
        """The latest ``now`` handed in (reports made when no clock is at hand use it)."""
        self._stats_at: float | None = None  # the next statistics report (armed lazily)

    # ---------------------------------------------------------------- queries

    @property
    def cluster(self) -> ClusterMetadata:
        """The current metadata snapshot."""
        return self._metadata.cluster

    @property
    def metadata(self) -> Metadata:
        """The metadata machine (topics of interest, refresh requests)."""
        return self._metadata

    @property
    def last_connection_error(self) -> KafkaError | None:
        """Why the last connection to any node failed or ended (None after a success):
        what to tell a user waiting for a cluster that does not answer."""
        return self._last_connection_error

    @property
    def authentication_refused(self) -> AuthenticationFailedError | None:
        """The error of the last connection attempt when it was refused authentication
        (wrong credentials, an expired or badly-signed token, a token provider that
        refused) and no connection is ready: waiting for the cluster cannot help, so a
        client waiting for it raises this at once (as the Java client does) instead of at
        its timeout. None otherwise (also once a connection succeeds)."""
        error = self._last_connection_error
        if not isinstance(error, AuthenticationFailedError):
            return None
        if any(node.state is NodeState.READY for node in self._nodes.values()):
            return None
        return error

    @property
    def reauthentications(self) -> int:
        """KIP-368 re-authentications that succeeded on live connections (Java's
        ``successful-reauthentication-total``)."""
        return self._reauthentications

    def node_state(self, node_id: NodeId) -> NodeState | None:
        """The state of a node's connection, or None for an unknown node."""
        node = self._nodes.get(node_id)
        return None if node is None else node.state

    def ready_nodes(self) -> list[NodeId]:
        """The nodes with a READY connection, in id order."""
        return [n.node_id for n in self._sorted_nodes() if n.state is NodeState.READY]

    def versions(self, node_id: NodeId) -> ApiVersionTable | None:
        """The versions negotiated with a READY node."""
        node = self._nodes.get(node_id)
        if node is None or node.conn is None:
            return None
        return node.conn.versions

    # --------------------------------------------------------------- commands

    def send(
        self,
        factory: RequestFactory,
        *,
        now: float,
        node_id: NodeId | None = None,
        timeout: float | None = None,
        expect_response: bool = True,
    ) -> RequestId:
        """Send a request to ``node_id`` (None = the least-loaded node).

        Args:
            factory: builds the request for the versions negotiated with the node.
            now: the driver's clock.
            node_id: a broker from metadata, a bootstrap node, or None for any.
            timeout: overall timeout (queueing plus response); default the connection's
                ``request_timeout``.
            expect_response: False only for Produce with acks=0.

        Returns:
            The id that :class:`RequestCompleted` / :class:`RequestFailed` will carry.

        Raises:
            LocalProtocolError: the client is closed, or ``node_id`` is unknown.
        """
        self._walk = None  # an input: get_timer() walks the nodes again
        if self._closed:
            raise LocalProtocolError("send on a closed Client")
        self.last_now = max(self.last_now, now)
        if node_id is not None and node_id not in self._nodes:
            raise LocalProtocolError(f"unknown node {node_id}")
        return self._submit(factory, now, node_id, timeout, expect_response, internal=False)

    def separate_connection(self, node_id: NodeId) -> NodeId:
        """A second connection to broker ``node_id``, under its own id (Java gives the
        group coordinator one: ``Integer.MAX_VALUE - id``), so that requests sent there
        do not queue behind a long-polling Fetch on the broker's main connection.

        Returns:
            The id to send to; the same for the same broker while its address holds.

        Raises:
            LocalProtocolError: ``node_id`` is not a broker from metadata.
        """
        base = self._nodes.get(node_id)
        if base is None or not 0 <= node_id < SEPARATE_BASE:
            raise LocalProtocolError(f"no broker {node_id} to open a second connection to")
        nid = NodeId(SEPARATE_TOP - node_id)
        node = self._nodes.get(nid)
        moved = node is not None and (node.host, node.port) != (base.host, base.port)
        if node is None or (moved and node.conn is None):
            self._add_node(nid, base.host, base.port)
        return nid

    def statistics_due(self, *, now: float) -> bool:
        """Whether a statistics report is due at ``now`` (its deadline is one of
        :meth:`get_timer`'s); if so the next is scheduled one interval on (from ``now`` if
        the driver fell behind), so the owner must then emit the report. The schedule
        starts at the first :meth:`handle_timer`; with ``statistics_interval`` 0 nothing
        is ever due."""
        due = self._stats_at
        if due is None or now < due or self._closed:
            return False
        following = due + self.config.statistics_interval
        self._stats_at = following if following > now else now + self.config.statistics_interval
        return True

    def request_metadata_update(self) -> None:
        """Refresh metadata as soon as the retry backoff allows."""
        self._metadata.request_update()

    def close(self) -> None:
        """Close every connection and fail every outstanding request."""
        self._walk = None  # an input: get_timer() walks the nodes again
        if self._closed:
            return
        self._closed = True
        error = KafkaConnectionError("client closed")
        for node in self._sorted_nodes():
            if node.conn is not None:
                node.conn.close()
                self._drain_connection(node, 0.0, closing=True)
            if node.state in (NodeState.CONNECTING, NodeState.HANDSHAKING, NodeState.READY):
                self._events.append(CloseRequested(node_id=node.node_id))
            self._fail_queue(node.queue, error, node.node_id)
            node.state = transition(NODE_STATES, node.state, _N.DISCONNECTED, what="close")
            node.conn = None
        self._fail_queue(self._any, error, None)

    def token_received(
        self, token: str, *, now: float, extensions: Mapping[str, str] | None = None
    ) -> None:
        """The answer to :class:`TokenRequested`, for every connection waiting for a token.

        Args:
            token: the bearer token the provider returned.
            now: the driver's clock.
            extensions: the provider's SASL extensions (KIP-342), if any.
        """
        self._walk = None  # an input: get_timer() walks the nodes again
        self._token_answered(
            now, lambda conn: conn.token_received(token, now=now, extensions=extensions)
        )

    def token_failed(self, error: BaseException, *, now: float) -> None:
        """The token provider raised: every connection waiting for a token closes with
        ``error`` (see :meth:`BrokerConnection.token_failed`).

        Args:
            error: what the provider raised.
            now: the driver's clock.
        """
        self._walk = None  # an input: get_timer() walks the nodes again
        self._token_answered(now, lambda conn: conn.token_failed(error, now=now))

    def _token_answered(self, now: float, answer: Callable[[BrokerConnection], None]) -> None:
        self._token_asked_at = None
        for node in self._sorted_nodes():
            if node.conn is not None and node.conn.awaiting_token:
                answer(node.conn)
                self._drain_connection(node, now)
        self._progress(now)

    def _ask_token(self, now: float) -> None:
        asked = self._token_asked_at
        if asked is None or asked + self.config.connection.request_timeout <= now:
            self._token_asked_at = now
            self._events.append(TokenRequested())

    # ------------------------------------------------------------ IO inputs

    def connection_made(self, node_id: NodeId, *, now: float, attempt: int | None = None) -> None:
        """The adapter's socket to ``node_id`` is connected (TLS included).

        Args:
            node_id: the node of the :class:`ConnectRequested`.
            now: the driver's clock.
            attempt: that request's :attr:`~ConnectRequested.attempt` (None: the node's
                current one). A report for an attempt given up on is ignored (see the
                module docstring): the CloseRequested that ended it closes the socket.
        """
        self._walk = None  # an input: get_timer() walks the nodes again
        node = self._node(node_id)
        if self._stale(node, attempt):
            return
        node.state = transition(NODE_STATES, node.state, _N.HANDSHAKING, what="connection_made")
        node.connect_deadline = None
        node.last_active = now
        # Reuse the node's ApiVersions answer: a reconnect costs no extra round trip.
        if node.versions is None and node.node_id >= SEPARATE_BASE:
            # a second connection to a broker: the broker's answer holds for it too
            base = self._nodes.get(_broker_id(node.node_id))
            if base is not None and (base.host, base.port) == (node.host, node.port):
                node.versions = base.versions
        node.conn = BrokerConnection(
            self.config.connection, rng=self._rng, known_versions=node.versions, host=node.host
        )
        node.versions_proven = False
        node.conn.connection_made(now=now)
        self._after_io(node, now)

    def connection_failed(
        self,
        node_id: NodeId,
        *,
        now: float,
        error: BaseException | None = None,
        attempt: int | None = None,
    ) -> None:
        """The adapter could not connect to ``node_id`` (``attempt`` as for
        :meth:`connection_made`: a late failure of an attempt given up on is ignored)."""
        self._walk = None  # an input: get_timer() walks the nodes again
        node = self._node(node_id)
        if self._stale(node, attempt):
            return
        exc: KafkaError
        if isinstance(error, AuthenticationFailedError) and not (
            isinstance(error, SecurityProtocolMismatchError) and node.handshaken
        ):
            exc = error  # the adapter's typed TLS refusal, naming the address: fatal
        else:
            # (a broker that did TLS before and now hangs up mid-handshake is restarting)
            exc = KafkaConnectionError(
                f"cannot connect to node {node_id} at {node.host}:{node.port}: {error}"
            )
            exc.__cause__ = error
        self._disconnected(node, exc, now, request_close=False)
        self._progress(now)

    def connection_lost(
        self, node_id: NodeId, *, now: float, error: BaseException | None = None
    ) -> None:
        """The adapter's socket to ``node_id`` closed or failed."""
        self._walk = None  # an input: get_timer() walks the nodes again
        node = self._node(node_id)
        if node.conn is not None:
            node.conn.connection_lost(now=now, error=error)
            self._drain_connection(node, now, request_close=False)
        elif node.state is NodeState.CONNECTING:
            self.connection_failed(node_id, now=now, error=error)
            return
        self._progress(now)

    def receive_data(self, node_id: NodeId, data: bytes, *, now: float) -> None:
        """Bytes read from ``node_id``'s socket (``b""`` = EOF).

        A RemoteProtocolError from the connection is not raised: the node is disconnected
        and its requests fail with it.
        """
        self._walk = None  # an input: get_timer() walks the nodes again
        node = self._node(node_id)
        if node.conn is None:
            return
        self.last_now = max(self.last_now, now)
        node.last_active = now
        self.counters.incoming.record(len(data), now)
        # A RemoteProtocolError leaves ConnectionClosed(error) queued and the connection's
        # requests failed; draining below turns that into a disconnect with backoff.
        with contextlib.suppress(RemoteProtocolError):
            node.conn.receive_data(data, now=now)
        self._after_io(node, now)

    def handle_timer(self, *, now: float) -> None:
        """Run everything whose deadline passed. Safe to call early or twice."""
        self._walk = None  # an input: get_timer() walks the nodes again
        self.last_now = max(self.last_now, now)
        if self._stats_at is None and self.config.statistics_interval > 0:
            self._stats_at = now + self.config.statistics_interval
        for node in self._sorted_nodes():
            if node.conn is not None:
                node.conn.handle_timer(now=now)
                self._drain_connection(node, now)
            if (
                node.state is NodeState.CONNECTING
                and node.connect_deadline is not None
                and node.connect_deadline <= now
            ):
                error = KafkaTimeoutError(
                    f"connecting to node {node.node_id} at {node.host}:{node.port} took longer "
                    f"than {self.config.socket_connection_setup_timeout:g} s"
                )
                self._disconnected(node, error, now, request_close=True)
            self._expire_queue(node.queue, now, node.node_id)
            if (
                node.state is NodeState.READY
                and node.conn is not None
                and not node.queue
                and node.conn.in_flight_count == 0
                # the same sum get_timer() reports, so float rounding cannot strand it
                and node.last_active + self.config.connections_max_idle <= now
            ):
                node.conn.close()
                node.conn = None
                node.state = transition(NODE_STATES, node.state, _N.DISCONNECTED, what="idle")
                self.counters.closed.record(1.0, now)
                self._events.append(CloseRequested(node_id=node.node_id))
                self._events.append(NodeDisconnected(node_id=node.node_id, error=None))
        self._expire_queue(self._any, now, None)
        self._progress(now)

    # ----------------------------------------------------------- IO outputs

    def data_to_send(self) -> list[tuple[NodeId, bytes]]:
        """``(node, bytes)`` to write, in order; clears the buffer."""
        out, self._out = self._out, []
        return out

    def next_event(self) -> ClientEvent | None:
        """The next event, or None."""
        return self._events.popleft() if self._events else None

    def has_events(self) -> bool:
        """Whether :meth:`next_event` has something."""
        return bool(self._events)

    def get_timer(self) -> float | None:
        """The earliest deadline at which :meth:`handle_timer` must run, or None."""
        if self._closed:
            return None
        # The walk over the nodes and their queues changes only with an input to this
        # client: it is kept from the last get_timer() until the next input (adapters and
        # the simulator ask after every input, most of which never reach the client).
        walk = self._walk
        if walk is None:
            walk = self._walk = self._walk_nodes()
        best, backoff_first = walk
        best = earliest(best, self._stats_at)
        due = self._metadata.update_due_at()  # the metadata's own inputs move this one
        best = earliest(best, due)
        if backoff_first is not None:
            # "Any node" work (a metadata refresh once it is due) waits for the first
            # candidate whose backoff ends.
            if self._any:
                best = earliest(best, backoff_first)
            if due is not None:
                best = earliest(best, max(due, backoff_first))
        return best

    def _walk_nodes(self) -> tuple[float | None, float | None]:
        """The nodes' and the queues' earliest deadline, and when the first backing-off
        candidate for "any node" work is free (None if none backs off or one is busy)."""
        best: float | None = None
        idle = self.config.connections_max_idle
        for node in self._nodes.values():
            state = node.state
            conn = node.conn
            if conn is not None:
                best = earliest(best, conn.get_timer())
                if state is _READY:
                    best = earliest(best, node.last_active + idle)
            if state is _CONNECTING:
                best = earliest(best, node.connect_deadline)
            elif state is _BACKOFF and node.queue:
                best = earliest(best, node.backoff_until)
            for r in node.queue:
                best = earliest(best, r.deadline)
        for r in self._any:
            best = earliest(best, r.deadline)
        backoff_first: float | None = None
        for n in self._candidates():
            if n.state is _BACKOFF:
                backoff_first = earliest(backoff_first, n.backoff_until)
            elif n.state in _BUSY:
                return best, None
        return best, backoff_first

    # ------------------------------------------------------------- internals

    def _node(self, node_id: NodeId) -> _Node:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise LocalProtocolError(f"unknown node {node_id}") from None

    def _stale(self, node: _Node, attempt: int | None) -> bool:
        """Whether a connect report is for an attempt the node no longer waits for."""
        if node.state is NodeState.CONNECTING and attempt in (None, node.attempt):
            return False
        log.debug(
            "node %s: connect report for attempt %s ignored (now %s, attempt %s)",
            node.node_id,
            attempt,
            node.state.name,
            node.attempt,
        )
        return True

    def _sorted_nodes(self) -> list[_Node]:
        """The nodes by id (kept until a node is added or replaced: this runs after every
        input)."""
        if self._by_id is None:
            self._by_id = [self._nodes[k] for k in sorted(self._nodes)]
        return self._by_id

    def _add_node(self, nid: NodeId, host: str, port: int) -> None:
        self._nodes[nid] = _Node(node_id=nid, host=host, port=port)
        self._by_id = self._candidates_cache = self._walk = None

    def _submit(
        self,
        factory: RequestFactory,
        now: float,
        node_id: NodeId | None,
        timeout: float | None,
        expect_response: bool,
        *,
        internal: bool,
    ) -> RequestId:
        rid = RequestId(self._next_request_id)
        self._next_request_id += 1
        if timeout is None:
            timeout = self.config.connection.request_timeout
        req = _Request(
            request_id=rid,
            factory=factory,
            timeout=timeout,
            deadline=now + timeout,
            expect_response=expect_response,
            internal=internal,
            node_id=node_id,
        )
        if node_id is None:
            self._any.append(req)
        else:
            self._nodes[node_id].queue.append(req)
        self._progress(now)
        return rid

    def _candidates(self) -> list[_Node]:
        """Nodes eligible for 'any node' requests: real brokers once metadata named them
        (never a second connection made by :meth:`separate_connection`)."""
        if self._candidates_cache is None:
            by_id = self._sorted_nodes()
            real = [n for n in by_id if 0 <= n.node_id < SEPARATE_BASE]
            self._candidates_cache = real or [n for n in by_id if n.node_id < 0]
        return self._candidates_cache

    def _progress(self, now: float) -> None:
        """Move work forward: metadata, 'any' requests, queued requests, connects."""
        if self._closed:
            return
        if self._metadata.update_due(now):
            self._submit_metadata(now)
        self._dispatch_any(now)
        for node in self._sorted_nodes():
            if node.queue:  # (_flush_node's own first test: this runs after every input)
                self._flush_node(node, now)

    def _submit_metadata(self, now: float) -> None:
        self._metadata.start_update(now=now)
        rid = RequestId(self._next_request_id)
        self._next_request_id += 1
        timeout = self.config.connection.request_timeout
        self._any.append(
            _Request(
                request_id=rid,
                factory=self._metadata.build_request,
                timeout=timeout,
                deadline=now + timeout,
                expect_response=True,
                internal=True,
            )
        )

    def _dispatch_any(self, now: float) -> None:
        if not self._any:
            return
        candidates = self._candidates()
        ready = [n for n in candidates if n.state is NodeState.READY and n.conn is not None]
        if ready:
            while self._any:
                # Least loaded: fewest in flight plus queued; ties by node id.
                best = min(
                    ready,
                    key=lambda n: (
                        (n.conn.in_flight_count + n.conn.queued_count) if n.conn else 0,
                        n.node_id,
                    ),
                )
                req = self._any.popleft()
                req.node_id = best.node_id
                best.queue.append(req)
                self._flush_node(best, now)
            return
        if any(n.state in (NodeState.CONNECTING, NodeState.HANDSHAKING) for n in candidates):
            return
        idle = [
            n
            for n in candidates
            if n.state is NodeState.DISCONNECTED
            or (n.state is NodeState.BACKOFF and n.backoff_until <= now)
        ]
        if idle:
            self._connect(self._rng.choice(idle), now)

    def _flush_node(self, node: _Node, now: float) -> None:
        if not node.queue:
            return
        if node.state is _READY and node.conn is not None:
            versions = node.conn.versions
            assert versions is not None
            while node.queue:
                req = node.queue.popleft()
                try:
                    req.request = req.factory(versions)
                except UnsupportedVersionError as exc:
                    named = exc.on_node(_broker_id(node.node_id))
                    self._request_failed(req, named, node.node_id)
                    continue
                except KafkaError as exc:
                    self._request_failed(req, exc, node.node_id)
                    continue
                remaining = max(req.deadline - now, 0.0)
                cid = node.conn.send_request(
                    req.request,
                    now=now,
                    timeout=remaining or 1e-9,
                    expect_response=req.expect_response,
                )
                self.counters.sent.record(1.0, now)
                if log.isEnabledFor(logging.DEBUG):
                    log.debug(
                        "node %s: sent %s (correlation id %s)",
                        node.node_id,
                        _describe(req.request),
                        cid,
                    )
                if req.expect_response:
                    req.sent_at = now
                    node.sent[cid] = req
                node.last_active = now
            self._collect(node, now)
            return
        if node.state is NodeState.DISCONNECTED or (
            node.state is NodeState.BACKOFF and node.backoff_until <= now
        ):
            self._connect(node, now)

    def _connect(self, node: _Node, now: float) -> None:
        node.state = transition(NODE_STATES, node.state, _N.CONNECTING, what="connect")
        node.connect_deadline = now + self.config.socket_connection_setup_timeout
        self._attempts += 1
        node.attempt = self._attempts
        self._events.append(
            ConnectRequested(
                node_id=node.node_id, host=node.host, port=node.port, attempt=node.attempt
            )
        )

    def _after_io(self, node: _Node, now: float) -> None:
        self._drain_connection(node, now)
        self._progress(now)

    def _collect(self, node: _Node, now: float) -> None:
        if node.conn is not None:
            data = node.conn.data_to_send()
            if data:
                self.counters.outgoing.record(len(data), now)
                self._out.append((node.node_id, data))

    def _drain_connection(
        self, node: _Node, now: float, *, request_close: bool = True, closing: bool = False
    ) -> None:
        conn = node.conn
        if conn is None:
            return
        self._collect(node, now)
        while (event := conn.next_event()) is not None:
            match event:
                case conn_events.ConnectionReady(versions=versions):
                    self.counters.created.record(1.0, now)
                    log.info("connected to node %s at %s:%s", node.node_id, node.host, node.port)
                    node.versions = versions
                    node.state = transition(NODE_STATES, node.state, _N.READY, what="ready")
                    node.failures = 0
                    node.handshaken = True
                    self._last_connection_error = None
                case conn_events.ResponseReceived(correlation_id=cid, response=response):
                    node.versions_proven = True
                    req = node.sent.pop(cid, None)
                    if req is not None:
                        self._request_completed(req, node, response, now)
                case conn_events.RequestFailed(correlation_id=cid, error=error):
                    req = node.sent.pop(cid, None)
                    if req is not None:
                        self._request_failed(req, error, node.node_id)
                case conn_events.TokenRequested():
                    self._ask_token(now)
                case conn_events.ConnectionReauthenticated():
                    self._reauthentications += 1
                case conn_events.ConnectionClosed(error=error):
                    if closing:
                        continue
                    address = f"{node.host}:{node.port}"
                    if isinstance(error, SecurityProtocolMismatchError) and address not in str(
                        error
                    ):
                        named = SecurityProtocolMismatchError(
                            f"node {node.node_id} at {address}: {error}"
                        )
                        named.__cause__ = error.__cause__
                        error = named
                    self._disconnected(node, error, now, request_close=request_close)
                    return
        self._collect(node, now)

    def _disconnected(
        self, node: _Node, error: KafkaError | None, now: float, *, request_close: bool
    ) -> None:
        if request_close and node.state is not NodeState.DISCONNECTED:
            self._events.append(CloseRequested(node_id=node.node_id))
        if node.state is NodeState.CONNECTING:
            log.debug(
                "node %s at %s:%s: no connection: %s", node.node_id, node.host, node.port, error
            )
        else:  # a connection that was open ended
            self.counters.closed.record(1.0, now)
            if error is not None:
                log.info(
                    "node %s at %s:%s disconnected: %s", node.node_id, node.host, node.port, error
                )
        if node.conn is not None and node.conn.versions_reused and not node.versions_proven:
            # The broker may have been upgraded or downgraded while we were away (it closes
            # a connection that sends a version it does not know): ask it again next time.
            node.versions = None
        for req in node.sent.values():  # normally failed by the connection already
            self._request_failed(req, error or KafkaConnectionError("disconnected"), node.node_id)
        node.sent.clear()
        node.conn = None
        node.connect_deadline = None
        node.failures += 1
        base = self.config.reconnect_backoff * (2 ** (node.failures - 1))
        backoff = min(base, self.config.reconnect_backoff_max)
        backoff *= 1 + self._rng.uniform(-_JITTER, _JITTER)
        node.backoff_until = now + backoff
        node.state = transition(NODE_STATES, node.state, _N.BACKOFF, what="disconnected")
        self._events.append(NodeDisconnected(node_id=node.node_id, error=error))
        if error is not None:
            self._last_connection_error = error
        if isinstance(error, AuthenticationFailedError):
            self._fail_queue(node.queue, error, node.node_id)
        elif node.node_id >= 0 and error is not None:
            # Java NetworkClient: a broker that went away may no longer lead what we
            # send it, so look again (DefaultMetadataUpdater.handleServerDisconnect); and
            # what waited for this connection fails now, retriable, instead of at its
            # deadline -- its owner re-routes it with the new metadata (a producer batch
            # to the new leader).
            self._metadata.request_update()
            self._fail_queue(node.queue, error, node.node_id)

    def _request_completed(self, req: _Request, node: _Node, response: Any, now: float) -> None:
        latency = now - req.sent_at
        counters = self.counters
        counters.latency.record(latency, now)
        per_node = counters.node_latency.get(node.node_id)
        if per_node is None:
            per_node = Stat(counters.samples, counters.window)
            counters.node_latency[node.node_id] = per_node
        per_node.record(latency, now)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "node %s: %s answered in %.1f ms",
                node.node_id,
                _describe(response),
                latency * 1000.0,
            )
        if req.internal:
            cluster = self._metadata.handle_response(response, now=now)
            self._adopt_brokers(cluster)
            self._events.append(MetadataUpdated(cluster=cluster))
            return
        self._events.append(
            RequestCompleted(
                request_id=req.request_id,
                node_id=node.node_id,
                request=req.request,
                response=response,
                latency=latency,
            )
        )

    def _request_failed(self, req: _Request, error: KafkaError, node_id: NodeId | None) -> None:
        self.counters.errors += 1
        log.debug("node %s: request %s failed: %s", node_id, req.request_id, error)
        if req.internal:
            self._metadata.handle_failure(error)
            return
        self._events.append(RequestFailed(request_id=req.request_id, node_id=node_id, error=error))

    def _fail_queue(
        self, queue: deque[_Request], error: KafkaError, node_id: NodeId | None
    ) -> None:
        while queue:
            self._request_failed(queue.popleft(), error, node_id)

    def _expire_queue(self, queue: deque[_Request], now: float, node_id: NodeId | None) -> None:
        if not any(r.deadline <= now for r in queue):
            return
        keep: deque[_Request] = deque()
        for req in queue:
            if req.deadline <= now:
                where = "any node" if node_id is None else f"node {node_id}"
                self._request_failed(
                    req,
                    KafkaTimeoutError(
                        f"request waited {req.timeout:g} s for a connection to {where}"
                    ),
                    node_id,
                )
            else:
                keep.append(req)
        queue.clear()
        queue.extend(keep)

    def _adopt_brokers(self, cluster: ClusterMetadata) -> None:
        for nid, addr in sorted(cluster.brokers.items()):
            node = self._nodes.get(nid)
            if node is None:
                self._add_node(nid, addr.host, addr.port)
            elif (node.host, node.port) != (addr.host, addr.port) and node.conn is None:
                node.host, node.port = addr.host, addr.port
                node.versions = None  # another broker process may answer there now

    def bootstrap_nodes(self) -> Sequence[NodeId]:
        """The negative ids given to the bootstrap servers, in configuration order."""
        return [n for n in sorted(self._nodes, reverse=True) if n < 0]


class ClientDriven:
    """The connection inputs and the bytes out of a machine that owns a :class:`Client`
    (``_client``) and moves its own work forward after each input (``_step(now)``): the
    producer, the fetcher, the admin machine."""

    _client: Client

    def _step(self, now: float) -> None:
        raise NotImplementedError

    @property
    def client(self) -> Client:
        """The Client (metadata, connections, the last connection error)."""
        return self._client

    def data_to_send(self) -> list[tuple[NodeId, bytes]]:
        """``(node, bytes)`` to write, in order; clears the buffer."""
        return self._client.data_to_send()

    def connection_made(self, node_id: NodeId, *, now: float, attempt: int | None = None) -> None:
        """The adapter's socket to ``node_id`` is connected (:meth:`Client.connection_made`)."""
        self._client.connection_made(node_id, now=now, attempt=attempt)
        self._step(now)

    def connection_failed(
        self,
        node_id: NodeId,
        *,
        now: float,
        error: BaseException | None = None,
        attempt: int | None = None,
    ) -> None:
        """The adapter could not connect to ``node_id`` (:meth:`Client.connection_failed`)."""
        self._client.connection_failed(node_id, now=now, error=error, attempt=attempt)
        self._step(now)

    def connection_lost(
        self, node_id: NodeId, *, now: float, error: BaseException | None = None
    ) -> None:
        """The adapter's socket to ``node_id`` closed or failed."""
        self._client.connection_lost(node_id, now=now, error=error)
        self._step(now)

    def token_received(
        self, token: str, *, now: float, extensions: Mapping[str, str] | None = None
    ) -> None:
        """The token provider's answer to :class:`TokenRequested`."""
        self._client.token_received(token, now=now, extensions=extensions)
        self._step(now)

    def token_failed(self, error: BaseException, *, now: float) -> None:
        """The token provider raised instead of answering :class:`TokenRequested`."""
        self._client.token_failed(error, now=now)
        self._step(now)
