"""A minimal blocking driver for one BrokerConnection, plus the admin calls tests need.

This is the smallest adapter that can talk to a real broker: a socket, ``selectors`` and
``time.monotonic()`` around the pure machine. It holds no protocol logic (STYLE.md §12):
it writes what the machine has, waits for readable bytes or the machine's deadline, feeds
them in, and turns events into return values or exceptions. The full asyncio, trio, anyio
and sync adapters come with the producer and consumer; the harness, the demo and the
integration tests use this one.
"""

from __future__ import annotations

import collections
import contextlib
import random
import select
import selectors
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

import attrs

from kafkastate.adapters._common import (
    READ_MIN,
    fetch_token_blocking,
    next_read_size,
    tls_failure,
)
from kafkastate.core.client import (
    Client,
    ClientConfig,
    CloseRequested,
    ConnectRequested,
    MetadataUpdated,
    NodeDisconnected,
    RequestCompleted,
    RequestFactory,
    RequestId,
    TokenRequested,
)
from kafkastate.core.client import RequestFailed as ClientRequestFailed
from kafkastate.core.client import parse_bootstrap_servers as parse_bootstrap
from kafkastate.core.connection import (
    BrokerConnection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionReady,
    CorrelationId,
    RequestFailed,
    ResponseReceived,
)
from kafkastate.core.metadata import ClusterMetadata, NodeId
from kafkastate.core.protocol import framing, requests
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.core.protocol.versions import ApiVersionTable
from kafkastate.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    error_for_code,
)

__all__ = [
    "BlockingAdmin",
    "BlockingClient",
    "BlockingConnection",
    "IOMachine",
    "NewTopic",
    "SocketLoop",
    "TopicInfo",
    "parse_bootstrap",
]


class BlockingConnection:
    """One blocking connection to one broker, driving :class:`BrokerConnection`.

    Use :meth:`open`; it returns once the handshake (ApiVersions, SASL) has finished.
    """

    def __init__(self, sock: socket.socket, machine: BrokerConnection) -> None:
        self._sock = sock
        self._machine = machine
        self._selector = selectors.DefaultSelector()
        self._selector.register(sock, selectors.EVENT_READ)
        self._responses: dict[CorrelationId, Any] = {}
        self._failures: dict[CorrelationId, KafkaError] = {}
        self._closed_error: KafkaError | None = None
        self._closed = False
        self._peer: tuple[str, int] = ("?", 0)
        self._read_size = READ_MIN
        self.versions: ApiVersionTable | None = None

    @classmethod
    def open(
        cls,
        host: str,
        port: int,
        *,
        config: ConnectionConfig | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 30.0,
    ) -> BlockingConnection:
        """Connect, run the handshake, return a ready connection.

        Args:
            host: broker host.
            port: broker port.
            config: connection settings (SASL among them).
            ssl_context: wrap the socket in TLS with this context.
            timeout: seconds for TCP connect plus handshake.

        Raises:
            KafkaConnectionError: TCP or TLS failed.
            AuthenticationFailedError: SASL failed (wrong credentials, mechanism refused).
            KafkaTimeoutError: the handshake did not finish in time.
        """
        deadline = time.monotonic() + timeout
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
        except OSError as exc:
            failure = tls_failure(exc, host, port, handshake=ssl_context is not None)
            if isinstance(failure, KafkaError):
                raise failure from exc
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        machine = BrokerConnection(
            config or ConnectionConfig(), rng=random.SystemRandom(), host=host
        )
        conn = cls(sock, machine)
        conn._peer = (host, port)
        machine.connection_made(now=time.monotonic())
        try:
            conn._pump(lambda: conn.versions is not None, deadline)
        except BaseException:
            conn.close()
            raise
        return conn

    def request(self, entity: Any, *, timeout: float | None = None) -> Any:
        """Send a kio request and block until its response.

        Raises:
            KafkaTimeoutError, KafkaConnectionError, UnsupportedVersionError: the request
                failed (the machine's RequestFailed error is raised as is).
        """
        cid = self._machine.send_request(entity, now=time.monotonic(), timeout=timeout)
        self._pump(lambda: cid in self._responses or cid in self._failures, None)
        if cid in self._failures:
            raise self._failures.pop(cid)
        return self._responses.pop(cid)

    def close(self) -> None:
        """Close the connection and the socket."""
        if self._closed:
            return
        self._closed = True
        self._machine.close()
        self._drain()
        self._selector.close()
        self._sock.close()

    def __enter__(self) -> BlockingConnection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # The loop: write, wait for bytes or the machine's deadline, feed, drain events.
    def _pump(self, done: Any, deadline: float | None) -> None:
        while True:
            self._drain()
            # Write first: handle_timer may have queued bytes (a KIP-368 re-authentication)
            # that must not wait for the caller's next request.
            if not self._closed:
                self._flush()
            if done():
                return
            if self._closed_error is not None:
                raise self._closed_error
            if self._closed:
                raise KafkaConnectionError("connection closed")
            self._flush()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise KafkaTimeoutError("connection handshake did not finish in time")
            wakes = [t for t in (self._machine.get_timer(), deadline) if t is not None]
            wait = max(0.0, min(wakes) - now) if wakes else None
            if self._selector.select(wait):
                size = self._read_size
                try:
                    data = self._sock.recv(size)
                except (BlockingIOError, ssl.SSLWantReadError):
                    continue
                except OSError as exc:
                    error = tls_failure(exc, *self._peer, handshake=False)
                    self._machine.connection_lost(now=time.monotonic(), error=error)
                    continue
                self._read_size = next_read_size(size, len(data))
                self._machine.receive_data(data, now=time.monotonic())
            else:
                self._machine.handle_timer(now=time.monotonic())

    def _flush(self) -> None:
        data = self._machine.data_to_send()
        view = memoryview(data)
        while view:
            try:
                sent = self._sock.send(view)
            except (BlockingIOError, ssl.SSLWantWriteError):
                select.select([], [self._sock], [], 1.0)
                continue
            except OSError as exc:
                self._machine.connection_lost(now=time.monotonic(), error=exc)
                return
            view = view[sent:]

    def _drain(self) -> None:
        while (event := self._machine.next_event()) is not None:
            match event:
                case ConnectionReady(versions=versions):
                    self.versions = versions
                case ResponseReceived(correlation_id=cid, response=resp):
                    self._responses[cid] = resp
                case RequestFailed(correlation_id=cid, error=error):
                    self._failures[cid] = error
                case ConnectionClosed(error=error):
                    self._closed_error = error or KafkaConnectionError("connection closed")


class IOMachine(Protocol):
    """What :class:`SocketLoop` needs of a core machine (the Client's IO surface)."""

    def connection_made(
        self, node_id: NodeId, *, now: float, attempt: int | None = None
    ) -> None: ...
    def connection_failed(
        self,
        node_id: NodeId,
        *,
        now: float,
        error: BaseException | None = None,
        attempt: int | None = None,
    ) -> None: ...
    def connection_lost(
        self, node_id: NodeId, *, now: float, error: BaseException | None = None
    ) -> None: ...
    def receive_data(self, node_id: NodeId, data: bytes, *, now: float) -> None: ...
    def handle_timer(self, *, now: float) -> None: ...
    def get_timer(self) -> float | None: ...
    def data_to_send(self) -> list[tuple[NodeId, bytes]]: ...
    def token_received(
        self, token: str, *, now: float, extensions: Mapping[str, str] | None = None
    ) -> None: ...
    def token_failed(self, error: BaseException, *, now: float) -> None: ...


_TOKEN_ANSWER = "token"
"""The selector key of the socket a token worker wakes the loop with."""

TokenAnswer = tuple[str, Mapping[str, str] | None] | Exception
"""A token worker's outcome: the provider's token and extensions, or what it raised."""


class SocketLoop:
    """The sockets of one core machine: one selector, one socket per node.

    The machine decides; this only opens what it asks for (:meth:`open`), closes
    (:meth:`forget`), writes what it has (:meth:`flush`) and, in :meth:`poll`, waits for
    readable sockets or the machine's deadline and feeds the results back.

    The token provider (a user's code, maybe an HTTP call to an identity provider) runs
    on a worker thread (:meth:`fetch_token`), so that a slow one stalls only the
    connections waiting for its token: the loop keeps serving the others, and the
    worker's answer reaches the machine on the loop's thread, through the selector.

    Args:
        machine: a Client, a ProducerMachine... anything with the Client's IO surface.
        ssl_context: TLS for every connection, or None for plaintext.
        connect_timeout: seconds for TCP connect plus TLS handshake.
        waker: a socket whose readability also ends :meth:`poll` (another thread writes
            to its peer to hand the loop a command); the caller drains it.
        token_provider: the ``sasl_oauth_token_provider`` :meth:`fetch_token` asks.
    """

    def __init__(
        self,
        machine: IOMachine,
        *,
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout: float = 10.0,
        waker: socket.socket | None = None,
        token_provider: Any = None,
    ) -> None:
        self._machine = machine
        self._token_provider = token_provider
        self._ssl = ssl_context
        self._connect_timeout = connect_timeout
        self._selector = selectors.DefaultSelector()
        self._socks: dict[NodeId, socket.socket] = {}
        self._peers: dict[NodeId, tuple[str, int]] = {}
        self._read_sizes: dict[NodeId, int] = {}  # what each socket's next read asks for
        self._has_waker = waker is not None
        if waker is not None:
            self._selector.register(waker, selectors.EVENT_READ, data=None)
        self._token_answers: collections.deque[TokenAnswer] = collections.deque()
        self._tokens_pending = 0  # workers started, answers not fed yet
        self._token_r: socket.socket | None = None
        self._token_w: socket.socket | None = None

    def open(self, node: NodeId, host: str, port: int, attempt: int | None = None) -> None:
        """Connect a socket for ``node`` and report the outcome to the machine (with the
        ConnectRequested's ``attempt``: the machine ignores a report for an attempt it gave
        up on, whose socket the CloseRequested queued after it closes)."""
        try:
            sock = socket.create_connection((host, port), timeout=self._connect_timeout)
            if self._ssl is not None:
                sock = self._ssl.wrap_socket(sock, server_hostname=host)
        except OSError as exc:
            error = tls_failure(exc, host, port, handshake=self._ssl is not None)
            self._machine.connection_failed(
                node, now=time.monotonic(), error=error, attempt=attempt
            )
            return
        self._peers[node] = (host, port)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socks[node] = sock
        self._selector.register(sock, selectors.EVENT_READ, data=int(node))
        self._machine.connection_made(node, now=time.monotonic(), attempt=attempt)

    def fetch_token(self) -> None:
        """On TokenRequested: call the token provider on a worker thread; its answer (or
        exception) reaches the machine from :meth:`feed`, on the loop's thread. (The core
        bounds the wait with ``request_timeout`` and asks again after it.)"""
        if self._token_w is None:
            self._token_r, self._token_w = socket.socketpair()
            self._token_r.setblocking(False)
            self._selector.register(self._token_r, selectors.EVENT_READ, data=_TOKEN_ANSWER)
        self._tokens_pending += 1
        worker = threading.Thread(
            target=self._ask_provider,
            args=(self._token_w,),
            name="kafkastate token provider",
            daemon=True,
        )
        worker.start()

    def _ask_provider(self, wake: socket.socket) -> None:
        answer: TokenAnswer
        try:
            answer = fetch_token_blocking(self._token_provider)
        except Exception as exc:
            answer = exc
        self._token_answers.append(answer)
        with contextlib.suppress(OSError):  # closed meanwhile: nobody waits any more
            wake.send(b"\0")

    def _feed_token_answers(self) -> None:
        if self._token_r is not None:
            with contextlib.suppress(OSError):
                while self._token_r.recv(4096):
                    pass
        while self._token_answers:
            answer = self._token_answers.popleft()
            self._tokens_pending -= 1
            if isinstance(answer, Exception):
                self._machine.token_failed(answer, now=time.monotonic())
            else:
                token, extensions = answer
                self._machine.token_received(token, now=time.monotonic(), extensions=extensions)

    def forget(self, node: NodeId) -> None:
        """Close ``node``'s socket, if any (the machine asked, or it broke)."""
        sock = self._socks.pop(node, None)
        self._peers.pop(node, None)
        self._read_sizes.pop(node, None)
        if sock is not None:
            self._selector.unregister(sock)
            sock.close()

    def serve(self, event: object) -> bool:
        """Do what a connection event of the machine asks (:class:`ConnectRequested`,
        :class:`CloseRequested`, :class:`TokenRequested`) and say True; False for any other
        event, which the caller handles."""
        match event:
            case ConnectRequested(node_id=node, host=host, port=port, attempt=attempt):
                self.open(node, host, port, attempt)
            case CloseRequested(node_id=node):
                self.forget(node)
            case TokenRequested():
                self.fetch_token()
            case _:
                return False
        return True

    def flush(self) -> None:
        """Write everything the machine has queued."""
        for node, data in self._machine.data_to_send():
            sock = self._socks.get(node)
            if sock is None:
                continue
            try:
                _send_all(sock, data)
            except OSError as exc:
                self.forget(node)
                self._machine.connection_lost(node, now=time.monotonic(), error=exc)

    def poll(self, deadline: float | None) -> None:
        """Wait for readable sockets, the machine's deadline or ``deadline``; feed the
        machine what arrived, then run its timers."""
        wakes = [t for t in (self._machine.get_timer(), deadline) if t is not None]
        self.feed(self.select(min(wakes) if wakes else None))

    def select(self, until: float | None) -> list[int | str | None]:
        """Wait, touching no machine state, until a socket or the waker is readable or
        ``until`` (a ``time.monotonic()`` deadline; None: no limit) passes.

        Another thread may use the machine meanwhile (``KafkaProducer.send`` does).

        Returns:
            The readable nodes (None for the waker), for :meth:`feed`.
        """
        wait = None if until is None else max(0.0, until - time.monotonic())
        if not self._socks and not self._has_waker and not self._tokens_pending:
            time.sleep(0.05 if wait is None else min(wait, 0.05))
            return []
        return [key.data for key, _mask in self._selector.select(wait)]

    def feed(self, ready: list[int | str | None]) -> None:
        """Read the sockets :meth:`select` found readable, give the machine what arrived
        (token workers' answers too), then run its timers."""
        machine = self._machine
        for data_key in ready:
            if data_key is None:
                continue  # the waker: its owner drains it
            if data_key == _TOKEN_ANSWER:
                self._feed_token_answers()
                continue
            node = NodeId(int(data_key))
            sock = self._socks.get(node)
            if sock is None:
                continue
            size = self._read_sizes.get(node, READ_MIN)
            try:
                data = sock.recv(size)
            except (BlockingIOError, ssl.SSLWantReadError):
                continue
            except OSError as exc:
                # (TLS 1.3: a broker refusing our certificate says so on the first read)
                error = tls_failure(exc, *self._peers.get(node, ("?", 0)), handshake=False)
                self.forget(node)
                machine.connection_lost(node, now=time.monotonic(), error=error)
                continue
            if data:
                self._read_sizes[node] = next_read_size(size, len(data))
            else:
                self.forget(node)
            machine.receive_data(node, data, now=time.monotonic())
        machine.handle_timer(now=time.monotonic())

    def close(self) -> None:
        """Close every socket and the selector (a token worker still running finds its
        socket closed and drops its answer)."""
        for sock in self._socks.values():
            sock.close()
        self._socks.clear()
        for end in (self._token_r, self._token_w):
            if end is not None:
                end.close()
        self._selector.close()


class BlockingClient:
    """Drives the core :class:`~kafkastate.core.client.Client` over blocking sockets.

    Requests are made with :meth:`request`, which blocks until that request completes or
    fails; :class:`SocketLoop` does the IO.

    Args:
        config: the client settings (bootstrap servers, connection, metadata...).
        ssl_context: TLS for every connection, or None for plaintext.
        topics: topics whose metadata to track (None = all).
        token_provider: the ``sasl_oauth_token_provider``, asked for OAUTHBEARER tokens.
    """

    def __init__(
        self,
        config: ClientConfig,
        *,
        ssl_context: ssl.SSLContext | None = None,
        topics: Iterable[str] | None = (),
        token_provider: Any = None,
    ) -> None:
        self.client = Client(config, rng=random.SystemRandom(), topics=topics)
        self._io = SocketLoop(
            self.client,
            ssl_context=ssl_context,
            token_provider=token_provider,
            connect_timeout=config.socket_connection_setup_timeout,
        )
        self._done: dict[RequestId, RequestCompleted | ClientRequestFailed] = {}
        self._metadata_updates = 0

    def request(
        self,
        factory: RequestFactory,
        *,
        node_id: NodeId | None = None,
        timeout: float | None = None,
    ) -> RequestCompleted:
        """Send a request (to ``node_id`` or any node) and block until it completes.

        Raises:
            KafkaError: the request failed; the Client's error is raised as is.
        """
        rid = self.client.send(factory, now=time.monotonic(), node_id=node_id, timeout=timeout)
        self._run(lambda: rid in self._done)
        outcome = self._done.pop(rid)
        if isinstance(outcome, ClientRequestFailed):
            raise outcome.error
        return outcome

    def wait_for_metadata(self, timeout: float = 30.0) -> ClusterMetadata:
        """Block until a Metadata response has been merged; return the snapshot.

        Raises:
            KafkaTimeoutError: no metadata within ``timeout`` seconds.
        """
        seen = self._metadata_updates
        self.client.request_metadata_update()
        self._run(lambda: self._metadata_updates > seen, deadline=time.monotonic() + timeout)
        return self.client.cluster

    def close(self) -> None:
        """Close every connection."""
        self.client.close()
        self._handle_events()
        self._io.close()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, done: Any, deadline: float | None = None) -> None:
        self.client.handle_timer(now=time.monotonic())
        while True:
            self._handle_events()
            self._io.flush()
            if done():
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise KafkaTimeoutError("the client did not finish in time")
            self._io.poll(deadline)

    def _handle_events(self) -> None:
        while (event := self.client.next_event()) is not None:
            if self._io.serve(event):
                continue
            match event:
                case RequestCompleted(request_id=rid) | ClientRequestFailed(request_id=rid):
                    self._done[rid] = event
                case MetadataUpdated():
                    self._metadata_updates += 1
                case NodeDisconnected():
                    pass


def _send_all(sock: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view) :]
        except (BlockingIOError, ssl.SSLWantWriteError):
            select.select([], [sock], [], 1.0)


@attrs.frozen(kw_only=True)
class TopicInfo:
    """What Metadata says about one topic."""

    name: str
    topic_id: uuid.UUID | None
    partitions: dict[int, int]
    """partition -> leader node id (-1 while there is no leader)."""
    error_code: int


class BlockingAdmin:
    """Metadata, create/delete topics, and raw produce/fetch over one blocking connection.

    Args:
        bootstrap_servers: ``"host:port[,host:port]"``; the first that answers is used.
        config: connection settings (SASL among them).
        ssl_context: TLS context, or None for plaintext.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        config: ConnectionConfig | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 30.0,
    ) -> None:
        errors: list[str] = []
        for host, port in parse_bootstrap(bootstrap_servers):
            try:
                self.connection = BlockingConnection.open(
                    host, port, config=config, ssl_context=ssl_context, timeout=timeout
                )
                break
            except KafkaConnectionError as exc:
                errors.append(str(exc))
        else:
            raise KafkaConnectionError("no bootstrap server answered: " + "; ".join(errors))
        assert self.connection.versions is not None
        self.versions: ApiVersionTable = self.connection.versions

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()

    def __enter__(self) -> BlockingAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def metadata(self, topics: Sequence[str] | None = None) -> Any:
        """The raw Metadata response for ``topics`` (None = all)."""
        return self.connection.request(requests.metadata_request(self.versions, topics))

    def topics(self, names: Sequence[str] | None = None) -> dict[str, TopicInfo]:
        """Topic name -> :class:`TopicInfo` from a Metadata request."""
        out = {}
        for t in self.metadata(names).topics:
            out[t.name] = TopicInfo(
                name=t.name,
                topic_id=getattr(t, "topic_id", None),
                partitions={int(p.partition_index): int(p.leader_id) for p in t.partitions},
                error_code=int(t.error_code),
            )
        return out

    def create_topics(
        self, topics: Iterable[NewTopic | str], *, timeout: float = 30.0, wait: bool = True
    ) -> None:
        """Create topics; with ``wait`` block until every partition has a leader.

        Raises:
            BrokerResponseError: a topic could not be created (TopicAlreadyExistsError...).
        """
        specs = [NewTopic(name=t) if isinstance(t, str) else t for t in topics]
        response = self.connection.request(
            requests.create_topics_request(self.versions, specs, timeout=timeout),
            timeout=timeout + 5,
        )
        for result in response.topics:
            if int(result.error_code) != 0:
                raise error_for_code(int(result.error_code))(
                    result.error_message or "", topic=result.name
                )
        if wait:
            self._wait_for(
                lambda info: all(_ready(info.get(s.name)) for s in specs), specs, timeout
            )

    def delete_topics(
        self, names: Iterable[str], *, timeout: float = 30.0, wait: bool = True
    ) -> None:
        """Delete topics by name; with ``wait`` block until Metadata no longer lists them.

        Raises:
            BrokerResponseError: a topic could not be deleted (UnknownTopicOrPartitionError...).
        """
        names = list(names)
        response = self.connection.request(
            requests.delete_topics_request(self.versions, names, timeout=timeout),
            timeout=timeout + 5,
        )
        for result in response.responses:
            if int(result.error_code) != 0:
                raise error_for_code(int(result.error_code))(
                    getattr(result, "error_message", None) or "", topic=result.name
                )
        if wait:
            specs = [NewTopic(name=n) for n in names]
            self._wait_for(
                lambda info: all(n not in info or info[n].error_code != 0 for n in names),
                specs,
                timeout,
            )

    def _wait_for(self, check: Any, specs: Sequence[NewTopic], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            info = self.topics([s.name for s in specs])
            if check(info):
                return
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"topics {[s.name for s in specs]} did not reach the expected state "
                    f"within {timeout:g} s"
                )
            time.sleep(0.05)

    def produce(
        self, topic: str, partition: int, batch: bytes, *, acks: int = -1, timeout: float = 30.0
    ) -> int:
        """Produce one record batch; return the base offset the broker assigned.

        Raises:
            BrokerResponseError: the partition answered with an error code.
        """
        info = self.topics([topic])[topic]
        request = framing.produce_request(
            self.versions, {(topic, info.topic_id, partition): batch}, acks=acks, timeout=timeout
        )
        response = self.connection.request(request, timeout=timeout + 5)
        part = response.responses[0].partition_responses[0]
        if int(part.error_code) != 0:
            raise error_for_code(int(part.error_code))(
                part.error_message or "", topic=topic, partition=partition
            )
        return int(part.base_offset)

    def fetch(
        self, topic: str, partition: int, offset: int, *, max_wait: float = 0.5
    ) -> tuple[bytes, int]:
        """Fetch raw record bytes from ``offset``; return ``(records, high_watermark)``.

        Raises:
            BrokerResponseError: the partition answered with an error code.
        """
        info = self.topics([topic])[topic]
        request = requests.fetch_request(
            self.versions, {(topic, info.topic_id, partition): offset}, max_wait=max_wait
        )
        response = self.connection.request(request, timeout=max_wait + 30)
        data = response.responses[0].partitions[0]
        if int(data.error_code) != 0:
            raise error_for_code(int(data.error_code))(topic=topic, partition=partition)
        return bytes(data.records or b""), int(data.high_watermark)


def _ready(info: TopicInfo | None) -> bool:
    return (
        info is not None
        and info.error_code == 0
        and bool(info.partitions)
        and all(leader >= 0 for leader in info.partitions.values())
    )
