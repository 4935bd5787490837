"""The seed's ``kafka.partition.roundrobin``: :mod:`kafkastate.legacy.partitioner.roundrobin`."""

from kafkastate.legacy.partitioner.roundrobin import RoundRobinPartitioner

__all__ = ["RoundRobinPartitioner"]
