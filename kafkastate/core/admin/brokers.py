"""Operations on the brokers themselves and on the metadata quorum -- DescribeQuorum
(KIP-595, KIP-853), AlterReplicaLogDirs (KIP-113), ApiVersions at each broker,
ListConfigResources (KIP-1142) -- and waiting until topics are ready: operations of the
:class:`~kafkastate.core.admin.AdminMachine`.

Waiting for topics is DescribeTopics whose "not ready yet" answers (unknown topic, a
partition without a leader) are retriable errors: the machine asks again after
``retry_backoff`` until every topic is ready or the deadline passes, and the timeout names
what the last answer lacked.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar, Final

import attrs

from kafkastate.core.admin.operations import (
    DescribeTopics,
    Operation,
    PerBroker,
    Route,
    ToNode,
    error_of,
)
from kafkastate.core.metadata import ClusterMetadata
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable, request_type
from kafkastate.errors import KafkaError, LeaderNotAvailableError
from kafkastate.structs import TopicPartitionReplica

__all__ = [
    "AlterReplicaLogDirs",
    "BrokerApiVersions",
    "DescribeQuorum",
    "ListConfigResources",
    "QuorumDescription",
    "QuorumReplica",
    "WaitForTopics",
]

ALTER_REPLICA_LOG_DIRS: Final = 34
DESCRIBE_QUORUM: Final = 55
LIST_CONFIG_RESOURCES: Final = 74
METADATA_TOPIC: Final = "__cluster_metadata"
"""The KRaft metadata log (one partition, 0)."""


# ------------------------------------------------------------------------- the quorum


@attrs.frozen(kw_only=True)
class QuorumReplica:
    """A voter or observer of the metadata quorum."""

    replica_id: int
    """Its node id."""
    log_end_offset: int
    """The end offset of its copy of the metadata log (-1: unknown)."""
    last_fetch_timestamp: int
    """When it last fetched from the leader, ms since the epoch (-1: unknown)."""
    last_caught_up_timestamp: int
    """When it last caught up with the leader, ms since the epoch (-1: unknown)."""


@attrs.frozen(kw_only=True)
class QuorumDescription:
    """The KRaft metadata quorum (``__cluster_metadata`` partition 0)."""

    leader_id: int
    """The active controller's node id."""
    leader_epoch: int
    """The leader's epoch."""
    high_watermark: int
    """The metadata log's high watermark."""
    voters: tuple[QuorumReplica, ...]
    """The voting controllers."""
    observers: tuple[QuorumReplica, ...]
    """The brokers (and other non-voters) following the log."""
    nodes: Mapping[int, tuple[tuple[str, str, int], ...]]
    """Node id -> its ``(listener, host, port)`` endpoints (Kafka 3.8+, KIP-853; else
    empty)."""


def _replica(r: Any) -> QuorumReplica:
    return QuorumReplica(
        replica_id=int(r.replica_id),
        log_end_offset=int(r.log_end_offset),
        last_fetch_timestamp=int(getattr(r, "last_fetch_timestamp", -1)),
        last_caught_up_timestamp=int(getattr(r, "last_caught_up_timestamp", -1)),
    )


@attrs.define
class DescribeQuorum(Operation):
    """DescribeQuorum at any broker (it forwards to the controllers); the key None."""

    name: ClassVar[str] = "describe_metadata_quorum"

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [None]

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(DESCRIBE_QUORUM)
        partition = build(nested_type(cls, "PartitionData"), partition_index=0)
        topic = build(
            nested_type(cls, "TopicData"), topic_name=METADATA_TOPIC, partitions=(partition,)
        )
        return build(cls, topics=(topic,))

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        error = error_of(response.error_code, getattr(response, "error_message", None))
        if error is not None:
            return {None: error}
        for t in response.topics:
            for p in t.partitions:
                error = error_of(p.error_code, getattr(p, "error_message", None))
                if error is not None:
                    return {None: error}
                nodes = {
                    int(n.node_id): tuple((li.name, li.host, int(li.port)) for li in n.listeners)
                    for n in getattr(response, "nodes", ())
                }
                return {
                    None: QuorumDescription(
                        leader_id=int(p.leader_id),
                        leader_epoch=int(p.leader_epoch),
                        high_watermark=int(p.high_watermark),
                        voters=tuple(_replica(r) for r in p.current_voters),
                        observers=tuple(_replica(r) for r in p.observers),
                        nodes=nodes,
                    )
                }
        return {}


# ----------------------------------------------------------------------- log dirs


@attrs.define
class AlterReplicaLogDirs(Operation):
    """AlterReplicaLogDirs at each replica's broker; one key per TopicPartitionReplica."""

    name: ClassVar[str] = "alter_replica_log_dirs"
    assignments: Mapping[TopicPartitionReplica, str]

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.assignments)

    def route(self, key: Any) -> Route:
        return ToNode(key.broker_id)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(ALTER_REPLICA_LOG_DIRS)
        dir_cls = nested_type(cls, "AlterReplicaLogDir")
        topic_cls = nested_type(cls, "AlterReplicaLogDirTopic")
        by_path: dict[str, dict[str, list[int]]] = {}
        for key in keys:
            topics = by_path.setdefault(self.assignments[key], {})
            topics.setdefault(key.topic, []).append(int(key.partition))
        dirs = tuple(
            build(
                dir_cls,
                path=path,
                topics=tuple(
                    build(topic_cls, name=t, partitions=tuple(ps)) for t, ps in topics.items()
                ),
            )
            for path, topics in by_path.items()
        )
        return build(cls, dirs=dirs)

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        return {}  # the answer does not name the broker: see parse_from

    def parse_from(self, response: Any, keys: Sequence[Any], node: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for t in response.results:
            for p in t.partitions:
                tpr = TopicPartitionReplica(t.topic_name, int(p.partition_index), int(node))
                out[tpr] = error_of(p.error_code, None, topic=t.topic_name, partition=tpr.partition)
        return out


# -------------------------------------------------------------------- api versions


@attrs.define
class BrokerApiVersions(PerBroker):
    """ApiVersions at every broker (or those given); results by broker id: API key ->
    the ``(min, max)`` versions that broker supports."""

    name: ClassVar[str] = "api_versions"

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        return build(
            versions.request_type(ApiKey.API_VERSIONS),
            client_software_name="kafkastate",
            client_software_version="admin",
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        error = error_of(response.error_code, None, broker=keys[0])
        return {
            keys[0]: error
            or {
                int(k.api_key): (int(k.min_version), int(k.max_version))
                for k in sorted(response.api_keys, key=lambda k: int(k.api_key))
            }
        }


# --------------------------------------------------------------- config resources


@attrs.define
class ListConfigResources(Operation):
    """ListConfigResources at any broker (Kafka 4.1+ for every type, KIP-1142; older
    brokers know it as ListClientMetricsResources); the key None: a list of
    ``(ConfigResourceType code, name)``."""

    name: ClassVar[str] = "list_config_resources"
    resource_types: Sequence[int] = ()

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [None]

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        if self.resource_types:
            version = versions.require(
                LIST_CONFIG_RESOURCES,
                feature="list_config_resources of chosen resource types",
                remedy="Kafka 4.1 or newer lists every config resource type (KIP-1142)",
                min_version=1,
            )
            cls = request_type(LIST_CONFIG_RESOURCES, version)
        else:
            cls = versions.request_type(LIST_CONFIG_RESOURCES)
        return build(cls, resource_types=tuple(self.resource_types))

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        error = error_of(response.error_code, None)
        if error is not None:
            return {None: error}
        client_metrics = 16  # v0 (ListClientMetricsResources) lists only these
        return {
            None: [
                (int(getattr(r, "resource_type", client_metrics)), str(r.resource_name))
                for r in response.config_resources
            ]
        }


# ----------------------------------------------------------------- ready topics


@attrs.define
class WaitForTopics(DescribeTopics):
    """Metadata for topics until each is ready: known, with a leader for every
    partition. Results by name: TopicDescription (retriable errors are retried until the
    deadline, then the topic's KafkaTimeoutError names what it still lacked)."""

    name: ClassVar[str] = "wait_for_topics"
    final: ClassVar[frozenset[type[KafkaError]]] = frozenset()

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for name, described in super().parse(response, keys).items():
            if isinstance(described, KafkaError):
                out[name] = described
                continue
            leaderless = [p.partition for p in described.partitions if p.leader < 0]
            if not described.partitions or leaderless:
                lacking = "no partitions yet" if not described.partitions else "no leader yet"
                which = "" if not leaderless else f" for partitions {leaderless}"
                out[name] = LeaderNotAvailableError(f"{lacking}{which}", topic=name)
            else:
                out[name] = described
        return out


def replica_keys(assignments: Mapping[Any, str]) -> dict[TopicPartitionReplica, str]:
    """``alter_replica_log_dirs``'s argument (TopicPartitionReplica or ``(topic,
    partition, broker id)`` -> absolute path) with typed keys."""
    return {
        TopicPartitionReplica(str(t), int(p), int(b)): str(path)
        for (t, p, b), path in assignments.items()
    }
