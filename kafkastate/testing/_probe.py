"""Tiny blocking Kafka protocol probes used by the harness to decide a broker is ready.

Deliberately independent of kafkastate's own protocol code: the harness must be able to tell
"the broker is up" even when the client under test is broken. Two requests are spoken, both in
non-flexible versions (request header v1, response header v0):

* ApiVersions v0 (api_key 18): empty body; the response is ``error_code`` + the list of
  ``(api_key, min_version, max_version)`` ranges.
* Metadata v4 (api_key 3): no topics, ``allow_auto_topic_creation=false``; the response lists
  the registered brokers and the active controller id.
"""

from __future__ import annotations

import itertools
import socket
import struct
from dataclasses import dataclass

__all__ = ["MetadataInfo", "ProbeError", "api_versions", "metadata"]

API_VERSIONS_KEY = 18
METADATA_KEY = 3
METADATA_VERSION = 4
_MAX_RESPONSE = 16 * 1024 * 1024

_correlation = itertools.count(1)


class ProbeError(Exception):
    """A probe did not get a well-formed, successful answer (connection refused, bad frame…)."""


@dataclass(frozen=True)
class MetadataInfo:
    """What a Metadata response says about the cluster.

    Attributes:
        brokers: registered (unfenced) brokers, node id -> (host, port).
        controller_id: the node id the broker reports as controller (-1 if unknown).
        cluster_id: the cluster id, if the broker sent one.
    """

    brokers: dict[int, tuple[str, int]]
    controller_id: int
    cluster_id: str | None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self._pos + size > len(self._data):
            raise ProbeError("response truncated")
        (value,) = struct.unpack_from(fmt, self._data, self._pos)
        self._pos += size
        return int(value)

    def string(self) -> str | None:
        length = self.take(">h")
        if length < 0:
            return None
        if self._pos + length > len(self._data):
            raise ProbeError("response truncated")
        raw = self._data[self._pos : self._pos + length]
        self._pos += length
        return raw.decode("utf-8", "replace")


def _encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str, body: bytes
) -> bytes:
    cid = client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ProbeError("connection closed by broker")
        chunks += chunk
    return bytes(chunks)


def _round_trip(
    host: str, port: int, *, api_key: int, version: int, body: bytes, timeout: float, client_id: str
) -> _Reader:
    correlation_id = next(_correlation) & 0x7FFFFFFF
    request = _encode_request(api_key, version, correlation_id, client_id, body)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(request)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            if size < 4 or size > _MAX_RESPONSE:
                raise ProbeError(f"bad response size {size}")
            frame = _recv_exact(sock, size)
    except OSError as exc:
        raise ProbeError(f"{host}:{port}: {exc}") from exc
    reader = _Reader(frame)
    got = reader.take(">i")
    if got != correlation_id:
        raise ProbeError(f"correlation id mismatch: sent {correlation_id}, got {got}")
    return reader


def api_versions(
    host: str, port: int, *, timeout: float = 2.0, client_id: str = "kafkastate-probe"
) -> dict[int, tuple[int, int]]:
    """Send ApiVersions v0 and return the broker's supported version ranges.

    Args:
        host: broker host.
        port: broker port (a PLAINTEXT listener).
        timeout: socket timeout in seconds, for connect and for each read.
        client_id: client id put in the request header.

    Returns:
        api_key -> (min_version, max_version) for every API the broker announces.

    Raises:
        ProbeError: connection failed, the frame was malformed, or error_code was not 0.
    """
    reader = _round_trip(
        host,
        port,
        api_key=API_VERSIONS_KEY,
        version=0,
        body=b"",
        timeout=timeout,
        client_id=client_id,
    )
    error_code = reader.take(">h")
    if error_code != 0:
        raise ProbeError(f"ApiVersions error_code {error_code}")
    ranges: dict[int, tuple[int, int]] = {}
    for _ in range(reader.take(">i")):
        key = reader.take(">h")
        ranges[key] = (reader.take(">h"), reader.take(">h"))
    if API_VERSIONS_KEY not in ranges:
        raise ProbeError("ApiVersions response does not list ApiVersions itself")
    return ranges


def metadata(
    host: str, port: int, *, timeout: float = 2.0, client_id: str = "kafkastate-probe"
) -> MetadataInfo:
    """Send Metadata v4 for no topics and return the brokers and controller the broker knows.

    Args:
        host: broker host.
        port: broker port (a PLAINTEXT listener).
        timeout: socket timeout in seconds.
        client_id: client id put in the request header.

    Returns:
        The registered brokers, the controller id and the cluster id.

    Raises:
        ProbeError: connection failed or the frame was malformed.
    """
    body = struct.pack(">i?", 0, False)  # topics: empty array; allow_auto_topic_creation
    reader = _round_trip(
        host,
        port,
        api_key=METADATA_KEY,
        version=METADATA_VERSION,
        body=body,
        timeout=timeout,
        client_id=client_id,
    )
    reader.take(">i")  # throttle_time_ms
    brokers: dict[int, tuple[str, int]] = {}
    for _ in range(reader.take(">i")):
        node_id = reader.take(">i")
        broker_host = reader.string() or ""
        broker_port = reader.take(">i")
        reader.string()  # rack
        brokers[node_id] = (broker_host, broker_port)
    cluster_id = reader.string()
    controller_id = reader.take(">i")
    return MetadataInfo(brokers=brokers, controller_id=controller_id, cluster_id=cluster_id)
