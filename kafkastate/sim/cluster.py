"""The simulated Kafka cluster: brokers that speak the wire protocol, partition logs and
the group coordinator.

Requests arrive as frames (size prefix, request header, body) and are decoded with kio's
schemas, the bodies answered as kio response entities and framed like a broker frames them,
so the client's framing, version negotiation and record batch code run end to end. What a
broker serves, at the versions it advertises: ApiVersions, Metadata, FindCoordinator, the
classic group APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup -- through
:class:`~kafkastate.sim.coordinator.ClassicCoordinator`), OffsetCommit, OffsetFetch,
ListOffsets and sessionless Fetch (held up to ``max_wait_ms`` while there is nothing to
return, as a broker holds it).

The model is deliberately small: logs belong to the cluster (every replica in sync, so a
crashed broker loses nothing; the high watermark is the log end), leaders are routing only
(a partition is led by the first live broker from ``partition % brokers``), and moving the
coordinator with :meth:`SimCluster.move_group_coordinator` unloads the groups and loads them from
their last records, as a new coordinator replays ``__consumer_offsets``
(:meth:`~kafkastate.sim.coordinator.ClassicCoordinator.failover`), while requests to the old
one get NOT_COORDINATOR.

Pure: no IO, no clock; time comes with every call.
"""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from collections.abc import Hashable, Mapping
from typing import Any, Final

import attrs
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16

from kafkastate.core.protocol.records import RecordBatchBuilder
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, request_type, response_type
from kafkastate.sim.coordinator import ClassicCoordinator, commit_answer

__all__ = ["SERVED_VERSIONS", "Request", "SimCluster"]

SERVED_VERSIONS: Final = {
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (1, 12),
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 7),
    ApiKey.FIND_COORDINATOR: (1, 4),
    ApiKey.JOIN_GROUP: (2, 9),
    ApiKey.HEARTBEAT: (1, 4),
    ApiKey.LEAVE_GROUP: (1, 5),
    ApiKey.SYNC_GROUP: (1, 5),
    ApiKey.API_VERSIONS: (0, 3),
}
"""What the simulated brokers advertise (versions with topic names, not ids)."""

_NO_TIME: Final = datetime.timedelta(0)
_NOT_LEADER: Final = 6
_NOT_COORDINATOR: Final = 16
_UNKNOWN_TOPIC: Final = 3
_COORDINATOR_APIS: Final = frozenset(
    {
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
    }
)
_TIMESTAMP: Final = 1_700_000_000_000
_ANSWERS_MAX: Final = 1024  # Fetch answers kept for reuse (see SimCluster._fetch)


@attrs.frozen
class Request:
    """One decoded request frame."""

    api_key: int
    version: int
    correlation_id: int
    body: Any


_PARSED: dict[tuple[int, int, bytes], Any] = {}
"""Request bodies already decoded, by API key, version and the body's bytes: most requests
repeat byte for byte but for the correlation id in the header (a caught-up consumer's
Fetch, a Heartbeat, a commit of the same offsets), and kio entities are frozen, so one
decoding serves them all. Bounded, like :data:`_ENCODED`; the entity is the same either
way, so a run does not depend on what an earlier run left here."""
_PARSED_MAX: Final = 4096


def parse_request(frame: bytes) -> Request:
    """Decode one request frame (without its size prefix)."""
    api_key, version, correlation_id, client_len = struct.unpack_from(">hhih", frame, 0)
    pos = 10 + max(client_len, 0)
    cls = request_type(api_key, version)
    if cls.__flexible__:
        pos += 1  # no tagged header fields
    key = (api_key, version, bytes(frame[pos:]))
    body = _PARSED.get(key)
    if body is None:
        body, _size = entity_reader(cls)(frame, pos)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = body
    return Request(api_key, version, correlation_id, body)


_ENCODED: dict[Any, bytes] = {}
"""Response bodies already encoded (kio entities are frozen and compare by value, class
included): most answers repeat -- an empty Fetch, a Heartbeat's NONE, a commit's result --
and kio's writer is the model's costliest step. Bounded; the bytes are the same either
way, so a run does not depend on what an earlier run left here."""
_ENCODED_MAX: Final = 4096


_ENCODED_SAME: dict[int, tuple[Any, bytes]] = {}
"""The same cache by identity, checked first: an answer the model reuses as one object (a
Fetch answer from :meth:`SimCluster._fetch`'s cache, ApiVersions) is found without hashing
its whole entity tree again (kio entities do not keep their hash). The entry holds the
entity, so its id cannot be reused while it is kept; bounded like :data:`_ENCODED`."""


def _encoded(body: Any) -> bytes:
    same = _ENCODED_SAME.get(id(body))
    if same is not None and same[0] is body:
        return same[1]
    try:
        data = _ENCODED.get(body)
    except TypeError:  # an entity holding something unhashable: encode it every time
        data = None
        cache = False
    else:
        cache = True
    if data is None:
        buf = io.BytesIO()
        entity_writer(type(body))(buf, body)
        data = buf.getvalue()
        if cache:
            if len(_ENCODED) >= _ENCODED_MAX:
                _ENCODED.clear()
            _ENCODED[body] = data
    if len(_ENCODED_SAME) >= _ENCODED_MAX:
        _ENCODED_SAME.clear()
    _ENCODED_SAME[id(body)] = (body, data)
    return data


def response_frame(request: Request, body: Any) -> bytes:
    """Frame ``body`` as the answer to ``request`` (ApiVersions keeps header v0)."""
    flexible = bool(type(body).__flexible__) and request.api_key != ApiKey.API_VERSIONS
    payload = struct.pack(">i", request.correlation_id) + (b"\x00" if flexible else b"")
    payload += _encoded(body)
    return struct.pack(">i", len(payload)) + payload


@attrs.define
class PartitionLog:
    """One partition's records as v2 batches: ``(base offset, count, bytes)``."""

    batches: list[tuple[int, int, bytes]] = attrs.Factory(list)
    end: int = 0

    def append(self, values: list[bytes], epoch: int) -> None:
        builder = RecordBatchBuilder(base_offset=self.end, partition_leader_epoch=epoch)
        for value in values:
            builder.append(_TIMESTAMP, None, value)
        self.batches.append((self.end, len(values), builder.build()))
        self.end += len(values)

    def read(self, offset: int, max_bytes: int) -> bytes:
        out = bytearray()
        for base, count, data in self.batches:
            if base + count <= offset:
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return bytes(out)


class SimCluster:
    """Brokers ``1..brokers``, topics, logs and one group coordinator.

    Args:
        brokers: how many brokers.
        coordinator: the group coordinator model (its ``offsets`` are the committed ones).
    """

    served: Mapping[int, tuple[int, int]] = SERVED_VERSIONS
    """The API versions advertised in ApiVersions (a subclass serves more)."""

    def __init__(self, brokers: int, coordinator: ClassicCoordinator) -> None:
        self.nodes = list(range(1, brokers + 1))
        self.alive = set(self.nodes)
        self.coordinator = coordinator
        self.coordinator_node = 1
        self.topics: dict[str, int] = {}
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.leader_epochs: dict[tuple[str, int], int] = {}
        self.held: list[tuple[float, int, Hashable, Request]] = []  # parked fetches
        self._api_versions_answers: dict[int, Any] = {}
        self._fetch_answers: dict[Any, Any] = {}  # see _fetch

    # ----------------------------------------------------------------- admin

    def create_topic(self, name: str, partitions: int) -> None:
        """A topic with ``partitions`` empty partitions."""
        self.topics[name] = partitions
        for p in range(partitions):
            self.logs[(name, p)] = PartitionLog()
            self.leader_epochs[(name, p)] = 0

    def append(self, topic: str, partition: int, values: list[bytes]) -> None:
        """Write records (as a producer would, acknowledged by every replica)."""
        tp = (topic, partition)
        self.logs[tp].append(values, self.leader_epochs[tp])

    def leader(self, topic: str, partition: int) -> int | None:
        """The partition's leader: the first live broker from ``partition % brokers``."""
        n = len(self.nodes)
        for i in range(n):
            node = self.nodes[(partition + i) % n]
            if node in self.alive:
                return node
        return None

    def set_alive(self, node: int, alive: bool) -> None:
        """A broker crashes or comes back; partitions it led move (leader epoch + 1)."""
        before = {tp: self.leader(*tp) for tp in self.logs}
        if alive:
            self.alive.add(node)
        else:
            self.alive.discard(node)
        for tp, old in before.items():
            if self.leader(*tp) != old:
                self.leader_epochs[tp] += 1
        if node == self.coordinator_node and not alive:
            live = sorted(self.alive)
            if live:
                self.coordinator_node = live[0]

    def move_group_coordinator(self, node: int, *, now: float) -> None:
        """The group coordinator moves to broker ``node`` (its ``__consumer_offsets``
        partition gets a new leader): the old one unloads the groups, the new one loads them
        from their last records (:meth:`ClassicCoordinator.failover`); requests to the old
        one get NOT_COORDINATOR."""
        if node != self.coordinator_node:
            self.coordinator_node = node
            self.coordinator.failover(now=now)

    # -------------------------------------------------------------- requests

    def handle(self, node: int, token: Hashable, request: Request, now: float) -> list[Any]:
        """Answer ``request`` at broker ``node``: answers due now (coordinator answers to
        parked requests come from :meth:`take_coordinator_replies`; held fetches from
        :meth:`due_fetches`).
        """
        key, version, body = request.api_key, request.version, request.body
        if key in _COORDINATOR_APIS and node != self.coordinator_node:
            return [_not_coordinator(key, version, body)]
        if key == ApiKey.API_VERSIONS:
            return [self._api_versions(version)]
        if key == ApiKey.METADATA:
            return [self._metadata(version, body)]
        if key == ApiKey.FIND_COORDINATOR:
            return [self._find_coordinator(version, body)]
        if key == ApiKey.OFFSET_FETCH:
            return [self._offset_fetch(version, body)]
        if key == ApiKey.LIST_OFFSETS:
            return [self._list_offsets(node, version, body)]
        if key == ApiKey.FETCH:
            answer = self._fetch(node, version, body)
            if answer is None:
                wait = int(body.max_wait.total_seconds() * 1000) / 1000
                self.held.append((now + wait, node, token, request))
                return []
            return [answer]
        self.coordinator.handle(token, key, version, body, now=now)
        return []

    def due_fetches(self, now: float) -> list[tuple[Hashable, Request, Any]]:
        """Held fetches whose wait is over (or that have data now), answered."""
        out = []
        keep = []
        for due, node, token, request in self.held:
            # one read: an answer if there is data, or an empty one once the wait is over
            answer = self._fetch(node, request.version, request.body, empty_ok=now >= due)
            if answer is None:
                keep.append((due, node, token, request))
            else:
                out.append((token, request, answer))
        self.held = keep
        return out

    def drop_held(self, connection: Hashable) -> None:
        """Forget the held fetches of a closed connection (tokens start with its id)."""
        self.held = [h for h in self.held if not _of(h[2], connection)]

    def next_fetch_deadline(self) -> float | None:
        """When the earliest held fetch must be answered."""
        return min((h[0] for h in self.held), default=None)

    # ------------------------------------------------------------- answers

    def _api_versions(self, version: int) -> Any:
        # the same answer every time for a version: built once (its phantom-typed fields
        # cost more to check than the rest of a connection's handshake)
        answer = self._api_versions_answers.get(version)
        if answer is None:
            answer = self._api_versions_answers[version] = self._build_api_versions(version)
        return answer

    def _build_api_versions(self, version: int) -> Any:
        cls = response_type(ApiKey.API_VERSIONS, version)
        entry = nested_type(cls, "ApiVersion")
        keys = tuple(
            entry(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
            for k, (lo, hi) in sorted(self.served.items())
        )
        return build(cls, error_code=ErrorCode(0), api_keys=keys, throttle_time=_NO_TIME)

    def _metadata(self, version: int, body: Any) -> Any:
        cls = response_type(ApiKey.METADATA, version)
        broker_cls = nested_type(cls, "MetadataResponseBroker")
        topic_cls = nested_type(cls, "MetadataResponseTopic")
        part_cls = nested_type(cls, "MetadataResponsePartition")
        wanted = sorted(self.topics) if body.topics is None else [str(t.name) for t in body.topics]
        topics = []
        for name in wanted:
            count = self.topics.get(name)
            parts = []
            for p in range(count or 0):
                leader = self.leader(name, p)
                parts.append(
                    build(
                        part_cls,
                        error_code=ErrorCode(0 if leader is not None else 5),
                        partition_index=p,
                        leader_id=-1 if leader is None else leader,
                        leader_epoch=self.leader_epochs[(name, p)],
                        replica_nodes=tuple(self.nodes),
                        isr_nodes=tuple(sorted(self.alive)),
                        offline_replicas=(),
                    )
                )
            topics.append(
                build(
                    topic_cls,
                    error_code=ErrorCode(0 if count is not None else _UNKNOWN_TOPIC),
                    name=name,
                    topic_id=uuid.UUID(int=sorted(self.topics).index(name) + 1)
                    if count is not None
                    else uuid.UUID(int=0),
                    is_internal=False,
                    topic_authorized_operations=-2147483648,
                    partitions=tuple(parts),
                )
            )
        return build(
            cls,
            throttle_time=_NO_TIME,
            brokers=tuple(
                build(broker_cls, node_id=n, host=f"b{n}", port=9092, rack=None)
                for n in sorted(self.alive)
            ),
            cluster_id="sim",
            controller_id=min(self.alive, default=-1),
            topics=tuple(topics),
            cluster_authorized_operations=-2147483648,
            error_code=ErrorCode(0),
        )

    def _find_coordinator(self, version: int, body: Any) -> Any:
        cls = response_type(ApiKey.FIND_COORDINATOR, version)
        node = self.coordinator_node
        fields: dict[str, Any] = {
            "node_id": node,
            "host": f"b{node}",
            "port": 9092,
            "error_code": ErrorCode(0),
            "error_message": None,
        }
        keys = getattr(body, "coordinator_keys", None)
        if keys is not None:
            entry = nested_type(cls, "Coordinator")
            coordinators = tuple(build(entry, key=k, **fields) for k in keys)
            return build(cls, throttle_time=_NO_TIME, coordinators=coordinators)
        return build(cls, throttle_time=_NO_TIME, **fields)

    def _offset_fetch(self, version: int, body: Any) -> Any:
        cls = response_type(ApiKey.OFFSET_FETCH, version)
        topic_cls = nested_type(cls, "OffsetFetchResponseTopic")
        part_cls = nested_type(cls, "OffsetFetchResponsePartition")
        group = self.coordinator.groups.get(body.group_id)
        offsets = {} if group is None else group.offsets
        topics = []
        for t in body.topics or ():
            parts = tuple(
                build(
                    part_cls,
                    partition_index=p,
                    committed_offset=offsets.get((str(t.name), int(p)), -1),
                    committed_leader_epoch=-1,
                    metadata="",
                    error_code=ErrorCode(0),
                )
                for p in t.partition_indexes
            )
            topics.append(build(topic_cls, name=t.name, partitions=parts))
        return build(cls, throttle_time=_NO_TIME, topics=tuple(topics), error_code=ErrorCode(0))

    def _list_offsets(self, node: int, version: int, body: Any) -> Any:
        cls = response_type(ApiKey.LIST_OFFSETS, version)
        topic_cls = nested_type(cls, "ListOffsetsTopicResponse")
        part_cls = nested_type(cls, "ListOffsetsPartitionResponse")
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                tp = (str(t.name), int(p.partition_index))
                log = self.logs.get(tp)
                code = 0
                if log is None:
                    code = _UNKNOWN_TOPIC
                elif self.leader(*tp) != node:
                    code = _NOT_LEADER
                offset = -1
                if code == 0 and log is not None:
                    offset = 0 if int(p.timestamp) == -2 else log.end
                parts.append(
                    build(
                        part_cls,
                        partition_index=tp[1],
                        error_code=ErrorCode(code),
                        timestamp=-1,
                        offset=offset,
                        leader_epoch=self.leader_epochs.get(tp, -1),
                        old_style_offsets=(),
                    )
                )
            topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
        return build(cls, throttle_time=_NO_TIME, topics=tuple(topics))

    def _fetch(self, node: int, version: int, body: Any, *, empty_ok: bool = False) -> Any:
        """The answer to a Fetch, or None while it has nothing to return (and may wait):
        the partitions are read first, the answer built only when it is given."""
        committed_only = int(getattr(body, "isolation_level", 0)) == 1
        budget = int(body.max_bytes)
        anything = False
        reads = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                tp = (str(t.topic), int(p.partition))
                limit = min(int(p.partition_max_bytes), max(budget, 1))
                read = self._read_partition(
                    node, tp, int(p.fetch_offset), limit, committed_only=committed_only
                )
                budget -= len(read[1])
                anything = anything or bool(read[1]) or read[0] != 0
                parts.append((tp[1], read))
            reads.append((t.topic, parts))
        if not anything and not empty_ok:
            return None
        key = (
            version,
            tuple(
                (
                    topic,
                    tuple(
                        (i, code, data, end, lso, tuple(ab))
                        for i, (code, data, end, lso, ab) in parts
                    ),
                )
                for topic, parts in reads
            ),
        )
        answer = self._fetch_answers.get(key)
        if answer is None:
            if len(self._fetch_answers) >= _ANSWERS_MAX:
                self._fetch_answers.clear()
            answer = self._fetch_answers[key] = self._fetch_answer(version, reads)
        return answer

    def _fetch_answer(self, version: int, reads: list[tuple[Any, list[tuple[int, Any]]]]) -> Any:
        """The Fetch response entity for what :meth:`_fetch` read (built once per distinct
        answer: an empty one repeats until the next write)."""
        cls = response_type(ApiKey.FETCH, version)
        topic_cls = nested_type(cls, "FetchableTopicResponse")
        part_cls = nested_type(cls, "PartitionData")
        aborted_cls = nested_type(cls, "AbortedTransaction")
        topics = tuple(
            build(
                topic_cls,
                topic=topic,
                partitions=tuple(
                    build(
                        part_cls,
                        partition_index=partition,
                        error_code=ErrorCode(code),
                        high_watermark=end,
                        last_stable_offset=lso,
                        log_start_offset=0,
                        aborted_transactions=tuple(
                            build(aborted_cls, producer_id=pid, first_offset=first)
                            for pid, first in aborted
                        ),
                        preferred_read_replica=-1,
                        records=data,
                    )
                    for partition, (code, data, end, lso, aborted) in parts
                ),
            )
            for topic, parts in reads
        )
        return build(
            cls,
            throttle_time=_NO_TIME,
            error_code=ErrorCode(0),
            session_id=0,
            responses=topics,
        )

    def _read_partition(
        self, node: int, tp: tuple[str, int], offset: int, limit: int, *, committed_only: bool
    ) -> tuple[int, bytes, int, int, list[tuple[int, int]]]:
        """One partition of a Fetch at ``node``: error code, records from ``offset`` (up to
        ``limit`` bytes), high watermark, last stable offset, and the aborted transactions
        a read_committed reader must skip as ``(producer id, first offset)``. Without
        transactions the last stable offset is the high watermark."""
        log = self.logs.get(tp)
        if log is None:
            return _UNKNOWN_TOPIC, b"", 0, 0, []
        if self.leader(*tp) != node:
            return _NOT_LEADER, b"", 0, 0, []
        return 0, log.read(offset, limit), log.end, log.end, []


def _of(token: Hashable, connection: Hashable) -> bool:
    return isinstance(token, tuple) and bool(token) and token[0] == connection


def _not_coordinator(key: int, version: int, body: Any) -> Any:
    """The NOT_COORDINATOR answer of a coordinator API at a broker that is not one."""
    cls = response_type(key, version)
    code = _NOT_COORDINATOR
    if key == ApiKey.OFFSET_COMMIT:
        topics = commit_answer(cls, "OffsetCommit", body.topics, code)
        return build(cls, throttle_time=_NO_TIME, topics=topics)
    if key == ApiKey.OFFSET_FETCH:
        return build(cls, throttle_time=_NO_TIME, topics=(), error_code=ErrorCode(code))
    if key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
        return build(
            cls,
            throttle_time=_NO_TIME,
            error_code=ErrorCode(code),
            error_message=None,
            member_id=None,
            member_epoch=0,
            heartbeat_interval=_NO_TIME,
            assignment=None,
        )
    return build(
        cls,
        throttle_time=_NO_TIME,
        error_code=ErrorCode(code),
        generation_id=-1,
        protocol_type=None,
        protocol_name=None,
        leader="",
        skip_assignment=False,
        member_id=getattr(body, "member_id", ""),
        members=(),
        assignment=b"",
    )
