"""Replica placement, leadership, paged topic descriptions and feature flags: the
AlterPartitionReassignments / ListPartitionReassignments (KIP-455), ElectLeaders (KIP-460),
DescribeTopicPartitions (KIP-966, paged with a cursor), ApiVersions-as-describe-features and
UpdateFeatures (KIP-584) operations of the :class:`~kafkastate.core.admin.AdminMachine`.

All go to any broker: KRaft brokers forward reassignments, elections and feature updates to
the active controller (NOT_CONTROLLER while it moves is retried) and answer the rest from
their metadata image. A top-level error of a response is every key's answer.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar, Final

import attrs

from kafkastate.core.admin.operations import (
    Again,
    Operation,
    _by_topic,
    _ms,
    error_of,
)
from kafkastate.core.admin.types import PartitionDescription, TopicDescription
from kafkastate.core.metadata import ClusterMetadata
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable, request_type
from kafkastate.errors import ElectionNotNeededError, KafkaError
from kafkastate.structs import TopicPartition

__all__ = [
    "ElectionType",
    "FeatureMetadata",
    "FeatureUpdate",
    "FeatureUpdateType",
    "PartitionReassignment",
    "TopicPartitionsPage",
    "UpdateFeatureType",
]

ELECT_LEADERS: Final = 43
ALTER_PARTITION_REASSIGNMENTS: Final = 45
LIST_PARTITION_REASSIGNMENTS: Final = 46
UPDATE_FEATURES: Final = 57
DESCRIBE_TOPIC_PARTITIONS: Final = 75


def _top_level(response: Any, keys: Sequence[Any]) -> dict[Any, Any] | None:
    error = error_of(getattr(response, "error_code", 0), getattr(response, "error_message", None))
    return None if error is None else dict.fromkeys(keys, error)


# ---------------------------------------------------------------------- reassignments


@attrs.frozen(kw_only=True)
class PartitionReassignment:
    """A reassignment in progress (``list_partition_reassignments``)."""

    replicas: tuple[int, ...]
    """The partition's replica set now (old and new replicas)."""
    adding_replicas: tuple[int, ...]
    """Replicas being added."""
    removing_replicas: tuple[int, ...]
    """Replicas to be removed once the new ones caught up."""


@attrs.define
class AlterPartitionReassignments(Operation):
    """AlterPartitionReassignments, one key per partition (replicas, or None to cancel)."""

    name: ClassVar[str] = "alter_partition_reassignments"
    targets: Mapping[TopicPartition, Sequence[int] | None]

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.targets)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(ALTER_PARTITION_REASSIGNMENTS)
        topic_cls = nested_type(cls, "ReassignableTopic")
        part_cls = nested_type(cls, "ReassignablePartition")
        topics = []
        for topic, partitions in _by_topic(keys).items():
            parts = []
            for p in partitions:
                replicas = self.targets[TopicPartition(topic, p)]
                parts.append(
                    build(
                        part_cls,
                        partition_index=p,
                        replicas=None if replicas is None else tuple(int(r) for r in replicas),
                    )
                )
            topics.append(build(topic_cls, name=topic, partitions=tuple(parts)))
        return build(
            cls, timeout=_ms(timeout), allow_replication_factor_change=True, topics=tuple(topics)
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        failed = _top_level(response, keys)
        if failed is not None:
            return failed
        return {
            TopicPartition(t.name, int(p.partition_index)): error_of(
                p.error_code, p.error_message, topic=t.name, partition=int(p.partition_index)
            )
            for t in response.responses
            for p in t.partitions
        }


@attrs.define
class ListPartitionReassignments(Operation):
    """ListPartitionReassignments; the one key None: partition -> PartitionReassignment
    (only the partitions being reassigned)."""

    name: ClassVar[str] = "list_partition_reassignments"
    partitions: Sequence[TopicPartition] | None = None

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [None]

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(LIST_PARTITION_REASSIGNMENTS)
        topics = None
        if self.partitions is not None:
            topic_cls = nested_type(cls, "ListPartitionReassignmentsTopics")
            topics = tuple(
                build(topic_cls, name=t, partition_indexes=tuple(ps))
                for t, ps in _by_topic(self.partitions).items()
            )
        return build(cls, timeout=_ms(timeout), topics=topics)

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        failed = _top_level(response, keys)
        if failed is not None:
            return failed
        return {
            None: {
                TopicPartition(t.name, int(p.partition_index)): PartitionReassignment(
                    replicas=tuple(int(r) for r in p.replicas),
                    adding_replicas=tuple(int(r) for r in p.adding_replicas),
                    removing_replicas=tuple(int(r) for r in p.removing_replicas),
                )
                for t in response.topics
                for p in t.partitions
            }
        }


class ElectionType(enum.IntEnum):
    """Which leader an election picks (KIP-460)."""

    PREFERRED = 0
    """The first replica of the assignment, if in sync."""
    UNCLEAN = 1
    """Any live replica when no in-sync one is (may lose data)."""


@attrs.define
class ElectLeaders(Operation):
    """ElectLeaders; one key per partition, or the key None for every partition (a dict
    partition -> None or its error). ELECTION_NOT_NEEDED is an answer, not retried."""

    name: ClassVar[str] = "elect_leaders"
    final: ClassVar[frozenset[type[KafkaError]]] = frozenset({ElectionNotNeededError})
    election_type: ElectionType
    partitions: Sequence[TopicPartition] | None = None

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [None] if self.partitions is None else list(self.partitions)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(ELECT_LEADERS)
        topics = None
        if keys != [None]:
            topic_cls = nested_type(cls, "TopicPartitions")
            topics = tuple(
                build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in _by_topic(keys).items()
            )
        return build(
            cls,
            election_type=int(self.election_type),
            topic_partitions=topics,
            timeout=_ms(timeout),
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        failed = _top_level(response, keys)
        if failed is not None:
            return failed
        results = {
            TopicPartition(t.topic, int(p.partition_id)): error_of(
                p.error_code, p.error_message, topic=t.topic, partition=int(p.partition_id)
            )
            for t in response.replica_election_results
            for p in t.partition_result
        }
        return {None: results} if keys == [None] else results


# ------------------------------------------------------------- paged topic descriptions


@attrs.frozen(kw_only=True)
class TopicPartitionsPage:
    """What ``describe_topic_partitions`` found: the topics (their partitions from every
    page read), and where the next page would start (None: nothing left)."""

    topics: Mapping[str, TopicDescription | KafkaError]
    """Topic name -> its description, or its error."""
    next_cursor: TopicPartition | None
    """The first partition not read yet (only when reading one page)."""


@attrs.define
class DescribeTopicPartitions(Operation):
    """DescribeTopicPartitions (Kafka 3.7+) at any broker; the one key None. Each answer
    holds at most ``partition_limit`` partitions and a cursor to the next one: the
    operation asks again from the cursor until there is none (or, ``one_page``, stops)."""

    name: ClassVar[str] = "describe_topic_partitions"
    names: Sequence[str] | None
    partition_limit: int = 2000
    cursor: TopicPartition | None = None
    one_page: bool = False
    _found: dict[str, Any] = attrs.field(factory=dict)

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [None]

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(DESCRIBE_TOPIC_PARTITIONS)
        topic_cls = nested_type(cls, "TopicRequest")
        cursor = None
        if self.cursor is not None:
            cursor = build(
                nested_type(cls, "Cursor"),
                topic_name=self.cursor.topic,
                partition_index=self.cursor.partition,
            )
        return build(
            cls,
            topics=tuple(build(topic_cls, name=n) for n in self.names or ()),
            response_partition_limit=self.partition_limit,
            cursor=cursor,
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        for t in response.topics:
            name = str(t.name)
            error = error_of(t.error_code, None, topic=name)
            if error is not None:
                self._found[name] = error
                continue
            parts = tuple(
                PartitionDescription(
                    partition=int(p.partition_index),
                    leader=int(p.leader_id),
                    leader_epoch=int(p.leader_epoch),
                    replicas=tuple(int(r) for r in p.replica_nodes),
                    isr=tuple(int(r) for r in p.isr_nodes),
                    offline_replicas=tuple(int(r) for r in p.offline_replicas),
                )
                for p in t.partitions
            )
            known = self._found.get(name)
            if isinstance(known, TopicDescription):  # the topic continues from a page before
                parts = tuple(sorted({*known.partitions, *parts}, key=lambda p: p.partition))
            topic_id = t.topic_id if t.topic_id is not None and t.topic_id.int else None
            self._found[name] = TopicDescription(
                name=name, topic_id=topic_id, is_internal=bool(t.is_internal), partitions=parts
            )
        nxt = response.next_cursor
        self.cursor = None if nxt is None else TopicPartition(nxt.topic_name, nxt.partition_index)
        if self.cursor is not None and not self.one_page:
            return {None: Again()}
        return {None: TopicPartitionsPage(topics=dict(self._found), next_cursor=self.cursor)}


# --------------------------------------------------------------------------- features


@attrs.frozen(kw_only=True)
class FeatureMetadata:
    """The cluster's feature flags as a broker's ApiVersions answer tells them (KIP-584)."""

    finalized_features: Mapping[str, tuple[int, int]]
    """Feature -> ``(min, max)`` finalized level, cluster-wide."""
    finalized_features_epoch: int | None
    """The epoch of the finalized set (None: unknown)."""
    supported_features: Mapping[str, tuple[int, int]]
    """Feature -> ``(min, max)`` version this broker supports."""


@attrs.define
class DescribeFeatures(Operation):
    """ApiVersions at any broker (what Java's ``describeFeatures`` sends); the key None."""

    name: ClassVar[str] = "describe_features"

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return [None]

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        # features came with ApiVersions v3 (KIP-511's flexible version)
        version = versions.require(
            ApiKey.API_VERSIONS,
            feature="describe_features",
            remedy="feature flags need Kafka 2.7 or newer",
            min_version=3,
        )
        return build(
            request_type(ApiKey.API_VERSIONS, version),
            client_software_name="kafkastate",
            client_software_version="admin",
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        error = error_of(response.error_code, None)
        if error is not None:
            return {None: error}
        epoch = int(getattr(response, "finalized_features_epoch", -1))
        return {
            None: FeatureMetadata(
                finalized_features={
                    f.name: (int(f.min_version_level), int(f.max_version_level))
                    for f in response.finalized_features
                },
                finalized_features_epoch=None if epoch < 0 else epoch,
                supported_features={
                    f.name: (int(f.min_version), int(f.max_version))
                    for f in response.supported_features
                },
            )
        }


class FeatureUpdateType(enum.IntEnum):
    """How a feature's finalized level may move (KIP-778); kafka-python 3.0 names it
    ``UpdateFeatureType``."""

    UNKNOWN = 0  # (kafka-python's; a broker refuses it)
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


UpdateFeatureType = FeatureUpdateType
"""kafka-python 3.0's name of :class:`FeatureUpdateType`."""


@attrs.frozen
class FeatureUpdate:
    """A feature's new finalized max level (``update_features``; level 0 removes it)."""

    max_version_level: int
    """The new level."""
    upgrade_type: FeatureUpdateType = attrs.field(
        converter=FeatureUpdateType, default=FeatureUpdateType.UPGRADE
    )
    """Upgrade, or which kind of downgrade is allowed."""


@attrs.define
class UpdateFeatures(Operation):
    """UpdateFeatures, one key per feature name. Since v2 the broker answers for the
    request as a whole: its error is every feature's."""

    name: ClassVar[str] = "update_features"
    updates: Mapping[str, FeatureUpdate]
    validate_only: bool = False

    def keys(self, cluster: ClusterMetadata) -> list[Hashable]:
        return list(self.updates)

    def request(self, versions: ApiVersionTable, keys: Sequence[Any], timeout: float) -> Any:
        cls = versions.request_type(UPDATE_FEATURES)
        key_cls = nested_type(cls, "FeatureUpdateKey")
        return build(
            cls,
            timeout=_ms(timeout),
            feature_updates=tuple(
                build(
                    key_cls,
                    feature=k,
                    max_version_level=self.updates[k].max_version_level,
                    upgrade_type=int(self.updates[k].upgrade_type),
                    allow_downgrade=self.updates[k].upgrade_type != FeatureUpdateType.UPGRADE,
                )
                for k in keys
            ),
            validate_only=self.validate_only,
        )

    def parse(self, response: Any, keys: Sequence[Any]) -> dict[Any, Any]:
        failed = _top_level(response, keys)
        if failed is not None:
            return failed
        results = getattr(response, "results", None)
        if results is None:
            return dict.fromkeys(keys)
        return {r.feature: error_of(r.error_code, r.error_message) for r in results}
