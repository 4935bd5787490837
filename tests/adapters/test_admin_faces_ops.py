"""The operator admin calls on the two library faces against a real broker:
``AIOKafkaAdminClient`` (asyncio, kafkastate's result shapes) and ``KafkaAdminClient``
(blocking, kafka-python 3.0's names and return shapes).

Witnesses: kafka-python (an independent client) logs in with a SCRAM user made here, a
read_committed ListOffsets sees an aborted transaction's end, a fenced producer cannot
commit, a removed static member is no longer in its group."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from kafka import KafkaAdminClient as Witness  # kafka-python: an independent client
from kafka.errors import KafkaError as WitnessError

from kafkastate.admin import (
    FeatureMetadata,
    TopicDescription,
    TopicPartitionsPage,
    TransactionListing,
)
from kafkastate.asyncio import (
    AbortTransactionSpec,
    AIOKafkaAdminClient,
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ElectionType,
    MemberToRemove,
    NewTopic,
    OffsetSpec,
    QuotaMatchType,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafkastate.errors import (
    ElectionNotNeededError,
    KafkaError,
    TransactionalIdNotFoundError,
    UnknownMemberIdError,
)
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafkastate.sync import UserScramCredentialDeletion as Deletion
from kafkastate.sync import UserScramCredentialUpsertion as Upsertion

pytestmark = pytest.mark.integration


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _until(check: Any, limit: float = 20) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def _witness_logs_in(cluster: Any, mechanism: str, user: str, password: str) -> bool:
    """kafka-python authenticates on the SASL listener and lists the topics."""
    try:
        witness = Witness(
            bootstrap_servers=cluster.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username=user,
            sasl_plain_password=password,
            request_timeout_ms=5000,
        )
    except WitnessError:
        return False
    try:
        witness.list_topics()
        return True
    except WitnessError:
        return False
    finally:
        witness.close()


def test_aiokafka_face_runs_every_operator_call(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic, tid, group = _name("aio-ops"), _name("aio-tid"), _name("aio-g")
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with AIOKafkaAdminClient(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1)])
            async with asyncio.timeout(15):
                while not isinstance(
                    (await admin.describe_topic_partitions([topic])).topics.get(topic),
                    TopicDescription,
                ):
                    await asyncio.sleep(0.1)
            page = await admin.describe_topic_partitions([topic], response_partition_limit=1)
            assert isinstance(page, TopicPartitionsPage) and page.next_cursor is None

            client_id = _name("c")
            entity = (("client-id", client_id),)
            alteration = ClientQuotaAlteration(
                {"client-id": client_id}, {"consumer_byte_rate": 5e5}
            )
            assert await admin.alter_client_quotas([alteration]) == {entity: None}
            exact = [ClientQuotaFilterComponent("client-id", client_id, QuotaMatchType.EXACT)]
            async with asyncio.timeout(15):
                while not await admin.describe_client_quotas(exact):
                    await asyncio.sleep(0.1)
            assert await admin.describe_client_quotas(exact) == {
                entity: {"consumer_byte_rate": 5e5}
            }

            user = _name("aio-user")
            upsert = UserScramCredentialUpsertion(user, ScramMechanism.SCRAM_SHA_512, "pw-aio")
            assert await admin.alter_user_scram_credentials([upsert]) == {user: None}
            async with asyncio.timeout(15):
                while isinstance(
                    (await admin.describe_user_scram_credentials([user]))[user], KafkaError
                ):
                    await asyncio.sleep(0.1)

            features = await admin.describe_features()
            assert isinstance(features, FeatureMetadata)
            level = features.finalized_features["metadata.version"][1]
            assert await admin.update_features({"metadata.version": level}, validate_only=True) == {
                "metadata.version": None
            }

            # one broker: the only replica is already the leader and no move is under way
            assert await admin.list_partition_reassignments() == {}
            elected = await admin.elect_leaders(ElectionType.PREFERRED, [tp])
            assert isinstance(elected[tp], ElectionNotNeededError)

            async with AIOKafkaProducer(
                bootstrap_servers=bootstrap, transactional_id=tid
            ) as producer:
                await producer.begin_transaction()
                await producer.send_and_wait(topic, b"open", partition=0)
                listed = await admin.list_transactions(state_filters=["Ongoing"])
                assert tid in {t.transactional_id for ts in listed.values() for t in ts}
                txn = (await admin.describe_transactions([tid]))[tid]
                assert txn.state == "Ongoing" and txn.topic_partitions == {tp}
                (active,) = (await admin.describe_producers([tp]))[tp].active_producers
                await admin.abort_transaction(
                    AbortTransactionSpec(tp, active.producer_id, active.producer_epoch)
                )
                committed = await admin.list_offsets({tp: OffsetSpec.LATEST}, isolation_level=1)
                assert committed[tp].offset == 2  # past the record and the abort marker
                fenced = (await admin.fence_producers([tid]))[tid]
                assert fenced.producer_epoch > txn.producer_epoch
                with pytest.raises(KafkaError):
                    await producer.commit_transaction()

            async with AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                group_instance_id="aio-static",
                session_timeout_ms=45000,
            ) as consumer:
                async with asyncio.timeout(30):
                    while not consumer.assignment():
                        await consumer.getmany(timeout_ms=200)
                who = MemberToRemove(group_instance_id="aio-static")
                assert await admin.remove_group_members(group, [who]) == {who: None}
                (described,) = await admin.describe_consumer_groups([group])
                assert "aio-static" not in {m.group_instance_id for m in described.members}
            await admin.delete_topics([topic])

    asyncio.run(main())


def test_kafka_python_face_has_its_names_and_shapes(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic, tid, group = _name("kp-ops"), _name("kp-tid"), _name("kp-g")
    tp = TopicPartition(topic, 0)
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 3, 1)])

        def described() -> bool:
            page = admin.describe_topic_partitions([topic], response_partition_limit=2)
            return page["topics"][0]["error_code"] == 0

        _until(described)
        page = admin.describe_topic_partitions([topic], response_partition_limit=2)
        assert page["next_cursor"] == {"topic_name": topic, "partition_index": 2}
        (first,) = page["topics"]
        assert first["name"] == topic and [p["partition_index"] for p in first["partitions"]] == [
            0,
            1,
        ]
        rest = admin.describe_topic_partitions([topic], cursor=page["next_cursor"])
        assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [2]
        assert rest["next_cursor"] is None

        ip = ClientQuotaAlteration({"ip": "10.9.8.7"}, {"connection_creation_rate": 5.0})
        assert admin.alter_client_quotas([ip]) == {(("ip", "10.9.8.7"),): None}
        _until(lambda: bool(admin.describe_client_quotas([ClientQuotaFilterComponent("ip")])))
        quotas = admin.describe_client_quotas([ClientQuotaFilterComponent("ip")])
        assert quotas[(("ip", "10.9.8.7"),)] == {"connection_creation_rate": 5.0}

        # SCRAM, witnessed by kafka-python logging in on the SASL listener
        user, password = _name("kp-user"), "pw-" + uuid.uuid4().hex
        assert admin.alter_user_scram_credentials([Upsertion(user, "SCRAM-SHA-256", password)]) == {
            user: None
        }
        _until(lambda: admin.describe_user_scram_credentials([user])[user]["error"] is None)
        assert admin.describe_user_scram_credentials([user]) == {
            user: {
                "error": None,
                "credential_infos": [
                    {"mechanism": ScramMechanism.SCRAM_SHA_256, "iterations": 4096}
                ],
            }
        }
        assert user in admin.describe_user_scram_credentials()
        if kafka_cluster.sasl_bootstrap is not None:
            assert _witness_logs_in(kafka_cluster, "SCRAM-SHA-256", user, password)
        assert admin.alter_user_scram_credentials([Deletion(user, "SCRAM-SHA-256")]) == {user: None}
        gone = admin.alter_user_scram_credentials([Deletion(user, "SCRAM-SHA-256")])
        assert gone[user] is not None  # kafka-python's shape: the error message

        features = admin.describe_features()
        assert set(features) == {
            "supported_features",
            "finalized_features",
            "finalized_features_epoch",
        }
        level = features["finalized_features"]["metadata.version"][1]
        assert admin.update_features({"metadata.version": ("upgrade", level)}) == {
            "metadata.version": "OK"
        }
        refused = admin.update_features({"metadata.version": level + 1000}, validate_only=True)
        assert refused["metadata.version"] != "OK"

        assert admin.list_partition_reassignments({topic: [0, 1]}) == {}
        elected = admin.elect_leaders(0, [topic])  # topic names: all their partitions
        assert set(elected) == {TopicPartition(topic, p) for p in range(3)}
        assert all(isinstance(e, ElectionNotNeededError) for e in elected.values())
        (broker,) = admin.describe_cluster()["brokers"]
        assert admin.alter_partition_reassignments({tp: [broker["broker_id"]]}) == {tp: None}

        producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, b"open", partition=0).get(timeout=30)
            listed = admin.list_transactions()
            mine = [t for ts in listed.values() for t in ts if t.transactional_id == tid]
            assert mine and isinstance(mine[0], TransactionListing)
            txn = admin.describe_transactions([tid])[tid]
            assert txn.producer_id == mine[0].producer_id
            with pytest.raises(TransactionalIdNotFoundError):
                admin.describe_transactions([_name("no-tid")])
            (active,) = admin.describe_producers([tp])[tp].active_producers
            assert (
                admin.abort_transaction(
                    AbortTransactionSpec(tp, active.producer_id, active.producer_epoch)
                )
                is None
            )
            after = admin.list_offsets({tp: OffsetSpec.LATEST}, isolation_level=1)
            assert after[tp].offset == 2
            assert admin.fence_producers([tid])[tid].producer_id == txn.producer_id
            with pytest.raises(KafkaError):
                producer.commit_transaction()
        finally:
            producer.close()

        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            group_instance_id="kp-static",
            session_timeout_ms=45000,
        )
        try:
            _until(lambda: bool(consumer.poll(timeout_ms=200) or consumer.assignment()), 30)
            (before,) = admin.describe_consumer_groups([group])
            (member,) = before.members
            who = MemberToRemove(group_instance_id="kp-static")
            stranger = MemberToRemove(member_id="nobody")
            removed = admin.remove_group_members(group, [who, stranger])
            assert removed[who] is None and isinstance(removed[stranger], UnknownMemberIdError)
            (info,) = admin.describe_consumer_groups([group])
            assert member.member_id not in {m.member_id for m in info.members}
        finally:
            consumer.close()
        admin.delete_topics([topic])
