"""kafka-python 0.9.5's ``kafka.conn``: a blocking socket to one broker.

``KafkaConnection`` moves already-encoded, size-prefixed requests and responses; it does not
encode anything (0.9.5's ``KafkaProtocol`` encoders wrote API versions Kafka 4 removed, see
:mod:`kafkastate.legacy.protocol`). Everything else in :mod:`kafkastate.legacy` talks to
brokers through the core client.
"""

from __future__ import annotations

import copy as _copy
import random
import socket
import struct
from collections.abc import Sequence

from kafkastate.core.client import parse_bootstrap_servers
from kafkastate.legacy.common import ConnectionError

__all__ = [
    "DEFAULT_KAFKA_PORT",
    "DEFAULT_SOCKET_TIMEOUT_SECONDS",
    "KafkaConnection",
    "collect_hosts",
]

DEFAULT_SOCKET_TIMEOUT_SECONDS = 120
DEFAULT_KAFKA_PORT = 9092


def collect_hosts(hosts: str | Sequence[str], randomize: bool = True) -> list[tuple[str, int]]:
    """``(host, port)`` pairs from ``"host:port,..."`` (or a list), shuffled if
    ``randomize``.

    Raises:
        KafkaConfigurationError: a malformed address.
    """
    pairs = list(parse_bootstrap_servers(hosts))
    if randomize:
        random.shuffle(pairs)
    return pairs


class KafkaConnection:
    """A blocking socket to one broker: :meth:`send` a framed request, :meth:`recv` its
    framed response. Not thread safe: each ``send`` is followed by its ``recv``.

    Args:
        host: the broker's host.
        port: its port.
        timeout: socket timeout in seconds (None: block forever).

    Raises:
        ConnectionError: the broker cannot be reached (a KafkaConnectionError).
    """

    def __init__(
        self, host: str, port: int, timeout: float | None = DEFAULT_SOCKET_TIMEOUT_SECONDS
    ) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self.reinit()

    def __repr__(self) -> str:
        return f"<KafkaConnection host={self.host} port={self.port}>"

    def get_connected_socket(self) -> socket.socket:
        """The socket, connecting first if closed.

        Raises:
            ConnectionError: the connection failed.
        """
        if self._sock is None:
            self.reinit()
        assert self._sock is not None
        return self._sock

    def send(self, request_id: int, payload: bytes) -> None:
        """Write ``payload`` (a size-prefixed request).

        Raises:
            ConnectionError: the write failed (the socket is closed).
        """
        try:
            self.get_connected_socket().sendall(payload)
        except OSError as exc:
            self.close()
            raise ConnectionError(f"Kafka @ {self.host}:{self.port} went away: {exc}") from exc

    def _read(self, n: int) -> bytes:
        sock = self.get_connected_socket()
        parts = []
        while n:
            try:
                chunk = sock.recv(min(n, 65536))
            except OSError as exc:
                self.close()
                raise ConnectionError(f"Kafka @ {self.host}:{self.port} went away: {exc}") from exc
            if not chunk:
                self.close()
                raise ConnectionError(f"Kafka @ {self.host}:{self.port} closed the socket")
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)

    def recv(self, request_id: int) -> bytes:
        """Read one response (without its 4-byte size prefix).

        Raises:
            ConnectionError: the read failed or the broker closed the socket.
        """
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def copy(self) -> KafkaConnection:
        """An unconnected copy: call :meth:`reinit` before use."""
        c = _copy.copy(self)
        c._sock = None
        return c

    def close(self) -> None:
        """Shut down and close the socket."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def reinit(self) -> None:
        """Close the socket (if open) and connect afresh.

        Raises:
            ConnectionError: the connection failed.
        """
        self.close()
        try:
            self._sock = socket.create_connection((self.host, self.port), self.timeout)
        except OSError as exc:
            raise ConnectionError(f"unable to connect to {self.host}:{self.port}: {exc}") from exc
