"""The seed's ``kafka.partitionner.base``: :mod:`kafkastate.legacy.partitioner.base`."""

from kafkastate.legacy.partitioner.base import Partitioner

__all__ = ["Partitioner"]
