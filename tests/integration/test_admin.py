"""The async admin client (``open_admin``) against a real broker, on asyncio and trio.

Each operation is checked by an independent witness where one exists: a created topic is
produced to and consumed from by the project's producer and consumer, altered offsets are
where a consumer of the group resumes, deleted records are gone for a consumer, the
cluster is described the same way by kafka-python."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from kafka import KafkaAdminClient as Witness  # kafka-python: an independent client

from kafkastate.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    CreatedTopic,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafkastate.anyio import open_admin, open_consumer, open_producer
from kafkastate.errors import (
    GroupIdNotFoundError,
    InvalidPartitionsError,
    SecurityDisabledError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from kafkastate.structs import OffsetAndMetadata, TopicPartition
from kafkastate.sync import KafkaAdminClient as SyncAdmin

pytestmark = pytest.mark.integration

TOPIC = ConfigResourceType.TOPIC


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``check`` until true: a broker's metadata image follows the controller's
    commit a moment later (KRaft), so a just created topic may not be listed yet."""
    with anyio.fail_after(15):
        while not await check():
            await anyio.sleep(0.05)


async def configs_until(admin: Any, topic: str, wanted: dict[str, str]) -> dict[str, Any]:
    """The topic's configs once they show ``wanted``: the broker applies a change a moment
    after the controller committed it (KRaft), so a describe right after may be stale."""
    key = (TOPIC, topic)
    with anyio.fail_after(15):
        while True:
            described = await admin.describe_configs([ConfigResource(TOPIC, topic)])
            now: dict[str, Any] = described[key]
            if all(now[k].value == v for k, v in wanted.items()):
                return now
            await anyio.sleep(0.05)


async def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    async with open_producer(bootstrap) as producer:
        for i, value in enumerate(values):
            await producer.send(topic, value, partition=partition, timestamp_ms=1_000 * (i + 1))


async def _consume(bootstrap: str, tp: TopicPartition, count: int, **options: Any) -> list[Any]:
    got: list[Any] = []
    topics = (tp.topic,) if "group_id" in options else ()
    async with open_consumer(*topics, bootstrap_servers=bootstrap, **options) as consumer:
        if "group_id" not in options:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
        with anyio.fail_after(20):
            while len(got) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(records)
    return got


@pytest.mark.anyio
async def test_topics_are_created_described_grown_and_deleted(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    a, b, dry = _name("adm-a"), _name("adm-b"), _name("adm-dry")
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        (broker,) = (await admin.describe_cluster()).brokers
        checked = await admin.create_topics([NewTopic(dry, 2, 1)], validate_only=True)
        assert isinstance(checked[dry], CreatedTopic)
        created = await admin.create_topics(
            [
                NewTopic(a, 2, 1, topic_configs={"retention.ms": "3600000"}),
                NewTopic(b, replica_assignments={0: [broker.node_id]}),
            ]
        )
        assert isinstance(created[a], CreatedTopic) and created[a].num_partitions == 2
        assert created[a].topic_id is not None
        assert isinstance(created[b], CreatedTopic) and created[b].num_partitions == 1
        assert dry not in await admin.list_topics()  # validate_only created nothing

        # one topic's failure does not hide another's success
        c = _name("adm-c")
        again = await admin.create_topics([NewTopic(a, 1, 1), NewTopic(c, 1, 1)])
        assert isinstance(again[a], TopicAlreadyExistsError)
        assert isinstance(again[c], CreatedTopic)

        async def described() -> bool:
            found = await admin.describe_topics([a, b])
            return all(not isinstance(v, Exception) for v in found.values())

        await eventually(described, "topics described")
        found = await admin.describe_topics([a, b, "no-such-topic"])
        assert found[a].topic_id == created[a].topic_id
        assert [p.partition for p in found[a].partitions] == [0, 1]
        assert found[b].partitions[0].replicas == (broker.node_id,)
        assert isinstance(found["no-such-topic"], UnknownTopicOrPartitionError)

        # the witness: the project's producer and consumer use the new topic
        await _produce(bootstrap, a, [b"x", b"y"], partition=1)
        got = await _consume(bootstrap, TopicPartition(a, 1), 2)
        assert [r.value for r in got] == [b"x", b"y"]

        grown = await admin.create_partitions({a: NewPartitions(4), b: NewPartitions(1)})
        assert grown[a] is None and isinstance(grown[b], InvalidPartitionsError)

        async def four() -> bool:
            return len((await admin.describe_topics([a]))[a].partitions) == 4

        await eventually(four, "four partitions")
        deleted = await admin.delete_topics([a, b, c, "no-such-topic"])
        assert [deleted[t] for t in (a, b, c)] == [None, None, None]
        assert isinstance(deleted["no-such-topic"], UnknownTopicOrPartitionError)

        async def gone() -> bool:
            return not {a, b, c} & set(await admin.list_topics())

        await eventually(gone, "topics deleted")


@pytest.mark.anyio
async def test_topics_are_described_and_deleted_by_topic_id(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    a, b = _name("adm-id-a"), _name("adm-id-b")
    nobody = uuid.uuid4()  # no topic has this id
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        created = await admin.create_topics([NewTopic(a, 2, 1), NewTopic(b, 1, 1)])
        id_a, id_b = created[a].topic_id, created[b].topic_id
        assert isinstance(id_a, uuid.UUID) and isinstance(id_b, uuid.UUID)

        async def described() -> bool:
            found = await admin.describe_topics([id_a, b])
            return all(not isinstance(v, Exception) for v in found.values())

        await eventually(described, "topics described by id")
        found = await admin.describe_topics([id_a, b, nobody])
        assert found[id_a] == (await admin.describe_topics([a]))[a]  # one topic, two names
        assert found[id_a].name == a and found[b].topic_id == id_b
        assert isinstance(found[nobody], UnknownTopicIdError)

        deleted = await admin.delete_topics([id_a, nobody])
        assert deleted[id_a] is None and isinstance(deleted[nobody], UnknownTopicIdError)

        # the witness: kafka-python's admin client no longer sees the topic deleted by id
        def seen() -> set[str]:
            witness = Witness(bootstrap_servers=bootstrap)
            try:
                return set(witness.list_topics()) & {a, b}
            finally:
                witness.close()

        async def only_b() -> bool:
            return await anyio.to_thread.run_sync(seen) == {b}

        await eventually(only_b, "the topic deleted by id gone")
        assert (await admin.delete_topics([id_b])) == {id_b: None}


@pytest.mark.anyio
async def test_configs_are_described_and_altered(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _name("adm-cfg")
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        (broker,) = (await admin.describe_cluster()).brokers
        await admin.create_topics(
            [NewTopic(topic, 1, 1, topic_configs={"retention.ms": "1234567"})]
        )
        key = (TOPIC, topic)
        await configs_until(admin, topic, {"retention.ms": "1234567"})

        # AlterConfigs replaces the set: retention.ms goes back to its default
        altered = await admin.alter_configs(
            [ConfigResource(TOPIC, topic, {"segment.ms": "7200000"})]
        )
        assert altered == {key: None}
        await configs_until(admin, topic, {"segment.ms": "7200000", "retention.ms": "604800000"})
        wanted = ConfigResource(TOPIC, topic, ["retention.ms", "segment.ms"])
        assert set((await admin.describe_configs([wanted]))[key]) == {"retention.ms", "segment.ms"}

        changes = {
            "retention.ms": "555000",
            "segment.ms": None,  # delete: back to the default
            "cleanup.policy": AlterConfigOp(value="compact", op=AlterConfigOpType.APPEND),
        }
        assert await admin.incremental_alter_configs([ConfigResource(TOPIC, topic, changes)]) == {
            key: None
        }
        expected = {
            "retention.ms": "555000",
            "segment.ms": "604800000",
            "cleanup.policy": "delete,compact",
        }
        await configs_until(admin, topic, expected)

        node = str(broker.node_id)
        brokers = await admin.describe_configs(
            [
                ConfigResource("broker", node, ["num.partitions"]),
                ConfigResource("broker_logger", node),
                ConfigResource(TOPIC, "no-such-topic"),
            ]
        )
        assert set(brokers[(ConfigResourceType.BROKER, node)]) == {"num.partitions"}
        loggers = brokers[(ConfigResourceType.BROKER_LOGGER, node)]
        assert "kafka" in loggers or "root" in loggers
        assert isinstance(brokers[(TOPIC, "no-such-topic")], UnknownTopicOrPartitionError)
        logger = "kafka.server.ReplicaManager"
        level = ConfigResource("broker_logger", node, {logger: "INFO"})
        assert await admin.incremental_alter_configs([level]) == {
            (ConfigResourceType.BROKER_LOGGER, node): None
        }
        await admin.delete_topics([topic])


@pytest.mark.anyio
async def test_groups_and_their_offsets(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic, group = _name("adm-grp"), _name("adm-g")
    tp = TopicPartition(topic, 0)
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        await _produce(bootstrap, topic, [b"%d" % i for i in range(10)])
        async with open_consumer(
            topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest"
        ) as consumer:
            got: list[Any] = []
            with anyio.fail_after(30):
                while len(got) < 10:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got.extend(records)
            await consumer.commit()
            (described,) = (await admin.describe_consumer_groups([group])).values()
            (broker,) = (await admin.describe_cluster()).brokers
            assert await admin.find_coordinator(group) == broker.node_id
            assert described.state == "Stable" and described.protocol_type == "consumer"
            (member,) = described.members
            assert member.assignment is not None and member.assignment.partitions == (tp,)
            assert member.subscription is not None and member.subscription.topics == (topic,)
        listed = await admin.list_consumer_groups()
        groups = {g.group_id: g for gs in listed.values() for g in gs}
        assert groups[group].protocol_type == "consumer"
        assert (await admin.list_consumer_group_offsets(group))[tp].offset == 10

        # the group is empty now: an admin may move its offset; a consumer resumes there
        moved = await admin.alter_consumer_group_offsets(group, {tp: OffsetAndMetadata(3, "admin")})
        assert moved == {tp: None}
        assert (await admin.list_consumer_group_offsets(group, [tp]))[tp] == OffsetAndMetadata(
            3, "admin", -1
        )
        resumed = await _consume(bootstrap, tp, 7, group_id=group)
        assert resumed[0].offset == 3

        assert await admin.delete_consumer_group_offsets(group, [tp]) == {tp: None}
        async with open_consumer(bootstrap_servers=bootstrap, group_id=group) as witness:
            assert await witness.committed(tp) is None
        # Kafka < 4.0's group coordinator drops an empty group with its last offset ("Group
        # ... transitioned to Dead" in the broker log; 4.x keeps it until its periodic
        # cleanup): give the group an offset again, so DeleteGroups meets it on every broker.
        readded = await admin.alter_consumer_group_offsets(group, {tp: OffsetAndMetadata(5, "")})
        assert readded == {tp: None}
        other = _name("never")
        deleted = await admin.delete_consumer_groups([group, other])
        assert deleted[group] is None and isinstance(deleted[other], GroupIdNotFoundError)
        listed = await admin.list_consumer_groups()
        assert group not in {g.group_id for gs in listed.values() for g in gs}
        await admin.delete_topics([topic])


@pytest.mark.anyio
async def test_offsets_are_listed_and_records_deleted(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _name("adm-off")
    tp, missing = TopicPartition(topic, 0), TopicPartition(topic, 5)
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        await _produce(bootstrap, topic, [b"%d" % i for i in range(10)])  # timestamps 1000..10000
        offsets = await admin.list_offsets({tp: OffsetSpec.EARLIEST})
        assert offsets[tp].offset == 0
        assert (await admin.list_offsets({tp: OffsetSpec.LATEST}))[tp].offset == 10
        by_time = (await admin.list_offsets({tp: 4_500}))[tp]
        assert (by_time.offset, by_time.timestamp) == (4, 5_000)
        newest = (await admin.list_offsets({tp: OffsetSpec.MAX_TIMESTAMP}))[tp]
        assert (newest.offset, newest.timestamp) == (9, 10_000)

        deleted = await admin.delete_records({tp: 4, missing: 1})
        assert deleted[tp] == 4
        assert isinstance(deleted[missing], UnknownTopicOrPartitionError)
        assert (await admin.list_offsets({tp: OffsetSpec.EARLIEST}))[tp].offset == 4
        # the witness: a consumer from the beginning starts at the new low watermark
        got = await _consume(bootstrap, tp, 6)
        assert [r.offset for r in got] == list(range(4, 10))
        await admin.delete_topics([topic])


@pytest.mark.anyio
async def test_a_missing_topic_is_each_partitions_answer_and_is_not_refreshed_after(
    kafka_cluster: Any,
) -> None:
    missing = TopicPartition(_name("adm-missing"), 0)
    async with open_admin(kafka_cluster.bootstrap) as admin:
        listed = await admin.list_offsets({missing: OffsetSpec.LATEST})
        assert isinstance(listed[missing], UnknownTopicOrPartitionError)
        deleted = await admin.delete_records({missing: 1})
        assert isinstance(deleted[missing], UnknownTopicOrPartitionError)
        # no operation needs the topic any more: the client stops asking the cluster for it
        assert admin.machine.client.metadata.topics == ()


def test_a_missing_topic_raises_from_the_blocking_admin_and_is_not_refreshed_after(
    kafka_cluster: Any,
) -> None:
    missing = TopicPartition(_name("adm-missing"), 0)
    with SyncAdmin(bootstrap_servers=kafka_cluster.bootstrap) as admin:
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.list_offsets({missing: OffsetSpec.LATEST})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_records({missing: 1})
        assert admin._machine.client.metadata.topics == ()


def test_the_blocking_admin_closes_a_connection_idle_past_connections_max_idle(
    kafka_cluster: Any,
) -> None:
    with SyncAdmin(bootstrap_servers=kafka_cluster.bootstrap, connections_max_idle_ms=300) as admin:
        admin.describe_cluster()
        before = admin.metrics()["admin-client-metrics"]
        time.sleep(0.6)  # idle: no call runs the client meanwhile
        admin.describe_cluster()
        after = admin.metrics()["admin-client-metrics"]
    # the idle connection was closed, not reused, and the call went on a new one
    assert after["connection-close-total"] > before["connection-close-total"]
    assert after["connection-creation-total"] > before["connection-creation-total"]


@pytest.mark.anyio
async def test_the_cluster_is_described_as_another_client_sees_it(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    async with open_admin(bootstrap) as admin:
        cluster = await admin.describe_cluster()
    witness = Witness(bootstrap_servers=bootstrap)
    try:
        seen = await anyio.to_thread.run_sync(witness.describe_cluster)
    finally:
        witness.close()
    assert cluster.cluster_id == seen["cluster_id"]
    assert [(b.node_id, b.host, b.port) for b in cluster.brokers] == [
        (b["broker_id"], b["host"], b["port"]) for b in seen["brokers"]
    ]


@pytest.mark.anyio
async def test_log_dirs_hold_what_was_produced(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _name("adm-dirs")
    tp = TopicPartition(topic, 0)
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        await _produce(bootstrap, topic, [b"x" * 1000] * 5)
        ((node, dirs),) = (await admin.describe_log_dirs(partitions=[tp])).items()
        assert node == (await admin.describe_cluster()).brokers[0].node_id
        (found,) = [d for d in dirs if tp in d.replicas]
        assert found.error is None and found.total_bytes >= found.usable_bytes > 0
        # the witness: five 1000-byte records went into that replica's log
        assert found.replicas[tp].size >= 5000 and not found.replicas[tp].is_future
        await admin.delete_topics([topic])


@pytest.mark.anyio
async def test_acls_without_an_authorizer_are_refused_per_resource(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    pattern = ResourcePattern(ResourceType.TOPIC, "adm-acl", ACLResourcePatternType.LITERAL)
    acl = ACL("User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
    any_acl = ACLFilter(
        None,
        None,
        ACLOperation.ANY,
        ACLPermissionType.ANY,
        ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
    )
    async with open_admin(bootstrap) as admin:
        with pytest.raises(SecurityDisabledError):
            await admin.describe_acls(any_acl)
        created = await admin.create_acls([acl])
        assert isinstance(created[acl], SecurityDisabledError)
        deleted = await admin.delete_acls([any_acl])
        assert isinstance(deleted[any_acl], SecurityDisabledError)
