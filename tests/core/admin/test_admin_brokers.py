"""The AdminMachine's broker and quorum operations driven by hand (a scripted two-broker
cluster, time stepped explicitly): DescribeQuorum, AlterReplicaLogDirs at each replica's
broker, ApiVersions per broker, ListConfigResources, waiting for topics; and the pure
rules of offset resets and hanging transactions."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.admin import QuorumDescription, TopicDescription, TransactionDescription
from kafkastate.core.admin import AdminOperationCompleted
from kafkastate.core.admin.transactions import hanging_transactions
from kafkastate.core.admin.types import reset_offset
from kafkastate.errors import (
    KafkaConfigurationError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    LogDirNotFoundError,
    UnknownTopicOrPartitionError,
)
from kafkastate.structs import TopicPartition, TopicPartitionReplica
from tests._support.peer import ScriptedCluster
from tests.core.admin.test_admin_machine import BACKOFF, admin, answer, completed, entry, start

DESCRIBE_QUORUM, ALTER_REPLICA_LOG_DIRS, LIST_CONFIG_RESOURCES = 55, 34, 74


def completed_events(cluster: ScriptedCluster) -> list[AdminOperationCompleted]:
    return [e for e in cluster.events if isinstance(e, AdminOperationCompleted)]


@pytest.mark.parametrize(
    ("target", "expected"),
    [(5, 5), (0, 2), (-1, 9), (10, 9), (9, 9), (2, 2)],
)
def test_a_reset_lands_inside_the_log(target: int, expected: int) -> None:
    assert reset_offset(target, earliest=2, latest=9) == expected


def _txn(state: str, start: int | None) -> TransactionDescription:
    return TransactionDescription(
        coordinator_id=1,
        state=state,
        producer_id=7,
        producer_epoch=0,
        transaction_timeout_ms=60000,
        transaction_start_time_ms=start,
        topic_partitions=frozenset({TopicPartition("t", 0)}),
    )


def test_hanging_transactions_are_the_open_ones_past_the_threshold_oldest_first() -> None:
    found = hanging_transactions(
        {
            "young": _txn("Ongoing", 9_000),
            "old": _txn("Ongoing", 1_000),
            "older": _txn("PrepareAbort", 500),
            "done": _txn("CompleteCommit", 0),
            "empty": _txn("Empty", None),
            "unknown start": _txn("Ongoing", None),
        },
        now_ms=10_000,
        threshold_ms=5_000,
    )
    assert [(tid, age) for tid, _, age in found] == [("older", 9_500), ("old", 9_000)]


def test_describe_quorum_asks_any_broker_for_the_metadata_log() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.describe_metadata_quorum(now=now))
    sent = cluster.take(DESCRIBE_QUORUM)
    ((topic,),) = [sent.req.body.topics]
    assert topic.topic_name == "__cluster_metadata"
    assert [p.partition_index for p in topic.partitions] == [0]

    def replica(node: int, leo: int) -> object:
        return entry(
            sent,
            "ReplicaState",
            replica_id=node,
            replica_directory_id=None,
            log_end_offset=leo,
            last_fetch_timestamp=-1,
            last_caught_up_timestamp=-1,
        )

    partition = entry(
        sent,
        "PartitionData",
        partition_index=0,
        error_code=ErrorCode.none,
        error_message=None,
        leader_id=1,
        leader_epoch=3,
        high_watermark=42,
        current_voters=(replica(1, 42),),
        observers=(replica(2, 40),),
    )
    cluster.answer(
        sent,
        entry(
            sent,
            "DescribeQuorumResponse",
            error_code=ErrorCode.none,
            error_message=None,
            topics=(
                entry(sent, "TopicData", topic_name="__cluster_metadata", partitions=(partition,)),
            ),
            nodes=(),
        ),
    )
    (quorum,) = completed(cluster).results.values()
    assert isinstance(quorum, QuorumDescription)
    assert (quorum.leader_id, quorum.leader_epoch, quorum.high_watermark) == (1, 3, 42)
    assert [v.replica_id for v in quorum.voters] == [1]
    assert [(o.replica_id, o.log_end_offset) for o in quorum.observers] == [(2, 40)]


def test_alter_replica_log_dirs_goes_to_each_replicas_broker() -> None:
    m, cluster = admin()
    on1, on2 = TopicPartitionReplica("t", 0, 1), TopicPartitionReplica("t", 1, 2)
    start(
        m,
        cluster,
        lambda now: m.alter_replica_log_dirs({on1: "/d1", ("t", 1, 2): "/d2"}, now=now),
    )
    by_node = {s.node: s for s in cluster.pending if s.req.api_key == ALTER_REPLICA_LOG_DIRS}
    assert sorted(by_node) == [1, 2]
    ((d1,),) = [by_node[1].req.body.dirs]
    assert (d1.path, [(t.name, list(t.partitions)) for t in d1.topics]) == ("/d1", [("t", [0])])
    for node, code in ((1, ErrorCode.none), (2, ErrorCode.log_dir_not_found)):
        sent = by_node[node]
        part = entry(
            sent, "AlterReplicaLogDirPartitionResult", partition_index=node - 1, error_code=code
        )
        result = entry(sent, "AlterReplicaLogDirTopicResult", topic_name="t", partitions=(part,))
        answer(cluster, sent, results=(result,))
    results = completed(cluster).results
    assert list(results) == [on1, on2]
    assert results[on1] is None and isinstance(results[on2], LogDirNotFoundError)


def test_api_versions_asks_every_broker() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.api_versions(now=now))
    cluster.advance()
    results = completed(cluster).results
    assert sorted(results) == [1, 2]
    assert all(r[3][0] <= r[3][1] for r in results.values())  # Metadata's range


def test_list_config_resources_of_chosen_types() -> None:
    m, cluster = admin()
    start(m, cluster, lambda now: m.list_config_resources(["topic", 32], now=now))
    sent = cluster.take(LIST_CONFIG_RESOURCES)
    assert list(sent.req.body.resource_types) == [2, 32]
    listed = (
        entry(sent, "ConfigResource", resource_name="t", resource_type=2),
        entry(sent, "ConfigResource", resource_name="g", resource_type=32),
    )
    answer(cluster, sent, error_code=ErrorCode.none, config_resources=listed)
    assert completed(cluster).results == {None: [(2, "t"), (32, "g")]}
    with pytest.raises(KafkaConfigurationError, match="unknown config resource type"):
        m.list_config_resources(["nothing"], now=cluster.now)


def test_wait_for_topics_asks_again_until_each_topic_has_its_leaders() -> None:
    m, cluster = admin()
    cluster.topics["late"] = {0: (-1, 0)}  # created, no leader elected yet
    start(m, cluster, lambda now: m.wait_for_topics(["late", "new"], now=now))
    assert not completed_events(cluster)
    t0 = cluster.now
    assert m.get_timer() == pytest.approx(t0 + BACKOFF)
    cluster.advance()
    cluster.topics["late"] = {0: (2, 1)}
    cluster.topics["new"] = {0: (1, 0), 1: (2, 0)}
    cluster.advance()
    results = completed(cluster).results
    assert list(results) == ["late", "new"]
    assert all(isinstance(r, TopicDescription) for r in results.values())
    assert [p.leader for p in results["new"].partitions] == [1, 2]


def test_wait_for_topics_times_out_naming_what_was_missing() -> None:
    m, cluster = admin()
    cluster.topics["late"] = {0: (-1, 0)}
    start(m, cluster, lambda now: m.wait_for_topics(["late", "never"], now=now, timeout=1.0))
    while not completed_events(cluster):
        cluster.advance()
    results = completed(cluster).results
    assert isinstance(results["late"].__cause__, LeaderNotAvailableError)
    assert "no leader yet for partitions [0]" in str(results["late"])
    assert isinstance(results["never"], KafkaTimeoutError)
    assert isinstance(results["never"].__cause__, UnknownTopicOrPartitionError)
    assert cluster.now == pytest.approx(1.0)
