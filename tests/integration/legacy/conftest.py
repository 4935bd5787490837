"""Fixtures for the kafkastate.legacy tests: a KafkaClient and fresh topics."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.errors import BrokerResponseError
from kafkastate.legacy import KafkaClient, create_message
from kafkastate.legacy.common import OffsetRequest, ProduceRequest
from kafkastate.testing import KafkaCluster


@pytest.fixture
def bootstrap(kafka_cluster: KafkaCluster) -> str:
    return kafka_cluster.bootstrap


@pytest.fixture
def new_topic(bootstrap: str) -> Callable[..., str]:
    """``new_topic(partitions=1)``: create a topic with a unique name, return the name."""

    def make(partitions: int = 1) -> str:
        name = f"legacy-{uuid.uuid4().hex[:10]}"
        with BlockingAdmin(bootstrap) as admin:
            admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
        # Metadata names a leader a moment before it serves: wait until every partition
        # answers, so that examples without retries (as 0.9.5's) meet a ready topic.
        with KafkaClient(bootstrap) as client:
            for _ in range(100):
                client.load_metadata_for_topics(name)
                reqs = [OffsetRequest(name, p, -1, 1) for p in range(partitions)]
                if all(r.error == 0 for r in client.send_offset_request(reqs, False)):
                    return name
                time.sleep(0.1)
        raise AssertionError(f"topic {name} never became ready")

    return make


@pytest.fixture
def client(bootstrap: str) -> Iterator[KafkaClient]:
    c = KafkaClient(bootstrap)
    yield c
    c.close()


@pytest.fixture
def produce(client: KafkaClient) -> Callable[..., None]:
    """``produce(topic, partition, values)``: write ``values`` (bytes) to one partition."""

    def write(topic: str, partition: int, values: list[bytes]) -> None:
        messages = [create_message(v) for v in values]
        for attempt in range(50):
            try:
                client.send_produce_request([ProduceRequest(topic, partition, messages)])
                return
            except BrokerResponseError as exc:  # a new topic's leader may not be ready
                if not exc.retriable or attempt == 49:
                    raise
                client.load_metadata_for_topics(topic)
                time.sleep(0.1)

    return write
