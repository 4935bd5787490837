"""The blocking adapter's socket loop, driven by a real Client over real loopback sockets
(a listening socket stands in for the broker: what is checked is what the loop opens,
closes and writes, not Kafka)."""

from __future__ import annotations

import fcntl
import random
import socket
import termios
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kafkastate.adapters._common import READ_MAX, READ_MIN, next_read_size
from kafkastate.adapters.blocking import SocketLoop
from kafkastate.core.client import (
    Client,
    ClientConfig,
    CloseRequested,
    ConnectRequested,
    NodeState,
)
from kafkastate.core.metadata import NodeId
from kafkastate.core.protocol.versions import ApiKey

SETUP_TIMEOUT = 0.2


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0), backlog=8)
    server.settimeout(5.0)
    yield server
    server.close()


def test_a_connect_request_served_after_its_deadline_opens_and_closes_a_socket(
    listener: socket.socket,
) -> None:
    # The chaos runner's crash (the sync KafkaConsumer): a ConnectRequested stayed queued
    # while a later call ran the client's timers past its setup deadline, and serving it
    # then raised LocalProtocolError ("connection_made for node -1 in BACKOFF") out of the
    # loop. The socket opened for the stale request must close, and the node connect again.
    port = listener.getsockname()[1]
    client = Client(
        ClientConfig(
            bootstrap_servers=[("127.0.0.1", port)],
            socket_connection_setup_timeout=SETUP_TIMEOUT,
        ),
        rng=random.Random(7),
        topics=("t",),
    )
    loop = SocketLoop(client)
    try:
        now = time.monotonic()
        client.handle_timer(now=now)  # metadata is due: connect to the bootstrap server
        client.handle_timer(now=now + 2 * SETUP_TIMEOUT)  # ...and nobody served it in time
        events = []
        while (event := client.next_event()) is not None:
            events.append(event)
        kinds = [type(e) for e in events if isinstance(e, ConnectRequested | CloseRequested)]
        assert kinds == [ConnectRequested, CloseRequested]
        for event in events:
            loop.serve(event)  # opens the stale socket, reports it, closes it
        stale, _ = listener.accept()
        with stale:
            stale.settimeout(5.0)
            assert stale.recv(1024) == b""  # closed at once, nothing written to it
        # the node's next attempt connects and speaks (ApiVersions first)
        deadline = time.monotonic() + 5.0
        while True:
            while (event := client.next_event()) is not None:
                loop.serve(event)
            loop.flush()
            listener.settimeout(0.0)
            try:
                fresh, _ = listener.accept()
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "no second connection"
            loop.poll(time.monotonic() + 0.05)
        with fresh:
            fresh.settimeout(5.0)
            loop.flush()
            header = fresh.recv(6)
            assert int.from_bytes(header[4:6], "big") == ApiKey.API_VERSIONS
        assert client.node_state(NodeId(-1)) is NodeState.HANDSHAKING
    finally:
        loop.close()
        client.close()


class Receiver:
    """The IO surface SocketLoop drives, recording the size of every read it is given."""

    def __init__(self) -> None:
        self.reads: list[int] = []

    def connection_made(self, node_id: Any, *, now: float, attempt: Any = None) -> None:
        pass

    def connection_failed(self, node_id: Any, *, now: float, **_: Any) -> None:
        raise AssertionError("the loopback connection failed")

    def connection_lost(self, node_id: Any, *, now: float, error: Any = None) -> None:
        pass

    def receive_data(self, node_id: Any, data: bytes, *, now: float) -> None:
        self.reads.append(len(data))

    def handle_timer(self, *, now: float) -> None:
        pass

    def get_timer(self) -> float | None:
        return None

    def data_to_send(self) -> list[tuple[Any, bytes]]:
        return []

    def token_received(self, token: str, *, now: float, extensions: Any = None) -> None:
        pass

    def token_failed(self, error: BaseException, *, now: float) -> None:
        pass


def test_reads_follow_the_adapters_read_size_rule(listener: socket.socket) -> None:
    """The blocking loop reads as the async driver does (one rule,
    ``_common.next_read_size``): 64 KiB first, twice that after a read that filled it, up
    to 1 MiB, 64 KiB again after one that did not -- never 1 MiB reads of whatever is
    there (they fragment the heap: docs/reliability.md#resource-bounds)."""
    assert [next_read_size(64 << 10, 64 << 10), next_read_size(64 << 10, 10)] == [
        128 << 10,
        READ_MIN,
    ]
    assert next_read_size(READ_MAX, READ_MAX) == READ_MAX
    receiver = Receiver()
    loop = SocketLoop(receiver)  # type: ignore[arg-type]
    total = 4 << 20
    try:
        loop.open(NodeId(1), "127.0.0.1", listener.getsockname()[1])
        peer, _ = listener.accept()
        with peer:
            sender = threading.Thread(target=peer.sendall, args=(b"x" * total,), daemon=True)
            sender.start()
            # more than 64 KiB waiting before the first read: a bigger read would take it
            sock = loop._socks[NodeId(1)]
            deadline = time.monotonic() + 10.0
            while _queued(sock) <= READ_MIN:
                assert time.monotonic() < deadline, "the sender did not get 64 KiB through"
            while sum(receiver.reads) < total:
                assert time.monotonic() < deadline, f"read {sum(receiver.reads)} of {total}"
                loop.poll(time.monotonic() + 0.05)
            sender.join(5.0)
    finally:
        loop.close()
    assert receiver.reads[0] == READ_MIN
    asked = READ_MIN
    for got in receiver.reads:
        assert got <= asked
        asked = next_read_size(asked, got)


def _queued(sock: socket.socket) -> int:
    """The bytes waiting in ``sock``'s receive queue."""
    return int.from_bytes(fcntl.ioctl(sock, termios.FIONREAD, b"\0\0\0\0"), "little")
