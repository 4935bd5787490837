"""What the admin faces share: turning the core's per-resource results into aiokafka's and
kafka-python's return shapes. No IO and no decisions: the results are the
:class:`~kafkastate.core.admin.AdminMachine`'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, TypeVar

from kafkastate.admin import (
    ClusterDescription,
    ConfigResourceType,
    FeatureMetadata,
    FeatureUpdate,
    FeatureUpdateType,
    GroupDescription,
    ListedOffset,
    MemberDescription,
    PartitionReassignment,
    QuorumDescription,
    RecordsToDelete,
    TopicDescription,
    TopicPartitionsPage,
)
from kafkastate.errors import KafkaError, NoError
from kafkastate.structs import OffsetAndTimestamp, TopicPartition

__all__ = [
    "GroupInformation",
    "acl_list",
    "checked",
    "config_resource_list",
    "scram_results",
    "MemberInformation",
    "before_offsets",
    "cluster_dict",
    "code_of",
    "common_versions",
    "error_classes",
    "group_dict",
    "listing_dicts",
    "quorum_dict",
    "config_dicts",
    "feature_updates",
    "features_dict",
    "messages",
    "page_dict",
    "partitions_of",
    "reassignment_dicts",
    "resource_type",
    "scram_dicts",
    "group_information",
    "group_tuples",
    "offsets_and_timestamps",
    "one_group",
    "only",
    "raise_first",
    "seconds",
    "topic_dicts",
]


class MemberInformation(NamedTuple):
    """A group member as kafka-python's ``describe_consumer_groups`` gives it; the
    metadata and assignment decoded (Subscription, Assignment; None if not a consumer's)."""

    member_id: str
    client_id: str
    client_host: str
    member_metadata: Any
    member_assignment: Any


class GroupInformation(NamedTuple):
    """A group as kafka-python's ``describe_consumer_groups`` gives it."""

    error_code: int
    group: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberInformation]
    authorized_operations: Any


def seconds(timeout_ms: float | None) -> float | None:
    """A face's ``timeout_ms`` as the machine's seconds (None: the default)."""
    return None if timeout_ms is None else timeout_ms / 1000


def resource_type(code: int) -> ConfigResourceType | int:
    """A config resource type code as ConfigResourceType (the code itself if unknown)."""
    try:
        return ConfigResourceType(code)
    except ValueError:
        return code


def code_of(value: Any) -> int:
    """A result's Kafka error code: 0 for a value, the error's ``errno`` (-1 if none)."""
    return int(getattr(value, "errno", -1)) if isinstance(value, KafkaError) else 0


def raise_first(results: Mapping[Any, Any]) -> None:
    """Raise the first resource's error, as aiokafka and kafka-python do."""
    for value in results.values():
        if isinstance(value, KafkaError):
            raise value


def only(results: Mapping[Any, Any]) -> Any:
    """The value of a one-resource operation (a describe of the whole cluster...).

    Raises:
        KafkaError: that resource's error.
    """
    (value,) = results.values()
    if isinstance(value, BaseException):
        raise value
    return value


_Results = TypeVar("_Results", bound=Mapping[Any, Any])


def checked(results: _Results) -> _Results:
    """``results`` as they are once no resource failed (the faces that raise an error
    rather than return it).

    Raises:
        KafkaError: the first resource's error.
    """
    raise_first(results)
    return results


def acl_list(results: Mapping[Any, Any]) -> list[Any]:
    """The ACLs ``describe_acls`` found (its one result, under the filter).

    Raises:
        KafkaError: the broker's error.
    """
    return list(only(results))


def scram_results(results: Mapping[Any, Any], users: Any) -> dict[str, Any]:
    """``describe_user_scram_credentials``' user -> credentials (or error): the one result
    under None is that map when every user was asked (``users`` None).

    Raises:
        KafkaError: the broker's error for the request as a whole (``users`` None).
    """
    return dict(only(results)) if users is None else dict(results)


def config_resource_list(results: Mapping[Any, Any]) -> list[tuple[ConfigResourceType | int, str]]:
    """``list_config_resources``' ``(ConfigResourceType, name)`` pairs (a type this
    client does not know stays its code).

    Raises:
        KafkaError: the broker's error.
    """
    return [(resource_type(kind), name) for kind, name in only(results)]


def one_group(results: Mapping[Any, Any]) -> dict[Any, Any]:
    """The result of a one-group operation (its offsets, or its partitions' errors).

    Raises:
        KafkaError: the group's error.
    """
    raise_first(results)
    (value,) = results.values()
    return dict(value)


def topic_dicts(described: Mapping[str, Any], *, names: str) -> list[dict[str, Any]]:
    """Topic descriptions as dicts: ``names="aiokafka"`` (``topic``, ``partition``,
    ``leader``...) or ``"kafka-python"`` (the protocol's: ``name``, ``partition_index``,
    ``leader_id``...). A failed topic has its error code and no partitions."""
    aio = names == "aiokafka"
    out = []
    for name, t in described.items():
        parts: list[dict[str, Any]] = []
        if isinstance(t, TopicDescription):
            for p in t.partitions:
                parts.append(
                    {
                        "error_code": 0,
                        ("partition" if aio else "partition_index"): p.partition,
                        ("leader" if aio else "leader_id"): p.leader,
                        "leader_epoch": p.leader_epoch,
                        ("replicas" if aio else "replica_nodes"): list(p.replicas),
                        ("isr" if aio else "isr_nodes"): list(p.isr),
                        "offline_replicas": list(p.offline_replicas),
                    }
                )
        out.append(
            {
                "error_code": code_of(t),
                ("topic" if aio else "name"): name,
                "topic_id": getattr(t, "topic_id", None),
                "is_internal": bool(getattr(t, "is_internal", False)),
                "partitions": parts,
            }
        )
    return out


def cluster_dict(cluster: ClusterDescription, *, broker_key: str) -> dict[str, Any]:
    """The cluster as both libraries' ``describe_cluster`` dicts (``broker_key``:
    ``"node_id"`` for aiokafka, ``"broker_id"`` for kafka-python)."""
    return {
        "brokers": [
            {broker_key: b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in cluster.brokers
        ],
        "cluster_id": cluster.cluster_id,
        "controller_id": cluster.controller_id,
    }


def group_tuples(listed: Mapping[int, Any]) -> list[tuple[str, str]]:
    """``(group_id, protocol_type)`` of every group every broker listed, once each.

    Raises:
        KafkaError: a broker's error.
    """
    raise_first(listed)
    seen = {(g.group_id, g.protocol_type) for groups in listed.values() for g in groups}
    return sorted(seen)


def group_information(group: GroupDescription) -> GroupInformation:
    """kafka-python's tuple for a described group."""
    return GroupInformation(
        error_code=0,
        group=group.group_id,
        state=group.state,
        protocol_type=group.protocol_type,
        protocol=group.protocol,
        members=[_member(m) for m in group.members],
        authorized_operations=None,
    )


def _member(m: MemberDescription) -> MemberInformation:
    return MemberInformation(
        member_id=m.member_id,
        client_id=m.client_id,
        client_host=m.client_host,
        member_metadata=m.subscription,
        member_assignment=m.assignment,
    )


def before_offsets(records: Mapping[Any, Any]) -> dict[TopicPartition, int]:
    """``delete_records``'s argument (offsets or RecordsToDelete) as offsets."""
    return {
        TopicPartition(*tp): r.before_offset if isinstance(r, RecordsToDelete) else int(r)
        for tp, r in records.items()
    }


def offsets_and_timestamps(
    results: Mapping[TopicPartition, Any],
) -> dict[TopicPartition, OffsetAndTimestamp]:
    """``list_offsets`` results as OffsetAndTimestamp.

    Raises:
        KafkaError: a partition's error.
    """
    raise_first(results)
    out = {}
    for tp, listed in results.items():
        assert isinstance(listed, ListedOffset)
        epoch = None if listed.leader_epoch < 0 else listed.leader_epoch
        out[tp] = OffsetAndTimestamp(listed.offset, listed.timestamp, epoch)
    return out


def config_dicts(results: Mapping[Any, Any]) -> dict[str, dict[str, Any]]:
    """kafka-python's ``describe_configs`` shape: resource type name -> resource name ->
    config name -> its data.

    Raises:
        KafkaError: a resource's error.
    """
    raise_first(results)
    out: dict[str, dict[str, Any]] = {}
    for (kind, name), configs in results.items():
        per = out.setdefault(ConfigResourceType(kind).name.lower(), {})
        per[name] = {
            key: {
                "value": c.value,
                "read_only": c.read_only,
                "source": c.source,
                "is_sensitive": c.is_sensitive,
                "synonyms": list(c.synonyms),
            }
            for key, c in configs.items()
        }
    return out


def scram_dicts(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """kafka-python's ``describe_user_scram_credentials`` shape: user -> ``{"error": None
    or its message, "credential_infos": [{"mechanism", "iterations"}]}``."""
    out: dict[str, dict[str, Any]] = {}
    for user, infos in results.items():
        failed = isinstance(infos, KafkaError)
        out[user] = {
            "error": str(infos) if failed else None,
            "credential_infos": []
            if failed
            else [{"mechanism": c.mechanism, "iterations": c.iterations} for c in infos],
        }
    return out


def messages(results: Mapping[Any, Any]) -> dict[Any, str | None]:
    """Each resource's error message, None where it succeeded (kafka-python's shape of
    ``alter_user_scram_credentials``)."""
    return {k: str(v) if isinstance(v, KafkaError) else None for k, v in results.items()}


def reassignment_dicts(
    ongoing: Mapping[TopicPartition, PartitionReassignment],
) -> dict[TopicPartition, dict[str, list[int]]]:
    """kafka-python's ``list_partition_reassignments`` shape."""
    return {
        tp: {
            "replicas": list(r.replicas),
            "adding_replicas": list(r.adding_replicas),
            "removing_replicas": list(r.removing_replicas),
        }
        for tp, r in ongoing.items()
    }


def partitions_of(topic_partitions: Any) -> list[TopicPartition] | None:
    """kafka-python's partition arguments (``{topic: [partition ids]}``, TopicPartitions,
    or None) as TopicPartitions."""
    if topic_partitions is None:
        return None
    if isinstance(topic_partitions, Mapping):
        return [TopicPartition(t, int(p)) for t, ps in topic_partitions.items() for p in ps]
    return [TopicPartition(*tp) for tp in topic_partitions]


def features_dict(features: FeatureMetadata) -> dict[str, Any]:
    """kafka-python's ``describe_features`` shape."""
    return {
        "supported_features": dict(features.supported_features),
        "finalized_features": dict(features.finalized_features),
        "finalized_features_epoch": features.finalized_features_epoch,
    }


def feature_updates(updates: Mapping[str, Any]) -> dict[str, FeatureUpdate]:
    """kafka-python's ``update_features`` argument (feature -> level, or ``(upgrade type,
    level)``; the type as a FeatureUpdateType, its name or code) as FeatureUpdates."""
    out: dict[str, FeatureUpdate] = {}
    for name, update in updates.items():
        if isinstance(update, FeatureUpdate):
            out[name] = update
        elif isinstance(update, tuple):
            kind, level = update
            if isinstance(kind, str):
                kind = FeatureUpdateType[kind.upper()]
            out[name] = FeatureUpdate(int(level), kind)
        else:
            out[name] = FeatureUpdate(int(update))
    return out


def page_dict(page: TopicPartitionsPage) -> dict[str, Any]:
    """kafka-python's ``describe_topic_partitions`` shape (one page)."""
    topics = topic_dicts(page.topics, names="kafka-python")
    for t in topics:
        t["topic_authorized_operations"] = _NO_OPERATIONS
    cursor = page.next_cursor
    return {
        "topics": topics,
        "next_cursor": None
        if cursor is None
        else {"topic_name": cursor.topic, "partition_index": cursor.partition},
    }


_NO_OPERATIONS = -(2**31)  # "not asked for" in the protocol


# ------------------------------------------------------------- kafka-python 3.0's shapes


def error_classes(results: Mapping[Any, Any]) -> dict[Any, type[KafkaError]]:
    """Each resource's error class, NoError where it succeeded (kafka-python 3.0's shape of
    ``alter_group_offsets``, ``delete_group_offsets``, ``alter_replica_log_dirs``)."""
    return {k: type(v) if isinstance(v, KafkaError) else NoError for k, v in results.items()}


def listing_dicts(listed: Mapping[int, Any]) -> list[dict[str, Any]]:
    """kafka-python 3.0's ``list_groups`` shape: one dict per group per broker.

    Raises:
        KafkaError: a broker's error.
    """
    raise_first(listed)
    return [
        {
            "group_id": g.group_id,
            "protocol_type": g.protocol_type,
            "group_state": g.state,
            "group_type": g.group_type,
        }
        for groups in listed.values()
        for g in groups
    ]


def group_dict(group: Any) -> dict[str, Any]:
    """kafka-python 3.0's ``describe_groups`` entry: the group (or its error) as a dict,
    the members' subscriptions and assignments decoded."""
    if isinstance(group, KafkaError):
        return {"error": str(group), "members": []}
    return {
        "error": None,
        "group_id": group.group_id,
        "group_state": group.state,
        "protocol_type": group.protocol_type,
        "protocol_data": group.protocol,
        "group_type": group.group_type,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.subscription,
                "member_assignment": m.assignment,
            }
            for m in group.members
        ],
        "authorized_operations": None,
    }


def quorum_dict(quorum: QuorumDescription) -> dict[str, Any]:
    """kafka-python 3.0's ``describe_metadata_quorum`` shape (the DescribeQuorum
    response's)."""

    def replicas(rs: Any) -> list[dict[str, Any]]:
        return [
            {
                "replica_id": r.replica_id,
                "log_end_offset": r.log_end_offset,
                "last_fetch_timestamp": r.last_fetch_timestamp,
                "last_caught_up_timestamp": r.last_caught_up_timestamp,
            }
            for r in rs
        ]

    return {
        "topics": [
            {
                "topic_name": "__cluster_metadata",
                "partitions": [
                    {
                        "partition_index": 0,
                        "leader_id": quorum.leader_id,
                        "leader_epoch": quorum.leader_epoch,
                        "high_watermark": quorum.high_watermark,
                        "current_voters": replicas(quorum.voters),
                        "observers": replicas(quorum.observers),
                        "error": None,
                    }
                ],
            }
        ],
        "nodes": [
            {
                "node_id": node,
                "listeners": [{"name": n, "host": h, "port": p} for n, h, p in endpoints],
            }
            for node, endpoints in quorum.nodes.items()
        ],
    }


def common_versions(per_broker: Mapping[int, Any]) -> dict[int, tuple[int, int]]:
    """The API versions every broker supports (the overlap of their ranges).

    Raises:
        KafkaError: a broker's error.
    """
    raise_first(per_broker)
    common: dict[int, tuple[int, int]] | None = None
    for ranges in per_broker.values():
        if common is None:
            common = dict(ranges)
            continue
        common = {
            key: (max(lo, ranges[key][0]), min(hi, ranges[key][1]))
            for key, (lo, hi) in common.items()
            if key in ranges and max(lo, ranges[key][0]) <= min(hi, ranges[key][1])
        }
    return common or {}
