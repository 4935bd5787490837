"""Build kio request entities at whatever version was negotiated.

kio has one class per API version and the fields move between versions (Produce v13 and
Fetch v13 name topics by id instead of name, DeleteTopics v6 nests names in structs...).
These builders take the negotiated :class:`ApiVersionTable` and the caller's intent and
fill in the entity for the chosen version, so request-level machines never branch on
versions themselves. Pure functions: no IO.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from kafkastate.core.protocol.framing import encoded_request_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable
from kafkastate.errors import KafkaConfigurationError

__all__ = [
    "NewTopic",
    "build",
    "create_topics_request",
    "delete_topics_request",
    "fetch_request",
    "metadata_request",
    "nested_type",
    "produce_request",
    "produce_request_body",
]


def nested_type(entity_cls: type[Any], name: str) -> type[Any]:
    """A nested struct class defined next to ``entity_cls`` in its kio module."""
    cls: type[Any] = getattr(sys.modules[entity_cls.__module__], name)
    return cls


def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type[Any], **values: Any) -> Any:
    """Instantiate ``cls`` with the subset of ``values`` this version has.

    Fields that the version lacks are dropped (the caller offers everything it knows);
    fields the version requires and the caller did not give raise TypeError as usual.
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def _ms(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=round(seconds * 1000))


def metadata_request(
    versions: ApiVersionTable,
    topics: Sequence[str] | None,
    *,
    allow_auto_topic_creation: bool = False,
) -> Any:
    """Metadata for ``topics`` (None = all topics).

    Args:
        versions: the negotiated version table.
        topics: topic names, or None for every topic.
        allow_auto_topic_creation: let the broker create missing topics (v4+).
    """
    cls = versions.request_type(ApiKey.METADATA)
    topic_cls = nested_type(cls, "MetadataRequestTopic")
    entries = (
        None
        if topics is None
        else tuple(build(topic_cls, name=name, topic_id=None) for name in topics)
    )
    return build(
        cls,
        topics=entries,
        allow_auto_topic_creation=allow_auto_topic_creation,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def _as_dict(value: Mapping[Any, Any] | None) -> dict[Any, Any]:
    return dict(value or {})


def _new_topic_check(inst: NewTopic, _attr: attrs.Attribute[Any], _value: object) -> None:
    if inst.replica_assignments and (inst.num_partitions != -1 or inst.replication_factor != -1):
        raise KafkaConfigurationError(
            f"topic {inst.name!r}: give either replica_assignments or num_partitions and "
            "replication_factor, not both"
        )


@attrs.frozen
class NewTopic:
    """A topic to create (aiokafka's and kafka-python's argument order).

    Raises:
        KafkaConfigurationError: both ``replica_assignments`` and a partition count or
            replication factor.
    """

    name: str
    """Topic name."""
    num_partitions: int = -1
    """Partition count; -1 = the broker's ``num.partitions`` (or the assignments')."""
    replication_factor: int = -1
    """Replication factor; -1 = the broker's ``default.replication.factor``."""
    replica_assignments: Mapping[int, Sequence[int]] = attrs.field(
        factory=dict, converter=_as_dict, validator=_new_topic_check
    )
    """Partition -> broker ids of its replicas, instead of the two counts."""
    topic_configs: Mapping[str, str] = attrs.field(factory=dict, converter=_as_dict)
    """Topic configs, e.g. ``{"cleanup.policy": "compact"}``."""
    configs: Mapping[str, str] = attrs.field(factory=dict, converter=_as_dict, kw_only=True)
    """The earlier keyword for ``topic_configs`` (``NewTopic(name=..., configs=...)``);
    either names the same configs."""

    def __attrs_post_init__(self) -> None:
        if self.configs and self.topic_configs and self.configs != self.topic_configs:
            raise KafkaConfigurationError(
                f"topic {self.name!r}: give topic_configs or configs, not both"
            )
        merged = self.topic_configs or self.configs
        object.__setattr__(self, "topic_configs", merged)
        object.__setattr__(self, "configs", merged)


def create_topics_request(
    versions: ApiVersionTable,
    topics: Iterable[NewTopic],
    *,
    timeout: float = 30.0,
    validate_only: bool = False,
) -> Any:
    """CreateTopics for ``topics`` (send it to the controller or any broker in KRaft)."""
    cls = versions.request_type(ApiKey.CREATE_TOPICS)
    topic_cls = nested_type(cls, "CreatableTopic")
    config_cls = nested_type(cls, "CreatableTopicConfig")
    assignment_cls = nested_type(cls, "CreatableReplicaAssignment")
    entries = tuple(
        build(
            topic_cls,
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            assignments=tuple(
                build(assignment_cls, partition_index=p, broker_ids=tuple(ids))
                for p, ids in sorted(t.replica_assignments.items())
            ),
            configs=tuple(
                build(config_cls, name=k, value=v) for k, v in sorted(t.topic_configs.items())
            ),
        )
        for t in topics
    )
    return build(cls, topics=entries, timeout=_ms(timeout), validate_only=validate_only)


def delete_topics_request(
    versions: ApiVersionTable, names: Iterable[str], *, timeout: float = 30.0
) -> Any:
    """DeleteTopics by name."""
    cls = versions.request_type(ApiKey.DELETE_TOPICS)
    names = tuple(names)
    if "topics" in _field_names(cls):
        state_cls = nested_type(cls, "DeleteTopicState")
        return cls(
            topics=tuple(state_cls(name=n, topic_id=None) for n in names), timeout=_ms(timeout)
        )
    return cls(topic_names=names, timeout=_ms(timeout))


def produce_request(
    versions: ApiVersionTable,
    batches: Mapping[tuple[str, uuid.UUID | None, int], bytes],
    *,
    acks: int = -1,
    timeout: float = 30.0,
    transactional_id: str | None = None,
    max_version: int | None = None,
) -> Any:
    """Produce record batches.

    Args:
        versions: the negotiated version table.
        batches: ``(topic name, topic id or None, partition) -> record batch bytes``. The
            topic id is needed when the negotiated version names topics by id (v13+).
        acks: 0, 1 or -1 (all).
        timeout: how long the broker waits for acks.
        transactional_id: for transactional batches.
        max_version: the highest version to use (a transactional producer speaking
            transaction version 1 stays at v11).
    """
    version = versions.version_for(ApiKey.PRODUCE)
    if max_version is not None:
        version = min(version, max_version)
    body = produce_request_body(
        version, batches, acks=acks, timeout=timeout, transactional_id=transactional_id
    )
    return encoded_request_type(ApiKey.PRODUCE, version, flexible=version >= _PRODUCE_FLEXIBLE)(
        body
    )


_PRODUCE_FLEXIBLE: Final = 9  # Produce v9+ is flexible (KIP-482)
_PRODUCE_TOPIC_IDS: Final = 13  # Produce v13+ names topics by id (KIP-516)
_I16_I32: Final = struct.Struct(">hi")
_I32: Final = struct.Struct(">i")
_I16: Final = struct.Struct(">h")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def produce_request_body(
    version: int,
    batches: Mapping[tuple[str, uuid.UUID | None, int], bytes],
    *,
    acks: int = -1,
    timeout: float = 30.0,
    transactional_id: str | None = None,
) -> bytes:
    """Encode a ProduceRequest body (v3-v13) by hand: the producer sends one per batch
    or so, and kio's generic writer is several times slower for it. The same bytes as
    kio writes for the same request (tests/core/protocol/test_framing.py compares them).

    Args:
        version: the request version (3 to 13).
        batches: ``(topic name, topic id or None, partition) -> record batch bytes``.
        acks: 0, 1 or -1 (all).
        timeout: how long the broker waits for acks, in seconds.
        transactional_id: for transactional batches.

    Returns:
        The body bytes.

    Raises:
        KafkaConfigurationError: v13+ without a topic id, or a version out of range.
    """
    if not 3 <= version <= _PRODUCE_TOPIC_IDS:
        raise KafkaConfigurationError(f"no Produce encoder for v{version}")
    flexible = version >= _PRODUCE_FLEXIBLE
    by_topic: dict[tuple[str, uuid.UUID | None], list[tuple[int, bytes]]] = {}
    for (topic, topic_id, partition), records in batches.items():
        by_topic.setdefault((topic, topic_id), []).append((partition, records))
    out: list[bytes] = []
    tid = None if transactional_id is None else transactional_id.encode()
    if flexible:
        out.append(b"\x00" if tid is None else _uvarint(len(tid) + 1) + tid)
    else:
        out.append(b"\xff\xff" if tid is None else _I16.pack(len(tid)) + tid)
    out.append(_I16_I32.pack(acks, round(timeout * 1000)))
    out.append(_uvarint(len(by_topic) + 1) if flexible else _I32.pack(len(by_topic)))
    for (topic, topic_id), parts in by_topic.items():
        if version >= _PRODUCE_TOPIC_IDS:
            if topic_id is None:
                raise KafkaConfigurationError(f"Produce v{version} needs the id of {topic!r}")
            out.append(topic_id.bytes)
        else:
            name = topic.encode()
            out.append(_uvarint(len(name) + 1) + name if flexible else _I16.pack(len(name)) + name)
        out.append(_uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts)))
        for partition, records in parts:
            out.append(_I32.pack(partition))
            out.append(_uvarint(len(records) + 1) if flexible else _I32.pack(len(records)))
            out.append(records)
            if flexible:
                out.append(b"\x00")  # the partition's tagged fields
        if flexible:
            out.append(b"\x00")  # the topic's tagged fields
    if flexible:
        out.append(b"\x00")  # the request's tagged fields
    return b"".join(out)


def fetch_request(
    versions: ApiVersionTable,
    partitions: Mapping[tuple[str, uuid.UUID | None, int], int],
    *,
    max_wait: float = 0.5,
    min_bytes: int = 1,
    max_bytes: int = 52_428_800,
    partition_max_bytes: int = 1_048_576,
    isolation_level: int = 0,
) -> Any:
    """A sessionless Fetch (session id 0, epoch -1) from the given offsets.

    Args:
        versions: the negotiated version table.
        partitions: ``(topic name, topic id or None, partition) -> fetch offset``.
        max_wait: seconds the broker may wait for ``min_bytes``.
        min_bytes: bytes to accumulate before answering.
        max_bytes: response size limit.
        partition_max_bytes: per-partition limit.
        isolation_level: 0 read_uncommitted, 1 read_committed.
    """
    cls = versions.request_type(ApiKey.FETCH)
    topic_cls = nested_type(cls, "FetchTopic")
    part_cls = nested_type(cls, "FetchPartition")
    by_topic: dict[tuple[str, uuid.UUID | None], list[Any]] = {}
    for (topic, topic_id, partition), offset in partitions.items():
        by_topic.setdefault((topic, topic_id), []).append(
            build(
                part_cls,
                partition=partition,
                fetch_offset=offset,
                partition_max_bytes=partition_max_bytes,
                current_leader_epoch=-1,
                log_start_offset=-1,
            )
        )
    topics = tuple(
        build(topic_cls, topic=name, topic_id=tid, partitions=tuple(parts))
        for (name, tid), parts in by_topic.items()
    )
    return build(
        cls,
        replica_id=-1,
        max_wait=_ms(max_wait),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
    )
