"""kafkastate for blocking code: kafka-python's :class:`KafkaProducer`,
:class:`KafkaConsumer` and :class:`KafkaAdminClient` (change only the import).

The producer's IO runs on one background thread, as kafka-python's sender; the consumer's
in the caller's thread inside ``poll()``, plus a heartbeat thread for a group member; no
event loop is hidden in a thread. Every decision is the core's (:mod:`kafkastate.core`);
options are resolved by :mod:`kafkastate.core.config` with kafka-python's defaults
(docs/options.md). The implementations live in :mod:`kafkastate.adapters.blocking`.
"""

from __future__ import annotations

from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.adapters.blocking.admin import KafkaAdminClient
from kafkastate.adapters.blocking.consumer import KafkaConsumer
from kafkastate.adapters.blocking.producer import (
    FutureRecordMetadata,
    KafkaProducer,
    RecordMetadata,
)
from kafkastate.core.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    RecordsToDelete,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafkastate.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    TopicPartition,
)

__all__ = [
    "ACL",
    "ACLFilter",
    "ACLOperation",
    "ACLPermissionType",
    "ACLResourcePatternType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "AlterConfigOp",
    "AlterConfigOpType",
    "ConfigResource",
    "ConfigResourceType",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "FutureRecordMetadata",
    "KafkaAdminClient",
    "KafkaConsumer",
    "KafkaProducer",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "RecordMetadata",
    "RecordsToDelete",
    "TopicPartition",
]
