"""kafka-python 0.9.5's partitioners (``kafka.partitioner``; the seed also documents them as
``kafka.partitionner`` and ``kafka.partition``, importable here under those names too)."""

from kafkastate.legacy.partitioner.base import Partitioner
from kafkastate.legacy.partitioner.hashed import (
    HashedPartitioner,
    LegacyPartitioner,
    Murmur2Partitioner,
    murmur2,
)
from kafkastate.legacy.partitioner.roundrobin import RoundRobinPartitioner

__all__ = [
    "HashedPartitioner",
    "LegacyPartitioner",
    "Murmur2Partitioner",
    "Partitioner",
    "RoundRobinPartitioner",
    "murmur2",
]
