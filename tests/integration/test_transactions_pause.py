"""A transactional producer against three real brokers when the broker that leads both
coordinators is paused (SIGSTOP) past its session timeout, and answers again.

The chaos run of 2026-11-27 (seed 653836115): after an EndTxn whose answer never came
(the broker was paused) the producer retries it at the new coordinator and bumps its epoch
(KIP-890 client defence); its next TxnOffsetCommit goes to the group coordinator it knew,
the paused broker, which answers once it runs again from its stale cache -- the old epoch,
so ``PRODUCER_FENCED`` -- before it learns that both coordinators moved. That answer must
not fail the producer for good.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin, NewTopic
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaAdminClient, KafkaProducer

pytestmark = pytest.mark.integration


def _leaders(admin: KafkaAdminClient) -> dict[str, tuple[int, list[int]]]:
    """``__transaction_state`` / ``__consumer_offsets`` -> (leader, replicas) of partition
    0 (the harness gives each one partition)."""
    found = {}
    for topic in admin.describe_topics(["__transaction_state", "__consumer_offsets"]):
        part = topic["partitions"][0]
        found[topic["name"]] = (int(part["leader_id"]), list(part["replica_nodes"]))
    return found


def _lead_both_from_one_broker(admin: KafkaAdminClient) -> int:
    """Make the leader of ``__transaction_state-0`` lead ``__consumer_offsets-0`` too (as
    in the chaos run); return its id."""
    deadline = time.monotonic() + 60
    while True:
        leaders = _leaders(admin)
        txn_leader, _ = leaders["__transaction_state"]
        offsets_leader, replicas = leaders["__consumer_offsets"]
        if offsets_leader == txn_leader:
            return txn_leader
        assert time.monotonic() < deadline, leaders
        if replicas[0] != txn_leader:
            order = [txn_leader] + [r for r in replicas if r != txn_leader]
            admin.alter_partition_reassignments({TopicPartition("__consumer_offsets", 0): order})
        admin.elect_leaders(0, [TopicPartition("__consumer_offsets", 0)], raise_errors=False)
        time.sleep(0.5)


def _transaction(producer: KafkaProducer, topic: str, group: str, offset: int) -> None:
    producer.begin_transaction()
    producer.send(topic, b"%d" % offset, partition=0).get(timeout=60)
    producer.send_offsets_to_transaction({TopicPartition(topic, 0): offset}, group)
    producer.commit_transaction()


def test_a_paused_coordinator_answering_from_its_stale_cache_does_not_fence(
    kafka_cluster3: Any,
) -> None:
    if not kafka_cluster3.controllable:
        pytest.skip("KAFKASTATE_BOOTSTRAP3 names a cluster the harness cannot pause")
    suffix = uuid.uuid4().hex[:8]
    topic, group, tid = f"txnpause-{suffix}", f"txnpause-g-{suffix}", f"txnpause-{suffix}"
    with BlockingAdmin(kafka_cluster3.bootstrap) as created:
        created.create_topics([NewTopic(name=topic, num_partitions=1, replication_factor=3)])
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster3.bootstrap)
    try:
        producer = KafkaProducer(
            bootstrap_servers=kafka_cluster3.bootstrap,
            transactional_id=tid,
            request_timeout_ms=6000,
            transaction_timeout_ms=60000,
            linger_ms=5,
        )
        try:
            producer.init_transactions()
            _transaction(producer, topic, group, 1)  # both internal topics exist now
            victim = kafka_cluster3.broker(_lead_both_from_one_broker(admin))
            _transaction(producer, topic, group, 2)  # the group coordinator is the victim
            producer.begin_transaction()
            producer.send(topic, b"3", partition=0).get(timeout=60)
            producer.send_offsets_to_transaction({TopicPartition(topic, 0): 3}, group)
            victim.pause()
            try:
                # EndTxn times out, is retried at the new coordinator; the epoch is bumped
                producer.commit_transaction()
                producer.begin_transaction()
                producer.send(topic, b"4", partition=0).get(timeout=60)
                # TxnOffsetCommit goes to the paused broker, answered once it runs again
                waker = threading.Timer(1.0, victim.resume)
                waker.start()
                producer.send_offsets_to_transaction({TopicPartition(topic, 0): 4}, group)
                waker.join()
                producer.commit_transaction()
            finally:
                victim.resume(settle=True)
        finally:
            producer.close(timeout=30)
        committed = admin.list_consumer_group_offsets(group)
    finally:
        admin.close()
    assert committed[TopicPartition(topic, 0)].offset == 4
