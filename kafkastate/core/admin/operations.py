"""The admin operations: for each, its resources, where each goes, its request and how
its response reads per resource. Pure functions of their inputs; the
:class:`~kafkastate.core.admin.machine.AdminMachine` sends, retries and collects.

An operation is split into *keys* (a topic name, a ``(resource type, name)`` pair, a group
id, a partition, a broker id): each key has a :data:`Route` and gets its own outcome, a
value or a :class:`~kafkastate.errors.KafkaError`. Keys that share a destination go in one
request where the API batches (``batch``). ``final`` names retriable errors that, for this
operation, are answers and not reasons to retry (deleting an unknown topic).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar, Final

import attrs

from kafkastate.core.admin.types import (
    AlterConfigOp,
    AlterConfigOpType,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    CreatedTopic,
    GroupDescription,
    GroupListing,
    ListedOffset,
    LogDirDescription,
    MemberDescription,
    MemberToRemove,
    NewPartitions,
    PartitionDescription,
    ReplicaInfo,
    TopicDescription,
)
from kafkastate.core.consumer.assignors import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
)
from kafkastate.core.consumer.fetch.offsets import list_offsets_request
from kafkastate.core.metadata import ClusterMetadata
from kafkastate.core.protocol.requests import (
    NewTopic,
    build,
    create_topics_request,
    delete_topics_request,
    metadata_request,
    nested_type,
)
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable, request_type
from kafkastate.errors import (
    KafkaError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from kafkastate.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "Again",
    "AnyBroker",
    "PerBroker",
    "error_of",
    "Operation",
    "parse_outcomes",
    "Route",
    "ToCoordinator",
    "ToLeader",
    "ToNode",
]

CREATE_PARTITIONS: Final = 37
DESCRIBE_CONFIGS: Final = 32
ALTER_CONFIGS: Final = 33
INCREMENTAL_ALTER_CONFIGS: Final = 44
LIST_GROUPS: Final = 16
DESCRIBE_GROUPS: Final = 15
DELETE_GROUPS: Final = 42
OFFSET_DELETE: Final = 47
DELETE_RECORDS: Final = 21
DESCRIBE_LOG_DIRS: Final = 35
CONSUMER_GROUP_DESCRIBE: Final = 69
# ConsumerGroupDescribe's answer for a group to describe with DescribeGroups: not a KIP-848
# group (GROUP_ID_NOT_FOUND), or a 3.7-3.9 broker without the new coordinator enabled
# (UNSUPPORTED_VERSION), as the Java Admin falls back
_NOT_A_CONSUMER_GROUP: Final = frozenset({69, 35})
# OffsetFetch v10 / OffsetCommit v10 name topics by id only; admin calls name them, so
# they stay at the last versions that carry names.
_OFFSET_FETCH_BY_NAME: Final = 9
_OFFSET_COMMIT_BY_NAME: Final = 9


@attrs.frozen
class AnyBroker:
    """Any live broker (in KRaft every broker forwards controller requests, KIP-590)."""


@attrs.frozen
class ToNode:
    """One broker (its configs, its groups)."""

    node_id: int


@attrs.frozen
class ToCoordinator:
    """The coordinator of a group (``key_type`` 0) or of a transactional id (1), found
    with FindCoordinator."""

    group: str
    key_type: int = 0


@attrs.frozen
class Again:
    """A key's outcome that is no outcome yet: send the key again at once (the next page
    of a paged answer, the next step of a two-step operation). The operation keeps what
    it learnt."""


@attrs.frozen
class ToLeader:
    """The partition's leader, from metadata."""

    topic: str
    partition: int


Route = AnyBroker | ToNode | ToCoordinator | ToLeader


def _ms(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=max(0, round(seconds * 1000)))


def error_of(code: int, message: str | None = None, **context: object) -> KafkaError | None:
    """The KafkaError of a response's error code (None for 0), with its message."""
    if int(code) == 0:
        return None
    return error_for_code(int(code))(message or "", **context)


_error = error_of


def _no_answer(key: object) -> KafkaError:
    return KafkaError(f"the broker's response did not mention {key!r}")


def parse_outcomes(
    spec: Operation, response: Any, keys: Sequence[Any], node: int
) -> dict[Any, Any]:
    """Each key's outcome from a response, as the machine reads it.

    A response that decodes but holds what the operation cannot read (a value out of its
    range, a shape it does not expect) is a broker bug, not ours to crash on.

    Raises:
        KafkaError: the response cannot be read ("unexpected response"); every key fails.
    """
    try:
        return spec.parse_from(response, keys, node)
    except (AttributeError, TypeError, ValueError, IndexError) as exc:
        raise KafkaError(f"{spec.name}: unexpected response: {exc!r}") from None


def _capped(versions: ApiVersionTable, api_key: int, cap: int) -> type[Any]:
    return request_type(api_key, min(versions.version_for(api_key), cap))


class Operation:
    """Base of every operation (subclasses fill in the hooks)."""

    name: ClassVar[str] = "admin"
    """The command's name, for errors (``create_topics``)."""
    batch: ClassVar[bool] = True
    """Whether keys bound for one broker share a request."""
    final: ClassVar[frozenset[type[KafkaError]]] = frozenset()
    """Retriable errors that are this operation's answer."""

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        """The resources, once the cluster's brokers are known."""
        raise NotImplementedError

    def route(self, key: Any) -> Route:
        """Where ``key`` goes."""
        return AnyBroker()

    def phase(self, key: Any) -> Hashable:
        """Keys of one route share a request only in the same phase (the same API)."""
        return None

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        """The kio request for ``keys`` (``timeout``: seconds the broker may wait)."""
        raise NotImplementedError

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        """Each key's value or KafkaError (a key left out gets "no answer")."""
        raise NotImplementedError

    def parse_from(self, response: Any, keys: Sequence[Any], node: int) -> dict[Any, Any]:
        """:meth:`parse`, for operations whose answer names the broker that gave it."""
        return self.parse(response, keys)


# ----------------------------------------------------------------------------- topics


@attrs.define
class CreateTopics(Operation):
    """CreateTopics, one key per topic name."""

    name: ClassVar[str] = "create_topics"
    topics: Mapping[str, NewTopic]
    validate_only: bool = False

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.topics)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        specs = [self.topics[k] for k in keys]
        return create_topics_request(
            versions, specs, timeout=timeout, validate_only=self.validate_only
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for t in response.topics:
            out[t.name] = _error(t.error_code, t.error_message, topic=t.name) or CreatedTopic(
                name=t.name,
                topic_id=getattr(t, "topic_id", None),
                num_partitions=int(getattr(t, "num_partitions", -1)),
                replication_factor=int(getattr(t, "replication_factor", -1)),
            )
        return out


def _require_topic_ids(
    versions: ApiVersionTable, keys: Sequence[Any], api: int, operation: str, min_version: int
) -> None:
    """Topics named by id (KIP-516) need a version of ``api`` that carries ids."""
    if any(isinstance(k, uuid.UUID) for k in keys):
        versions.require(
            api,
            feature=f"{operation} by topic id",
            remedy="name the topics instead (topic ids need Kafka 3.1 or newer)",
            min_version=min_version,
        )


def _asked_as(asked: Sequence[Any], name: str | None, topic_id: Any) -> Any:
    """The key an answer belongs to: its topic id when the topic was asked for by id,
    else its name."""
    return topic_id if topic_id in asked else name


def _by_id(key: Any) -> Hashable:
    """Topics asked for by id and by name go in separate requests: a broker answers a
    Metadata request naming any topic id for the ids alone."""
    return isinstance(key, uuid.UUID)


@attrs.define
class DeleteTopics(Operation):
    """DeleteTopics, one key per topic name or topic id (:class:`uuid.UUID`, v6+)."""

    name: ClassVar[str] = "delete_topics"
    final: ClassVar[frozenset[type[KafkaError]]] = frozenset(
        {UnknownTopicOrPartitionError, UnknownTopicIdError}
    )
    names: Sequence[str | uuid.UUID]

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.names)

    def phase(self, key: Any) -> Hashable:
        return _by_id(key)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        _require_topic_ids(versions, keys, ApiKey.DELETE_TOPICS, self.name, 6)
        return delete_topics_request(versions, keys, timeout=timeout)

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        return {
            _asked_as(keys, r.name, getattr(r, "topic_id", None)): _error(
                r.error_code, r.error_message, topic=r.name
            )
            for r in response.responses
        }


@attrs.define
class DescribeTopics(Operation):
    """Metadata for topics; one key per name or topic id (:class:`uuid.UUID`, Metadata
    v12+), or the one key None for every topic."""

    name: ClassVar[str] = "describe_topics"
    final: ClassVar[frozenset[type[KafkaError]]] = frozenset(
        {UnknownTopicOrPartitionError, UnknownTopicIdError}
    )
    names: Sequence[str | uuid.UUID] | None

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [None] if self.names is None else list(self.names)

    def phase(self, key: Any) -> Hashable:
        return _by_id(key)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        _require_topic_ids(versions, keys, ApiKey.METADATA, self.name, 12)
        return metadata_request(versions, None if keys == [None] else list(keys))

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        described: dict[Any, Any] = {}
        for t in response.topics:
            error = _error(t.error_code, None, topic=t.name)
            key = _asked_as(keys, t.name, getattr(t, "topic_id", None))
            described[key] = error or _topic_description(t)
        if keys == [None]:
            return {None: [v for v in described.values() if not isinstance(v, KafkaError)]}
        return described


def _topic_description(t: Any) -> TopicDescription:
    topic_id = getattr(t, "topic_id", None)
    return TopicDescription(
        name=t.name,
        topic_id=None if topic_id is None or topic_id.int == 0 else topic_id,
        is_internal=bool(getattr(t, "is_internal", False)),
        partitions=tuple(
            PartitionDescription(
                partition=int(p.partition_index),
                leader=int(p.leader_id),
                leader_epoch=int(getattr(p, "leader_epoch", -1)),
                replicas=tuple(int(r) for r in p.replica_nodes),
                isr=tuple(int(r) for r in p.isr_nodes),
                offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
            )
            for p in sorted(t.partitions, key=lambda p: int(p.partition_index))
        ),
    )


@attrs.define
class DescribeCluster(Operation):
    """The cluster from a Metadata response (every broker answers it); the key None."""

    name: ClassVar[str] = "describe_cluster"

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [None]

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        return metadata_request(versions, [])

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        brokers = tuple(
            BrokerDescription(
                node_id=int(b.node_id),
                host=str(b.host),
                port=int(b.port),
                rack=getattr(b, "rack", None),
            )
            for b in sorted(response.brokers, key=lambda b: int(b.node_id))
        )
        return {
            None: ClusterDescription(
                cluster_id=getattr(response, "cluster_id", None),
                controller_id=int(getattr(response, "controller_id", -1)),
                brokers=brokers,
            )
        }


@attrs.define
class CreatePartitions(Operation):
    """CreatePartitions, one key per topic name."""

    name: ClassVar[str] = "create_partitions"
    final: ClassVar[frozenset[type[KafkaError]]] = frozenset({UnknownTopicOrPartitionError})
    topics: Mapping[str, NewPartitions]
    validate_only: bool = False

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.topics)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(CREATE_PARTITIONS)
        topic_cls = nested_type(cls, "CreatePartitionsTopic")
        assign_cls = nested_type(cls, "CreatePartitionsAssignment")
        topics = []
        for name in keys:
            spec = self.topics[name]
            assignments = (
                None
                if spec.new_assignments is None
                else tuple(build(assign_cls, broker_ids=tuple(ids)) for ids in spec.new_assignments)
            )
            topics.append(
                build(topic_cls, name=name, count=spec.total_count, assignments=assignments)
            )
        return build(
            cls, topics=tuple(topics), timeout=_ms(timeout), validate_only=self.validate_only
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        return {
            r.name: _error(r.error_code, r.error_message, topic=r.name) for r in response.results
        }


# ---------------------------------------------------------------------------- configs

ConfigKey = tuple[ConfigResourceType, str]


def _config_route(key: ConfigKey) -> Route:
    kind, name = key
    if kind in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and name.isdigit():
        return ToNode(int(name))
    return AnyBroker()  # topics, and the cluster-wide broker default (name "")


def _config_keys(resources: Sequence[ConfigResource]) -> dict[ConfigKey, ConfigResource]:
    return {(r.resource_type, r.name): r for r in resources}


def _config_results(entries: Sequence[Any]) -> dict[Any, Any]:
    return {(ConfigResourceType(int(r.resource_type)), str(r.resource_name)): r for r in entries}


@attrs.define
class DescribeConfigs(Operation):
    """DescribeConfigs, one key per ``(resource type, name)``."""

    name: ClassVar[str] = "describe_configs"
    final: ClassVar[frozenset[type[KafkaError]]] = frozenset({UnknownTopicOrPartitionError})
    resources: Mapping[ConfigKey, ConfigResource]
    include_synonyms: bool = False

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.resources)

    def route(self, key: Any) -> Route:
        return _config_route(key)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(DESCRIBE_CONFIGS)
        res_cls = nested_type(cls, "DescribeConfigsResource")
        entries = []
        for key in keys:
            wanted = self.resources[key].configs
            entries.append(
                build(
                    res_cls,
                    resource_type=int(key[0]),
                    resource_name=key[1],
                    configuration_keys=None if wanted is None else tuple(wanted),
                )
            )
        return build(
            cls,
            resources=tuple(entries),
            include_synonyms=self.include_synonyms,
            include_documentation=False,
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, r in _config_results(response.results).items():
            error = _error(r.error_code, r.error_message, resource=key[1])
            out[key] = error or {
                c.name: ConfigEntry(
                    name=c.name,
                    value=c.value,
                    read_only=bool(c.read_only),
                    source=int(getattr(c, "config_source", -1)),
                    is_sensitive=bool(c.is_sensitive),
                    synonyms=tuple(
                        (s.name, s.value, int(s.source)) for s in getattr(c, "synonyms", ())
                    ),
                )
                for c in r.configs
            }
        return out


@attrs.define
class AlterConfigs(Operation):
    """AlterConfigs (whole sets) or IncrementalAlterConfigs (KIP-339), one key per
    ``(resource type, name)``."""

    name: ClassVar[str] = "alter_configs"
    final: ClassVar[frozenset[type[KafkaError]]] = frozenset({UnknownTopicOrPartitionError})
    incremental: ClassVar[bool] = False
    resources: Mapping[ConfigKey, ConfigResource]
    validate_only: bool = False

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.resources)

    def route(self, key: Any) -> Route:
        return _config_route(key)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        api = INCREMENTAL_ALTER_CONFIGS if self.incremental else ALTER_CONFIGS
        cls = versions.request_type(api)
        res_cls = nested_type(cls, "AlterConfigsResource")
        config_cls = nested_type(cls, "AlterableConfig")
        entries = []
        for key in keys:
            configs = []
            for name, value in sorted((self.resources[key].configs or {}).items()):
                change = value if isinstance(value, AlterConfigOp) else None
                if change is None and self.incremental:
                    change = AlterConfigOp(
                        value=value,
                        op=AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE,
                    )
                configs.append(
                    build(
                        config_cls,
                        name=name,
                        value=value if change is None else change.value,
                        config_operation=0 if change is None else int(change.op),
                    )
                )
            entries.append(
                build(
                    res_cls,
                    resource_type=int(key[0]),
                    resource_name=key[1],
                    configs=tuple(configs),
                )
            )
        return build(cls, resources=tuple(entries), validate_only=self.validate_only)

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        return {
            key: _error(r.error_code, r.error_message, resource=key[1])
            for key, r in _config_results(response.responses).items()
        }


@attrs.define
class IncrementalAlterConfigs(AlterConfigs):
    """IncrementalAlterConfigs (KIP-339): set, delete, append or subtract single configs."""

    name: ClassVar[str] = "incremental_alter_configs"
    incremental: ClassVar[bool] = True


# ----------------------------------------------------------------------------- groups


@attrs.define
class PerBroker(Operation):
    """An operation on every broker (or the ones given), one key per broker id."""

    broker_ids: Sequence[int] | None = None

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(sorted(cluster.brokers) if self.broker_ids is None else self.broker_ids)

    def route(self, key: Any) -> Route:
        return ToNode(key)


@attrs.define
class ListGroups(PerBroker):
    """ListGroups on every broker (or the ones given), one key per broker id."""

    name: ClassVar[str] = "list_consumer_groups"
    states: Sequence[str] = ()
    types: Sequence[str] = ()

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        # a filter needs the version that carries it (v4: states, KIP-518; v5: types)
        version = versions.version_for(LIST_GROUPS)
        for wanted, needs, what in ((self.states, 4, "states"), (self.types, 5, "types")):
            if wanted:
                version = max(
                    version,
                    versions.require(
                        LIST_GROUPS,
                        feature=f"list_consumer_groups filtered by {what}",
                        remedy="filter the groups listed without one",
                        min_version=needs,
                    ),
                )
        return build(
            request_type(LIST_GROUPS, version),
            states_filter=tuple(self.states),
            types_filter=tuple(self.types),
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        error = _error(response.error_code, None, broker=keys[0])
        return {
            keys[0]: error
            or [
                GroupListing(
                    group_id=str(g.group_id),
                    protocol_type=str(g.protocol_type),
                    state=str(getattr(g, "group_state", "")),
                    group_type=str(getattr(g, "group_type", "")),
                )
                for g in response.groups
            ]
        }


def _decoded(decode: Any, data: bytes) -> Any:
    if not data:
        return None
    try:
        return decode(data)
    except (KafkaError, ValueError):
        return None


@attrs.define
class _Groups(Operation):
    """An operation on groups, one key per group id, each at its coordinator."""

    groups: Sequence[str]

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.groups)

    def route(self, key: Any) -> Route:
        return ToCoordinator(key)


@attrs.define
class _OneGroup(Operation):
    """An operation on one group's offsets: the one key is the group id."""

    batch: ClassVar[bool] = False
    group: str

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [self.group]

    def route(self, key: Any) -> Route:
        return ToCoordinator(key)


@attrs.define
class FindCoordinator(Operation):
    """FindCoordinator for one key (a group id, or a transactional id): its broker id."""

    name: ClassVar[str] = "find_coordinator"
    batch: ClassVar[bool] = False
    key: str
    key_type: int = 0  # 0 group, 1 transaction

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [self.key]

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(ApiKey.FIND_COORDINATOR)
        return build(cls, key=self.key, key_type=self.key_type, coordinator_keys=(self.key,))

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        entry = response.coordinators[0] if hasattr(response, "coordinators") else response
        message = getattr(entry, "error_message", None)
        error = _error(entry.error_code, message, key=self.key)
        return {self.key: error or int(entry.node_id)}


@attrs.define
class DescribeGroups(_Groups):
    """Describe groups at each group's coordinator, one key per group id.

    As the Java Admin does, a group is first described with ConsumerGroupDescribe
    (KIP-848, where the broker has it): a KIP-848 ``consumer`` group answers with its
    members, epochs and assignments; any other group answers GROUP_ID_NOT_FOUND and is
    described again with the classic DescribeGroups (its own phase, so the two APIs never
    share a request)."""

    name: ClassVar[str] = "describe_consumer_groups"
    _classic: set[str] = attrs.field(factory=set)

    def phase(self, key: Any) -> Hashable:
        return key in self._classic

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        if keys[0] not in self._classic and versions.supports(CONSUMER_GROUP_DESCRIBE):
            cls = versions.request_type(CONSUMER_GROUP_DESCRIBE)
            return build(cls, group_ids=tuple(keys), include_authorized_operations=False)
        return _describe_groups_request(versions, keys)

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        if type(response).__name__ == "ConsumerGroupDescribeResponse":
            return self._parse_consumer(response)
        return _parse_classic(response)

    def _parse_consumer(self, response: Any) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for g in response.groups:
            gid = str(g.group_id)
            if int(g.error_code) in _NOT_A_CONSUMER_GROUP:  # classic, none, or KIP-848 off
                self._classic.add(gid)
                out[gid] = Again()
                continue
            error = _error(g.error_code, g.error_message, group=gid)
            out[gid] = error or GroupDescription(
                group_id=gid,
                state=str(g.group_state),
                protocol_type="consumer",
                protocol=str(g.assignor_name),
                members=tuple(_consumer_member(m) for m in g.members),
                group_type="consumer",
                group_epoch=int(g.group_epoch),
                assignment_epoch=int(g.assignment_epoch),
            )
        return out


def _describe_groups_request(versions: ApiVersionTable, groups: Sequence[str]) -> Any:
    cls = versions.request_type(DESCRIBE_GROUPS)
    return build(cls, groups=tuple(groups), include_authorized_operations=False)


def _assigned(assignment: Any) -> Assignment:
    return Assignment(
        partitions=tuple(
            TopicPartition(t.topic_name, int(p))
            for t in assignment.topic_partitions
            for p in sorted(t.partitions)
        )
    )


def _consumer_member(m: Any) -> MemberDescription:
    return MemberDescription(
        member_id=str(m.member_id),
        group_instance_id=m.instance_id,
        client_id=str(m.client_id),
        client_host=str(m.client_host),
        subscription=Subscription(topics=tuple(m.subscribed_topic_names), rack_id=m.rack_id),
        assignment=_assigned(m.assignment),
        member_metadata=b"",
        member_assignment=b"",
        member_epoch=int(m.member_epoch),
        target_assignment=_assigned(m.target_assignment),
        rack_id=m.rack_id,
    )


def _parse_classic(response: Any) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for g in response.groups:
        consumer = g.protocol_type == "consumer"
        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=getattr(m, "group_instance_id", None),
                client_id=m.client_id,
                client_host=m.client_host,
                subscription=(
                    _decoded(decode_subscription, m.member_metadata) if consumer else None
                ),
                assignment=(_decoded(decode_assignment, m.member_assignment) if consumer else None),
                member_metadata=bytes(m.member_metadata),
                member_assignment=bytes(m.member_assignment),
            )
            for m in g.members
        )
        error = _error(g.error_code, getattr(g, "error_message", None), group=g.group_id)
        out[str(g.group_id)] = error or GroupDescription(
            group_id=str(g.group_id),
            state=g.group_state,
            protocol_type=g.protocol_type,
            protocol=g.protocol_data,
            members=members,
        )
    return out


@attrs.define
class DeleteGroups(_Groups):
    """DeleteGroups at each group's coordinator, one key per group id."""

    name: ClassVar[str] = "delete_consumer_groups"

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        return build(versions.request_type(DELETE_GROUPS), groups_names=tuple(keys))

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        return {
            str(r.group_id): _error(r.error_code, None, group=r.group_id) for r in response.results
        }


def _by_topic(partitions: Any) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        out.setdefault(topic, []).append(partition)
    return out


def _partition_errors(topics: Any) -> dict[TopicPartition, KafkaError | None]:
    return {
        TopicPartition(t.name, int(p.partition_index)): _error(
            p.error_code, None, topic=t.name, partition=int(p.partition_index)
        )
        for t in topics
        for p in t.partitions
    }


# The group's own trouble, reported per partition by OffsetCommit: retried as a whole.
_GROUP_LEVEL: Final = frozenset({14, 15, 16})


def _group_or_partitions(
    group: str, group_code: int, parts: dict[TopicPartition, KafkaError | None]
) -> Any:
    error = _error(group_code, None, group=group)
    if error is not None:
        return error
    for e in parts.values():
        if e is not None and isinstance(e, KafkaError) and getattr(e, "errno", 0) in _GROUP_LEVEL:
            return e
    return parts


@attrs.define
class ListGroupOffsets(_OneGroup):
    """OffsetFetch for one group (its key) at its coordinator."""

    name: ClassVar[str] = "list_consumer_group_offsets"
    partitions: Sequence[TopicPartition] | None = None
    require_stable: bool = False

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = _capped(versions, ApiKey.OFFSET_FETCH, _OFFSET_FETCH_BY_NAME)
        by_topic = None if self.partitions is None else _by_topic(self.partitions)
        if "groups" in {f for f in cls.__dataclass_fields__}:  # v8+: batched groups
            topic_cls = nested_type(cls, "OffsetFetchRequestTopics")
            topics = (
                None
                if by_topic is None
                else tuple(
                    build(topic_cls, name=t, partition_indexes=tuple(ps))
                    for t, ps in by_topic.items()
                )
            )
            group = build(
                nested_type(cls, "OffsetFetchRequestGroup"),
                group_id=self.group,
                member_id=None,
                member_epoch=-1,
                topics=topics,
            )
            return build(cls, groups=(group,), require_stable=self.require_stable)
        topic_cls = nested_type(cls, "OffsetFetchRequestTopic")
        topics = (
            None
            if by_topic is None
            else tuple(
                build(topic_cls, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items()
            )
        )
        return build(cls, group_id=self.group, topics=topics, require_stable=self.require_stable)

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        entry = response.groups[0] if hasattr(response, "groups") else response
        offsets: dict[TopicPartition, Any] = {}
        errors: dict[TopicPartition, KafkaError | None] = {}
        for t in entry.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                errors[tp] = _error(p.error_code, None, topic=t.name, partition=tp.partition)
                offsets[tp] = OffsetAndMetadata(
                    int(p.committed_offset),
                    p.metadata or "",
                    int(getattr(p, "committed_leader_epoch", -1)),
                )
        outcome = _group_or_partitions(self.group, int(getattr(entry, "error_code", 0)), errors)
        if isinstance(outcome, KafkaError):
            return {self.group: outcome}
        first = next((e for e in errors.values() if e is not None), None)
        return {self.group: first or offsets}


@attrs.define
class AlterGroupOffsets(_OneGroup):
    """OffsetCommit for one group (its key) as an admin: generation -1, no member."""

    name: ClassVar[str] = "alter_consumer_group_offsets"
    offsets: Mapping[TopicPartition, OffsetAndMetadata] = attrs.field(factory=dict)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = _capped(versions, ApiKey.OFFSET_COMMIT, _OFFSET_COMMIT_BY_NAME)
        topic_cls = nested_type(cls, "OffsetCommitRequestTopic")
        part_cls = nested_type(cls, "OffsetCommitRequestPartition")
        by_topic: dict[str, list[Any]] = {}
        for tp, meta in sorted(self.offsets.items()):
            by_topic.setdefault(tp.topic, []).append(
                build(
                    part_cls,
                    partition_index=tp.partition,
                    committed_offset=meta.offset,
                    committed_leader_epoch=meta.leader_epoch,
                    committed_metadata=meta.metadata,
                    commit_timestamp=-1,
                )
            )
        return build(
            cls,
            group_id=self.group,
            generation_id_or_member_epoch=-1,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            retention_time=_ms(-0.001),
            topics=tuple(
                build(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        parts = _partition_errors(response.topics)
        return {self.group: _group_or_partitions(self.group, 0, parts)}


@attrs.define
class DeleteGroupOffsets(_OneGroup):
    """OffsetDelete for one group (its key, KIP-496)."""

    name: ClassVar[str] = "delete_consumer_group_offsets"
    partitions: Sequence[TopicPartition] = ()

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(OFFSET_DELETE)
        topic_cls = nested_type(cls, "OffsetDeleteRequestTopic")
        part_cls = nested_type(cls, "OffsetDeleteRequestPartition")
        return build(
            cls,
            group_id=self.group,
            topics=tuple(
                build(
                    topic_cls,
                    name=t,
                    partitions=tuple(build(part_cls, partition_index=p) for p in ps),
                )
                for t, ps in _by_topic(self.partitions).items()
            ),
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        parts = _partition_errors(response.topics)
        return {self.group: _group_or_partitions(self.group, int(response.error_code), parts)}


@attrs.define
class RemoveGroupMembers(_OneGroup):
    """LeaveGroup (v3+, KIP-345) on behalf of members of one group (its key): the
    coordinator removes them and rebalances. With ``members`` None every member goes: the
    group is described first (DescribeGroups), then its members are named."""

    name: ClassVar[str] = "remove_group_members"
    members: Sequence[MemberToRemove] | None = None

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        if self.members is None:
            return _describe_groups_request(versions, [self.group])
        version = versions.require(
            ApiKey.LEAVE_GROUP,
            feature="remove_group_members",
            remedy="removing members by id needs LeaveGroup v3 (Kafka 2.4 or newer)",
            min_version=3,
        )
        cls = request_type(ApiKey.LEAVE_GROUP, version)
        identity = nested_type(cls, "MemberIdentity")
        return build(
            cls,
            group_id=self.group,
            members=tuple(
                build(
                    identity,
                    member_id=m.member_id or "",
                    group_instance_id=m.group_instance_id,
                    reason=m.reason,
                )
                for m in self.members
            ),
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        if self.members is None:  # the DescribeGroups answer: who is in the group
            (g,) = response.groups
            error = _error(g.error_code, getattr(g, "error_message", None), group=self.group)
            if error is not None:
                return {self.group: error}
            self.members = tuple(
                MemberToRemove(member_id=m.member_id, group_instance_id=m.group_instance_id)
                for m in g.members
            )
            return {self.group: Again() if self.members else {}}
        error = _error(response.error_code, None, group=self.group)
        if error is not None:
            return {self.group: error}
        answered = {
            (r.group_instance_id or None, r.member_id if r.group_instance_id is None else None): r
            for r in response.members
        }
        out: dict[MemberToRemove, Any] = {}
        for m in self.members:
            who = (m.group_instance_id, m.member_id if m.group_instance_id is None else None)
            r = answered.get(who)
            clean = MemberToRemove(member_id=m.member_id, group_instance_id=m.group_instance_id)
            out[clean] = (
                _no_answer(clean)
                if r is None
                else _error(r.error_code, None, group=self.group, member=r.member_id)
            )
        return {self.group: out}


# ------------------------------------------------------------------------- partitions


@attrs.define
class ListOffsets(Operation):
    """ListOffsets at each partition's leader, one key per partition."""

    name: ClassVar[str] = "list_offsets"
    specs: Mapping[TopicPartition, int]
    isolation_level: int = 0

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.specs)

    def route(self, key: Any) -> Route:
        return ToLeader(key.topic, key.partition)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        return list_offsets_request(
            versions, {k: int(self.specs[k]) for k in keys}, self.isolation_level
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                out[tp] = _error(
                    p.error_code, None, topic=t.name, partition=tp.partition
                ) or ListedOffset(
                    offset=int(p.offset),
                    timestamp=int(p.timestamp),
                    leader_epoch=int(getattr(p, "leader_epoch", -1)),
                )
        return out


@attrs.define
class DeleteRecords(Operation):
    """DeleteRecords at each partition's leader, one key per partition."""

    name: ClassVar[str] = "delete_records"
    before: Mapping[TopicPartition, int]

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.before)

    def route(self, key: Any) -> Route:
        return ToLeader(key.topic, key.partition)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(DELETE_RECORDS)
        topic_cls = nested_type(cls, "DeleteRecordsTopic")
        part_cls = nested_type(cls, "DeleteRecordsPartition")
        by_topic: dict[str, list[Any]] = {}
        for tp in sorted(keys):
            by_topic.setdefault(tp.topic, []).append(
                build(part_cls, partition_index=tp.partition, offset=self.before[tp])
            )
        return build(
            cls,
            topics=tuple(
                build(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
            timeout=_ms(timeout),
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        return {
            TopicPartition(t.name, int(p.partition_index)): _error(
                p.error_code, None, topic=t.name, partition=int(p.partition_index)
            )
            or int(p.low_watermark)
            for t in response.topics
            for p in t.partitions
        }


@attrs.define
class DescribeLogDirs(PerBroker):
    """DescribeLogDirs on every broker (or those given), one key per broker id."""

    name: ClassVar[str] = "describe_log_dirs"
    partitions: Sequence[TopicPartition] | None = None

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(DESCRIBE_LOG_DIRS)
        topic_cls = nested_type(cls, "DescribableLogDirTopic")
        topics = None
        if self.partitions is not None:
            topics = tuple(
                build(topic_cls, topic=t, partitions=tuple(ps))
                for t, ps in _by_topic(self.partitions).items()
            )
        return build(cls, topics=topics)

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        error = _error(getattr(response, "error_code", 0), None, broker=keys[0])
        if error is not None:
            return {keys[0]: error}
        dirs = [
            LogDirDescription(
                path=r.log_dir,
                error=_error(r.error_code, None, log_dir=r.log_dir),
                replicas={
                    TopicPartition(t.name, int(p.partition_index)): ReplicaInfo(
                        size=int(p.partition_size),
                        offset_lag=int(p.offset_lag),
                        is_future=bool(p.is_future_key),
                    )
                    for t in r.topics
                    for p in t.partitions
                },
                total_bytes=int(getattr(r, "total_bytes", -1)),
                usable_bytes=int(getattr(r, "usable_bytes", -1)),
            )
            for r in response.results
        ]
        return {keys[0]: dirs}
