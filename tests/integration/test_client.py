"""The core Client driven by the blocking adapter against real Kafka: bootstrap, metadata,
routing to the leader, and recovery after a broker is killed."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin, BlockingClient
from kafkastate.core.client import ClientConfig
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.metadata import MetadataConfig, NodeId
from kafkastate.core.protocol.framing import produce_request
from kafkastate.core.protocol.records import RecordBatchBuilder, iter_batches
from kafkastate.core.protocol.requests import NewTopic, fetch_request
from kafkastate.core.protocol.versions import ApiVersionTable

pytestmark = pytest.mark.integration


def _client(bootstrap: str, topic: str) -> BlockingClient:
    config = ClientConfig(
        bootstrap_servers=bootstrap,
        connection=ConnectionConfig(request_timeout=10.0),
        metadata=MetadataConfig(retry_backoff=0.2),
        reconnect_backoff=0.05,
        reconnect_backoff_max=0.5,
        socket_connection_setup_timeout=5.0,
    )
    return BlockingClient(config, topics=[topic])


def _produce_to_leader(client: BlockingClient, topic: str, value: bytes) -> int:
    builder = RecordBatchBuilder()
    builder.append(int(time.time() * 1000), None, value)
    batch = builder.build()
    # A partition created a moment ago may answer NOT_LEADER_OR_FOLLOWER until its leader
    # has finished becoming one: a raw request is retried as a client would.
    for _ in range(50):
        cluster = client.client.cluster
        leader = cluster.leader_for(topic, 0)
        assert leader is not None
        topic_id = cluster.topics[topic].topic_id

        def factory(versions: ApiVersionTable, topic_id: Any = topic_id) -> Any:
            return produce_request(versions, {(topic, topic_id, 0): batch}, acks=-1, timeout=10)

        done = client.request(factory, node_id=leader)
        part = done.response.responses[0].partition_responses[0]
        if int(part.error_code) != 6:  # NOT_LEADER_OR_FOLLOWER
            break
        time.sleep(0.1)
        client.wait_for_metadata()
    assert int(part.error_code) == 0, part
    return int(part.base_offset)


@pytest.mark.kafka_needs("single_broker")
def test_client_bootstraps_and_routes_to_leader(kafka_cluster: Any) -> None:
    topic = f"client-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(kafka_cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name=topic, num_partitions=2)])
    with _client(kafka_cluster.bootstrap, topic) as client:
        cluster = client.wait_for_metadata()
        assert len(cluster.brokers) == 1
        assert cluster.partitions_for(topic) == (0, 1)
        assert _produce_to_leader(client, topic, b"a") == 0
        assert _produce_to_leader(client, topic, b"b") == 1
        leader = cluster.leader_for(topic, 0)
        assert leader is not None and leader >= 0  # a real broker id, not the bootstrap node
        topic_id = cluster.topics[topic].topic_id

        def fetch(versions: ApiVersionTable) -> Any:
            return fetch_request(versions, {(topic, topic_id, 0): 0}, max_wait=0.1)

        done = client.request(fetch, node_id=leader)
        records = done.response.responses[0].partitions[0].records
        values = [r.value for b in iter_batches(bytes(records)) for r in b]
        assert values == [b"a", b"b"]


@pytest.mark.kafka_needs("fault_control")
def test_client_survives_leader_kill_on_three_brokers(kafka_cluster3: Any) -> None:
    topic = f"client3-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(kafka_cluster3.bootstrap) as admin:
        admin.create_topics([NewTopic(name=topic, num_partitions=1, replication_factor=3)])
    with _client(kafka_cluster3.bootstrap, topic) as client:
        cluster = client.wait_for_metadata()
        assert len(cluster.brokers) == 3
        old_leader = cluster.leader_for(topic, 0)
        assert old_leader is not None
        assert _produce_to_leader(client, topic, b"before") == 0
        victim = kafka_cluster3.broker(int(old_leader))
        victim.kill()
        try:
            deadline = time.monotonic() + 60
            while True:
                cluster = client.wait_for_metadata()
                new_leader = cluster.leader_for(topic, 0)
                if new_leader is not None and new_leader != old_leader:
                    break
                assert time.monotonic() < deadline, "no new leader elected within 60 s"
                time.sleep(0.2)
            assert _produce_to_leader(client, topic, b"after") == 1
            epoch = cluster.topics[topic].partitions[0].leader_epoch
            assert epoch > 0
        finally:
            victim.restart()
        assert client.client.node_state(NodeId(int(old_leader))) is not None
