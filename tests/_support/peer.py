"""A scripted broker *peer* for byte-level unit tests of BrokerConnection.

It decodes the frames the machine writes (with kio's request-header and body readers, an
implementation independent of our framing code) and encodes the answers a test scripts.
It is not a broker: integration tests use the real one from kafkastate.testing.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
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

from kafkastate.core.client import CloseRequested, ConnectRequested
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
    errors: dict[str, ErrorCode] | None = None,
) -> Any:
    """A Metadata response: ``topics`` maps name -> partition -> (leader, leader epoch);
    ``unknown`` topics answer UNKNOWN_TOPIC_OR_PARTITION, ``errors`` others' codes."""
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
    failed = {**dict.fromkeys(unknown, ErrorCode.unknown_topic_or_partition), **(errors or {})}
    for name, code in failed.items():
        entries.append(
            build(
                topic_cls,
                error_code=code,
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


BROKERS = {1: ("b1", 9092), 2: ("b2", 9092)}
"""The nodes of :class:`ScriptedCluster`'s Metadata answers."""


@dataclass
class Sent:
    """One request the machine wrote that the test answers itself."""

    node: int
    req: Any  # Received
    auto: Any = None  # a Metadata/ApiVersions answer held back behind an earlier request


class ScriptedCluster:
    """A scripted two-broker cluster around one machine with the Client's IO surface
    (``next_event``, ``data_to_send``, ``connection_made``/``_failed``, ``receive_data``,
    ``handle_timer``, ``get_timer``): the producer's and the fetcher's.

    Connections open as soon as they are requested (unless ``refuse`` names the node);
    ApiVersions and Metadata are answered at once from :attr:`topics` (name -> partition ->
    (leader, leader epoch); change it to move leaders); every other request waits in
    :attr:`pending` for the test. Events other than socket requests land in :attr:`events`.
    """

    def __init__(
        self,
        machine: Any,
        topics: dict[str, dict[int, tuple[int, int]]] | None = None,
        *,
        api_ranges: dict[int, tuple[int, int]] | None = None,
    ) -> None:
        self.m = machine
        self.topics = {"t": {0: (1, 0), 1: (2, 0)}} if topics is None else topics
        self.api_ranges = api_ranges
        self.now = 0.0
        self.open: set[int] = set()
        self.pending: list[Sent] = []
        self.events: list[Any] = []
        self.refuse: set[int] = set()
        self.topic_errors: dict[str, ErrorCode] = {}
        """Topics whose Metadata answer is this error (whatever :attr:`topics` says)."""
        self.requests: collections.Counter[int] = collections.Counter()
        """How many requests of each API key the machine has written."""
        self.metadata_topics: list[tuple[str, ...] | None] = []
        """The topics of each Metadata request, in order (None: all topics)."""

    def topic_ids(self) -> dict[Any, str]:
        """Topic id -> name, as metadata_response numbers them (sorted names)."""
        return {uuid.UUID(int=i + 1): n for i, n in enumerate(sorted(self.topics))}

    def pump(self) -> None:
        """Deliver everything until the machine is quiet."""
        progress = True
        while progress:
            progress = False
            while (ev := self.m.next_event()) is not None:
                progress = True
                if isinstance(ev, ConnectRequested):
                    # a new socket: whatever the old one carried is gone with it
                    self.pending = [s for s in self.pending if s.node != ev.node_id]
                    if ev.node_id in self.refuse:
                        self.m.connection_failed(ev.node_id, now=self.now, error=OSError("no"))
                    else:
                        self.open.add(ev.node_id)
                        self.m.connection_made(ev.node_id, now=self.now)
                elif isinstance(ev, CloseRequested):
                    self.open.discard(ev.node_id)
                    self.pending = [s for s in self.pending if s.node != ev.node_id]
                else:
                    self.events.append(ev)
            for node, data in self.m.data_to_send():
                progress = True
                assert node in self.open, f"bytes for closed node {node}"
                for frame in split_frames(data):
                    req = parse_request(frame)
                    self.requests[req.api_key] += 1
                    if req.api_key == 18:  # ApiVersions
                        body = api_versions_response(req.version, ranges=self.api_ranges)
                        self._answer_in_order(node, req, body)
                    elif req.api_key == 3:  # Metadata
                        names = [t.name for t in req.body.topics or ()]
                        asked = req.body.topics
                        self.metadata_topics.append(None if asked is None else tuple(names))
                        errors = {n: e for n, e in self.topic_errors.items() if n in names}
                        known = {
                            n: p for n, p in self.topics.items() if n in names and n not in errors
                        }
                        unknown = tuple(n for n in names if n not in self.topics)
                        body = metadata_response(
                            req.version,
                            brokers=BROKERS,
                            topics=known,
                            unknown=tuple(n for n in unknown if n not in errors),
                            errors=errors,
                        )
                        # topic ids must stay stable: number them over all topics
                        self._answer_in_order(node, req, self._renumber(body))
                    else:
                        self.pending.append(Sent(node, req))

    def _renumber(self, body: Any) -> Any:
        ids = {n: i for i, n in self.topic_ids().items()}
        topics = tuple(
            dataclasses.replace(t, topic_id=ids[t.name]) if t.name in ids else t
            for t in body.topics
        )
        return dataclasses.replace(body, topics=topics)

    def _answer(self, node: int, req: Any, body: Any) -> None:
        self.m.receive_data(node, response_frame(req.correlation_id, body), now=self.now)

    def _answer_in_order(self, node: int, req: Any, body: Any) -> None:
        # A broker answers in request order on a connection: an automatic answer waits
        # behind any request of the same connection that the test has not answered yet.
        if any(s.node == node for s in self.pending):
            self.pending.append(Sent(node, req, auto=body))
        else:
            self._answer(node, req, body)

    def answer(self, sent: Sent, body: Any) -> None:
        """Answer a pending request, then the automatic answers queued behind it; pump."""
        self.pending.remove(sent)
        self._answer(sent.node, sent.req, body)
        while True:
            head = next((s for s in self.pending if s.node == sent.node), None)
            if head is None or head.auto is None:
                break
            self.pending.remove(head)
            self._answer(head.node, head.req, head.auto)
        self.pump()

    def take(self, api_key: int) -> Sent:
        """The oldest pending request of that API."""
        for sent in self.pending:
            if sent.req.api_key == api_key:
                return sent
        raise AssertionError(f"no pending api_key {api_key}: {self.pending}")

    def advance(self, to: float | None = None) -> None:
        """Jump to ``to`` (default: the machine's timer) and run the timer."""
        timer = self.m.get_timer() if to is None else to
        assert timer is not None
        self.now = max(self.now, timer)
        self.m.handle_timer(now=self.now)
        self.pump()
        after = self.m.get_timer()
        assert after is None or after > self.now, f"timer {after} not after {self.now}"
