"""The seed's ``kafka.partition.hashed`` path: :mod:`kafkastate.legacy.partitioner.hashed`."""

from kafkastate.legacy.partitioner import hashed as _same
from kafkastate.legacy.partitioner.hashed import *  # noqa: F403

__all__ = _same.__all__
