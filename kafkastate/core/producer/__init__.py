"""The producer's pure machines: partitioner, record accumulator, idempotence, sender.

``ProducerMachine`` ties them to the :class:`~kafkastate.core.client.Client`; transactions
come next (see ``docs/producer-internals.md``).
"""

from kafkastate.core.producer.accumulator import (
    Accumulator,
    AccumulatorConfig,
    AccumulatorEvent,
    BatchState,
    BufferFullError,
    BufferSpaceFreed,
    FlushCompleted,
    FlushId,
    ProducerBatch,
    ReadyResult,
    RecordId,
    RecordsAcknowledged,
    RecordsFailed,
)
from kafkastate.core.producer.partitioner import (
    CustomPartitioner,
    Partitioner,
    PartitionerError,
    default_partition,
    murmur2,
)
from kafkastate.core.producer.producer import (
    MetadataPendingError,
    ProducerClosed,
    ProducerClosedError,
    ProducerConfig,
    ProducerEvent,
    ProducerFailed,
    ProducerIdAssigned,
    ProducerMachine,
    ProducerState,
)

__all__ = [
    "Accumulator",
    "AccumulatorConfig",
    "AccumulatorEvent",
    "BatchState",
    "BufferFullError",
    "BufferSpaceFreed",
    "CustomPartitioner",
    "FlushCompleted",
    "FlushId",
    "MetadataPendingError",
    "Partitioner",
    "PartitionerError",
    "ProducerBatch",
    "ProducerClosed",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerEvent",
    "ProducerFailed",
    "ProducerIdAssigned",
    "ProducerMachine",
    "ProducerState",
    "ReadyResult",
    "RecordId",
    "RecordsAcknowledged",
    "RecordsFailed",
    "default_partition",
    "murmur2",
]
