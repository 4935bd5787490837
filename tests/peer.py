"""A scripted broker *peer* for byte-level unit tests of BrokerConnection.

It decodes the frames the machine writes (with kio's request-header and body readers, an
implementation independent of our framing code) and encodes the answers a test scripts.
It is not a broker: integration tests use the real one from kafkastate.testing.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import io
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16

from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import CLIENT_VERSIONS


@dataclass
class Received:
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any


def parse_request(frame: bytes) -> Received:
    """Parse one request frame (payload after the size prefix)."""
    api_key, version, correlation_id, client_len = struct.unpack_from(">hhih", frame, 0)
    pos = 10
    client_id = None
    if client_len >= 0:
        client_id = frame[pos : pos + client_len].decode()
        pos += client_len
    cls = load_request_schema(api_key, version)
    if cls.__flexible__:
        assert frame[pos] == 0, "we never send tagged header fields"
        pos += 1
    body, size = entity_reader(cls)(frame, pos)
    assert pos + size == len(frame), "request body must fill the frame exactly"
    return Received(api_key, version, correlation_id, client_id, body)


def split_frames(data: bytes) -> list[bytes]:
    frames = []
    pos = 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        frames.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    assert pos == len(data)
    return frames


def response_frame(correlation_id: int, body: Any, *, header_v1: bool | None = None) -> bytes:
    """Frame a kio response entity with the right response header."""
    cls = type(body)
    if header_v1 is None:
        header_v1 = bool(cls.__flexible__) and int(cls.__api_key__) != 18
    buf = io.BytesIO()
    entity_writer(cls)(buf, body)
    header = struct.pack(">i", correlation_id) + (b"\x00" if header_v1 else b"")
    payload = header + buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def api_versions_response(
    version: int,
    *,
    error: ErrorCode = ErrorCode.none,
    ranges: dict[int, tuple[int, int]] | None = None,
) -> Any:
    cls = load_response_schema(18, version)
    mod = __import__(cls.__module__, fromlist=["ApiVersion"])
    ranges = dict(CLIENT_VERSIONS) if ranges is None else ranges
    keys = tuple(
        mod.ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
        for k, (lo, hi) in sorted(ranges.items())
    )
    kwargs: dict[str, Any] = {"error_code": error, "api_keys": keys}
    if version >= 1:
        kwargs["throttle_time"] = datetime.timedelta(0)
    return cls(**kwargs)


def response(api_key: int, version: int, **fields: Any) -> Any:
    return load_response_schema(api_key, version)(**fields)


class ScramServer:
    """Server side of SCRAM (RFC 5802), for unit tests of the client side."""

    def __init__(self, mechanism: str, password: str, *, iterations: int = 4096) -> None:
        self.hash = "sha256" if mechanism.endswith("256") else "sha512"
        self.salt = b"fixed-test-salt!"
        self.iterations = iterations
        self.salted = hashlib.pbkdf2_hmac(self.hash, password.encode(), self.salt, iterations)
        self.server_nonce_suffix = "srvNONCE"

    def first(self, client_first: bytes) -> bytes:
        assert client_first.startswith(b"n,,")
        self.client_first_bare = client_first[3:].decode()
        attrs = dict(p.split("=", 1) for p in self.client_first_bare.split(","))
        self.nonce = attrs["r"] + self.server_nonce_suffix
        salt = base64.b64encode(self.salt).decode()
        self.server_first = f"r={self.nonce},s={salt},i={self.iterations}"
        return self.server_first.encode()

    def final(self, client_final: bytes, *, corrupt_signature: bool = False) -> tuple[bool, bytes]:
        text = client_final.decode()
        without_proof, proof_b64 = text.rsplit(",p=", 1)
        auth = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        client_key = hmac.digest(self.salted, b"Client Key", self.hash)
        stored = hashlib.new(self.hash, client_key).digest()
        signature = hmac.digest(stored, auth, self.hash)
        proof = base64.b64decode(proof_b64)
        recovered = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        ok = hashlib.new(self.hash, recovered).digest() == stored
        server_key = hmac.digest(self.salted, b"Server Key", self.hash)
        server_sig = hmac.digest(server_key, auth, self.hash)
        if corrupt_signature:
            server_sig = bytes(b ^ 1 for b in server_sig)
        return ok, b"v=" + base64.b64encode(server_sig)


def metadata_response(
    version: int,
    *,
    brokers: dict[int, tuple[str, int]],
    topics: dict[str, dict[int, tuple[int, int]]] | None = None,
    unknown: tuple[str, ...] = (),
    controller: int = 1,
) -> Any:
    """A Metadata response: ``topics`` maps name -> partition -> (leader, leader epoch)."""
    cls = load_response_schema(3, version)
    broker_cls = nested_type(cls, "MetadataResponseBroker")
    topic_cls = nested_type(cls, "MetadataResponseTopic")
    part_cls = nested_type(cls, "MetadataResponsePartition")
    entries = []
    for i, (name, parts) in enumerate(sorted((topics or {}).items())):
        entries.append(
            build(
                topic_cls,
                error_code=ErrorCode.none,
                name=name,
                topic_id=uuid.UUID(int=i + 1),
                is_internal=False,
                topic_authorized_operations=-2147483648,
                partitions=tuple(
                    build(
                        part_cls,
                        error_code=ErrorCode.none,
                        partition_index=p,
                        leader_id=leader,
                        leader_epoch=epoch,
                        replica_nodes=(leader,),
                        isr_nodes=(leader,),
                        offline_replicas=(),
                    )
                    for p, (leader, epoch) in sorted(parts.items())
                ),
            )
        )
    for name in unknown:
        entries.append(
            build(
                topic_cls,
                error_code=ErrorCode.unknown_topic_or_partition,
                name=name,
                topic_id=uuid.UUID(int=0),
                is_internal=False,
                topic_authorized_operations=-2147483648,
                partitions=(),
            )
        )
    return build(
        cls,
        throttle_time=datetime.timedelta(0),
        brokers=tuple(
            build(broker_cls, node_id=n, host=h, port=p, rack=None)
            for n, (h, p) in sorted(brokers.items())
        ),
        error_code=ErrorCode.none,
        cluster_id="test-cluster",
        controller_id=controller,
        topics=tuple(entries),
    )
