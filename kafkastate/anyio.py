"""kafkastate for anyio: ``async with open_producer(...)``, ``async with
open_consumer(...)`` and ``async with open_admin(...)``, on asyncio or trio.

The async adapter (:mod:`kafkastate.adapters.anyio`) runs natively on either backend: its
clock is the event loop's, cancellation is the host library's. Every decision is the
core's (:mod:`kafkastate.core`); options are resolved by :mod:`kafkastate.core.config`
(docs/options.md).
"""

from __future__ import annotations

from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.adapters.anyio.admin import Admin, open_admin
from kafkastate.adapters.anyio.consumer import Consumer, open_consumer
from kafkastate.adapters.anyio.producer import (
    BatchBuilder,
    BatchRecord,
    Delivery,
    Producer,
    RecordMetadata,
    open_producer,
)
from kafkastate.core.admin import (
    AbortTransactionSpec,
    AlterConfigOp,
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
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

__all__ = [
    "AbortTransactionSpec",
    "Admin",
    "AlterConfigOp",
    "BatchBuilder",
    "BatchRecord",
    "ClientQuotaAlteration",
    "ClientQuotaFilterComponent",
    "ConfigResource",
    "ConfigResourceType",
    "Consumer",
    "ConsumerRebalanceListener",
    "Delivery",
    "ElectionType",
    "FeatureUpdate",
    "FeatureUpdateType",
    "MemberToRemove",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "Producer",
    "QuotaMatchType",
    "RecordMetadata",
    "ScramMechanism",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "open_admin",
    "open_consumer",
    "open_producer",
]
