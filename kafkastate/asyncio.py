"""kafkastate for asyncio: aiokafka's :class:`AIOKafkaProducer`,
:class:`AIOKafkaConsumer` and :class:`AIOKafkaAdminClient` (change only the import), and the
async adapter's ``open_producer``/``open_consumer``/``open_admin`` for anyio-style code on
asyncio, and aiokafka's :func:`~kafkastate.helpers.create_ssl_context`.

Every decision is the core's (:mod:`kafkastate.core`); options are resolved by
:mod:`kafkastate.core.config` with aiokafka's defaults (docs/options.md). The
implementations live in :mod:`kafkastate.adapters.asyncio` and
:mod:`kafkastate.adapters.anyio`.
"""

from __future__ import annotations

from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.adapters.anyio.admin import Admin, open_admin
from kafkastate.adapters.anyio.consumer import Consumer, open_consumer
from kafkastate.adapters.anyio.producer import (
    BatchBuilder,
    Delivery,
    Producer,
    RecordMetadata,
    open_producer,
)
from kafkastate.adapters.asyncio.admin import AIOKafkaAdminClient
from kafkastate.adapters.asyncio.consumer import AIOKafkaConsumer
from kafkastate.adapters.asyncio.producer import AIOKafkaProducer
from kafkastate.core.admin import (
    ACL,
    AbortTransactionSpec,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    AlterConfigOp,
    AlterConfigOpType,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ConfigResource,
    ConfigResourceType,
    ElectionType,
    FeatureUpdate,
    FeatureUpdateType,
    MemberToRemove,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    QuotaMatchType,
    RecordsToDelete,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafkastate.errors import ConsumerStoppedError, IllegalOperation
from kafkastate.helpers import create_ssl_context
from kafkastate.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)

__all__ = [
    "ACL",
    "ACLFilter",
    "ACLOperation",
    "ACLPermissionType",
    "ACLResourcePatternType",
    "AIOKafkaAdminClient",
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "AbortTransactionSpec",
    "Admin",
    "AlterConfigOp",
    "AlterConfigOpType",
    "BatchBuilder",
    "ClientQuotaAlteration",
    "ClientQuotaFilterComponent",
    "ConfigResource",
    "ConfigResourceType",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerStoppedError",
    "Delivery",
    "ElectionType",
    "FeatureUpdate",
    "FeatureUpdateType",
    "IllegalOperation",
    "MemberToRemove",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetSpec",
    "Producer",
    "QuotaMatchType",
    "RecordMetadata",
    "RecordsToDelete",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "ScramMechanism",
    "TopicPartition",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "create_ssl_context",
    "open_admin",
    "open_consumer",
    "open_producer",
]
