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
    "ConfigFilterType",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSourceType",
    "ConfigType",
    "CreatedTopic",
    "GroupDescription",
    "GroupListing",
    "GroupState",
    "GroupType",
    "ListedOffset",
    "LogDirDescription",
    "MemberDescription",
    "MemberToRemove",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "OffsetTimestamp",
    "PartitionDescription",
    "RecordsToDelete",
    "ReplicaInfo",
    "TopicDescription",
    "TransactionState",
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
    EARLIEST_LOCAL = -4  # the first offset in the broker's local log (KIP-405, ListOffsets v8)
    LATEST_TIERED = -5  # the last offset in tiered storage (KIP-1005, ListOffsets v9)


class OffsetTimestamp(int):
    """A timestamp in ms where an offset could also be given (kafka-python 3.0's name): the
    first offset whose record's timestamp is at or after it. ``list_offsets`` reads any
    int >= 0 as a timestamp already; this only says so where offsets and specs mix."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"OffsetTimestamp({int(self)})"


class ConfigType(enum.IntEnum):
    """A config's value type, as DescribeConfigs v3+ names it (KIP-569)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSourceType(enum.IntEnum):
    """Where a config's value comes from (DescribeConfigs' ``config_source``, KIP-226)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    DYNAMIC_CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8

    def is_modified(self) -> bool:
        """Whether the value was set for this resource (not a default or a broker's
        static or cluster-wide default value)."""
        return self not in _UNMODIFIED

    @classmethod
    def dynamic_for_resource_type(cls, resource_type: Any) -> ConfigSourceType:
        """The source of a value set dynamically on a resource of ``resource_type``.

        Raises:
            KafkaConfigurationError: not a config resource type.
        """
        return _DYNAMIC_SOURCE[resource_type_of(resource_type)]


_UNMODIFIED = frozenset(
    {
        ConfigSourceType.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigSourceType.STATIC_BROKER_CONFIG,
        ConfigSourceType.DEFAULT_CONFIG,
    }
)


class ConfigFilterType(enum.IntEnum):
    """Which configs a description keeps, by source (kafka-python 3.0's
    ``describe_configs(config_filter=...)``; kafkastate describes them all and a caller
    filters with :meth:`should_skip` on ``ConfigEntry.source``)."""

    ALL = 0
    DYNAMIC = 1
    MODIFIED = 2
    DEFAULT = 3
    STATIC = 4

    def should_skip(self, config_source: ConfigSourceType | int) -> bool:
        """Whether a config of ``config_source`` (``ConfigEntry.source``) is left out by
        this filter; a code this client does not know counts as UNKNOWN."""
        try:
            source = ConfigSourceType(config_source)
        except ValueError:
            source = ConfigSourceType.UNKNOWN
        if self is ConfigFilterType.MODIFIED:
            return not source.is_modified()
        if self is ConfigFilterType.DEFAULT:
            return source.is_modified()
        if self is ConfigFilterType.STATIC:
            return source is not ConfigSourceType.STATIC_BROKER_CONFIG
        return False


class GroupState(enum.StrEnum):
    """A group's state as ListGroups / DescribeGroups name it (classic and KIP-848);
    ``states_filter`` takes these or their strings."""

    UNKNOWN = "Unknown"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"


class GroupType(enum.StrEnum):
    """A group's protocol (KIP-848); ``types_filter`` takes these or their strings."""

    UNKNOWN = "Unknown"
    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"


class TransactionState(enum.StrEnum):
    """A transactional id's state at its coordinator (``TransactionListing.state``,
    ``TransactionDescription.state``); ``state_filters`` takes these or their strings."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    UNKNOWN = "Unknown"


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


_DYNAMIC_SOURCE = {
    ConfigResourceType.UNKNOWN: ConfigSourceType.UNKNOWN,
    ConfigResourceType.TOPIC: ConfigSourceType.DYNAMIC_TOPIC_CONFIG,
    ConfigResourceType.BROKER: ConfigSourceType.DYNAMIC_BROKER_CONFIG,
    ConfigResourceType.BROKER_LOGGER: ConfigSourceType.DYNAMIC_BROKER_LOGGER_CONFIG,
    ConfigResourceType.CLIENT_METRICS: ConfigSourceType.DYNAMIC_CLIENT_METRICS_CONFIG,
    ConfigResourceType.GROUP: ConfigSourceType.DYNAMIC_GROUP_CONFIG,
}


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
