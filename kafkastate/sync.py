"""kafkastate for blocking code: kafka-python's :class:`KafkaProducer`,
:class:`KafkaConsumer` and :class:`KafkaAdminClient` (change only the import).

The producer's IO runs on one background thread, as kafka-python's sender; the consumer's
in the caller's thread inside ``poll()``, plus a heartbeat thread for a group member; no
event loop is hidden in a thread. Every decision is the core's (:mod:`kafkastate.core`);
options are resolved by :mod:`kafkastate.core.config` with kafka-python's defaults
(docs/options.md). The implementations live in :mod:`kafkastate.adapters.blocking`.
kafka-python's other modules have theirs under the same names: :mod:`kafkastate.errors`,
:mod:`kafkastate.structs`, :mod:`kafkastate.serializer`, :mod:`kafkastate.partitioner`
(docs/migrating-from-kafka-python.md maps every name).
"""

from __future__ import annotations

from kafkastate import admin as _admin
from kafkastate.abc import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from kafkastate.adapters.blocking.admin import KafkaAdminClient
from kafkastate.adapters.blocking.consumer import KafkaConsumer
from kafkastate.adapters.blocking.producer import (
    FutureRecordMetadata,
    KafkaProducer,
    RecordMetadata,
)
from kafkastate.admin import *  # noqa: F403
from kafkastate.serializer import DefaultSerializer, Deserializer, JsonSerializer, Serializer
from kafkastate.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    TopicPartition,
    TopicPartitionReplica,
)

__all__ = [
    "AsyncConsumerRebalanceListener",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "DefaultSerializer",
    "Deserializer",
    "FutureRecordMetadata",
    "JsonSerializer",
    "KafkaAdminClient",
    "KafkaConsumer",
    "KafkaProducer",
    "OffsetAndMetadata",
    "RecordMetadata",
    "Serializer",
    "TopicPartition",
    "TopicPartitionReplica",
]
__all__ += _admin.__all__  # the admin values (kafkastate.admin)
