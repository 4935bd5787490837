"""AdminMachine: admin operations over the core Client, routed, retried, per resource.

Theory of operation
-------------------
Each command (:meth:`AdminMachine.create_topics`, ...) starts an *operation*
(:mod:`kafkastate.core.admin.operations`) with a deadline (its ``timeout``, default the
client's ``request_timeout``) and returns an :data:`OpId`. Operations wait until the
cluster's brokers are known (the first Metadata answer), then split into keys (a topic, a
group, a partition, a broker, a config resource), each with a route:

* any broker -- topic and config changes: in KRaft every broker forwards them to the
  active controller (KIP-590), which answers NOT_CONTROLLER while it moves: retried;
* one broker -- a broker's configs, the groups it coordinates (ListGroups);
* the group or transaction coordinator -- found with FindCoordinator (``key_type`` 0 or
  1) and cached per ``(key_type, key)``; NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE
  forget it and find it again, COORDINATOR_LOAD_IN_PROGRESS retries at the same one;
* the partition leader -- from the Client's metadata (the topic is added to the topics it
  tracks); NOT_LEADER_OR_FOLLOWER and friends refresh it.

Keys bound for one broker (and in the same *phase*, see ``Operation.phase``) share a
request where the API batches. An operation that needs more than one round trip for a key
(pages of DescribeTopicPartitions, a group described before its members are removed)
answers :class:`~kafkastate.core.admin.operations.Again` and the key is sent again at
once. Each key ends with a value or a KafkaError of its own: a retriable error is retried
after ``retry_backoff`` until the deadline (then the key fails with KafkaTimeoutError
naming the last error), any other error is that key's answer -- one topic's failure does
not hide another's success. When every key has its outcome the machine emits
:class:`AdminOperationCompleted`.

An API the broker does not support fails the keys with UnsupportedVersionError naming the
operation. The machine never reads a clock: ``now`` comes with every call.
"""

from __future__ import annotations

import enum
import logging
import math
import random
import uuid
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Final, NewType

import attrs

from kafkastate.core import report
from kafkastate.core.admin import acls, brokers, quotas, replicas
from kafkastate.core.admin import operations as ops
from kafkastate.core.admin import transactions as txn
from kafkastate.core.admin.types import (
    ConfigResource,
    MemberToRemove,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    resource_type_of,
)
from kafkastate.core.client import (
    Client,
    ClientConfig,
    ClientDriven,
    CloseRequested,
    ConnectRequested,
    MetadataUpdated,
    NodeDisconnected,
    RequestCompleted,
    RequestFailed,
    RequestId,
    TokenRequested,
)
from kafkastate.core.metadata import STALE_METADATA_ERRORS, NodeId, TopicMetadata
from kafkastate.core.protocol.requests import build
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable
from kafkastate.core.states import StateTable, register, transition
from kafkastate.errors import (
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    LocalProtocolError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for_code,
)
from kafkastate.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "ADMIN_STATES",
    "AdminConfig",
    "AdminEvent",
    "AdminMachine",
    "AdminOperationCompleted",
    "AdminState",
    "OpId",
]

OpId = NewType("OpId", int)

_CoordinatorKey = tuple[int, str]  # (FindCoordinator key_type, key)

_FORGET_COORDINATOR: Final = frozenset({15, 16})  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


log = logging.getLogger("kafkastate.admin")


class AdminState(enum.Enum):
    """An admin machine is open until :meth:`AdminMachine.close`."""

    OPEN = "open"
    CLOSED = "closed"


ADMIN_STATES: Final = register(
    StateTable(
        machine="AdminMachine",
        states=AdminState,
        initial=AdminState.OPEN,
        transitions={AdminState.OPEN: {AdminState.CLOSED}, AdminState.CLOSED: set()},
        commands={AdminState.OPEN: {"operation", "close"}, AdminState.CLOSED: {"close"}},
    )
)


def _non_negative(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if not value >= 0:
        raise ValueError(f"{attr.name} must be >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class AdminConfig:
    """Settings of an :class:`AdminMachine`. Durations are float seconds."""

    client: ClientConfig
    """Bootstrap servers, connections, metadata."""
    retry_backoff: float = attrs.field(default=0.1, validator=_non_negative)
    """Wait before retrying a key that failed with a retriable error (``retry.backoff.ms``)."""


@attrs.frozen(kw_only=True)
class AdminOperationCompleted:
    """Every key of an operation has its outcome."""

    op_id: OpId
    """The id the command returned."""
    operation: str
    """The command's name (``"create_topics"``)."""
    results: Mapping[Any, Any]
    """Key -> value, or the key's KafkaError; in the order the command named them."""


AdminEvent = (
    ConnectRequested
    | CloseRequested
    | TokenRequested
    | MetadataUpdated
    | AdminOperationCompleted
    | report.StatisticsReported
)


@attrs.define(slots=True)
class _Op:
    op_id: OpId
    spec: ops.Operation
    timeout: float
    deadline: float
    keys: list[Hashable] | None = None
    results: dict[Hashable, Any] = attrs.field(factory=dict)
    pending: dict[Hashable, float] = attrs.field(factory=dict)  # key -> not before
    last_error: dict[Hashable, KafkaError] = attrs.field(factory=dict)
    waiting_topics: dict[Hashable, int] = attrs.field(factory=dict)  # key -> updates seen


@attrs.define(slots=True)
class _Unit:
    op: _Op
    keys: tuple[Hashable, ...]
    route: ops.Route


class AdminMachine(ClientDriven):
    """The sans-IO admin client.

    Args:
        config: the settings.
        rng: seeded randomness for the Client (backoff jitter, node choice).
    """

    def __init__(self, config: AdminConfig, *, rng: random.Random) -> None:
        self.config = config
        self._client = Client(config.client, rng=rng, topics=())
        self._ops: dict[OpId, _Op] = {}
        self._units: dict[RequestId, _Unit] = {}
        self._rng = rng
        self._coordinators: dict[_CoordinatorKey, NodeId] = {}
        self._finding: dict[RequestId, _CoordinatorKey] = {}
        self._find_after: dict[_CoordinatorKey, float] = {}
        self._updates = 0
        self._events: deque[AdminEvent] = deque()
        self._next_op = 0
        self._state = ADMIN_STATES.initial

    # ---------------------------------------------------------------- queries

    @property
    def state(self) -> AdminState:
        """OPEN, or CLOSED after :meth:`close`."""
        return self._state

    @property
    def in_flight(self) -> int:
        """Operations not finished yet."""
        return len(self._ops)

    # --------------------------------------------------------------- commands

    def create_topics(
        self,
        topics: Iterable[NewTopic],
        *,
        now: float,
        timeout: float | None = None,
        validate_only: bool = False,
    ) -> OpId:
        """Create topics; results by name: :class:`~kafkastate.core.admin.CreatedTopic`.

        Raises:
            KafkaConfigurationError: a topic named twice, or not a NewTopic.
        """
        specs: dict[str, NewTopic] = {}
        for t in topics:
            if not isinstance(t, NewTopic):
                raise KafkaConfigurationError(f"create_topics takes NewTopic objects, not {t!r}")
            if t.name in specs:
                raise KafkaConfigurationError(f"topic {t.name!r} given twice")
            specs[t.name] = t
        return self._start(ops.CreateTopics(specs, validate_only), now, timeout)

    def delete_topics(
        self, names: Iterable[str | uuid.UUID], *, now: float, timeout: float | None = None
    ) -> OpId:
        """Delete topics by name or by topic id (a :class:`uuid.UUID`, DeleteTopics v6+);
        results by what was given: None."""
        return self._start(ops.DeleteTopics(_topics(names)), now, timeout)

    def describe_topics(
        self,
        names: Iterable[str | uuid.UUID] | None = None,
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """Describe topics by name or by topic id (a :class:`uuid.UUID`, Metadata v12+);
        results by what was given: :class:`TopicDescription`. With ``names`` None, the one
        result under the key None is a list of every topic's."""
        listed = None if names is None else _topics(names)
        return self._start(ops.DescribeTopics(listed), now, timeout)

    def describe_cluster(self, *, now: float, timeout: float | None = None) -> OpId:
        """Describe the cluster; the result under the key None: ClusterDescription."""
        return self._start(ops.DescribeCluster(), now, timeout)

    def create_partitions(
        self,
        topics: Mapping[str, NewPartitions],
        *,
        now: float,
        timeout: float | None = None,
        validate_only: bool = False,
    ) -> OpId:
        """Grow topics; results by name: None."""
        return self._start(ops.CreatePartitions(dict(topics), validate_only), now, timeout)

    def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        now: float,
        timeout: float | None = None,
        include_synonyms: bool = False,
    ) -> OpId:
        """Describe configs; results by ``(ConfigResourceType, name)``: name ->
        :class:`ConfigEntry`."""
        keyed = ops._config_keys(list(resources))
        return self._start(ops.DescribeConfigs(keyed, include_synonyms), now, timeout)

    def alter_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        now: float,
        timeout: float | None = None,
        validate_only: bool = False,
        incremental: bool = False,
    ) -> OpId:
        """Replace (AlterConfigs) or change (``incremental``: IncrementalAlterConfigs,
        each value a str to set, None to delete, or an AlterConfigOp) configs; results by
        ``(ConfigResourceType, name)``: None."""
        keyed = ops._config_keys(list(resources))
        cls = ops.IncrementalAlterConfigs if incremental else ops.AlterConfigs
        return self._start(cls(keyed, validate_only), now, timeout)

    def list_consumer_groups(
        self,
        broker_ids: Iterable[int] | None = None,
        *,
        now: float,
        timeout: float | None = None,
        states_filter: Iterable[str] = (),
        types_filter: Iterable[str] = (),
    ) -> OpId:
        """ListGroups on every broker (or those given), of the groups in ``states_filter``
        (protocol names: ``"Stable"``, ``"Empty"``...; KIP-518) and ``types_filter``
        (``"classic"``, ``"consumer"``...; KIP-848) when given; results by broker id: a
        list of :class:`GroupListing`."""
        ids = None if broker_ids is None else list(broker_ids)
        spec = ops.ListGroups(ids, [str(s) for s in states_filter], [str(t) for t in types_filter])
        return self._start(spec, now, timeout)

    def describe_consumer_groups(
        self, group_ids: Iterable[str], *, now: float, timeout: float | None = None
    ) -> OpId:
        """Describe groups: KIP-848 ``consumer`` groups with ConsumerGroupDescribe, the
        others with DescribeGroups; results by id: :class:`GroupDescription`."""
        return self._start(ops.DescribeGroups(_unique(group_ids, "group")), now, timeout)

    def find_coordinator(
        self,
        key: str,
        key_type: int = 0,
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """The broker coordinating a group (``key_type`` 0) or a transactional id (1);
        the result under ``key``: its broker id."""
        if key_type not in (0, 1):
            raise KafkaConfigurationError(f"key_type must be 0 (group) or 1, got {key_type!r}")
        return self._start(ops.FindCoordinator(key, key_type), now, timeout)

    def delete_consumer_groups(
        self, group_ids: Iterable[str], *, now: float, timeout: float | None = None
    ) -> OpId:
        """Delete empty groups; results by id: None."""
        return self._start(ops.DeleteGroups(_unique(group_ids, "group")), now, timeout)

    def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        now: float,
        timeout: float | None = None,
        require_stable: bool = False,
    ) -> OpId:
        """A group's committed offsets; the result under ``group_id``: TopicPartition ->
        OffsetAndMetadata (offset -1: none committed)."""
        parts = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        return self._start(ops.ListGroupOffsets(group_id, parts, require_stable), now, timeout)

    def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[Any, OffsetAndMetadata | int],
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """Commit offsets for a group with no active members; the result under
        ``group_id``: TopicPartition -> None or that partition's KafkaError."""
        clean: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, value in offsets.items():
            meta = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            if isinstance(meta.offset, bool) or not isinstance(meta.offset, int) or meta.offset < 0:
                raise KafkaConfigurationError(f"offset for {tp} must be an int >= 0")
            if meta.leader_epoch is None or meta.metadata is None:  # kafka-python's "unknown"
                epoch = -1 if meta.leader_epoch is None else meta.leader_epoch
                meta = OffsetAndMetadata(meta.offset, meta.metadata or "", epoch)
            clean[TopicPartition(*tp)] = meta
        return self._start(ops.AlterGroupOffsets(group_id, clean), now, timeout)

    def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """Delete a group's committed offsets (KIP-496); the result under ``group_id``:
        TopicPartition -> None or that partition's KafkaError."""
        parts = [TopicPartition(*tp) for tp in partitions]
        return self._start(ops.DeleteGroupOffsets(group_id, parts), now, timeout)

    def list_offsets(
        self,
        specs: Mapping[Any, OffsetSpec | int],
        *,
        now: float,
        timeout: float | None = None,
        isolation_level: int = 0,
    ) -> OpId:
        """Offsets by spec (OffsetSpec, or a timestamp in ms); results by partition:
        :class:`ListedOffset`."""
        clean: dict[TopicPartition, int] = {}
        for tp, spec in specs.items():
            if isinstance(spec, bool) or not isinstance(spec, int) or spec < min(OffsetSpec):
                raise KafkaConfigurationError(f"{tp}: {spec!r} is not an OffsetSpec or timestamp")
            clean[TopicPartition(*tp)] = int(spec)
        return self._start(ops.ListOffsets(clean, isolation_level), now, timeout)

    def delete_records(
        self,
        before: Mapping[Any, int],
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """Delete records below an offset (-1: the high watermark); results by partition:
        the new low watermark."""
        clean = {TopicPartition(*tp): int(offset) for tp, offset in before.items()}
        return self._start(ops.DeleteRecords(clean), now, timeout)

    def describe_log_dirs(
        self,
        broker_ids: Iterable[int] | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """Every broker's (or those given) log directories and the replicas in them (all,
        or ``partitions``'); results by broker id: a list of LogDirDescription."""
        ids = None if broker_ids is None else list(broker_ids)
        parts = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        return self._start(ops.DescribeLogDirs(ids, parts), now, timeout)

    def describe_acls(
        self, acl_filter: acls.ACLFilter, *, now: float, timeout: float | None = None
    ) -> OpId:
        """ACLs matching a filter; the result under the filter: a list of ACL."""
        return self._start(acls.DescribeAcls(acl_filter), now, timeout)

    def create_acls(
        self, entries: Iterable[acls.ACL], *, now: float, timeout: float | None = None
    ) -> OpId:
        """Create ACLs; results by ACL: None or its KafkaError.

        Raises:
            KafkaConfigurationError: an entry that is not an ACL (a filter).
        """
        listed = list(entries)
        for entry in listed:
            if not isinstance(entry, acls.ACL):
                raise KafkaConfigurationError(f"create_acls takes ACL objects, not {entry!r}")
        return self._start(acls.CreateAcls(listed), now, timeout)

    def delete_acls(
        self, filters: Iterable[acls.ACLFilter], *, now: float, timeout: float | None = None
    ) -> OpId:
        """Delete the ACLs matching each filter; results by filter: the ACLs deleted."""
        return self._start(acls.DeleteAcls(list(filters)), now, timeout)

    # ------------------------------------------------ quotas and SCRAM credentials

    def describe_client_quotas(
        self,
        components: Iterable[quotas.ClientQuotaFilterComponent] = (),
        *,
        now: float,
        timeout: float | None = None,
        strict: bool = False,
    ) -> OpId:
        """Client quotas matching a filter (no components: every entity); the result
        under None: :data:`QuotaEntity` -> {quota name: value}."""
        parts = list(components)
        for c in parts:
            if not isinstance(c, quotas.ClientQuotaFilterComponent):
                raise KafkaConfigurationError(f"not a ClientQuotaFilterComponent: {c!r}")
        return self._start(quotas.DescribeClientQuotas(parts, strict), now, timeout)

    def alter_client_quotas(
        self,
        alterations: Iterable[quotas.ClientQuotaAlteration],
        *,
        now: float,
        timeout: float | None = None,
        validate_only: bool = False,
    ) -> OpId:
        """Set or remove client quotas; results by entity: None or its KafkaError.

        Raises:
            KafkaConfigurationError: not a ClientQuotaAlteration, or an entity twice.
        """
        keyed: dict[quotas.QuotaEntity, quotas.ClientQuotaAlteration] = {}
        for a in alterations:
            if not isinstance(a, quotas.ClientQuotaAlteration):
                raise KafkaConfigurationError(f"not a ClientQuotaAlteration: {a!r}")
            if a.entity in keyed:
                raise KafkaConfigurationError(f"quota entity {a.entity!r} given twice")
            keyed[a.entity] = a
        return self._start(quotas.AlterClientQuotas(keyed, validate_only), now, timeout)

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, now: float, timeout: float | None = None
    ) -> OpId:
        """SCRAM credentials (mechanism and iterations, never secrets); results by user:
        a tuple of ScramCredentialInfo, or with ``users`` None one result under None:
        user -> its tuple."""
        listed = None if users is None else _unique(users, "user")
        return self._start(quotas.DescribeUserScramCredentials(listed), now, timeout)

    def alter_user_scram_credentials(
        self,
        alterations: Iterable[
            quotas.UserScramCredentialUpsertion | quotas.UserScramCredentialDeletion
        ],
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """Add, replace or delete SCRAM credentials (the password is salted here, with a
        salt from the machine's ``rng`` unless given); results by user: None or its
        KafkaError."""
        spec = quotas.scram_alterations(list(alterations), lambda: self._rng.randbytes(32))
        return self._start(spec, now, timeout)

    # -------------------------------------------------------- replicas and leaders

    def alter_partition_reassignments(
        self,
        targets: Mapping[Any, Iterable[int] | None],
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """Move partitions to new replica sets (None: cancel the partition's ongoing
        reassignment); results by partition: None or its KafkaError."""
        clean = {
            TopicPartition(*tp): None if r is None else [int(b) for b in r]
            for tp, r in targets.items()
        }
        return self._start(replicas.AlterPartitionReassignments(clean), now, timeout)

    def list_partition_reassignments(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """Ongoing reassignments (of every partition, or those given); the result under
        None: partition -> PartitionReassignment."""
        parts = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        return self._start(replicas.ListPartitionReassignments(parts), now, timeout)

    def elect_leaders(
        self,
        election_type: replicas.ElectionType | int = replicas.ElectionType.PREFERRED,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """Elect leaders (preferred or unclean); results by partition: None, or its
        KafkaError (ElectionNotNeededError: the leader is already the one asked for).
        With ``partitions`` None one result under None: partition -> that."""
        kind = replicas.ElectionType(election_type)
        parts = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        return self._start(replicas.ElectLeaders(kind, parts), now, timeout)

    def describe_topic_partitions(
        self,
        names: Iterable[str] | None = None,
        *,
        now: float,
        timeout: float | None = None,
        partition_limit: int = 2000,
        cursor: TopicPartition | None = None,
        one_page: bool = False,
    ) -> OpId:
        """Topics (or every topic) with DescribeTopicPartitions, ``partition_limit``
        partitions per answer, from ``cursor``: every page (or ``one_page``); the result
        under None: :class:`TopicPartitionsPage`."""
        if isinstance(partition_limit, bool) or not (
            isinstance(partition_limit, int) and partition_limit > 0
        ):
            raise KafkaConfigurationError(f"partition_limit must be > 0, got {partition_limit!r}")
        listed = None if names is None else _unique(names, "topic")
        start = None if cursor is None else TopicPartition(*cursor)
        spec = replicas.DescribeTopicPartitions(listed, partition_limit, start, one_page)
        return self._start(spec, now, timeout)

    def describe_features(self, *, now: float, timeout: float | None = None) -> OpId:
        """The cluster's finalized and a broker's supported feature flags; the result
        under None: FeatureMetadata."""
        return self._start(replicas.DescribeFeatures(), now, timeout)

    def update_features(
        self,
        updates: Mapping[str, replicas.FeatureUpdate | int],
        *,
        now: float,
        timeout: float | None = None,
        validate_only: bool = False,
    ) -> OpId:
        """Change finalized feature levels (an int: upgrade to that level); results by
        feature: None or its KafkaError."""
        clean = {
            str(name): u if isinstance(u, replicas.FeatureUpdate) else replicas.FeatureUpdate(u)
            for name, u in updates.items()
        }
        return self._start(replicas.UpdateFeatures(clean, validate_only), now, timeout)

    # ----------------------------------------------------------------- transactions

    def list_transactions(
        self,
        broker_ids: Iterable[int] | None = None,
        *,
        now: float,
        timeout: float | None = None,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
        duration_filter_ms: int | None = None,
        transactional_id_pattern: str | None = None,
    ) -> OpId:
        """ListTransactions on every broker (or those given); results by broker id: a
        list of TransactionListing."""
        spec = txn.ListTransactions(
            None if broker_ids is None else list(broker_ids),
            [str(s) for s in state_filters],
            [int(p) for p in producer_id_filters],
            duration_filter_ms,
            transactional_id_pattern,
        )
        return self._start(spec, now, timeout)

    def describe_transactions(
        self, transactional_ids: Iterable[str], *, now: float, timeout: float | None = None
    ) -> OpId:
        """Transactions at their coordinators; results by id: TransactionDescription."""
        ids = _unique(transactional_ids, "transactional id")
        return self._start(txn.DescribeTransactions(ids), now, timeout)

    def describe_producers(
        self, partitions: Iterable[TopicPartition], *, now: float, timeout: float | None = None
    ) -> OpId:
        """Active producers at each partition's leader; results by partition:
        PartitionProducerState."""
        parts = list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        return self._start(txn.DescribeProducers(parts), now, timeout)

    def abort_transaction(
        self, spec: txn.AbortTransactionSpec, *, now: float, timeout: float | None = None
    ) -> OpId:
        """Abort a (hanging) transaction on one partition; the result under the
        partition: None or its KafkaError."""
        if not isinstance(spec, txn.AbortTransactionSpec):
            raise KafkaConfigurationError(f"not an AbortTransactionSpec: {spec!r}")
        return self._start(txn.AbortTransaction(spec), now, timeout)

    def fence_producers(
        self, transactional_ids: Iterable[str], *, now: float, timeout: float | None = None
    ) -> OpId:
        """Fence every producer of each transactional id; results by id:
        ProducerIdAndEpoch (the new epoch)."""
        ids = _unique(transactional_ids, "transactional id")
        return self._start(txn.FenceProducers(ids), now, timeout)

    def remove_group_members(
        self,
        group_id: str,
        members: Iterable[MemberToRemove] | None = None,
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """Remove members (None: all) from a classic group; the result under
        ``group_id``: MemberToRemove -> None or its KafkaError."""
        listed = None
        if members is not None:
            listed = list(members)
            for m in listed:
                if not isinstance(m, MemberToRemove):
                    raise KafkaConfigurationError(f"not a MemberToRemove: {m!r}")
        return self._start(ops.RemoveGroupMembers(group_id, listed), now, timeout)

    # ------------------------------------------------------- brokers and the quorum

    def describe_metadata_quorum(self, *, now: float, timeout: float | None = None) -> OpId:
        """The KRaft metadata quorum (its leader, voters, observers); the result under
        None: QuorumDescription."""
        return self._start(brokers.DescribeQuorum(), now, timeout)

    def alter_replica_log_dirs(
        self, assignments: Mapping[Any, str], *, now: float, timeout: float | None = None
    ) -> OpId:
        """Move replicas to other log directories of their brokers
        (TopicPartitionReplica or ``(topic, partition, broker id)`` -> absolute path);
        results by TopicPartitionReplica: None or its KafkaError."""
        spec = brokers.AlterReplicaLogDirs(brokers.replica_keys(assignments))
        return self._start(spec, now, timeout)

    def api_versions(
        self, broker_ids: Iterable[int] | None = None, *, now: float, timeout: float | None = None
    ) -> OpId:
        """ApiVersions at every broker (or those given); results by broker id: API key
        -> ``(min, max)`` version the broker supports."""
        ids = None if broker_ids is None else [int(b) for b in broker_ids]
        return self._start(brokers.BrokerApiVersions(ids), now, timeout)

    def list_config_resources(
        self,
        resource_types: Iterable[Any] = (),
        *,
        now: float,
        timeout: float | None = None,
    ) -> OpId:
        """The config resources the cluster knows (of ``resource_types``: each a
        ConfigResourceType, its code or name; none: every type); the result under None:
        ``[(type code, name)]``.

        Raises:
            KafkaConfigurationError: an unknown resource type.
        """
        spec = brokers.ListConfigResources([int(resource_type_of(t)) for t in resource_types])
        return self._start(spec, now, timeout)

    def wait_for_topics(
        self, names: Iterable[str], *, now: float, timeout: float | None = None
    ) -> OpId:
        """Ask for topics' metadata until each is known with a leader for every
        partition; results by name: TopicDescription, or KafkaTimeoutError naming what it
        still lacked at the deadline."""
        return self._start(brokers.WaitForTopics(_unique(names, "topic")), now, timeout)

    def close(self) -> None:
        """Close the connections; unfinished operations end with KafkaConnectionError."""
        if self._state is AdminState.CLOSED:
            return
        self._state = transition(ADMIN_STATES, self._state, AdminState.CLOSED, what="close")
        self._client.close()
        self._drain_client(0.0)
        for op in list(self._ops.values()):
            for key in self._all_keys(op):
                closed = KafkaConnectionError(f"{op.spec.name}: the admin client closed")
                op.results.setdefault(key, closed)
            op.pending.clear()
            self._finish(op)

    # ------------------------------------------------------------- IO inputs

    def receive_data(self, node_id: NodeId, data: bytes, *, now: float) -> None:
        """Bytes from ``node_id`` (b"" = EOF)."""
        self._client.receive_data(node_id, data, now=now)
        self._step(now)

    def handle_timer(self, *, now: float) -> None:
        """Run what is due: the Client's timers, retries, deadlines."""
        self._client.handle_timer(now=now)
        self._step(now)
        if self._client.statistics_due(now=now):
            self._events.append(report.StatisticsReported(stats=report.statistics(self, now)))

    # ------------------------------------------------------------ IO outputs

    def next_event(self) -> AdminEvent | None:
        """The next event, or None."""
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        """The earliest deadline for :meth:`handle_timer`, or None."""
        deadlines = [t for t in (self._client.get_timer(),) if t is not None]
        for op in self._ops.values():
            deadlines.append(op.deadline)
            deadlines.extend(t for t in op.pending.values() if t != math.inf)
        return min(deadlines) if deadlines else None

    # ------------------------------------------------------------- internals

    def _start(self, spec: ops.Operation, now: float, timeout: float | None) -> OpId:
        if "operation" not in ADMIN_STATES.commands[self._state]:
            raise LocalProtocolError(f"{spec.name} on a closed admin client")
        if timeout is None:
            timeout = self._client.config.connection.request_timeout
        if not timeout > 0:
            raise KafkaConfigurationError(f"{spec.name}: timeout must be > 0, got {timeout!r}")
        op_id = OpId(self._next_op)
        self._next_op += 1
        self._ops[op_id] = _Op(op_id=op_id, spec=spec, timeout=timeout, deadline=now + timeout)
        log.debug("operation %s: %s started", op_id, spec.name)
        self._step(now)
        return op_id

    def _step(self, now: float) -> None:
        self._drain_client(now)
        if self._state is AdminState.CLOSED:
            return
        cluster = self._client.cluster
        if not cluster.brokers:
            if self._ops and not self._client.metadata.in_flight:
                self._client.request_metadata_update()
        else:
            for op in list(self._ops.values()):
                if op.keys is None:
                    op.keys = op.spec.keys(cluster)
                    op.pending = dict.fromkeys(op.keys, now)
                self._dispatch(op, now)
        for op in list(self._ops.values()):
            if op.deadline <= now:
                for key in self._all_keys(op):
                    if key in op.results:
                        continue
                    last = op.last_error.get(key) or self._client.last_connection_error
                    why = "" if last is None else f" (last error: {type(last).__name__}: {last})"
                    timeout = KafkaTimeoutError(
                        f"{op.spec.name} did not finish within {op.timeout:g} s{why}"
                    )
                    timeout.__cause__ = last
                    op.results[key] = timeout
                op.pending.clear()
            self._finish(op)
        if self._client.metadata.update_due(now):
            # a topic named just now: its metadata goes out at once, not at the next timer
            self._client.handle_timer(now=now)
        self._drain_client(now)

    def _all_keys(self, op: _Op) -> list[Hashable]:
        """The operation's keys, settled now if the cluster never answered (so a timeout
        still names each topic or group); None stands for an operation with none."""
        if op.keys is None:
            op.keys = op.spec.keys(self._client.cluster) or [None]
        return op.keys

    def _dispatch(self, op: _Op, now: float) -> None:
        groups: dict[tuple[NodeId | None, ops.Route, Hashable], list[Hashable]] = {}
        for key, not_before in list(op.pending.items()):
            if not_before > now:
                continue
            route = op.spec.route(key)
            node = self._resolve(op, key, route, now)
            if node is False:
                continue
            slot = (node, route if not op.spec.batch else _kind(route), op.spec.phase(key))
            groups.setdefault(slot, []).append(key)
        for (node, _, _), keys in groups.items():
            chunks = [keys] if op.spec.batch else [[k] for k in keys]
            for chunk in chunks:
                for key in chunk:
                    del op.pending[key]
                self._send(op, tuple(chunk), op.spec.route(chunk[0]), node, now)

    def _resolve(self, op: _Op, key: Hashable, route: ops.Route, now: float) -> Any:
        """The node for ``route``: a NodeId, None (any broker), or False (not yet; the
        key waits, or has failed)."""
        match route:
            case ops.AnyBroker():
                return None
            case ops.ToNode(node_id=node_id):
                if self._client.node_state(NodeId(node_id)) is None:
                    self._fail(op, key, KafkaError(f"no broker {node_id} in the cluster"))
                    return False
                return NodeId(node_id)
            case ops.ToCoordinator(group=group, key_type=key_type):
                which = (key_type, group)
                node = self._coordinators.get(which)
                if node is not None:
                    return node
                self._find(which, now)
                finding = which in self._finding.values()
                op.pending[key] = math.inf if finding else self._find_after[which]
                return False
            case ops.ToLeader(topic=topic, partition=partition):
                cluster = self._client.cluster
                meta = cluster.topics.get(topic)
                seen = op.waiting_topics.get(key)
                if meta is None or (seen is not None and seen == self._updates):
                    if self._client.metadata.add_topics([topic]) or seen is None:
                        op.waiting_topics[key] = self._updates
                        self._client.request_metadata_update()
                    op.pending[key] = math.inf
                    return False
                op.waiting_topics.pop(key, None)
                failed = _ruled_out(meta, partition)
                if failed is not None:
                    self._fail(op, key, failed)
                    return False
                leader = cluster.leader_for(topic, partition)
                if leader is None:
                    op.waiting_topics[key] = self._updates
                    self._client.request_metadata_update()
                    op.pending[key] = math.inf
                    return False
                return leader
        raise AssertionError(route)  # pragma: no cover - the union is exhausted

    def _send(
        self, op: _Op, keys: tuple[Hashable, ...], route: ops.Route, node: NodeId | None, now: float
    ) -> None:
        remaining = max(op.deadline - now, 1e-3)
        timeout = min(remaining, self._client.config.connection.request_timeout)
        spec = op.spec

        def factory(versions: ApiVersionTable) -> Any:
            try:
                return spec.request(versions, list(keys), remaining)
            except UnsupportedVersionError as exc:
                raise UnsupportedVersionError(
                    f"{spec.name} is not supported by this broker: {exc}",
                    api_key=exc.api_key,
                    api_name=exc.api_name,
                    client_range=exc.client_range,
                    broker_range=exc.broker_range,
                ) from exc

        rid = self._client.send(factory, now=now, node_id=node, timeout=timeout)
        self._units[rid] = _Unit(op=op, keys=keys, route=route)

    def _find(self, which: _CoordinatorKey, now: float) -> None:
        if which in self._finding.values() or self._find_after.setdefault(which, now) > now:
            return
        key_type, key = which

        def factory(versions: ApiVersionTable) -> Any:
            cls = versions.request_type(ApiKey.FIND_COORDINATOR)
            return build(cls, key=key, key_type=key_type, coordinator_keys=(key,))

        rid = self._client.send(factory, now=now)
        self._finding[rid] = which

    def _drain_client(self, now: float) -> None:
        while (event := self._client.next_event()) is not None:
            match event:
                case ConnectRequested() | CloseRequested() | TokenRequested():
                    self._events.append(event)
                case MetadataUpdated():
                    self._events.append(event)  # what an adapter waiting for the cluster needs
                    self._updates += 1
                    self._wake_waiting(lambda route: isinstance(route, ops.ToLeader), now)
                case RequestCompleted(request_id=rid, node_id=node, response=response):
                    if rid in self._finding:
                        self._found(self._finding.pop(rid), response, now)
                    elif rid in self._units:
                        self._completed(self._units.pop(rid), node, response, now)
                case RequestFailed(request_id=rid, error=error):
                    if rid in self._finding:
                        self._find_failed(self._finding.pop(rid), error, now)
                    elif rid in self._units:
                        unit = self._units.pop(rid)
                        for key in unit.keys:
                            self._outcome(unit.op, key, unit.route, error, now)
                case NodeDisconnected():
                    pass

    def _untrack_topics(self) -> None:
        """Drop from the metadata the stale topics (an unknown topic...) no unfinished key
        routes by: the Client refreshes a stale topic after every ``retry_backoff`` -- for
        ever, once no operation waits for it. Good topics stay, their leaders cached."""
        metadata = self._client.metadata
        stale = metadata.stale_topics
        if not stale:
            return
        needed: set[str] = set()
        for op in self._ops.values():
            for key in op.keys or ():
                if key not in op.results:
                    route = op.spec.route(key)
                    if isinstance(route, ops.ToLeader):
                        needed.add(route.topic)
        metadata.remove_topics([t for t in stale if t not in needed])

    def _wake_waiting(self, which: Callable[[ops.Route], bool], now: float) -> None:
        for op in self._ops.values():
            for key, not_before in op.pending.items():
                if not_before == math.inf and which(op.spec.route(key)):
                    op.pending[key] = now

    def _found(self, group: _CoordinatorKey, response: Any, now: float) -> None:
        entry = response.coordinators[0] if hasattr(response, "coordinators") else response
        code = int(entry.error_code)
        if code == 0:
            node = NodeId(int(entry.node_id))
            if self._client.node_state(node) is None:
                self._client.request_metadata_update()
                self._find_after[group] = now + self.config.retry_backoff
            else:
                self._coordinators[group] = node
                self._find_after.pop(group, None)
        else:
            message = getattr(entry, "error_message", None) or ""
            self._find_failed(group, error_for_code(code)(message, group=group[1]), now)
            return
        self._wake_group(group, now)

    def _find_failed(self, group: _CoordinatorKey, error: KafkaError, now: float) -> None:
        if error.retriable:
            self._find_after[group] = now + self.config.retry_backoff
        for op in self._ops.values():
            for key in list(op.pending):
                if op.spec.route(key) == ops.ToCoordinator(group[1], group[0]):
                    if error.retriable:
                        op.last_error[key] = error
                        op.pending[key] = self._find_after[group]
                    else:
                        self._fail(op, key, error)

    def _wake_group(self, group: _CoordinatorKey, now: float) -> None:
        self._wake_waiting(lambda route: route == ops.ToCoordinator(group[1], group[0]), now)

    def _completed(self, unit: _Unit, node: NodeId, response: Any, now: float) -> None:
        op = unit.op
        if op.op_id not in self._ops:
            return  # answered after its deadline
        try:
            outcomes = ops.parse_outcomes(op.spec, response, list(unit.keys), node)
        except KafkaError as error:
            for key in unit.keys:
                self._fail(op, key, error)
            return
        for key in unit.keys:
            outcome = outcomes.get(key, ops._no_answer(key))
            if isinstance(outcome, ops.Again):
                if key not in op.results:
                    op.pending[key] = now  # the next page or step, at once
            elif isinstance(outcome, KafkaError):
                self._outcome(op, key, unit.route, outcome, now)
            elif key not in op.results:
                op.results[key] = outcome
                op.pending.pop(key, None)

    def _outcome(
        self, op: _Op, key: Hashable, route: ops.Route, error: KafkaError, now: float
    ) -> None:
        """A key failed: retry it after the backoff, or record the error as its answer."""
        if op.op_id not in self._ops or key in op.results:
            return
        errno = getattr(error, "errno", None)
        if isinstance(route, ops.ToCoordinator) and (errno in _FORGET_COORDINATOR or errno is None):
            self._coordinators.pop((route.key_type, route.group), None)
        if isinstance(route, ops.ToLeader) and (errno in STALE_METADATA_ERRORS or errno is None):
            self._client.request_metadata_update()
            if errno is not None:
                # the broker we asked is not the leader: the retry waits for metadata newer
                # than this answer, or it would go to the same broker again (found by the
                # simulator, tests/sim/test_sim_admin.py)
                op.waiting_topics[key] = self._updates
        if error.retriable and type(error) not in op.spec.final:
            op.last_error[key] = error
            op.pending[key] = now + self.config.retry_backoff
            return
        self._fail(op, key, error)

    def _fail(self, op: _Op, key: Hashable, error: KafkaError) -> None:
        op.results.setdefault(key, error)
        op.pending.pop(key, None)

    def _finish(self, op: _Op) -> None:
        if op.keys is None or len(op.results) < len(op.keys):
            return
        del self._ops[op.op_id]
        self._untrack_topics()
        if log.isEnabledFor(logging.DEBUG):
            failed = sum(isinstance(r, KafkaError) for r in op.results.values())
            log.debug(
                "operation %s: %s done, %d of %d failed",
                op.op_id,
                op.spec.name,
                failed,
                len(op.results),
            )
        order = op.keys if op.keys is not None else list(op.results)
        self._events.append(
            AdminOperationCompleted(
                op_id=op.op_id,
                operation=op.spec.name,
                results={k: op.results[k] for k in order if k in op.results},
            )
        )


def _ruled_out(meta: TopicMetadata, partition: int) -> KafkaError | None:
    """A partition's answer when the metadata rules it out, else None: its topic is
    unknown (UNKNOWN_TOPIC_OR_PARTITION -- the answer, as in Java's admin client, not a
    retry), the topic has another error that no retry cures (TOPIC_AUTHORIZATION_FAILED,
    INVALID_TOPIC_EXCEPTION), or the topic lacks the partition."""
    code, topic = meta.error_code, meta.name
    if code == 3 or (code != 0 and not error_for_code(code).retriable):
        return error_for_code(code)(topic=topic, partition=partition)
    if meta.partitions and partition not in meta.partitions:
        return UnknownTopicOrPartitionError(topic=topic, partition=partition)
    return None


def _kind(route: ops.Route) -> Any:
    """Routes that may share one request: every key of a batching operation bound for
    the same node shares it, whatever its exact route."""
    return type(route)


def _topics(items: Iterable[str | uuid.UUID]) -> list[str | uuid.UUID]:
    """Topics named or given by id (KIP-516), each once."""
    out: list[str | uuid.UUID] = []
    for item in items:
        if not isinstance(item, str | uuid.UUID):
            raise KafkaConfigurationError(f"a topic is a name (str) or an id (UUID), not {item!r}")
        if item in out:
            raise KafkaConfigurationError(f"topic {item!r} given twice")
        out.append(item)
    return out


def _unique(items: Iterable[str], what: str) -> list[str]:
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise KafkaConfigurationError(f"a {what} name must be a str, not {item!r}")
        if item in out:
            raise KafkaConfigurationError(f"{what} {item!r} given twice")
        out.append(item)
    return out
