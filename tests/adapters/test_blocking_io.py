"""The blocking adapter's socket loop, driven by a real Client over real loopback sockets
(a listening socket stands in for the broker: what is checked is what the loop opens,
closes and writes, not Kafka)."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator

import pytest

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
