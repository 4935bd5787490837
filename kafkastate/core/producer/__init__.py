"""The producer's pure machines: partitioner and record accumulator.

The sender, idempotence and transaction layers build on these (see
``docs/producer-internals.md``).
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
    "Partitioner",
    "PartitionerError",
    "ProducerBatch",
    "ReadyResult",
    "RecordId",
    "RecordsAcknowledged",
    "RecordsFailed",
    "default_partition",
    "murmur2",
]
