"""The admin faces against a real broker: aiokafka's ``AIOKafkaAdminClient`` (asyncio)
and kafka-python's ``KafkaAdminClient`` (blocking), with their libraries' return shapes,
checked by independent witnesses (the project's producer and consumer; kafka-python's
consumer reading what an altered group offset says)."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from typing import Any

import pytest
from kafka import KafkaConsumer as WitnessConsumer  # kafka-python: an independent reader

from kafkastate.asyncio import (
    AIOKafkaAdminClient,
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    RecordsToDelete,
)
from kafkastate.errors import (
    InvalidPartitionsError,
    KafkaConfigurationError,
    KafkaConnectionError,
    NoBrokersAvailable,
    SecurityDisabledError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafkastate.structs import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from kafkastate.sync import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    ResourcePattern,
    ResourceType,
)

pytestmark = pytest.mark.integration


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_aiokafka_admin_client(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic, group = _name("aio-adm"), _name("aio-g")
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        with pytest.raises(KafkaConnectionError, match="not started"):
            await admin.list_topics()
        await admin.start()
        try:
            created = await admin.create_topics([NewTopic(topic, 1, 1)])
            assert created[topic].num_partitions == 1
            again = await admin.create_topics([NewTopic(topic, 1, 1)])
            assert isinstance(again[topic], TopicAlreadyExistsError)
            async with asyncio.timeout(15):
                while topic not in await admin.list_topics():
                    await asyncio.sleep(0.05)
            (described,) = await admin.describe_topics([topic])
            assert described["topic"] == topic and described["error_code"] == 0
            assert [p["partition"] for p in described["partitions"]] == [0]
            cluster = await admin.describe_cluster()
            (broker,) = cluster["brokers"]
            assert described["partitions"][0]["leader"] == broker["node_id"]

            # the witness: records go through the new topic
            async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
                for i in range(6):
                    await producer.send_and_wait(topic, b"%d" % i, partition=0)
            async with AIOKafkaConsumer(
                topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest"
            ) as consumer:
                got: list[Any] = []
                async with asyncio.timeout(20):
                    while len(got) < 6:
                        for records in (await consumer.getmany(timeout_ms=500)).values():
                            got.extend(records)
                await consumer.commit()
                (group_info,) = await admin.describe_consumer_groups([group])
                assert group_info.members[0].assignment.partitions == (tp,)
            assert (group, "consumer") in await admin.list_consumer_groups()
            assert await admin.find_coordinator(group) == broker["node_id"]
            assert await admin.list_consumer_group_offsets(group) == {
                tp: OffsetAndMetadata(6, "", got[-1].leader_epoch)
            }
            assert await admin.alter_consumer_group_offsets(group, {tp: 2}) == {tp: None}
            async with AIOKafkaConsumer(
                topic, bootstrap_servers=bootstrap, group_id=group
            ) as resumed:
                async with asyncio.timeout(20):
                    batch: dict[Any, Any] = {}
                    while not batch:
                        batch = await resumed.getmany(timeout_ms=500)
                assert batch[tp][0].offset == 2

            with pytest.raises(InvalidPartitionsError):
                await admin.create_partitions({topic: NewPartitions(1)})
            assert await admin.create_partitions({topic: NewPartitions(2)}) == {topic: None}

            key = (ConfigResourceType.TOPIC, topic)
            resource = ConfigResource("topic", topic, {"retention.ms": "86400000"})
            assert await admin.alter_configs([resource]) == {key: None}
            async with asyncio.timeout(15):  # the broker follows the controller's commit
                while True:
                    configs = await admin.describe_configs([ConfigResource("topic", topic)])
                    if configs[key]["retention.ms"].value == "86400000":
                        break
                    await asyncio.sleep(0.05)

            offsets = await admin.list_offsets({tp: OffsetSpec.LATEST})
            assert offsets == {tp: OffsetAndTimestamp(6, -1, offsets[tp].leader_epoch)}
            assert await admin.delete_records({tp: RecordsToDelete(before_offset=3)}) == {tp: 3}
            with pytest.raises(UnknownTopicOrPartitionError):
                await admin.delete_records({TopicPartition(topic, 9): 1})
            assert await admin.delete_consumer_groups([group]) == {group: None}
            assert await admin.delete_topics([topic]) == {topic: None}
        finally:
            await admin.close()

    asyncio.run(main())


def test_kafka_python_admin_client(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic, group = _name("kp-adm"), _name("kp-g")
    tp = TopicPartition(topic, 0)
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        result = admin.create_topics([NewTopic(topic, 1, 1)])
        (entry,) = result["topics"]
        assert (entry["name"], entry["error_code"], entry["num_partitions"]) == (topic, 0, 1)
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, 1, 1)])
        (kept,) = admin.create_topics([NewTopic(topic, 1, 1)], raise_errors=False)["topics"]
        assert kept["error_code"] == TopicAlreadyExistsError.errno

        with KafkaProducer(bootstrap_servers=bootstrap) as producer:
            for i in range(5):
                producer.send(topic, b"%d" % i, partition=0).get(timeout=20)
        with KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=10_000,
        ) as consumer:
            got = [r for _, r in zip(range(5), consumer, strict=False)]
            assert len(got) == 5
            consumer.commit()
            (info,) = admin.describe_consumer_groups([group])
            assert (info.group, info.state, info.protocol_type) == (group, "Stable", "consumer")
            assert info.members[0].member_assignment.partitions == (tp,)
        assert (group, "consumer") in admin.list_consumer_groups()
        assert admin.list_consumer_group_offsets(group)[tp].offset == 5
        assert admin.alter_consumer_group_offsets(group, {tp: OffsetAndMetadata(1, "")}) == {
            tp: None
        }
        # the witness: kafka-python's own consumer resumes where the admin put the group
        witness = WitnessConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            consumer_timeout_ms=10_000,
        )
        try:
            first = next(iter(witness))
        finally:
            witness.close()
        assert first.offset == 1

        (described,) = admin.describe_topics([topic])
        assert described["name"] == topic
        assert described["partitions"][0]["partition_index"] == 0
        assert topic in admin.list_topics()
        (broker,) = admin.describe_cluster()["brokers"]
        assert described["partitions"][0]["leader_id"] == broker["broker_id"]

        change = ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "7200000"})
        assert admin.alter_configs([change], incremental=True) == {
            (ConfigResourceType.TOPIC, topic): None
        }
        deadline = time.monotonic() + 15
        while True:  # the broker follows the controller's commit a moment later
            configs = admin.describe_configs([ConfigResource("topic", topic, ["retention.ms"])])
            if configs["topic"][topic]["retention.ms"]["value"] == "7200000":
                break
            assert time.monotonic() < deadline, configs
            time.sleep(0.05)

        assert admin.list_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 0
        assert admin.delete_records({tp: 4}) == {tp: {"low_watermark": 4}}
        assert admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 4
        assert admin.create_partitions({topic: NewPartitions(3)}) == {
            "results": [{"name": topic, "error_code": 0, "error_message": None}]
        }
        ((dirs,)) = admin.describe_log_dirs([tp])
        assert dirs["broker"] == broker["broker_id"]
        assert any(tp in d.replicas for d in dirs["log_dirs"])
        pattern = ResourcePattern(ResourceType.GROUP, group)
        acl = ACL("User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
        (failed,) = admin.create_acls([acl])["failed"]  # the harness runs no authorizer
        assert failed[0] == acl and isinstance(failed[1], SecurityDisabledError)
        with pytest.raises(SecurityDisabledError):
            admin.describe_acls(acl)
        assert admin.delete_consumer_group_offsets(group, [tp]) == {tp: None}
        assert admin.delete_consumer_groups([group]) == [(group, None)]
        assert admin.delete_topics([topic])["topics"][0]["error_code"] == 0


def test_kafka_python_admin_client_names_an_unreachable_cluster() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(NoBrokersAvailable, match=f"127.0.0.1:{port}"):
        KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", bootstrap_timeout_ms=300)
    # kafka-python 3.0's type and words for an option it does not know
    with pytest.raises(KafkaConfigurationError, match=r"Unrecognized configs: \{'group_id'\}"):
        KafkaAdminClient(bootstrap_servers="localhost", group_id="g")
