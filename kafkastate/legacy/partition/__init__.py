"""The seed's ``kafka.partition`` path: :mod:`kafkastate.legacy.partitioner`'s classes."""

from kafkastate.legacy.partitioner import (
    HashedPartitioner,
    LegacyPartitioner,
    Murmur2Partitioner,
    Partitioner,
    RoundRobinPartitioner,
    murmur2,
)

__all__ = [
    "HashedPartitioner",
    "LegacyPartitioner",
    "Murmur2Partitioner",
    "Partitioner",
    "RoundRobinPartitioner",
    "murmur2",
]
