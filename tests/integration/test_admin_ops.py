"""The cluster-operator admin operations (``open_admin``) against a real broker, on asyncio
and trio: quotas, SCRAM credentials, paged topic descriptions, features, transactions,
member removal and KIP-848 group descriptions.

Each change is checked by an independent witness: a quota throttles kafka-python's
producer, a SCRAM user created here logs in on the SASL listener, an aborted transaction
moves the last stable offset a read_committed ListOffsets sees, a fenced producer cannot
commit, a removed member is no longer in the group, a KIP-848 member's assignment is the
one its consumer holds and a deleted KIP-848 group's offsets are gone for a new member."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from kafka import KafkaProducer as WitnessProducer  # kafka-python: an independent client

from kafkastate.admin import (
    AbortTransactionSpec,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    FeatureMetadata,
    FeatureUpdate,
    FeatureUpdateType,
    MemberToRemove,
    NewTopic,
    OffsetSpec,
    PartitionProducerState,
    ProducerIdAndEpoch,
    QuotaMatchType,
    ScramCredentialInfo,
    ScramMechanism,
    TopicDescription,
    TransactionDescription,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafkastate.anyio import open_admin, open_consumer, open_producer
from kafkastate.errors import (
    GroupIdNotFoundError,
    KafkaError,
    ResourceNotFoundError,
    TransactionalIdNotFoundError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from kafkastate.structs import OffsetAndMetadata, TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def eventually(check: Callable[[], Awaitable[bool]], what: str, limit: float = 20) -> None:
    """Poll ``check`` until true (KRaft brokers apply a committed change a moment later)."""
    with anyio.fail_after(limit):
        while not await check():
            await anyio.sleep(0.1)


async def _topic(admin: Any, partitions: int = 1) -> str:
    name = _name("ops")
    created = await admin.create_topics([NewTopic(name, partitions, 1)])
    assert not isinstance(created[name], Exception), created

    async def ready() -> bool:
        found = (await admin.describe_topics([name]))[name]
        return isinstance(found, TopicDescription) and all(p.leader >= 0 for p in found.partitions)

    await eventually(ready, "topic ready")
    return name


# ---------------------------------------------------------------------------- quotas


def _throttled_producer(bootstrap: str, client_id: str, topic: str) -> float:
    """kafka-python produces 2 KiB records as ``client_id`` until the broker throttles one
    (at most 30); its worst throttle time (ms) as its own metrics record it."""
    producer = WitnessProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=0)
    try:
        worst = 0.0
        for _ in range(30):
            producer.send(topic, b"x" * 2048, partition=0).get(timeout=30)
            worst = max(
                float(value)
                for group in producer.metrics().values()
                for key, value in group.items()
                if key.endswith("throttle-time-max")
            )
            if worst > 0:
                break
        return worst
    finally:
        producer.close()


async def test_a_producer_quota_throttles_and_is_described_then_removed(
    kafka_cluster: Any,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    client_id = _name("slow")
    entity = (("client-id", client_id),)
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        topic = await _topic(admin)
        dry = ClientQuotaAlteration({"client-id": client_id}, {"producer_byte_rate": 1024.0})
        assert await admin.alter_client_quotas([dry], validate_only=True) == {entity: None}
        exact = [ClientQuotaFilterComponent("client-id", client_id, QuotaMatchType.EXACT)]
        assert await admin.describe_client_quotas(exact) == {}  # validate_only set nothing

        set_ = ClientQuotaAlteration(
            {"client-id": client_id}, {"producer_byte_rate": 1024.0, "request_percentage": 200.0}
        )
        assert await admin.alter_client_quotas([set_]) == {entity: None}

        async def described() -> bool:
            return bool(await admin.describe_client_quotas(exact, strict=True))

        await eventually(described, "quota described")
        quotas = await admin.describe_client_quotas(exact, strict=True)
        assert quotas == {entity: {"producer_byte_rate": 1024.0, "request_percentage": 200.0}}
        every = await admin.describe_client_quotas([ClientQuotaFilterComponent("client-id")])
        assert every[entity]["producer_byte_rate"] == 1024.0

        # the witness: the broker throttles that client id's produce requests
        throttle = await anyio.to_thread.run_sync(_throttled_producer, bootstrap, client_id, topic)
        assert throttle > 0

        bad = ClientQuotaAlteration({"no-such-type": "x"}, {"producer_byte_rate": 1.0})
        mixed = await admin.alter_client_quotas(
            [ClientQuotaAlteration(entity, {"producer_byte_rate": None}), bad]
        )
        assert mixed[entity] is None and isinstance(mixed[(("no-such-type", "x"),)], KafkaError)

        async def removed() -> bool:
            left = await admin.describe_client_quotas(exact, strict=True)
            return left.get(entity, {}) == {"request_percentage": 200.0}

        await eventually(removed, "quota removed")
        await admin.alter_client_quotas(
            [ClientQuotaAlteration(entity, {"request_percentage": None})]
        )


# ----------------------------------------------------------------------------- SCRAM


async def _can_log_in(cluster: Any, mechanism: str, user: str, password: str) -> bool:
    try:
        async with open_admin(
            cluster.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username=user,
            sasl_plain_password=password,
            request_timeout_ms=5000,
        ) as admin:
            await admin.describe_cluster()
            return True
    except KafkaError:
        return False


@pytest.mark.kafka_needs("sasl:SCRAM-SHA-256", "sasl:SCRAM-SHA-512")
async def test_a_scram_user_made_here_logs_in_until_deleted(kafka_cluster: Any) -> None:
    user, password = _name("user"), "s3cret-" + uuid.uuid4().hex
    async with open_admin(kafka_cluster.bootstrap, request_timeout_ms=15000) as admin:
        results = await admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(user, "SCRAM-SHA-256", password),
                UserScramCredentialUpsertion(user, ScramMechanism.SCRAM_SHA_512, password, 8192),
            ]
        )
        assert results == {user: None}

        async def described() -> bool:
            found = (await admin.describe_user_scram_credentials([user]))[user]
            return not isinstance(found, Exception) and len(found) == 2

        await eventually(described, "credentials described")
        (mine,) = (await admin.describe_user_scram_credentials([user])).values()
        assert list(mine) == [
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
        ]
        everyone = await admin.describe_user_scram_credentials()
        assert user in everyone and kafka_cluster.sasl.username in everyone
        unknown = await admin.describe_user_scram_credentials([_name("nobody")])
        assert isinstance(next(iter(unknown.values())), ResourceNotFoundError)

        # the witness: the SASL listener accepts the new user with each mechanism
        assert await _can_log_in(kafka_cluster, "SCRAM-SHA-256", user, password)
        assert await _can_log_in(kafka_cluster, "SCRAM-SHA-512", user, password)
        assert not await _can_log_in(kafka_cluster, "SCRAM-SHA-256", user, "wrong")

        deleted = await admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, "SCRAM-SHA-256")]
        )
        assert deleted == {user: None}

        async def gone() -> bool:
            return not await _can_log_in(kafka_cluster, "SCRAM-SHA-256", user, password)

        await eventually(gone, "credential deleted")
        assert await _can_log_in(kafka_cluster, "SCRAM-SHA-512", user, password)
        await admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, "SCRAM-SHA-512")]
        )


# ------------------------------------------------------------ paged topic partitions


async def test_describe_topic_partitions_pages_through_every_partition(kafka_cluster: Any) -> None:
    async with open_admin(kafka_cluster.bootstrap, request_timeout_ms=15000) as admin:
        a, b = await _topic(admin, 5), await _topic(admin, 3)
        missing = _name("missing")
        page = await admin.describe_topic_partitions([a, b, missing], partition_limit=2)
        assert page.next_cursor is None
        assert [p.partition for p in page.topics[a].partitions] == [0, 1, 2, 3, 4]
        assert [p.partition for p in page.topics[b].partitions] == [0, 1, 2]
        assert isinstance(page.topics[missing], UnknownTopicOrPartitionError)
        # the witness: Metadata describes the same partitions, leaders and topic ids
        meta = await admin.describe_topics([a, b])
        for name in (a, b):
            assert page.topics[name] == meta[name]

        everything = await admin.describe_topic_partitions(partition_limit=3)  # every topic
        assert everything.topics[a] == meta[a] and everything.topics[b] == meta[b]

        # pages follow the broker's order: by topic name, then partition
        first = await admin.describe_topic_partitions([a], partition_limit=2, one_page=True)
        assert [p.partition for p in first.topics[a].partitions] == [0, 1]
        assert first.next_cursor == TopicPartition(a, 2)
        rest = await admin.describe_topic_partitions(
            [a], partition_limit=100, cursor=first.next_cursor
        )
        assert [p.partition for p in rest.topics[a].partitions] == [2, 3, 4]
        assert rest.next_cursor is None


# -------------------------------------------------------------------------- features


async def test_features_are_described_and_updates_validated(kafka_cluster: Any) -> None:
    async with open_admin(kafka_cluster.bootstrap, request_timeout_ms=15000) as admin:
        features = await admin.describe_features()
        assert isinstance(features, FeatureMetadata)
        low, high = features.finalized_features["metadata.version"]
        assert high >= 1 and features.supported_features["metadata.version"][1] >= high
        assert features.finalized_features_epoch is not None
        # the same level again is accepted; validate_only changes nothing
        assert await admin.update_features({"metadata.version": high}) == {"metadata.version": None}
        checked = await admin.update_features(
            {"metadata.version": FeatureUpdate(high, FeatureUpdateType.UPGRADE)},
            validate_only=True,
        )
        assert checked == {"metadata.version": None}
        refused = await admin.update_features({"metadata.version": high + 1000})
        assert isinstance(refused["metadata.version"], KafkaError)
        again = await admin.describe_features()
        assert again.finalized_features["metadata.version"] == (low, high)


# ---------------------------------------------------------------------- transactions


async def test_an_id_that_only_ran_init_transactions_is_described_empty_with_no_start(
    kafka_cluster: Any,
) -> None:
    # the broker answers TransactionStartTimeMs -1 for it: decoded as None, not refused
    bootstrap = kafka_cluster.bootstrap
    tid = _name("tid-empty")
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        async with open_producer(bootstrap, transactional_id=tid):  # init_transactions
            pass
        described = await admin.describe_transactions([tid])
        txn = described[tid]
        assert isinstance(txn, TransactionDescription), txn
        assert (txn.state, txn.transaction_start_time_ms) == ("Empty", None)
        assert txn.topic_partitions == frozenset() and txn.producer_id >= 0
        # the witness: the broker lists the id in that state too
        listed = await admin.list_transactions()
        assert [t.state for ts in listed.values() for t in ts if t.transactional_id == tid] == [
            "Empty"
        ]


async def test_a_hanging_transaction_is_found_aborted_and_its_producer_fenced(
    kafka_cluster: Any,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        topic = await _topic(admin)
        tp = TopicPartition(topic, 0)
        tid = _name("tid")
        async with open_producer(bootstrap, transactional_id=tid) as producer:
            await producer.begin_transaction()
            await producer.send(topic, b"hanging", partition=0)

            listed = await admin.list_transactions()
            mine = [t for ts in listed.values() for t in ts if t.transactional_id == tid]
            assert [t.state for t in mine] == ["Ongoing"]
            only_ongoing = await admin.list_transactions(state_filters=["CompleteCommit"])
            assert tid not in {t.transactional_id for ts in only_ongoing.values() for t in ts}

            described = await admin.describe_transactions([tid, _name("no-tid")])
            txn = described[tid]
            assert isinstance(txn, TransactionDescription) and txn.state == "Ongoing"
            assert txn.topic_partitions == {tp} and txn.producer_id == mine[0].producer_id
            (cluster_broker,) = (await admin.describe_cluster()).brokers
            assert txn.coordinator_id == cluster_broker.node_id
            assert await admin.find_coordinator(tid, 1) == txn.coordinator_id  # FindCoordinator
            unknown = [v for k, v in described.items() if k != tid]
            assert isinstance(unknown[0], TransactionalIdNotFoundError)

            producers = (await admin.describe_producers([tp]))[tp]
            assert isinstance(producers, PartitionProducerState)
            (active,) = producers.active_producers
            assert active.producer_id == txn.producer_id
            assert active.current_transaction_start_offset == 0

            # the witness: a read_committed reader is stuck below the open transaction
            stable = TopicPartition(topic, 0)
            lso = await admin.list_offsets({stable: OffsetSpec.LATEST}, isolation_level=1)
            assert lso[stable].offset == 0

            spec = AbortTransactionSpec(
                tp, active.producer_id, active.producer_epoch, active.coordinator_epoch
            )
            await admin.abort_transaction(spec)
            hw = await admin.list_offsets({stable: OffsetSpec.LATEST})
            lso = await admin.list_offsets({stable: OffsetSpec.LATEST}, isolation_level=1)
            assert lso[stable].offset == hw[stable].offset == 2  # the record + the marker

            fenced = (await admin.fence_producers([tid]))[tid]
            assert isinstance(fenced, ProducerIdAndEpoch)
            assert fenced.producer_id == txn.producer_id
            assert fenced.producer_epoch > txn.producer_epoch
            # the witness: the fenced producer cannot commit
            with pytest.raises(KafkaError):
                await producer.commit_transaction()


# ------------------------------------------------------------------------------ groups


async def _member_of(bootstrap: str, topic: str, group: str, **options: Any) -> Any:
    return open_consumer(
        topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **options
    )


async def _assigned(consumer: Any) -> frozenset[TopicPartition]:
    with anyio.fail_after(30):
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=200)
    return frozenset(consumer.assignment())


async def test_a_static_member_is_removed_by_instance_id(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    group = _name("grp")
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        topic = await _topic(admin)
        async with await _member_of(
            bootstrap, topic, group, group_instance_id="static-1", session_timeout_ms=45000
        ) as consumer:
            await _assigned(consumer)
            before = (await admin.describe_consumer_groups([group]))[group]
            (member,) = before.members
            assert member.group_instance_id == "static-1"
            removed = await admin.remove_group_members(
                group,
                [
                    MemberToRemove(group_instance_id="static-1", reason="test"),
                    MemberToRemove(member_id="no-such-member"),
                ],
            )
            assert removed[MemberToRemove(group_instance_id="static-1")] is None
            assert isinstance(
                removed[MemberToRemove(member_id="no-such-member")], UnknownMemberIdError
            )
            # the witness: the coordinator forgot that member id
            after = (await admin.describe_consumer_groups([group]))[group]
            assert member.member_id not in {m.member_id for m in after.members}


async def test_every_member_is_removed_when_none_is_named(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    group = _name("grp")
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        topic = await _topic(admin)
        async with await _member_of(bootstrap, topic, group) as consumer:
            await _assigned(consumer)
            (member,) = (await admin.describe_consumer_groups([group]))[group].members
            removed = await admin.remove_group_members(group)
            assert removed == {MemberToRemove(member_id=member.member_id): None}
            after = (await admin.describe_consumer_groups([group]))[group]
            assert member.member_id not in {m.member_id for m in after.members}
        # Kafka 4 says the group does not exist (DescribeGroups v6); older brokers describe
        # it as Dead with no members: nothing to remove
        try:
            nobody = await admin.remove_group_members(_name("no-such-group"))
        except GroupIdNotFoundError:
            pass
        else:
            assert nobody == {}


async def test_a_kip848_group_is_described_with_its_members_assignments(
    kafka_cluster: Any,
) -> None:
    bootstrap = kafka_cluster.bootstrap
    group = _name("grp848")
    async with open_admin(bootstrap, request_timeout_ms=15000) as admin:
        topic = await _topic(admin, 2)
        async with await _member_of(
            bootstrap, topic, group, group_protocol="consumer", client_id="kip848-client"
        ) as consumer:
            held = await _assigned(consumer)
            described = (await admin.describe_consumer_groups([group]))[group]
            assert described.group_type == "consumer" and described.group_epoch >= 1
            assert described.state == "Stable" and described.protocol in ("uniform", "range")
            (member,) = described.members
            assert member.client_id == "kip848-client" and member.member_epoch >= 1
            assert member.subscription is not None and member.subscription.topics == (topic,)
            # the witness: the assignment described is the one the consumer holds
            assert member.assignment is not None
            assert frozenset(member.assignment.partitions) == held
            listed = await admin.list_consumer_groups()
            kinds = {g.group_id: g.group_type for gs in listed.values() for g in gs}
            assert kinds[group] == "consumer"
            # a member's commit is what the admin lists
            tp = min(held)
            await consumer.commit({tp: OffsetAndMetadata(0, "member")})
            ((at, mine),) = (await admin.list_consumer_group_offsets(group)).items()
            assert (at, mine.offset, mine.metadata) == (tp, 0, "member")

        # the group is empty now: its offsets are the admin's to move, drop and delete
        other = TopicPartition(topic, 1 - tp.partition)
        moved = await admin.alter_consumer_group_offsets(group, {other: OffsetAndMetadata(0, "")})
        assert moved == {other: None}
        assert set(await admin.list_consumer_group_offsets(group)) == {tp, other}
        assert await admin.delete_consumer_group_offsets(group, [tp]) == {tp: None}
        assert set(await admin.list_consumer_group_offsets(group)) == {other}
        assert await admin.delete_consumer_groups([group]) == {group: None}
        # the witness: the broker lists the group no more, and a new member of that id
        # starts with no committed offset
        listed = await admin.list_consumer_groups()
        assert group not in {g.group_id for gs in listed.values() for g in gs}
        async with open_consumer(
            bootstrap_servers=bootstrap, group_id=group, group_protocol="consumer"
        ) as witness:
            assert await witness.committed(other) is None
