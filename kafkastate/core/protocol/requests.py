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
import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

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
]


def nested_type(entity_cls: type[Any], name: str) -> type[Any]:
    """A nested struct class defined next to ``entity_cls`` in its kio module."""
    cls: type[Any] = getattr(sys.modules[entity_cls.__module__], name)
    return cls


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    # kio's classes are fixed: one lookup per class, not one per request built
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return names


def build(cls: type[Any], **values: Any) -> Any:
    """Instantiate ``cls`` with the subset of ``values`` this version has.

    Fields that the version lacks are dropped (the caller offers everything it knows);
    fields the version requires and the caller did not give raise TypeError as usual.
    """
    names = _field_names(cls)
    if names.issuperset(values):  # the common case: nothing to drop
        return cls(**values)
    return cls(**{k: v for k, v in values.items() if k in names})


def _ms(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=round(seconds * 1000))


def _name_or_id(topic: str | uuid.UUID) -> dict[str, Any]:
    """A request's topic entry fields: by name, or (KIP-516) by topic id with no name."""
    if isinstance(topic, uuid.UUID):
        return {"name": None, "topic_id": topic}
    return {"name": topic, "topic_id": None}


def metadata_request(
    versions: ApiVersionTable,
    topics: Sequence[str | uuid.UUID] | None,
    *,
    allow_auto_topic_creation: bool = False,
) -> Any:
    """Metadata for ``topics`` (None = all topics).

    Args:
        versions: the negotiated version table.
        topics: topic names (or topic ids: the caller checked the version, v12+), or None
            for every topic.
        allow_auto_topic_creation: let the broker create missing topics (v4+).
    """
    cls = versions.request_type(ApiKey.METADATA)
    topic_cls = nested_type(cls, "MetadataRequestTopic")
    entries = (
        None
        if topics is None
        else tuple(build(topic_cls, **_name_or_id(topic)) for topic in topics)
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
    versions: ApiVersionTable, names: Iterable[str | uuid.UUID], *, timeout: float = 30.0
) -> Any:
    """DeleteTopics by name (or by topic id: the caller checked the version, v6+)."""
    cls = versions.request_type(ApiKey.DELETE_TOPICS)
    names = tuple(names)
    if "topics" in _field_names(cls):
        state_cls = nested_type(cls, "DeleteTopicState")
        return cls(topics=tuple(state_cls(**_name_or_id(n)) for n in names), timeout=_ms(timeout))
    return cls(topic_names=names, timeout=_ms(timeout))


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
