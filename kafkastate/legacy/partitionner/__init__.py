"""The seed's ``kafka.partitionner`` path: :mod:`kafkastate.legacy.partitioner`."""

from kafkastate.legacy import partitioner as _same
from kafkastate.legacy.partitioner import *  # noqa: F403

__all__ = _same.__all__
