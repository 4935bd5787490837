"""The producer's pure machines: partitioner, record accumulator, idempotence, sender.

``ProducerMachine`` ties them to the :class:`~kafkastate.core.client.Client`; with a
``transactional_id`` it owns a ``TransactionManager`` (see ``docs/transactions.md``).
"""

from kafkastate.core.producer.accumulator import (
    MIN_BUFFER_MEMORY,
    RECORD_OVERHEAD,
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
    RecordsAdmitted,
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
from kafkastate.core.producer.transactions import (
    TransactionManager,
    TransactionOperationCompleted,
    TransactionOpId,
    TransactionState,
)

__all__ = [
    "MIN_BUFFER_MEMORY",
    "RECORD_OVERHEAD",
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
    "RecordsAdmitted",
    "RecordsFailed",
    "TransactionManager",
    "TransactionOpId",
    "TransactionOperationCompleted",
    "TransactionState",
    "default_partition",
    "murmur2",
]
