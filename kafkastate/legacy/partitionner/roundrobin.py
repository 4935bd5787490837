"""The seed's ``kafka.partitionner.roundrobin``: :mod:`kafkastate.legacy.partitioner.roundrobin`."""

from kafkastate.legacy.partitioner.roundrobin import RoundRobinPartitioner

__all__ = ["RoundRobinPartitioner"]
