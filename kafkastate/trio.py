"""kafkastate for trio users.

:func:`open_producer` here *is* :func:`kafkastate.anyio.open_producer` (and likewise
:func:`open_consumer`, :func:`open_admin`): the async adapter
(:mod:`kafkastate.adapters.anyio`), which runs natively on trio (trio's clock, cancellation and
``trio.Cancelled``, its ``MockClock`` included). It is re-exported so trio code reads
naturally::

    import trio
    from kafkastate.trio import open_producer

    async def main() -> None:
        async with open_producer("localhost:9092") as producer:
            await producer.send("events", b"hello")

    trio.run(main)
"""

from __future__ import annotations

from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.adapters.anyio.admin import Admin, open_admin
from kafkastate.adapters.anyio.consumer import Consumer, open_consumer
from kafkastate.adapters.anyio.producer import Delivery, Producer, RecordMetadata, open_producer
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
