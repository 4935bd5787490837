"""kafka-python 3.0's ``KafkaAdminClient`` names that kafka-python 2.x did not have (the
``*_groups`` family, the quorum, replica log dirs, API versions, config resources, waiting
for topics), against a real broker, with kafka-python 3.0's return shapes; and the same
operations on the async ``Admin`` (asyncio and trio).

Witnesses: kafka-python (an independent client) commits the group offsets listed here and
reads the configs reset here; its own ``describe_metadata_quorum`` tells the leader."""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import pytest
from kafka import KafkaAdminClient as Witness  # kafka-python: an independent client
from kafka import KafkaConsumer as WitnessConsumer
from kafka import TopicPartition as WitnessPartition
from kafka.admin import ConfigResource as WitnessResource
from kafka.admin import ConfigResourceType as WitnessResourceType

from kafkastate.admin import ConfigResourceType, QuorumDescription, TopicDescription
from kafkastate.anyio import open_admin
from kafkastate.errors import (
    KafkaTimeoutError,
    LogDirNotFoundError,
    NoError,
    UnknownTopicOrPartitionError,
)
from kafkastate.structs import OffsetAndMetadata, TopicPartition, TopicPartitionReplica
from kafkastate.sync import (
    ConfigResource,
    GroupState,
    GroupType,
    KafkaAdminClient,
    KafkaProducer,
    NewTopic,
    OffsetSpec,
    TransactionState,
)

pytestmark = pytest.mark.integration


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_kafka_python_3_group_names(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic, group = _name("kp3-groups"), _name("kp3-g")
    tp = TopicPartition(topic, 0)
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
        admin.wait_for_topics([topic], timeout_ms=15000)
        assert admin.alter_group_offsets(group, {tp: OffsetAndMetadata(7, "m", None)}) == {
            tp: NoError
        }
        # an independent client reads the committed offset
        witness = WitnessConsumer(bootstrap_servers=bootstrap, group_id=group)
        try:
            assert witness.committed(WitnessPartition(topic, 0)) == 7
        finally:
            witness.close()
        offsets = admin.list_group_offsets(group)
        assert list(offsets) == [group] and offsets[group][tp].offset == 7
        assert admin.list_group_offsets({group: [tp]})[group][tp].metadata == "m"
        assert admin.list_group_offsets([group]) == offsets

        listed = admin.list_groups()
        (mine,) = [g for g in listed if g["group_id"] == group]
        assert set(mine) == {"group_id", "protocol_type", "group_state", "group_type"}
        assert mine["group_state"] == "Empty"
        stable = admin.list_groups(states_filter=["Stable"])
        assert group not in [g["group_id"] for g in stable]
        assert group in [g["group_id"] for g in admin.list_groups(states_filter=["Empty"])]

        described = admin.describe_groups([group])
        assert described[group]["error"] is None
        assert described[group]["group_state"] == "Empty" and described[group]["members"] == []

        # reset: an explicit offset is kept inside the log, a spec is resolved
        with KafkaProducer(bootstrap_servers=bootstrap) as producer:
            for i in range(5):
                producer.send(topic, b"r%d" % i, partition=0)
            producer.flush()
        assert admin.reset_group_offsets(group, {tp: 99}) == {tp: {"error": NoError, "offset": 5}}
        assert admin.reset_group_offsets(group, {tp: OffsetSpec.EARLIEST}) == {
            tp: {"error": NoError, "offset": 0}
        }
        assert admin.reset_group_offsets(group, {tp: 3})[tp]["offset"] == 3
        assert admin.list_group_offsets(group)[group][tp] == OffsetAndMetadata(3, "m", -1)

        assert admin.delete_group_offsets(group, [tp]) == {tp: NoError}
        assert admin.delete_groups([group]) == {group: "OK"}
        assert admin.delete_groups([group]) == {group: "GroupIdNotFoundError"}


def test_kafka_python_3_cluster_names(kafka_cluster: Any, tmp_path: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _name("kp3-cluster")
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        (broker,) = admin.describe_cluster()["brokers"]
        node = broker["broker_id"]

        quorum = admin.describe_metadata_quorum()
        (partition,) = quorum["topics"][0]["partitions"]
        assert partition["error"] is None and partition["high_watermark"] > 0
        witness = Witness(bootstrap_servers=bootstrap)
        try:
            theirs = witness.describe_metadata_quorum()["topics"][0]["partitions"][0]
        finally:
            witness.close()
        assert partition["leader_id"] == theirs["leader_id"]
        assert [v["replica_id"] for v in partition["current_voters"]] == [
            v["replica_id"] for v in theirs["current_voters"]
        ]

        versions = admin.api_versions()
        assert versions[3][0] <= versions[3][1]  # Metadata
        assert admin.get_broker_version_data(node)["api_versions"] == versions

        admin.create_topics([NewTopic(topic, 1, 1)])
        admin.wait_for_topics([topic])
        with pytest.raises(KafkaTimeoutError, match="UnknownTopicOrPartition"):
            admin.wait_for_topics([_name("never")], timeout_ms=800)

        replica = TopicPartitionReplica(topic, 0, node)
        moved = admin.alter_replica_log_dirs({replica: str(tmp_path / "nowhere")})
        assert moved == {replica: LogDirNotFoundError}

        resources = admin.list_config_resources(["topic"])
        assert topic in resources["topic"]
        assert set(admin.list_config_resources()) >= {"topic", "broker"}

        key = (ConfigResourceType.TOPIC, topic)
        changes = {"retention.ms": "123456"}
        assert admin.alter_configs([ConfigResource("topic", topic, changes)]) == {key: None}
        assert admin.reset_configs([ConfigResource("topic", topic, ["retention.ms"])]) == {
            key: None
        }
        # kafka-python reads the default back
        witness = Witness(bootstrap_servers=bootstrap)
        deadline = time.monotonic() + 15
        try:
            while True:
                resource = WitnessResource(WitnessResourceType.TOPIC, topic)
                (described,) = witness.describe_configs([resource], config_filter="all").values()
                if described[topic]["retention.ms"]["value"] == "604800000":
                    break
                assert time.monotonic() < deadline, described[topic]["retention.ms"]
                time.sleep(0.1)
        finally:
            witness.close()


@pytest.mark.anyio
async def test_async_admin_cluster_operations(kafka_cluster: Any, anyio_backend: str) -> None:
    topic = _name("async-cluster")
    async with open_admin(kafka_cluster.bootstrap) as admin:
        quorum = await admin.describe_metadata_quorum()
        assert isinstance(quorum, QuorumDescription)
        assert quorum.leader_id in [v.replica_id for v in quorum.voters]
        (node,) = await admin.api_versions()
        (versions,) = (await admin.api_versions([node])).values()
        assert 18 in versions  # ApiVersions

        await admin.create_topics([NewTopic(topic, 2, 1)])
        ready = await admin.wait_for_topics([topic], timeout=15)
        assert isinstance(ready[topic], TopicDescription)
        assert [p.leader for p in ready[topic].partitions] == [node, node]
        with anyio.fail_after(10), pytest.raises(KafkaTimeoutError) as caught:
            await admin.wait_for_topics([_name("never")], timeout=0.5)
        assert isinstance(caught.value.__cause__, UnknownTopicOrPartitionError)

        listed = await admin.list_config_resources([ConfigResourceType.TOPIC])
        assert (ConfigResourceType.TOPIC, topic) in listed

        replica = TopicPartitionReplica(topic, 1, node)
        moved = await admin.alter_replica_log_dirs({replica: "/nonexistent/kafkastate"})
        assert isinstance(moved[replica], LogDirNotFoundError)


def test_find_hanging_transactions(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic, tid = _name("kp3-hang"), _name("kp3-tid")
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)], wait_for_metadata=True)
        producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, b"open", partition=0).get(timeout=15)
            deadline = time.monotonic() + 15
            while True:  # the coordinator lists it once it has the partition
                hanging = admin.find_hanging_transactions(max_transaction_timeout_ms=0)
                found = [h for h in hanging if h["transactional_id"] == tid]
                if found:
                    break
                assert time.monotonic() < deadline, hanging
                time.sleep(0.1)
            (mine,) = found
            assert mine["state"] == "Ongoing" and mine["age_ms"] >= 0
            assert mine["topic_partitions"] == [TopicPartition(topic, 0)]
            # younger than the default threshold (15 min): not hanging
            assert tid not in [h["transactional_id"] for h in admin.find_hanging_transactions()]
            producer.abort_transaction()
        finally:
            producer.close()
        deadline = time.monotonic() + 15
        while tid in [
            h["transactional_id"]
            for h in admin.find_hanging_transactions(max_transaction_timeout_ms=0)
        ]:
            assert time.monotonic() < deadline, "the aborted transaction still hangs"
            time.sleep(0.1)


def test_an_id_that_only_ran_init_transactions_is_described_empty(kafka_cluster: Any) -> None:
    # its coordinator sends TransactionStartTimeMs -1, decoded as None (it failed the whole
    # describe before), and find_hanging_transactions passes over it
    bootstrap = kafka_cluster.bootstrap
    tid = _name("kp3-empty")
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
        try:
            producer.init_transactions()
        finally:
            producer.close()
        described = admin.describe_transactions([tid])
        assert (described[tid].state, described[tid].transaction_start_time_ms) == ("Empty", None)
        hanging = admin.find_hanging_transactions(max_transaction_timeout_ms=0)
        assert tid not in [h["transactional_id"] for h in hanging]
        # kafka-python 3.0's TransactionState filters as its string does
        empty = admin.list_transactions(state_filters=[TransactionState.EMPTY])
        listed = [t for ts in empty.values() for t in ts if t.transactional_id == tid]
        assert [t.state for t in listed] == [TransactionState.EMPTY]
        ongoing = admin.list_transactions(state_filters=[TransactionState.ONGOING])
        assert tid not in [t.transactional_id for ts in ongoing.values() for t in ts]


def test_kafka_python_3_offset_specs_and_group_filters(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic, group = _name("kp3-specs"), _name("kp3-specs-g")
    tp = TopicPartition(topic, 0)
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)], wait_for_metadata=True)
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        try:
            for i in range(3):
                producer.send(topic, b"%d" % i, partition=0).get(timeout=15)
        finally:
            producer.close()
        admin.delete_records({tp: 1})
        offsets = admin.list_offsets(
            {tp: OffsetSpec.EARLIEST_LOCAL}
        )  # the local log starts where the deletion left it (no tiered storage)
        assert offsets[tp].offset == 1
        assert admin.list_offsets({tp: OffsetSpec.LATEST})[tp].offset == 3
        admin.alter_group_offsets(group, {tp: OffsetAndMetadata(2, "", None)})
        empty = admin.list_groups(
            states_filter=[GroupState.EMPTY], types_filter=[GroupType.CLASSIC]
        )
        assert group in [g["group_id"] for g in empty]
        stable = admin.list_groups(states_filter=[GroupState.STABLE])
        assert group not in [g["group_id"] for g in stable]
