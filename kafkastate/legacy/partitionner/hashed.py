"""The seed's ``kafka.partitionner.hashed``: :mod:`kafkastate.legacy.partitioner.hashed`."""

from kafkastate.legacy.partitioner.hashed import (
    HashedPartitioner,
    LegacyPartitioner,
    Murmur2Partitioner,
    murmur2,
)

__all__ = ["HashedPartitioner", "LegacyPartitioner", "Murmur2Partitioner", "murmur2"]
