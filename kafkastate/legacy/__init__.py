"""The kafka-python 0.9.5 API (seed 004) on today's Kafka: change ``kafka`` to
``kafkastate.legacy`` in the imports.

Everything runs on kafkastate's core machines and blocking adapter: ``KafkaClient`` on the
core client, the producers on :class:`kafkastate.sync.KafkaProducer`, the consumers on
:class:`kafkastate.sync.KafkaConsumer`; offsets live in Kafka, not ZooKeeper. What Kafka 4
made impossible raises :class:`~kafkastate.legacy.common.LegacyFeatureUnavailableError`.
docs/legacy.md maps every class to its modern replacement.
"""

from kafkastate.legacy.client import KafkaClient
from kafkastate.legacy.conn import KafkaConnection
from kafkastate.legacy.consumer import KafkaConsumer, MultiProcessConsumer, SimpleConsumer
from kafkastate.legacy.partitioner import (
    HashedPartitioner,
    LegacyPartitioner,
    Murmur2Partitioner,
    RoundRobinPartitioner,
)
from kafkastate.legacy.producer import KeyedProducer, SimpleProducer
from kafkastate.legacy.protocol import (
    create_gzip_message,
    create_message,
    create_snappy_message,
)

__all__ = [
    "HashedPartitioner",
    "KafkaClient",
    "KafkaConnection",
    "KafkaConsumer",
    "KeyedProducer",
    "LegacyPartitioner",
    "Murmur2Partitioner",
    "MultiProcessConsumer",
    "RoundRobinPartitioner",
    "SimpleConsumer",
    "SimpleProducer",
    "create_gzip_message",
    "create_message",
    "create_snappy_message",
]
