"""Fixtures for the kafkastate.legacy tests: a KafkaClient and fresh topics."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.legacy import KafkaClient
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
        return name

    return make


@pytest.fixture
def client(bootstrap: str) -> Iterator[KafkaClient]:
    c = KafkaClient(bootstrap)
    yield c
    c.close()
