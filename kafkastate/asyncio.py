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

from kafkastate import admin as _admin
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
from kafkastate.admin import *  # noqa: F403
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
    "AIOKafkaAdminClient",
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "Admin",
    "BatchBuilder",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerStoppedError",
    "Delivery",
    "IllegalOperation",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
    "create_ssl_context",
    "open_admin",
    "open_consumer",
    "open_producer",
]
__all__ += _admin.__all__  # the admin values (kafkastate.admin)
