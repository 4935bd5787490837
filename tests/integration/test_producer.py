"""ProducerMachine through the blocking driver against real Kafka: records read back with
kafka-python's consumer (an independent implementation), exactly once and in order; keys on
their murmur2 partitions; idempotence through a leader kill on three brokers."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.adapters.blocking.caller_thread import BlockingProducer
from kafkastate.core.client import ClientConfig
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.metadata import MetadataConfig
from kafkastate.core.producer import AccumulatorConfig, default_partition
from kafkastate.core.producer.producer import ProducerConfig
from kafkastate.core.protocol.compression import Compression
from kafkastate.core.protocol.requests import NewTopic

pytestmark = pytest.mark.integration

kafka = pytest.importorskip("kafka")

from tests._support.readback import consume  # noqa: E402 (after the importorskip)


def _producer(bootstrap: str, **acc: Any) -> BlockingProducer:
    config = ProducerConfig(
        client=ClientConfig(
            bootstrap_servers=bootstrap,
            connection=ConnectionConfig(request_timeout=10.0),
            metadata=MetadataConfig(retry_backoff=0.1),
            reconnect_backoff=0.05,
            reconnect_backoff_max=0.5,
            socket_connection_setup_timeout=5.0,
        ),
        accumulator=AccumulatorConfig(
            request_timeout=10.0,
            delivery_timeout=60.0,
            retry_backoff=0.05,
            retry_backoff_max=0.5,
            **acc,
        ),
    )
    return BlockingProducer(config, max_block=30.0)


@pytest.mark.parametrize("codec", list(Compression))
def test_produce_and_read_back(kafka_cluster: Any, codec: Compression) -> None:
    topic = f"prod-{codec.name.lower()}-{uuid.uuid4().hex[:6]}"
    with BlockingAdmin(kafka_cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name=topic, num_partitions=3)])
    n = 300
    with _producer(kafka_cluster.bootstrap, compression=codec, linger=0.01) as producer:
        ids = []
        for i in range(n):
            key = f"k{i % 17}".encode() if i % 2 else None
            ids.append(producer.send(topic, f"v{i}".encode(), key=key))
        producer.flush(timeout=30)
        assert producer.machine.producer_id >= 0  # idempotence on by default
        outcomes = [producer.outcomes[rid] for rid in ids]
    assert all(isinstance(o, tuple) for o in outcomes), outcomes[:3]
    records = consume(kafka_cluster.bootstrap, topic, n)
    values = [r.value for r in records]
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(n))  # exactly once
    by_partition: dict[int, list[int]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(int(r.value[1:]))
        if r.key is not None:
            assert r.partition == default_partition(r.key, 3)  # murmur2, like Java
    for seq in by_partition.values():
        assert seq == sorted(seq)  # append order per partition
    for t, p, offset in outcomes:  # type: ignore[misc]
        assert t == topic and offset >= 0 and 0 <= p < 3
    assert len(by_partition) >= 2


@pytest.mark.kafka_needs("fault_control")
def test_idempotent_through_leader_kill(kafka_cluster3: Any) -> None:
    topic = f"prod3-{uuid.uuid4().hex[:6]}"
    with BlockingAdmin(kafka_cluster3.bootstrap) as admin:
        admin.create_topics(
            [
                NewTopic(
                    name=topic,
                    num_partitions=1,
                    replication_factor=3,
                    configs={"min.insync.replicas": "2"},
                )
            ]
        )
    n = 400
    with _producer(kafka_cluster3.bootstrap, linger=0.005) as producer:
        first = producer.send(topic, b"0", partition=0)
        producer.flush(timeout=30)
        leader = producer.machine.client.cluster.leader_for(topic, 0)
        assert leader is not None
        victim = kafka_cluster3.broker(int(leader))
        ids = [first]
        try:
            killer = threading.Timer(0.3, victim.kill)
            killer.start()
            for i in range(1, n):
                ids.append(producer.send(topic, str(i).encode(), partition=0))
                time.sleep(0.002)
            producer.flush(timeout=90)
            killer.join()
        finally:
            victim.restart()
        outcomes = [producer.outcomes[rid] for rid in ids]
    failed = [o for o in outcomes if not isinstance(o, tuple)]
    assert failed == []
    records = consume(kafka_cluster3.bootstrap, topic, n, timeout=40)
    values = [int(r.value) for r in records]
    assert values == list(range(n))  # nothing lost, nothing twice, in order
