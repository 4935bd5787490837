"""What admin commands take and what their results hold: plain frozen values, no IO.

The argument types keep the names and positional order of aiokafka's and kafka-python's
(``NewTopic("t", 3, 1)``, ``ConfigResource("topic", "t", {...})``), so both faces
re-export them unchanged. Results are one value per resource; a resource that failed has
its :class:`~kafkastate.errors.KafkaError` in place of the value.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from kafkastate.core.consumer.assignors import Assignment, Subscription
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.errors import KafkaConfigurationError, KafkaError

__all__ = [
    "AlterConfigOp",
    "AlterConfigOpType",
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "CreatedTopic",
    "GroupDescription",
    "GroupListing",
    "ListedOffset",
    "LogDirDescription",
    "MemberDescription",
    "MemberToRemove",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "PartitionDescription",
    "RecordsToDelete",
    "ReplicaInfo",
    "TopicDescription",
]


class ConfigResourceType(enum.IntEnum):
    """What a config belongs to (the protocol's resource type codes)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class AlterConfigOpType(enum.IntEnum):
    """What an incremental config change does (KIP-339)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class OffsetSpec(enum.IntEnum):
    """Which offset :meth:`~kafkastate.core.admin.AdminMachine.list_offsets` asks for;
    any int >= 0 is a timestamp in ms instead (the first offset at or after it)."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3  # the record with the largest timestamp (KIP-734)


def resource_type_of(value: Any) -> ConfigResourceType:
    """A ConfigResourceType from itself, its code or its name (``"topic"``...).

    Raises:
        KafkaConfigurationError: none of these.
    """
    if isinstance(value, ConfigResourceType):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return ConfigResourceType(value)
    try:
        return ConfigResourceType[str(value).upper().replace("-", "_")]
    except KeyError:
        raise KafkaConfigurationError(f"unknown config resource type {value!r}") from None


@attrs.frozen(kw_only=True)
class AlterConfigOp:
    """One incremental config change (``incremental_alter_configs``)."""

    value: str | None = None
    """The value to set, append or subtract (None to delete)."""
    op: AlterConfigOpType = AlterConfigOpType.SET
    """What to do with it."""


@attrs.frozen
class ConfigResource:
    """A topic, broker or broker logger whose configs to describe or change.

    Args:
        resource_type: a :class:`ConfigResourceType` or its name (``"topic"``,
            ``"broker"``, ``"broker_logger"``).
        name: the topic's name or the broker's id as text.
        configs: for describe, the names to return (None: all); for alter, name -> value;
            for incremental alter, name -> value (set), None (delete) or an
            :class:`AlterConfigOp`.
    """

    resource_type: ConfigResourceType = attrs.field(converter=resource_type_of)
    """The kind of resource."""
    name: str = attrs.field(converter=str)
    """Its name (a broker's id as text)."""
    configs: Mapping[str, Any] | None = None
    """Config names, values or changes (see above)."""


@attrs.frozen
class NewPartitions:
    """Grow a topic to ``total_count`` partitions (``create_partitions``)."""

    total_count: int
    """The topic's partition count afterwards."""
    new_assignments: Sequence[Sequence[int]] | None = None
    """The broker ids of each new partition's replicas (None: the controller chooses)."""


@attrs.frozen
class RecordsToDelete:
    """aiokafka's argument of ``delete_records``: delete below ``before_offset``."""

    before_offset: int
    """Records at lower offsets go (-1: every record, up to the high watermark)."""


@attrs.frozen(kw_only=True)
class CreatedTopic:
    """A topic the broker created (or would create, with ``validate_only``)."""

    name: str
    """Its name."""
    topic_id: uuid.UUID | None
    """Its id (None before CreateTopics v7)."""
    num_partitions: int
    """Its partition count (-1 before v5)."""
    replication_factor: int
    """Its replication factor (-1 before v5)."""


@attrs.frozen(kw_only=True)
class PartitionDescription:
    """One partition of a described topic."""

    partition: int
    """Its index."""
    leader: int
    """The leader's broker id (-1: none)."""
    leader_epoch: int
    """The leader epoch (-1: unknown)."""
    replicas: tuple[int, ...]
    """Broker ids of its replicas."""
    isr: tuple[int, ...]
    """Broker ids of its in-sync replicas."""
    offline_replicas: tuple[int, ...]
    """Broker ids of replicas that are offline."""


@attrs.frozen(kw_only=True)
class TopicDescription:
    """A topic as the Metadata response describes it."""

    name: str
    """Its name."""
    topic_id: uuid.UUID | None
    """Its id (KIP-516)."""
    is_internal: bool
    """Whether it is internal (``__consumer_offsets``...)."""
    partitions: tuple[PartitionDescription, ...]
    """Its partitions, by index."""


@attrs.frozen(kw_only=True)
class ConfigEntry:
    """One config of a described resource."""

    name: str
    """The config's name."""
    value: str | None
    """Its value (None when sensitive or unset)."""
    read_only: bool
    """Whether it can be changed."""
    source: int
    """Where the value comes from (1 dynamic topic, 4 static broker, 5 default...)."""
    is_sensitive: bool
    """Whether the value is hidden."""
    synonyms: tuple[tuple[str, str | None, int], ...] = ()
    """``(name, value, source)`` of its synonyms, with ``include_synonyms``."""


@attrs.frozen(kw_only=True)
class GroupListing:
    """A group as ListGroups lists it."""

    group_id: str
    """Its id."""
    protocol_type: str
    """``"consumer"`` for consumer groups ("" for groups that only store offsets)."""
    state: str
    """Its state (``"Stable"``, ``"Empty"``...; "" if the broker did not say)."""
    group_type: str
    """``"classic"`` or ``"consumer"`` (KIP-848; "" if the broker did not say)."""


@attrs.frozen(kw_only=True)
class MemberDescription:
    """One member of a described classic group."""

    member_id: str
    """Its member id."""
    group_instance_id: str | None
    """Its static id (KIP-345), if any."""
    client_id: str
    """Its ``client.id``."""
    client_host: str
    """Where it connects from."""
    subscription: Subscription | None
    """Its JoinGroup metadata, decoded (None if not a consumer's or undecodable)."""
    assignment: Assignment | None
    """Its SyncGroup assignment, decoded (None if not a consumer's or undecodable)."""
    member_metadata: bytes
    """The raw metadata."""
    member_assignment: bytes
    """The raw assignment."""
    member_epoch: int = -1
    """Its member epoch (a KIP-848 consumer group's member; -1 for classic groups)."""
    target_assignment: Assignment | None = None
    """The assignment the coordinator is moving it to (KIP-848), None for classic."""
    rack_id: str | None = None
    """Its ``client.rack`` (KIP-848 members)."""


@attrs.frozen(kw_only=True)
class GroupDescription:
    """A group as DescribeGroups describes it."""

    group_id: str
    """Its id."""
    state: str
    """``"Stable"``, ``"Empty"``, ``"Dead"``...."""
    protocol_type: str
    """``"consumer"`` for consumer groups."""
    protocol: str
    """The chosen assignor (``"range"``...)."""
    members: tuple[MemberDescription, ...]
    """Its members."""
    group_type: str = "classic"
    """``"classic"``, or ``"consumer"`` for a KIP-848 group (described with
    ConsumerGroupDescribe: ``protocol`` is then the server-side assignor)."""
    group_epoch: int = -1
    """A KIP-848 group's epoch (-1 for classic groups)."""
    assignment_epoch: int = -1
    """The epoch of a KIP-848 group's target assignment (-1 for classic groups)."""


def _one_of(inst: MemberToRemove, _attr: Any, _value: Any) -> None:
    if inst.member_id is None and inst.group_instance_id is None:
        raise KafkaConfigurationError("a MemberToRemove needs a member_id or a group_instance_id")


@attrs.frozen(kw_only=True)
class MemberToRemove:
    """A group member to remove (``remove_group_members``): a dynamic member by its
    ``member_id``, a static one (KIP-345) by its ``group_instance_id``."""

    member_id: str | None = None
    """The member id the coordinator gave it."""
    group_instance_id: str | None = attrs.field(default=None, validator=_one_of)
    """Its ``group.instance.id``."""
    reason: str | None = attrs.field(default=None, eq=False)
    """Why (sent to brokers with LeaveGroup v5, KIP-800); not part of its identity."""


@attrs.frozen(kw_only=True)
class ListedOffset:
    """One partition's answer to ``list_offsets``."""

    offset: int
    """The offset (-1: no record at or after the timestamp)."""
    timestamp: int
    """The record's timestamp for a timestamp query, else -1."""
    leader_epoch: int
    """The leader epoch of that offset, -1 if unknown."""


@attrs.frozen(kw_only=True)
class BrokerDescription:
    """One broker of the cluster."""

    node_id: int
    """Its id."""
    host: str
    """Its advertised host."""
    port: int
    """Its advertised port."""
    rack: str | None
    """Its ``broker.rack``."""


@attrs.frozen(kw_only=True)
class ClusterDescription:
    """The cluster as DescribeCluster (or Metadata) describes it."""

    cluster_id: str | None
    """The cluster's id."""
    controller_id: int
    """The id the broker reports as controller (in KRaft: a broker that forwards)."""
    brokers: tuple[BrokerDescription, ...]
    """The live brokers, by id."""


@attrs.frozen(kw_only=True)
class ReplicaInfo:
    """One replica in a log directory."""

    size: int
    """Its size in bytes."""
    offset_lag: int
    """How far it is behind the log end (a future replica being moved), else 0."""
    is_future: bool
    """Whether it is the future replica of a move between directories."""


@attrs.frozen(kw_only=True)
class LogDirDescription:
    """One log directory of a broker."""

    path: str
    """The directory."""
    error: KafkaError | None
    """Why it is unusable (KAFKA_STORAGE_ERROR...), None if it is fine."""
    replicas: Mapping[Any, ReplicaInfo]
    """TopicPartition -> the replica it holds."""
    total_bytes: int
    """The volume's size (-1 if the broker did not say)."""
    usable_bytes: int
    """The volume's free space (-1 if the broker did not say)."""


def reset_offset(target: int, earliest: int, latest: int) -> int:
    """Where a group's offset reset lands: ``target`` (an offset, or what ListOffsets
    answered for a spec or a timestamp) inside the log's ``[earliest, latest]``; no
    answer (< 0, a timestamp after the last record) or past the end is the end, as
    ``kafka-consumer-groups.sh --reset-offsets`` does."""
    if target < 0 or target > latest:
        return latest
    return max(target, earliest)
